"""Model monitoring (admin scope): a deployment's baseline, set from rows and read back, and
its traffic checked against it per window; ground truth posted by request id (predict scope)
and the model's quality per window (docs/monitoring.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from sluice.api.deps import (
    AdminDep,
    BatchDep,
    MonitorDep,
    PredictionsDep,
    PrincipalDep,
    SettingsDep,
)
from sluice.api.responses import MANAGEMENT, JSONResponse, errors
from sluice.domain.values import RevisionNumber
from sluice.types.monitoring import BaselineRows, Labels

router = APIRouter(prefix="/api/v1/deployments", tags=["monitoring"], responses=errors(*MANAGEMENT), default_response_class=JSONResponse)


@router.put("/{name}/baseline", summary="Set the deployment's baseline from its training data: rows, a batch job's input, or captured requests")
async def put_baseline(
    name: str, body: BaselineRows, principal: AdminDep, predictions: PredictionsDep, monitor: MonitorDep, settings: SettingsDep, batch: BatchDep
) -> JSONResponse:
    from sluice.codecs.plain_inputs import arrays_from_request
    from sluice.inference.baselines import baseline_profile

    principal.require("admin")
    if body.capture is not None:  # the captured rows and the answers they got
        window = body.capture
        out = await run_in_threadpool(monitor.baseline_from_capture, principal, name, since=window.since, until=window.until, outputs=body.outputs)
        return JSONResponse(out)
    resolved = await predictions.resolve(principal, name)
    source = body.source
    if body.job is not None:
        job, arrays = await run_in_threadpool(batch.input_rows, principal, body.job, resolved.version.signature, limit=body.limit)
        source = f"job {job.id}"
    else:
        arrays = arrays_from_request(resolved.version.signature, inputs=body.inputs, batch=body.batch)
    profile = await baseline_profile(
        predictions, principal, name, arrays, max_columns=settings.monitor.monitor_max_columns, outputs=body.outputs
    )
    return JSONResponse(await run_in_threadpool(monitor.put_baseline, principal, name, profile, source=source))


@router.get("/{name}/baseline", summary="The deployment's baseline: per column, count, missing rate, range, quantiles or top values")
def get_baseline(name: str, principal: AdminDep, monitor: MonitorDep) -> JSONResponse:
    return JSONResponse(monitor.baseline(principal, name))


@router.get("/{name}/monitor", summary="Drift and data quality against the baseline, and model quality from labels, per window")
def monitor_status(
    name: str,
    principal: AdminDep,
    monitor: MonitorDep,
    revision: RevisionNumber | None = None,
    variant: Annotated[str | None, Query(max_length=64, description="One variant's traffic (a split's); all of it by default.")] = None,
    windows: Annotated[int, Query(ge=1, le=168, description="How many of the latest windows with traffic.")] = 1,
    source: Annotated[
        Literal["profiles", "capture"],
        Query(description="`capture`: the latest windows recomputed from captured requests, every row sketched."),
    ] = "profiles",
) -> JSONResponse:
    return JSONResponse(monitor.status(principal, name, revision=revision, variant=variant, windows=windows, source=source))


@router.get("/{name}/monitor/history", summary="Each closed window's kept result, newest first, with its quality from the labels so far")
def monitor_history(
    name: str,
    principal: AdminDep,
    monitor: MonitorDep,
    batch: BatchDep,
    since: Annotated[str | None, Query(max_length=64, description="Windows that started at or after this time (RFC 3339, or a duration ago: `24h`).")] = None,
    until: Annotated[str | None, Query(max_length=64, description="Windows that started before this time (same forms).")] = None,
    before: Annotated[int | None, Query(ge=0, description="The `next` of the page before: windows that started before it.")] = None,
    limit: Annotated[int, Query(ge=1, le=168, description="Windows on this page.")] = 24,
) -> JSONResponse:
    import time

    from sluice.domain.errors import Unavailable
    from sluice.services.monitor_results import MonitorResults, parse_when

    at = time.time()
    start, end = parse_when(since, field="since", now=at), parse_when(until, field="until", now=at)
    if batch.files is None:
        raise Unavailable("no batch store here: the monitoring history is kept there", field="monitor")
    results = MonitorResults(monitor, batch.files, batch.paths.root)
    return JSONResponse(results.history(principal, name, since=start, until=end, before=before, limit=limit))


@router.post("/{name}/labels", summary="Ground truth by request id, joined to the predictions kept for it (predict scope)")
def post_labels(name: str, body: Labels, principal: PrincipalDep, monitor: MonitorDep) -> JSONResponse:
    return JSONResponse(monitor.add_labels(principal, name, [(x.request_id, x.row, x.label) for x in body.labels]))
