"""`/metrics`: the caller's tenant's Prometheus series, for a scraper holding an admin key."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from starlette.responses import Response

from sluice.api.deps import AdminDep, MonitorDep, TelemetryDep
from sluice.api.responses import AUTHENTICATED, JSONResponse, errors
from sluice.domain.errors import NotFound

router = APIRouter(tags=["metrics"], default_response_class=JSONResponse)

TEXT = {"content": {"text/plain": {"schema": {"type": "string"}}}}


@router.get(
    "/metrics",
    summary="Prometheus metrics of the caller's tenant (admin scope; the local service only)",
    response_class=Response,
    responses={
        200: {"description": "Prometheus text exposition, version 0.0.4", **TEXT},
        **errors(*AUTHENTICATED, _404="Metrics are off: not the local service (on AWS they are EMF)"),
    },
)
async def metrics(telemetry: TelemetryDep, principal: AdminDep, monitor: MonitorDep) -> Response:
    sink = telemetry.sink if telemetry is not None else None
    if sink is None:
        raise NotFound(
            "metrics are served by `sluice serve`; on AWS the same figures are CloudWatch metrics (EMF)",
            field="path",
        )
    from sluice.metrics import CONTENT_TYPE

    # The monitoring gauges: each deployment's latest window, checked now (registry reads).
    monitored = await asyncio.to_thread(monitor.latest, principal)
    quality = await asyncio.to_thread(monitor.latest_quality, principal)
    # Reading every worker's files is disk work: off the event loop.
    body = await asyncio.to_thread(sink.exposition, principal.tenant, monitored, quality)
    return Response(body, media_type=CONTENT_TYPE)
