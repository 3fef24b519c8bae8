"""Work that follows a prediction: shadow mirrors, handed off before the response (a local
mirror runs on its own thread; in Lambda it is a quick asynchronous invoke), and the stats
flush, which runs after the response is sent."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.background import BackgroundTask

if TYPE_CHECKING:
    from sluice.services.predictions import Prediction
    from sluice.wiring import Container


async def after_response(container: Container, prediction: Prediction) -> BackgroundTask | None:
    for job in prediction.mirrors:
        await container.mirror.submit(job)  # type: ignore[union-attr]
    if not container.predictions.stats.due():
        return None
    return BackgroundTask(container.predictions.flush_stats_if_due)
