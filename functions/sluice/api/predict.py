"""The two hot operations, a simple-JSON prediction and a v2 inference, as plain functions:
the ASGI fast path (`sluice.api.fast`) and the FastAPI routes that document them both call
these, so importing them does not build the rest of the API."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.api.after import after_response
from sluice.api.deps import request_id
from sluice.api.responses import JSONResponse
from sluice.codecs.plain import arrays_from_request, present_rows
from sluice.codecs.tensors import decode_tensor, encode_tensor
from sluice.domain.errors import BadRequest, InvalidInput

if TYPE_CHECKING:
    from starlette.datastructures import Headers
    from starlette.types import Scope

    from sluice.domain import Principal
    from sluice.services.predictions import Prediction
    from sluice.types.api import PredictionRequest
    from sluice.types.v2 import InferenceRequest
    from sluice.wiring import Container


def pinned_version(value: str | None) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or int(value) < 1:
        raise BadRequest("model version must be a positive integer", field="version")
    return int(value)


def _who_answered(prediction: Prediction) -> dict[str, Any]:
    """The model, version, variant or members that answered, and how fast: both APIs say it."""
    answer = prediction.answer
    who: dict[str, Any] = {
        "model": answer.version.model,
        "version": answer.version.version,
        "latency_ms": prediction.latency_ms,
    }
    if answer.variant is not None:
        who["variant"] = answer.variant
    if answer.members is not None:
        who["members"] = answer.members
    return who


async def predict_core(
    container: Container, principal: Principal, body: PredictionRequest, scope: Scope, headers: Headers
) -> JSONResponse:
    """A simple-JSON prediction; shared by the FastAPI route and the ASGI fast path."""
    rid = request_id(scope, headers, body.request_id)
    service = container.predictions
    resolved = service.resolve(principal, body.deployment, version=body.version)
    signature = resolved.version.signature
    arrays = arrays_from_request(signature, inputs=body.inputs, features=body.features, batch=body.batch)
    arrays = service.check(resolved, arrays)
    prediction = await service.infer(
        resolved,
        arrays,
        routing=lambda name: body.routing_key or headers.get(name),
        variant=body.variant,
        request_id=rid,
        log_fields={"request_id": rid, "tenant": principal.tenant},
    )
    answer = prediction.answer
    rows = present_rows(answer.signature, answer.result, return_probabilities=body.options.return_probabilities)
    content: dict[str, Any] = {"request_id": rid, "deployment": resolved.deployment.name, **_who_answered(prediction)}
    if body.batch is not None or len(rows) != 1:
        content["predictions"] = rows
    else:
        content.update(rows[0])
    return JSONResponse(content, headers={"x-request-id": rid}, background=await after_response(container, prediction))


async def infer_core(
    container: Container, principal: Principal, body: InferenceRequest, scope: Scope, headers: Headers, name: str, version: str | None
) -> JSONResponse:
    """A v2 inference; shared by the FastAPI routes and the ASGI fast path."""
    service = container.predictions
    resolved = service.resolve(principal, name, version=pinned_version(version))
    signature = resolved.version.signature
    arrays, declared = {}, {}
    for item in body.inputs:
        if item.name in arrays:
            raise InvalidInput(f"input '{item.name}' is given twice", field=f"inputs.{item.name}")
        arrays[item.name] = decode_tensor(item.name, item.datatype, item.shape, item.data, field=f"inputs.{item.name}")
        declared[item.name] = item.datatype
    arrays = service.check(resolved, arrays, datatypes=declared)
    wanted = None
    if body.outputs:
        wanted = [out.name for out in body.outputs]
        for out in wanted:
            if signature.output(out) is None:
                raise InvalidInput(
                    f"unknown output '{out}'; this version gives {[s.name for s in signature.outputs]}",
                    field=f"outputs.{out}",
                )
    rid = request_id(scope, headers, body.id)
    params = body.parameters or {}
    prediction = await service.infer(
        resolved,
        arrays,
        outputs=wanted,
        routing=lambda key: str(params.get("routing_key") or "") or headers.get(key),
        variant=params.get("variant"),
        request_id=rid,
        log_fields={"request_id": rid, "tenant": principal.tenant},
    )
    answer = prediction.answer
    outputs = []
    for out_name, array in answer.result.outputs.items():
        if wanted and out_name not in wanted:
            continue
        tensor = encode_tensor(out_name, array)
        classes = answer.result.classes.get(out_name)
        if classes is not None:
            tensor["parameters"] = {"classes": classes}
        outputs.append(tensor)
    parameters = _who_answered(prediction)
    content = {
        "model_name": resolved.deployment.name,
        "model_version": str(answer.version.version),
        "id": rid,
        "parameters": parameters,
        "outputs": outputs,
    }
    return JSONResponse(content, headers={"x-request-id": rid}, background=await after_response(container, prediction))
