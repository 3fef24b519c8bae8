"""Results of asynchronous predictions (predict scope, the caller's tenant only)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from sluice.api.deps import ContainerDep, PrincipalDep
from sluice.api.responses import JSONResponse, errors

router = APIRouter(prefix="/api/v1/results", tags=["results"], responses=errors(400, 401, 403, 404, 422, 502))


@router.get(
    "/{result_id}",
    summary="An asynchronous prediction's result: pending, succeeded (with outputs) or failed (with the error)",
)
async def get_result(result_id: str, principal: PrincipalDep, container: ContainerDep) -> JSONResponse:
    return JSONResponse(await run_in_threadpool(container.results.get, principal, result_id))
