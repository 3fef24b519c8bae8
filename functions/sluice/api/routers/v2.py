"""Open Inference Protocol v2 over REST. A deployment is the v2 "model"; `/versions/{v}`
pins a version of the deployment's model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request

from sluice.api.after import after_response
from sluice.api.deps import ContainerDep, PrincipalDep, parse_body, request_id
from sluice.api.responses import JSONResponse
from sluice.api.routers.predictions import ERRORS
from sluice.codecs.tensors import decode_tensor, encode_tensor
from sluice.errors import BadRequest, InvalidInput
from sluice.types.v2 import (
    InferenceRequest,
    InferenceResponse,
    MetadataModelResponse,
    ModelReadyResponse,
)

if TYPE_CHECKING:
    from starlette.datastructures import Headers
    from starlette.types import Scope

    from sluice.domain import Principal
    from sluice.services.predictions import Resolved
    from sluice.wiring import Container

router = APIRouter(tags=["v2 (Open Inference Protocol)"])

PLATFORMS = {"onnx": "onnxruntime_onnx", "triton": "triton", "sagemaker": "sagemaker_triton"}


def _version(value: str | None) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or int(value) < 1:
        raise BadRequest("model version must be a positive integer", field="version")
    return int(value)


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


INFER_BODY = {
    "requestBody": {
        "content": {"application/json": {"schema": InferenceRequest.model_json_schema(ref_template="#/components/schemas/{model}")}},
        "required": True,
    }
}


async def _infer(request: Request, principal: PrincipalDep, container: ContainerDep, name: str, version: str | None) -> JSONResponse:
    # v2 clients (tritonclient among them) often send no Content-Type: parse whatever came.
    body = parse_body(InferenceRequest, await request.body())
    return await infer_core(container, principal, body, request.scope, request.headers, name, version)


async def infer_core(
    container: Container, principal: Principal, body: InferenceRequest, scope: Scope, headers: Headers, name: str, version: str | None
) -> JSONResponse:
    """A v2 inference; shared by the FastAPI routes and the ASGI fast path."""
    service = container.predictions
    resolved = service.resolve(principal, name, version=_version(version))
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
    parameters: dict[str, Any] = {
        "model": answer.version.model,
        "version": answer.version.version,
        "latency_ms": prediction.latency_ms,
    }
    if answer.variant is not None:
        parameters["variant"] = answer.variant
    if answer.members is not None:
        parameters["members"] = answer.members
    content = {
        "model_name": resolved.deployment.name,
        "model_version": str(answer.version.version),
        "id": rid,
        "parameters": parameters,
        "outputs": outputs,
    }
    return JSONResponse(content, headers={"x-request-id": rid}, background=await after_response(container, prediction))


@router.get("/v2/models/{name}", response_model=MetadataModelResponse, summary="v2: model metadata")
async def model_metadata(name: str, principal: PrincipalDep, container: ContainerDep) -> JSONResponse:
    return JSONResponse(_metadata(container.predictions.resolve(principal, name)))


@router.get("/v2/models/{name}/versions/{version}", response_model=MetadataModelResponse, summary="v2: model version metadata")
async def model_version_metadata(name: str, version: str, principal: PrincipalDep, container: ContainerDep) -> JSONResponse:
    return JSONResponse(_metadata(container.predictions.resolve(principal, name, version=_version(version))))


async def _ready(name: str, version: str | None, principal: PrincipalDep, container: ContainerDep) -> JSONResponse:
    resolved = container.predictions.resolve(principal, name, version=_version(version))
    runtime = container.runtimes.get(resolved.version.runtime)
    ready = runtime is not None
    if runtime is not None:
        await runtime.load(resolved.version)
    return JSONResponse({"name": name, "ready": ready}, status_code=200 if ready else 503)


@router.get("/v2/models/{name}/ready", response_model=ModelReadyResponse, summary="v2: model ready (loads it)")
async def model_ready(name: str, principal: PrincipalDep, container: ContainerDep) -> JSONResponse:
    return await _ready(name, None, principal, container)


@router.get("/v2/models/{name}/versions/{version}/ready", response_model=ModelReadyResponse, summary="v2: model version ready")
async def model_version_ready(name: str, version: str, principal: PrincipalDep, container: ContainerDep) -> JSONResponse:
    return await _ready(name, version, principal, container)


@router.post("/v2/models/{name}/infer", response_model=InferenceResponse, responses=ERRORS, openapi_extra=INFER_BODY, summary="v2: infer")
async def infer(name: str, request: Request, principal: PrincipalDep, container: ContainerDep) -> JSONResponse:
    return await _infer(request, principal, container, name, None)


@router.post(
    "/v2/models/{name}/versions/{version}/infer",
    response_model=InferenceResponse,
    responses=ERRORS,
    openapi_extra=INFER_BODY,
    summary="v2: infer on a pinned version",
)
async def infer_version(name: str, version: str, request: Request, principal: PrincipalDep, container: ContainerDep) -> JSONResponse:
    return await _infer(request, principal, container, name, version)
