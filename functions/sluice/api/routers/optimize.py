"""Optimize a version (admin scope): start a run, then follow it. A run builds and measures
candidates for seconds to minutes, so it is a job: 202 with its id, then GET until it ends."""

from __future__ import annotations

import dataclasses
from typing import Annotated

from fastapi import APIRouter, Query, status
from fastapi.concurrency import run_in_threadpool

from sluice.api.deps import AdminDep, OptimizeJobsDep, OptimizerDep
from sluice.api.presenters import present
from sluice.api.responses import MANAGEMENT, JSONResponse, answers, errors
from sluice.domain.values import VersionOrLatest
from sluice.types.management import OptimizeCreate, OptimizeJobOut

router = APIRouter(prefix="/api/v1", tags=["optimize"], responses=errors(*MANAGEMENT, 422), default_response_class=JSONResponse)


@router.post(
    "/models/{name}/versions/{version}/optimize",
    status_code=status.HTTP_202_ACCEPTED,
    summary="Build, measure and (asked) register cheaper variants of a version",
)
@answers(OptimizeJobOut)
async def start_optimize(
    name: str,
    version: VersionOrLatest,
    body: OptimizeCreate,
    principal: AdminDep,
    service: OptimizerDep,
    jobs: OptimizeJobsDep,
) -> JSONResponse:
    from sluice.optimize.measure import Timing
    from sluice.optimize.report import Budget
    from sluice.optimize.service import OptimizeRequest

    principal.require("admin")
    request = OptimizeRequest(
        name, version,
        budget=Budget(body.min_agreement, body.max_abs_diff), kinds=tuple(body.candidates),
        calibration_rows=body.calibration_rows, evaluation_rows=body.evaluation_rows,
        timing=Timing(budget_s=body.seconds), tune=body.tune, register=tuple(body.to_register), shadow=body.shadow,
    )  # fmt: skip
    # What can be refused at once is, before the job starts: the request (`check`), the data, its rows.
    source = await run_in_threadpool(service.check, principal, request)
    request = dataclasses.replace(request, version=source.version)
    rows = await run_in_threadpool(
        service.rows_from_uri, principal, body.data_uri, source, body.calibration_rows + body.evaluation_rows
    )
    job = await run_in_threadpool(
        jobs.start,
        principal, lambda: service.run(principal, request, rows), model=name, version=source.version,
    )  # fmt: skip
    return JSONResponse(present(OptimizeJobOut, job), status_code=202)


@router.get("/optimize-jobs", summary="List optimize runs, newest first")
@answers(list[OptimizeJobOut])
def list_optimize_jobs(
    principal: AdminDep, jobs: OptimizeJobsDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> JSONResponse:
    return JSONResponse([present(OptimizeJobOut, j) for j in jobs.list(principal, limit=limit)])


@router.get("/optimize-jobs/{job_id}", summary="Follow an optimize run")
@answers(OptimizeJobOut)
def get_optimize_job(job_id: str, principal: AdminDep, jobs: OptimizeJobsDep) -> JSONResponse:
    return JSONResponse(present(OptimizeJobOut, jobs.get(principal, job_id)))
