"""Batch jobs (predict scope): submit a file in your inbox, follow it, cancel it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from sluice.api.deps import BatchDep, PrincipalDep, RootsDep
from sluice.api.responses import MANAGEMENT, JSONResponse, answers, errors
from sluice.batch.error_files import ERROR_ROWS_DEFAULT, ERROR_ROWS_MAX
from sluice.batch.wire import (
    BatchErrorsOut,
    BatchJobCreate,
    BatchJobOut,
    job_fields,
    job_out,
)

router = APIRouter(prefix="/api/v1/batch-jobs", tags=["batch"], responses=errors(*MANAGEMENT, 502, 503), default_response_class=JSONResponse)


@router.post("", status_code=202, summary="Score a file in your inbox")
@answers(BatchJobOut)
def create_batch_job(body: BatchJobCreate, principal: PrincipalDep, batch: BatchDep, roots: RootsDep) -> JSONResponse:
    job = batch.submit(principal, **job_fields(body))
    return JSONResponse(job_out(job, roots), status_code=202)


@router.get("", summary="List batch jobs, newest first")
@answers(list[BatchJobOut])
def list_batch_jobs(
    principal: PrincipalDep, batch: BatchDep, roots: RootsDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> JSONResponse:
    return JSONResponse([job_out(j, roots) for j in batch.list(principal, limit=limit)])


@router.get("/{job_id}", summary="Get a batch job: status, progress, counts")
@answers(BatchJobOut)
def get_batch_job(job_id: str, principal: PrincipalDep, batch: BatchDep, roots: RootsDep) -> JSONResponse:
    return JSONResponse(job_out(batch.get(principal, job_id), roots))


@router.post("/{job_id}/cancel", summary="Cancel a batch job")
@answers(BatchJobOut)
def cancel_batch_job(job_id: str, principal: PrincipalDep, batch: BatchDep, roots: RootsDep) -> JSONResponse:
    return JSONResponse(job_out(batch.cancel(principal, job_id), roots))


@router.get(
    "/{job_id}/errors",
    summary="The first rows of a batch job's error files",
)
@answers(BatchErrorsOut)
def batch_job_errors(
    job_id: str,
    principal: PrincipalDep,
    batch: BatchDep,
    roots: RootsDep,
    limit: Annotated[int, Query(ge=1, le=ERROR_ROWS_MAX, description="How many rows, 1 to 100.")] = ERROR_ROWS_DEFAULT,
) -> JSONResponse:
    found = batch.error_rows(principal, job_id, limit=limit)
    return JSONResponse(found | {"files": [roots.shown(uri) for uri in found["files"]]})
