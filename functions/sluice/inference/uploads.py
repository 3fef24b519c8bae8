"""Uploads: request bodies larger than the API takes in line (Lambda's 6 MB), put by the
client straight into the store and then named in a prediction request by their id.

`POST /api/v1/uploads` makes one for a deployment of the caller's tenant: a record under the
tenant's uploads prefix and the form the client posts the body with (an S3 presigned POST on
AWS; a form signed by `sluice serve` locally), bounded to the declared size. The prediction
service (`PredictionService.predict`, the one call) finds it here by id, for the caller's
tenant only: another tenant's id is not found, never forbidden.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any

import orjson

from sluice.codecs.json_text import NestedTooDeep, loads
from sluice.codecs.triton import (
    BINARY_JSON_CONTENT_TYPE,
    HEADER_SIZE_PARAMETER,
    JSON_CONTENT_TYPE,
    binary_json_type,
)
from sluice.domain.errors import BadRequest, Conflict, NotFound, PayloadTooLarge
from sluice.domain.requests import ROW_FIELDS, ArrayInputs, RowInputs, TensorInputs
from sluice.domain.uploads import OCTET_STREAM, UPLOAD_ID, Upload
from sluice.domain.values import decimal, shown

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from sluice.domain import Principal
    from sluice.domain.requests import Inputs, PredictionRequest, UploadInputs
    from sluice.domain.results import Resolved
    from sluice.registry import Registry
    from sluice.settings import UploadSettings
    from sluice.storage.uploads import UploadStore

MAX_HEADER_BYTES = 16 * 1024 * 1024  # a binary body's JSON header: names, shapes, parameters


def stored_type(content_type: str, header_size: int | None) -> tuple[str, int | None]:
    """The content type an upload is stored with, and its JSON header's size: JSON as it is;
    a binary body (the v2 binary extension's `application/octet-stream` with its
    `Inference-Header-Content-Length`, or SageMaker Triton's binary+json type) as SageMaker
    Triton's type, so an asynchronous endpoint takes the object as it lies."""
    media, _, params = content_type.partition(";")
    media = media.strip().lower()
    if media == JSON_CONTENT_TYPE:
        if header_size is not None:
            raise BadRequest("header_size is for binary bodies; a JSON body has none", field="header_size")
        return JSON_CONTENT_TYPE, None
    if media == BINARY_JSON_CONTENT_TYPE:
        named = None
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() == HEADER_SIZE_PARAMETER and (size := decimal(value.strip())) is not None:
                named = size
        if named is None or (header_size is not None and header_size != named):
            raise BadRequest(f"a binary+json content type names its {HEADER_SIZE_PARAMETER} (and header_size, if given, agrees)", field="content_type")
        header_size = named
    elif media != OCTET_STREAM:
        raise BadRequest(
            f"content_type is {JSON_CONTENT_TYPE}, {OCTET_STREAM} (the v2 binary extension, with header_size) or "
            f"{BINARY_JSON_CONTENT_TYPE};{HEADER_SIZE_PARAMETER}=N",
            field="content_type",
        )
    if header_size is None or not 0 < header_size <= MAX_HEADER_BYTES:
        raise BadRequest(
            f"a binary body needs header_size: its JSON header's length (the Inference-Header-Content-Length), 1 to {MAX_HEADER_BYTES}",
            field="header_size",
        )
    return binary_json_type(header_size), header_size


@dataclass(eq=False, slots=True)
class UploadService:
    registry: Registry
    store: UploadStore | None
    settings: UploadSettings
    _: KW_ONLY
    clock: Callable[[], float] = time.time

    def _store(self) -> UploadStore:
        if self.store is None:
            raise NotFound("uploads need an S3 or folder artifact store; this one has none", field="upload_id")
        return self.store

    def create(
        self,
        principal: Principal,
        *,
        deployment: str,
        content_type: str,
        size: int,
        header_size: int | None = None,
        base_url: str = "",
    ) -> dict[str, Any]:
        """A new upload for `deployment`: its id, the form to post the body with, until when."""
        principal.require("predict")
        store = self._store()
        most = self.settings.upload_max_bytes
        if size > most:
            raise PayloadTooLarge(
                f"size is {size} bytes, over the {most} an upload may hold (SageMaker asynchronous inference takes up to 1 GB)",
                field="size",
            )
        if size < 1:
            raise BadRequest("size is the body's length in bytes, at least 1", field="size")
        stored, header_size = stored_type(content_type, header_size)
        if header_size is not None and header_size >= size:
            raise BadRequest("header_size must be smaller than size: the binary tensors follow the header", field="header_size")
        self.registry.get_deployment(principal.tenant, deployment)  # NotFound (deployment) for another tenant's
        upload_id = uuid.uuid4().hex
        now = self.clock()
        window = self.settings.upload_form_ttl_s
        record = {
            "id": upload_id,
            "tenant": principal.tenant,
            "deployment": deployment,
            "content_type": stored,
            "header_size": header_size,
            "max_bytes": size,
            "created_at": round(now, 3),
            "expires_at": round(now + window, 3),
            "usable_until": round(now + max(self.settings.upload_ttl_s, window), 3),
            "created_by": principal.subject,
        }
        store.put_record(principal.tenant, upload_id, json.dumps(record, separators=(",", ":")).encode())
        form = store.form(principal.tenant, upload_id, content_type=stored, max_bytes=size, expires_in=window, base_url=base_url)
        return {
            "upload_id": upload_id,
            "deployment": deployment,
            "url": form.url,
            "method": form.method,
            "fields": form.fields,
            "content_type": stored,
            "max_bytes": size,
            "expires_at": record["expires_at"],
            "usable_until": record["usable_until"],
        }

    def find(self, principal: Principal, upload_id: str) -> Upload:
        """An upload of the caller's tenant whose body has arrived, to predict from."""
        principal.require("predict")
        if not isinstance(upload_id, str) or not UPLOAD_ID.match(upload_id):
            raise BadRequest("an upload id is 32 lowercase hex digits", field="upload_id")
        store = self._store()
        tenant = principal.tenant
        found = store.record(tenant, upload_id)
        if found is None:
            raise NotFound(f"no upload '{upload_id}'", field="upload_id")
        record = json.loads(found)
        if record.get("tenant") != tenant or record.get("id") != upload_id:
            raise NotFound(f"no upload '{upload_id}'", field="upload_id")
        if float(record.get("usable_until", 0)) <= self.clock():
            raise NotFound(f"upload '{upload_id}' has expired: make a new one", field="upload_id")
        size = store.size(tenant, upload_id)
        if size is None:
            raise Conflict(
                f"upload '{upload_id}' has no body yet: post it to the upload's url with its fields first", field="upload_id"
            )
        return Upload(
            id=upload_id,
            tenant=tenant,
            deployment=str(record["deployment"]),
            content_type=str(record["content_type"]),
            size=size,
            uri=store.uri(tenant, upload_id),
            header_size=record.get("header_size"),
            created_at=float(record["created_at"]),
            usable_until=float(record["usable_until"]),
            reader=lambda start, length: store.read(tenant, upload_id, start, length),
        )


def inputs_of_upload(data: bytes, upload: Upload, form: str) -> tuple[Inputs, tuple[str, ...] | None, bool]:
    """An upload's body as the inputs of the route that named it (`plain`: a simple-JSON
    prediction's `inputs`, `features` or `batch`; `v2`: an Open Inference Protocol request,
    JSON or a JSON header then binary tensors), the outputs it asks for, and whether its JSON
    holds a true or false anywhere (see `PredictionRequest.json_bools`)."""
    from pydantic import ValidationError

    from sluice.codecs.binary import decode_inputs, json_tensors
    from sluice.types.v2 import InferenceRequest

    size = upload.header_size
    header = data if size is None else data[:size]
    bools = b"true" in header or b"false" in header
    if form == "plain":
        if size is not None:
            raise BadRequest("a simple-JSON prediction reads a JSON upload; name a binary one from the v2 route", field="upload_id")
        try:
            body = loads(data)
        except orjson.JSONDecodeError:
            raise BadRequest(f"upload '{upload.id}' is not JSON", field="upload_id") from None
        except NestedTooDeep as exc:
            raise BadRequest(f"upload '{upload.id}': {exc.message}", field="upload_id") from None
        given = {k: body[k] for k in ROW_FIELDS if isinstance(body, dict) and body.get(k) is not None}
        if len(given) != 1:
            raise BadRequest(f"upload '{upload.id}' must hold exactly one of inputs, features or batch", field="upload_id")
        # A field beside the rows is read nowhere: refused, never dropped (a version, options, ...);
        # one null where a body in line may leave it null asks nothing, and a whole body uploaded
        # may name its deployment, the upload's.
        other = next((k for k, v in body.items() if k not in ROW_FIELDS and not _asks_nothing(k, v, upload)), None)
        if other is not None:
            raise BadRequest(
                f"upload '{upload.id}' holds the field {shown(other)}: an upload holds the rows (inputs, features or batch) only; "
                "give the request's other fields in the request that names the upload",
                field="upload_id",
            )
        return RowInputs(**given), None, bools
    try:
        request = InferenceRequest.model_validate_json(header)
    except ValidationError:
        raise BadRequest(f"upload '{upload.id}' is not a v2 inference request", field="upload_id") from None
    asked = next((f"output {shown(o.name)} parameters" for o in request.outputs or () if o.parameters), "the request parameters" if request.parameters else None)
    if asked is None and request.id is not None:
        asked = "an id"
    if asked is not None:  # binary_data_output, classification, an id to echo ...: read nowhere here, so refused, never dropped
        raise BadRequest(
            f"upload '{upload.id}' gives {asked}: an upload read here holds the inputs and the outputs' names only; "
            "give parameters and the id in the request that names the upload",
            field="upload_id",
        )
    outputs = tuple(o.name for o in request.outputs) if request.outputs else None
    if size is None:
        return TensorInputs(json_tensors(request.inputs)), outputs, bools
    return ArrayInputs(*decode_inputs(request.inputs, memoryview(data)[size:])), outputs, bools


def _asks_nothing(name: str, value: Any, upload: Upload) -> bool:
    from sluice.types.api import PredictionRequest as PredictionBody

    if name == "deployment":
        return value == upload.deployment
    field = PredictionBody.model_fields.get(name)
    return value is None and field is not None and field.default is None


# The request parameters that change how an answer is written: read by the answer for a request
# in line, and carried by nothing on a body queued as it lies.
ANSWER_PARAMETERS = ("binary_data_output",)


def asked_beside(request: PredictionRequest) -> str | None:
    """The field of a request naming an upload that asks for something in the answer (its
    outputs, one of `ANSWER_PARAMETERS`), or None: a body queued as it lies for asynchronous
    inference is answered as it asks, and whatever is asked beside it would be dropped."""
    if request.outputs is not None or request.classify:
        return "outputs"
    params = request.parameters or {}
    return next((f"parameters.{name}" for name in ANSWER_PARAMETERS if params.get(name) is not None), None)


async def request_from_upload(
    uploads: UploadService | None, runtimes: Mapping[str, Any], principal: Principal, resolved: Resolved, request: PredictionRequest, given: UploadInputs
) -> PredictionRequest:
    """The request with an upload's body as its inputs (found for the caller's tenant only);
    or `Accepted`, when the one version that answers queues the body as it lies (SageMaker
    asynchronous inference: its runtime's `submit_upload`)."""
    import asyncio
    import dataclasses

    if uploads is None:
        raise NotFound("uploads are not served here", field="upload_id")
    upload = await asyncio.to_thread(uploads.find, principal, given.upload_id)
    if upload.deployment != request.deployment:
        raise BadRequest(f"upload '{upload.id}' was made for deployment '{upload.deployment}', not '{request.deployment}'", field="upload_id")
    version = resolved.version
    if given.form == "v2" and resolved.node.kind == "single":
        submit = getattr(runtimes.get(version.runtime), "submit_upload", None)
        if submit is not None:
            await submit(version, upload, beside=asked_beside(request))  # raises Accepted when it queues the body
    most = uploads.settings.upload_inline_max_bytes
    if upload.size > most:
        raise PayloadTooLarge(
            f"upload '{upload.id}' is {upload.size} bytes; sluice scores at most {most} bytes itself "
            "(larger uploads go to SageMaker asynchronous endpoints from the v2 route): send a batch job",
            field="upload_id",
        )
    data = await asyncio.to_thread(upload.read)
    inputs, outputs, bools = inputs_of_upload(data, upload, given.form)
    return dataclasses.replace(request, inputs=inputs, outputs=request.outputs or outputs, json_bools=bools)
