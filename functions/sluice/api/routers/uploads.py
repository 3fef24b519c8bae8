"""Uploads: bodies larger than the API takes in line, sent straight to the store.

`POST /api/v1/uploads` (predict scope) answers the form to send the body with: an S3 presigned
POST on AWS; on `sluice serve`, the same shape of form posted to
`POST /api/v1/uploads/{id}/body` here, which checks its signed policy as S3 does (expiry, key,
content type, size) and takes no API key, as S3 takes none. Either way: multipart/form-data,
the fields first and the body last, as the part named `file`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

from sluice.api.deps import ContainerDep, PrincipalDep
from sluice.api.responses import JSONResponse, errors
from sluice.domain.errors import BadRequest, NotFound, PayloadTooLarge
from sluice.types.api import UploadOut, UploadRequest

if TYPE_CHECKING:
    from contextlib import ExitStack

    from sluice.storage.uploads import FolderUploads

router = APIRouter(prefix="/api/v1/uploads", tags=["uploads"])
FORM_OVERHEAD = 64 * 1024  # the fields and part headers around the body
MAX_FIELD_BYTES = 16 * 1024


@router.post(
    "",
    status_code=201,
    response_model=UploadOut,
    responses=errors(400, 401, 403, 404, 413, 422, 502),
    summary="Make an upload: the form that sends a large body straight to the store, for a prediction to name",
)
async def create_upload(body: UploadRequest, principal: PrincipalDep, container: ContainerDep, request: Request) -> JSONResponse:
    found = await run_in_threadpool(
        container.uploads.create,
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
    responses=errors(400, 403, 404, 413, 422),
    summary="sluice serve: an upload's body, as a signed form (the local twin of S3's presigned POST; no API key)",
)
async def receive_upload(upload_id: str, request: Request, container: ContainerDep) -> Response:
    from sluice.storage.uploads import FolderUploads

    store = container.uploads.store
    if not isinstance(store, FolderUploads):
        raise NotFound("uploads are posted to the store's url the upload answered, not here", field="upload_id")
    declared = request.headers.get("content-length")
    most = container.settings.upload_max_bytes + FORM_OVERHEAD
    if declared is not None and (not declared.isdigit() or int(declared) > most):
        raise PayloadTooLarge(f"the form is over {most} bytes", field="file")
    await _receive(store, upload_id, request)
    return Response(status_code=204)


async def _receive(store: FolderUploads, upload_id: str, request: Request) -> None:
    """Parse the multipart form as it streams in: fields kept (small), the `file` part written
    to the upload's body through its size-checked writer once the fields are checked."""
    import contextlib

    from python_multipart.multipart import MultipartParser, parse_options_header

    media, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if media != b"multipart/form-data" or not boundary:
        raise BadRequest("send the upload as multipart/form-data: the fields, then the body as `file`", field="body")
    fields: dict[str, str] = {}
    state: dict[str, Any] = {"name": None, "header": b"", "value": b"", "headers": {}, "sink": None, "done": False, "fields_bytes": 0}
    exits: ExitStack = contextlib.ExitStack()

    def on_header_field(data: bytes, start: int, end: int) -> None:
        state["header"] += data[start:end]
        on_header_bytes(end - start)

    def on_header_value(data: bytes, start: int, end: int) -> None:
        state["value"] += data[start:end]
        on_header_bytes(end - start)

    def on_header_bytes(count: int) -> None:
        state["fields_bytes"] += count
        if state["fields_bytes"] > FORM_OVERHEAD:
            raise BadRequest(f"the form's fields and part headers are over {FORM_OVERHEAD} bytes", field="body")

    def on_header_end() -> None:
        state["headers"][state["header"].lower()] = state["value"]
        state["header"], state["value"] = b"", b""

    def on_headers_finished() -> None:
        _, params = parse_options_header(state["headers"].get(b"content-disposition", b""))
        name = params.get(b"name", b"").decode("utf-8", "replace")
        state["name"], state["headers"], state["buffer"] = name, {}, bytearray()
        if name == "file" and not state["done"]:
            path, least, most = store.check_form(upload_id, fields)
            state["sink"] = exits.enter_context(store.writer(path, least, most))

    def on_part_data(data: bytes, start: int, end: int) -> None:
        if state["sink"] is not None:
            state["sink"].write(data[start:end])
        elif not state["done"]:
            state["buffer"] += data[start:end]
            state["fields_bytes"] += end - start
            if len(state["buffer"]) > MAX_FIELD_BYTES or state["fields_bytes"] > FORM_OVERHEAD:
                # read before the form's signature can be checked: bounded, whoever sends it
                raise BadRequest(f"form field '{state['name']}' is over {MAX_FIELD_BYTES} bytes, or the fields over {FORM_OVERHEAD}", field=state["name"])

    def on_part_end() -> None:
        if state["sink"] is not None:
            state["sink"].commit()  # the body is in place
            state["sink"], state["done"] = None, True
        elif not state["done"]:
            fields[state["name"]] = state["buffer"].decode("utf-8", "replace")

    parser = MultipartParser(
        boundary,
        {
            "on_header_field": on_header_field,
            "on_header_value": on_header_value,
            "on_header_end": on_header_end,
            "on_headers_finished": on_headers_finished,
            "on_part_data": on_part_data,
            "on_part_end": on_part_end,
        },
    )
    with exits:
        async for chunk in request.stream():
            if chunk:
                await run_in_threadpool(parser.write, chunk)
        parser.finalize()
    if not state["done"]:
        raise BadRequest("the form has no `file` part (the body, after the fields)", field="file")
