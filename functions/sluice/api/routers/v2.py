"""Open Inference Protocol v2 over REST: model metadata and readiness. A deployment is the v2
"model"; `/versions/{v}` pins a version of the deployment's model. `infer` is a hot route,
answered by the edge (`sluice.api.predict.hot_routes`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter

from sluice.api.deps import ContainerDep, PrincipalDep
from sluice.api.responses import AUTHENTICATED, JSONResponse, errors
from sluice.domain.values import VersionNumber
from sluice.types.v2 import MetadataModelResponse, ModelReadyResponse

if TYPE_CHECKING:
    from sluice.domain.results import Resolved

router = APIRouter(tags=["v2 (Open Inference Protocol)"], responses=errors(*AUTHENTICATED, 502, 503, 504))

PLATFORMS = {"onnx": "onnxruntime_onnx", "triton": "triton", "sagemaker": "sagemaker_triton"}


def _metadata(resolved: Resolved) -> dict[str, Any]:
    version = resolved.version
    signature = version.signature

    def tensors(specs: Any) -> list[dict[str, Any]]:
        return [{"name": s.name, "datatype": s.datatype, "shape": list(s.shape)} for s in specs]

    return {
        "name": resolved.deployment.name,
        "versions": [str(version.version)],
        "platform": PLATFORMS.get(version.runtime, version.runtime),
        "inputs": tensors(signature.inputs),
        "outputs": tensors(signature.outputs),
        "parameters": {"model": version.model, "version": version.version},
    }


@router.get("/v2/models/{name}", response_model=MetadataModelResponse, summary="v2: model metadata")
async def model_metadata(name: str, principal: PrincipalDep, container: ContainerDep) -> JSONResponse:
    return JSONResponse(_metadata(await container.predictions.resolve(principal, name)))


@router.get("/v2/models/{name}/versions/{version}", response_model=MetadataModelResponse, summary="v2: model version metadata")
async def model_version_metadata(name: str, version: VersionNumber, principal: PrincipalDep, container: ContainerDep) -> JSONResponse:
    return JSONResponse(_metadata(await container.predictions.resolve(principal, name, version=version)))


async def _ready(name: str, version: int | None, principal: PrincipalDep, container: ContainerDep) -> JSONResponse:
    resolved = await container.predictions.resolve(principal, name, version=version)
    runtime = container.runtimes.get(resolved.version.runtime)
    ready = runtime is not None
    if runtime is not None:
        await runtime.load(resolved.version)
    return JSONResponse({"name": name, "ready": ready}, status_code=200 if ready else 503)


@router.get("/v2/models/{name}/ready", response_model=ModelReadyResponse, summary="v2: model ready (loads it)")
async def model_ready(name: str, principal: PrincipalDep, container: ContainerDep) -> JSONResponse:
    return await _ready(name, None, principal, container)


@router.get("/v2/models/{name}/versions/{version}/ready", response_model=ModelReadyResponse, summary="v2: model version ready")
async def model_version_ready(name: str, version: VersionNumber, principal: PrincipalDep, container: ContainerDep) -> JSONResponse:
    return await _ready(name, version, principal, container)
