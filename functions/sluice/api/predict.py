"""The two hot operations: a simple-JSON prediction and a v2 inference. Each turns its wire
body into the core's request, makes the one call, and presents the answer."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

import orjson
from starlette.background import BackgroundTask
from starlette.responses import Response

from sluice.api.deps import request_id
from sluice.api.edge import JSON_BOOLS, HotRoute
from sluice.api.present import plain_body, v2_body
from sluice.api.responses import JSONResponse, errors
from sluice.codecs.binary import binary_outputs, decode_inputs, to_bytes
from sluice.domain.requests import ArrayInputs, PredictionRequest, RowInputs, Tensor, TensorInputs

if TYPE_CHECKING:
    from starlette.datastructures import Headers
    from starlette.types import Scope

    from sluice.domain import Principal
    from sluice.types.api import PredictionRequest as PredictionBody
    from sluice.types.v2 import InferenceRequest
    from sluice.wiring import Container


def _respond(container: Container, content: dict[str, Any], rid: str) -> JSONResponse:
    # Statistics are flushed after the response is sent, when one is due.
    service = container.predictions
    background = BackgroundTask(service.flush_stats_if_due) if service.stats.due() else None
    return JSONResponse(content, headers={"x-request-id": rid}, background=background)


async def predict(container: Container, principal: Principal, body: PredictionBody, scope: Scope, headers: Headers) -> JSONResponse:
    rid = request_id(scope, headers, body.request_id)
    request = PredictionRequest(
        deployment=body.deployment,
        inputs=RowInputs(inputs=body.inputs, features=body.features, batch=body.batch),
        version=body.version,
        variant=body.variant,
        routing_key=body.routing_key,
        headers=headers,
        request_id=rid,
        log_fields={"request_id": rid, "tenant": principal.tenant},
        json_bools=scope.get(JSON_BOOLS, True),
    )
    prediction = await container.predictions.predict(principal, request)
    content = {
        "request_id": rid,
        **plain_body(prediction, several=body.batch is not None, return_probabilities=body.options.return_probabilities),
    }
    return _respond(container, content, rid)


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
    rid = request_id(scope, headers, body.id)
    params = body.parameters or {}
    wanted = tuple(out.name for out in body.outputs) if body.outputs else None
    if binary is None:
        inputs: TensorInputs | ArrayInputs = TensorInputs(tuple(Tensor(t.name, t.datatype, tuple(t.shape), t.data) for t in body.inputs))
    else:
        inputs = ArrayInputs(*decode_inputs(body.inputs, binary))
    request = PredictionRequest(
        deployment=name,
        inputs=inputs,
        version=version,
        outputs=wanted,
        variant=params.get("variant"),
        routing_key=str(params.get("routing_key") or "") or None,
        headers=headers,
        request_id=rid,
        log_fields={"request_id": rid, "tenant": principal.tenant},
        json_bools=scope.get(JSON_BOOLS, True),
    )
    prediction = await container.predictions.predict(principal, request)
    content = v2_body(prediction, request_id=rid, wanted=wanted)
    as_binary = binary_outputs(params, body.outputs)
    if as_binary:
        return _respond_binary(container, content, as_binary, rid)
    return _respond(container, content, rid)


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
    background = BackgroundTask(service.flush_stats_if_due) if service.stats.due() else None
    return Response(
        header + b"".join(tail),
        media_type="application/octet-stream",
        headers={"x-request-id": rid, "inference-header-content-length": str(len(header))},
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
        HotRoute("POST", "/api/v1/predictions", PredictionBody, PredictionResponse, predict, "Predict with a deployment", ("predictions",), ERRORS),
        HotRoute("POST", "/v2/models/{name}/infer", InferenceRequest, InferenceResponse, infer, "v2: infer", v2, ERRORS, binary=True),
        HotRoute(
            "POST", "/v2/models/{name}/versions/{version}/infer", InferenceRequest, InferenceResponse, infer,
            "v2: infer on a pinned version", v2, ERRORS, params={"version": VersionNumber}, binary=True,
        ),
    ]  # fmt: skip
