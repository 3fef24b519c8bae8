"""Open Inference Protocol v2 over REST: model metadata and readiness. A deployment is the v2
"model"; `/versions/{v}` pins a version of the deployment's model. `infer` is a hot route,
answered by the edge (`sluice.api.predict.hot_routes`)."""

from __future__ import annotations

from fastapi import APIRouter

from sluice.api.deps import PredictionsDep, PrincipalDep, RuntimesDep
from sluice.api.responses import AUTHENTICATED, JSONResponse, answers, errors
from sluice.domain.values import VersionNumber
from sluice.inference.metadata import metadata_of, ready_to_answer
from sluice.types.v2 import MetadataModelResponse, ModelReadyResponse

router = APIRouter(tags=["v2 (Open Inference Protocol)"], responses=errors(*AUTHENTICATED, 502, 503, 504), default_response_class=JSONResponse)


@router.get("/v2/models/{name}", summary="v2: model metadata")
@answers(MetadataModelResponse)
async def model_metadata(name: str, principal: PrincipalDep, predictions: PredictionsDep) -> JSONResponse:
    return JSONResponse(metadata_of(await predictions.resolve(principal, name)))


@router.get("/v2/models/{name}/versions/{version}", summary="v2: model version metadata")
@answers(MetadataModelResponse)
async def model_version_metadata(
    name: str, version: VersionNumber, principal: PrincipalDep, predictions: PredictionsDep
) -> JSONResponse:
    return JSONResponse(metadata_of(await predictions.resolve(principal, name, version=version)))


async def _ready(
    name: str, version: int | None, principal: PrincipalDep, predictions: PredictionsDep, runtimes: RuntimesDep
) -> JSONResponse:
    resolved = await predictions.resolve(principal, name, version=version)
    ready = await ready_to_answer(runtimes, resolved.version)
    return JSONResponse({"name": name, "ready": ready}, status_code=200 if ready else 503)


@router.get("/v2/models/{name}/ready", summary="v2: model ready (loads it)")
@answers(ModelReadyResponse)
async def model_ready(name: str, principal: PrincipalDep, predictions: PredictionsDep, runtimes: RuntimesDep) -> JSONResponse:
    return await _ready(name, None, principal, predictions, runtimes)


@router.get("/v2/models/{name}/versions/{version}/ready", summary="v2: model version ready")
@answers(ModelReadyResponse)
async def model_version_ready(
    name: str, version: VersionNumber, principal: PrincipalDep, predictions: PredictionsDep, runtimes: RuntimesDep
) -> JSONResponse:
    return await _ready(name, version, principal, predictions, runtimes)
