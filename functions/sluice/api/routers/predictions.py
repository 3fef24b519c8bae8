"""Simple JSON predictions: `POST /api/v1/predictions`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request

from sluice.api.deps import ContainerDep, PrincipalDep
from sluice.api.predict import predict_core
from sluice.api.responses import JSONResponse
from sluice.types.api import PredictionRequest, PredictionResponse

if TYPE_CHECKING:

    pass

router = APIRouter(tags=["predictions"])

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "The input does not match the version's signature"},
    401: {"description": "Missing or invalid API key"},
    404: {"description": "No such deployment in this tenant"},
    413: {"description": "Too large for a synchronous request; use batch inference"},
    502: {"description": "The runtime failed"},
    504: {"description": "No answer within the request budget"},
}


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
