"""Simple JSON predictions: `POST /api/v1/predictions`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request

from sluice.api.after import after_response
from sluice.api.deps import ContainerDep, PrincipalDep, request_id
from sluice.api.responses import JSONResponse
from sluice.codecs.plain import arrays_from_request, present_rows
from sluice.types.api import PredictionRequest, PredictionResponse

if TYPE_CHECKING:
    from starlette.datastructures import Headers
    from starlette.types import Scope

    from sluice.domain import Principal
    from sluice.wiring import Container

router = APIRouter(tags=["predictions"])

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "The input does not match the version's signature"},
    401: {"description": "Missing or invalid API key"},
    404: {"description": "No such deployment in this tenant"},
    413: {"description": "Too large for a synchronous request; use batch inference"},
    502: {"description": "The runtime failed"},
    504: {"description": "No answer within the request budget"},
}


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
    content: dict[str, Any] = {
        "request_id": rid,
        "deployment": resolved.deployment.name,
        "model": answer.version.model,
        "version": answer.version.version,
        "latency_ms": prediction.latency_ms,
    }
    if answer.variant is not None:
        content["variant"] = answer.variant
    if answer.members is not None:
        content["members"] = answer.members
    if body.batch is not None or len(rows) != 1:
        content["predictions"] = rows
    else:
        content.update(rows[0])
    return JSONResponse(content, headers={"x-request-id": rid}, background=await after_response(container, prediction))


@router.post(
    "/api/v1/predictions",
    response_model=PredictionResponse,
    response_model_exclude_none=True,
    responses=ERRORS,
    summary="Predict with a deployment",
)
async def predict(
    body: PredictionRequest, request: Request, principal: PrincipalDep, container: ContainerDep
) -> JSONResponse:
    return await predict_core(container, principal, body, request.scope, request.headers)
