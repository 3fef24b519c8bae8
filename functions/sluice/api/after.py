"""Work that follows a response: shadow mirrors and the stats flush. The client never waits
for it locally; in Lambda, Mangum finishes it before returning (an async invoke is quick)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.background import BackgroundTask

if TYPE_CHECKING:
    from sluice.services.predictions import Prediction
    from sluice.wiring import Container


async def _after(container: Container, prediction: Prediction) -> None:
    for job in prediction.mirrors:
        await container.mirror.submit(job)  # type: ignore[union-attr]
    container.predictions.flush_stats_if_due()


def after_response(container: Container, prediction: Prediction) -> BackgroundTask | None:
    if not prediction.mirrors and not container.predictions.stats.due():
        return None
    return BackgroundTask(_after, container, prediction)
