"""The shadow Lambda: invoked asynchronously by the API with a shadow job (or a pointer to
one in S3 when it is over the 1 MB asynchronous payload limit); runs the mirror, compares,
records."""

from __future__ import annotations

from sluice.startup import pause_in_lambda, started

pause_in_lambda()  # in Lambda, the collector off until this module has loaded (`sluice.startup`)

import json
from typing import TYPE_CHECKING, Any

from sluice.handlers import snapstart
from sluice.inference.loop import run
from sluice.inference.shadow_jobs import ShadowJob
from sluice.observability import get_logger

if TYPE_CHECKING:
    from sluice.wiring import Container

logger = get_logger()
snapstart.install()


def container() -> Container:
    return snapstart.current()


def load_job(event: dict[str, Any], store: Any) -> ShadowJob:
    if "payload_uri" in event:
        data = store.get(event["payload_uri"], sha256=event["sha256"])
        return ShadowJob.from_json(json.loads(data))
    return ShadowJob.from_json(event)


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    c = container()
    job = load_job(event, c.store)
    logger.append_keys(tenant=job.tenant, deployment=job.deployment, mirror=job.mirror, request_id=job.request_id)
    run(c.shadows.run(job))
    c.predictions.stats.flush()
    if "payload_uri" in event:
        c.store.delete(event["payload_uri"])
    return {"deployment": job.deployment, "mirror": job.mirror, "status": "compared"}


started()  # the function's start-up is over: the collector back on (`sluice.startup`)
