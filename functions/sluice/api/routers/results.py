"""Results of asynchronous predictions (predict scope, the caller's tenant only)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from starlette.responses import FileResponse, RedirectResponse, Response

from sluice.api.deps import PrincipalDep, ResultsDep
from sluice.api.responses import JSONResponse, errors
from sluice.codecs.binary import HEADER

router = APIRouter(prefix="/api/v1/results", tags=["results"], responses=errors(400, 401, 403, 404, 422, 502), default_response_class=JSONResponse)


@router.get(
    "/{result_id}",
    summary="An asynchronous prediction's result: pending, succeeded (with outputs) or failed (with the error)",
    description="An answer larger than the API sends in line is answered as itself: a 303 to a short-lived "
    "presigned S3 GET on AWS (follow it without the API key: `curl -L` does), its bytes with 200 on `sluice serve`. "
    "A binary v2 answer's content type is `application/vnd.sagemaker-triton.binary+json;json-header-size=N`, "
    "N its JSON header's length (sent as `Inference-Header-Content-Length` too on `sluice serve`).",
    responses={303: {"description": "The answer is large: fetch it from Location (no API key)"}},
)
async def get_result(result_id: str, principal: PrincipalDep, results: ResultsDep) -> Response:
    from sluice.inference.results import LargeAnswer

    found = await run_in_threadpool(results.get, principal, result_id)
    if not isinstance(found, LargeAnswer):
        return JSONResponse(found)
    if found.url is not None:
        return RedirectResponse(found.url, status_code=303)
    # A binary v2 answer is read by its JSON header's length: sent as a v2 client reads it.
    header_size = found.header_size
    headers = {HEADER: str(header_size)} if header_size is not None else None
    return FileResponse(found.path, media_type=found.content_type or "application/octet-stream", headers=headers)  # type: ignore[arg-type]
