"""The two hot operations: a simple-JSON prediction and a v2 inference. Each turns its wire
body into the core's request, makes the one call, and presents the answer.

Either may name an upload instead of carrying its inputs (`upload_id` in the simple JSON body,
`parameters.upload_id` in a v2 request with no inputs). An answer to such a request too large
to send in line (`max_response_bytes`, counted as a Lambda result carries it) is kept as a
result: 303 to it. Any other answer too large is refused by the edge, in Lambda alone."""

from __future__ import annotations

import asyncio
from functools import cache
from typing import TYPE_CHECKING, Any

import orjson
from starlette.background import BackgroundTask
from starlette.responses import Response

from sluice.api.deps import id_header, request_id
from sluice.api.edge import JSON_BOOLS, HotRoute
from sluice.api.present import plain_body, v2_body
from sluice.api.responses import JSONResponse, errors, lambda_size_over
from sluice.codecs.binary import HEADER, binary_outputs, decode_inputs, json_tensors, to_bytes
from sluice.codecs.classification import asked
from sluice.codecs.triton import binary_json_type
from sluice.domain.errors import BadRequest
from sluice.domain.requests import (
    ArrayInputs,
    PredictionRequest,
    RowInputs,
    TensorInputs,
    UploadInputs,
    routing_key_of,
)

if TYPE_CHECKING:
    from starlette.datastructures import Headers
    from starlette.types import Scope

    from sluice.domain import Principal
    from sluice.domain.results import Prediction
    from sluice.types.api import PredictionRequest as PredictionBody
    from sluice.types.v2 import InferenceRequest
    from sluice.wiring import Container


def _respond(container: Container, content: dict[str, Any], rid: str) -> JSONResponse:
    # Statistics are flushed after the response is sent, when one is due.
    service = container.predictions
    background = BackgroundTask(service.flush_stats_if_due) if service.stats_due() else None
    return JSONResponse(content, headers={"x-request-id": id_header(rid)}, background=background)


async def _sent_or_kept(container: Container, principal: Principal, prediction: Prediction, response: Response, rid: str) -> Response:
    """The answer to a request naming an upload: `response`, or where it is too large to send
    in line, kept as a result: 303 to it.

    A binary v2 answer cannot be read without its JSON header's length, which travels in a
    header of the response; a presigned S3 GET answers no header of ours, so the kept answer's
    content type carries it, as SageMaker's Triton says it (`...binary+json;json-header-size=N`),
    and `GET /api/v1/results/{id}` sends it back as `Inference-Header-Content-Length` too."""
    if lambda_size_over(response, container.settings.limits.max_response_bytes) is None:
        return response
    header_size = response.headers.get(HEADER)
    media_type = response.media_type or "application/json"
    if header_size is not None:
        media_type = binary_json_type(header_size)
    return await asyncio.to_thread(_kept, container, principal, prediction, bytes(response.body), media_type, rid)


def _kept(container: Container, principal: Principal, prediction: Prediction, body: bytes, media_type: str, rid: str) -> JSONResponse:
    """An answer too large to send, kept as a result: 303 to it."""
    version = prediction.answer.version
    kept = container.results.keep(principal.tenant, model=version.model, version=version.version, body=body, content_type=media_type)
    return JSONResponse(kept, status_code=303, headers={"Location": kept["result"], "x-request-id": id_header(rid)})


def rows_field(body: PredictionBody) -> str:
    """The field a simple-JSON request carries its rows in (named when its answer is too large;
a WebSocket message names it alike: `sluice.api.socket.rows_field`)."""
    return "batch" if body.batch is not None else "features" if body.features is not None else "inputs"


async def predict(container: Container, principal: Principal, body: PredictionBody, scope: Scope, headers: Headers) -> Response:
    rid = request_id(scope, headers, body.request_id)
    if body.upload_id is not None:
        if body.inputs is not None or body.features is not None or body.batch is not None:
            raise BadRequest("give inputs, features or batch, or an upload_id, not both", field="upload_id")
        inputs: RowInputs | UploadInputs = UploadInputs(body.upload_id, "plain")
    else:
        inputs = RowInputs(inputs=body.inputs, features=body.features, batch=body.batch)
    request = PredictionRequest(
        deployment=body.deployment,
        inputs=inputs,
        version=body.version,
        variant=body.variant,
        routing_key=body.routing_key,
        headers=headers,
        request_id=rid,
        log_fields={"request_id": rid, "tenant": principal.tenant},
        json_bools=scope.get(JSON_BOOLS, True),
        parameters=body.parameters,
    )
    prediction = await container.predictions.predict(principal, request)
    content = {
        "request_id": rid,
        **plain_body(prediction, several=prediction.batch, return_probabilities=body.options.return_probabilities),
    }
    response = _respond(container, content, rid)
    if body.upload_id is not None:
        return await _sent_or_kept(container, principal, prediction, response, rid)
    return response


async def infer(
    container: Container,
    principal: Principal,
    body: InferenceRequest,
    scope: Scope,
    headers: Headers,
    name: str,
    version: int | None = None,
    binary: memoryview | None = None,
) -> Response:
    rid = request_id(scope, headers, body.id, field="id")
    params = body.parameters or {}
    wanted = tuple(out.name for out in body.outputs) if body.outputs else None
    classify = asked((out.name, out.parameters) for out in body.outputs) if body.outputs else None
    as_binary = binary_outputs(params, body.outputs)  # refused, if at all, before the model runs
    upload_id = params.get("upload_id")
    if upload_id is not None:
        if body.inputs or binary is not None:
            raise BadRequest("a request naming an upload (parameters.upload_id) carries no inputs of its own", field="upload_id")
        inputs: TensorInputs | ArrayInputs | UploadInputs = UploadInputs(str(upload_id), "v2")
    elif binary is None:
        inputs = TensorInputs(json_tensors(body.inputs))
    else:
        inputs = ArrayInputs(*decode_inputs(body.inputs, binary))
    request = PredictionRequest(
        deployment=name,
        inputs=inputs,
        version=version,
        outputs=wanted,
        classify=classify,
        variant=params.get("variant"),
        routing_key=routing_key_of(params),
        headers=headers,
        request_id=rid,
        log_fields={"request_id": rid, "tenant": principal.tenant},
        json_bools=scope.get(JSON_BOOLS, True),
        parameters=params,
    )
    prediction = await container.predictions.predict(principal, request)
    content = v2_body(prediction, request_id=body.id, wanted=wanted, classify=classify, binary=as_binary)
    response: Response = _respond_binary(container, content, as_binary, rid) if as_binary else _respond(container, content, rid)
    if upload_id is not None:
        return await _sent_or_kept(container, principal, prediction, response, rid)
    return response


def _respond_binary(container: Container, content: dict[str, Any], which: set[str] | bool, rid: str) -> Response:
    """The JSON header, then the bytes of each output asked for in binary, in output order."""
    tail = []
    for out in content["outputs"]:
        if which is True or out["name"] in which:  # type: ignore[operator]
            data = to_bytes(out.pop("data"))
            out["parameters"] = {**(out.get("parameters") or {}), "binary_data_size": len(data)}
            tail.append(data)
    header = orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)
    service = container.predictions
    background = BackgroundTask(service.flush_stats_if_due) if service.stats_due() else None
    return Response(
        header + b"".join(tail),
        media_type="application/octet-stream",
        headers={"x-request-id": id_header(rid), HEADER: str(len(header))},
        background=background,
    )


ERRORS = errors(400, 401, 403, 404, 413, 422, 502, 503, 504, _404="No such deployment in this tenant")


@cache
def hot_routes() -> list[HotRoute]:
    """The routes the edge answers before the framework, declared once: served by the edge,
    documented in the OpenAPI document from these same declarations."""
    from sluice.domain.values import VersionNumber
    from sluice.types.api import PredictionRequest as PredictionBody
    from sluice.types.api import PredictionResponse
    from sluice.types.v2 import InferenceRequest, InferenceResponse

    v2 = ("v2 (Open Inference Protocol)",)
    return [
        HotRoute("POST", "/api/v1/predictions", PredictionBody, PredictionResponse, predict, "Predict with a deployment", ("predictions",), ERRORS, rows=rows_field),
        HotRoute("POST", "/v2/models/{name}/infer", InferenceRequest, InferenceResponse, infer, "v2: infer", v2, ERRORS, binary=True),
        HotRoute(
            "POST", "/v2/models/{name}/versions/{version}/infer", InferenceRequest, InferenceResponse, infer,
            "v2: infer on a pinned version", v2, ERRORS, params={"version": VersionNumber}, binary=True,
        ),
    ]  # fmt: skip
