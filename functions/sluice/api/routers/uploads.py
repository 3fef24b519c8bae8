"""Uploads: bodies larger than the API takes in line, sent straight to the store.

`POST /api/v1/uploads` (predict scope) answers the form to send the body with: an S3 presigned
POST on AWS; on `sluice serve`, the same shape of form posted to
`POST /api/v1/uploads/{id}/body` here, which checks its signed policy as S3 does (expiry, key,
content type, size) and takes no API key, as S3 takes none. Either way: multipart/form-data,
the fields first and the body last, as the part named `file`.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

from sluice.api.deps import PrincipalDep, SettingsDep, UploadsDep
from sluice.api.errors import error_response
from sluice.api.responses import JSONResponse, answers, errors
from sluice.domain.errors import BadRequest, NotFound, SluiceError
from sluice.observability import get_logger
from sluice.types.api import UploadOut, UploadRequest

router = APIRouter(prefix="/api/v1/uploads", tags=["uploads"], default_response_class=JSONResponse)


@router.post(
    "",
    status_code=201,
    responses=errors(400, 401, 403, 404, 413, 422, 502),
    summary="Make an upload: the form that sends a large body straight to the store, for a prediction to name",
)
@answers(UploadOut)
async def create_upload(body: UploadRequest, principal: PrincipalDep, uploads: UploadsDep, request: Request) -> JSONResponse:
    found = await run_in_threadpool(
        uploads.create,
        principal,
        deployment=body.deployment,
        content_type=body.content_type,
        size=body.size,
        header_size=body.header_size,
        base_url=str(request.base_url),
    )
    return JSONResponse(found, status_code=201)


@router.post(
    "/{upload_id}/body",
    status_code=204,
    responses=errors(400, 403, 404, 408, 413, 422),
    summary="sluice serve: an upload's body, as a signed form (the local twin of S3's presigned POST; no API key)",
)
async def receive_upload(upload_id: str, request: Request, settings: SettingsDep, uploads: UploadsDep) -> Response:
    """Read as it streams, bounded in bytes and time (`sluice.api.upload_post`); every answer
    is given here."""
    from sluice.api.upload_post import ClientGone, UploadPost, read_form
    from sluice.storage.uploads import FolderUploads

    limits = settings.uploads
    post: UploadPost | None = None
    try:
        store = uploads.store
        if not isinstance(store, FolderUploads):
            raise NotFound("uploads are posted to the store's url the upload answered, not here", field="upload_id")
        headers = request.headers
        post = UploadPost(store, upload_id, headers.get("content-type", ""), declared=headers.get("content-length"), max_upload=limits.upload_max_bytes)
        await read_form(post, request.receive, timeout_s=limits.upload_body_timeout_s, min_rate=limits.upload_body_min_rate)
        response: Response = Response(status_code=204)
    except ClientGone as gone:
        get_logger().info("upload body: the client went away", extra={"upload_id": upload_id, "received": gone.received})
        response = error_response(BadRequest("the connection closed before the form was whole", field="body"))
    except SluiceError as exc:
        response = error_response(exc, request.url.path)
    finally:
        if post is not None:
            post.close()
    return response  # one given before the body's end closes the connection (`sluice.cli.protocol`)
