"""Models and versions (admin scope): create, push by upload or by URI, list, get, delete."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request, status
from fastapi.concurrency import run_in_threadpool

from sluice.api.deps import AdminDep, ModelsDep, RegistryDep, RootsDep, parse_body
from sluice.api.presenters import model_out, version_out
from sluice.api.responses import MANAGEMENT, JSONResponse, answers, errors
from sluice.domain.errors import BadRequest, NotFound
from sluice.domain.values import VersionNumber, VersionOrLatest
from sluice.types.management import (
    ModelCreate,
    ModelOut,
    VersionFromTriton,
    VersionOut,
    VersionPushByUri,
)

router = APIRouter(prefix="/api/v1/models", tags=["models"], responses=errors(*MANAGEMENT, 502, 503), default_response_class=JSONResponse)

ONNX_BODY = {
    "requestBody": {
        "content": {
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            "application/json": {
                "schema": {"oneOf": [VersionPushByUri.model_json_schema(), VersionFromTriton.model_json_schema()]}
            },
        },
        "required": True,
    }
}


def _latest(registry: RegistryDep, tenant: str, name: str) -> int | None:
    try:
        return registry.latest_version(tenant, name).version
    except NotFound:
        return None


@router.post("", status_code=status.HTTP_201_CREATED, summary="Create a model")
@answers(ModelOut)
def create_model(body: ModelCreate, principal: AdminDep, models: ModelsDep) -> JSONResponse:
    return JSONResponse(model_out(models.create(principal, body.name, body.description)), status_code=201)


@router.get("", summary="List models")
@answers(list[ModelOut])
def list_models(principal: AdminDep, models: ModelsDep, registry: RegistryDep) -> JSONResponse:
    found = models.list_models(principal)
    return JSONResponse([model_out(m, _latest(registry, principal.tenant, m.name)) for m in found])


@router.get("/{name}", summary="Get a model")
@answers(ModelOut)
def get_model(name: str, principal: AdminDep, models: ModelsDep, registry: RegistryDep) -> JSONResponse:
    model = models.get_model(principal, name)
    return JSONResponse(model_out(model, _latest(registry, principal.tenant, name)))


@router.delete("/{name}", status_code=204, summary="Delete a model and its versions")
def delete_model(name: str, principal: AdminDep, models: ModelsDep) -> None:
    models.delete_model(principal, name)


@router.post(
    "/{name}/versions",
    status_code=201,
    openapi_extra=ONNX_BODY,
    summary="Push a version: an ONNX file as the body, JSON naming an artifact URI, or a model on a Triton server",
)
@answers(VersionOut)
async def push_version(
    name: str,
    request: Request,
    principal: AdminDep,
    models: ModelsDep,
    roots: RootsDep,
    feature_names: str | None = Query(None, description="Comma-separated feature names (uploads)."),
) -> JSONResponse:
    content_type = request.headers.get("content-type", "").split(";")[0].strip()
    body = await request.body()
    if content_type == "application/json":
        if _names_triton(body):
            triton = parse_body(VersionFromTriton, body)
            version = await models.register_triton(
                principal,
                name,
                triton.triton_url,
                model_name=triton.model_name,
                model_version=triton.model_version or "",
                protocol=triton.protocol,
                feature_names=triton.feature_names,
                description=triton.description,
            )
        else:
            spec = parse_body(VersionPushByUri, body)
            version = await run_in_threadpool(
                models.push_uri,
                principal,
                name,
                spec.artifact_uri,
                runtime=spec.runtime,
                config=spec.config,
                feature_names=spec.feature_names,
                description=spec.description,
            )
    elif content_type in ("application/octet-stream", "application/onnx", ""):
        names = [n.strip() for n in feature_names.split(",")] if feature_names else None  # each named: `check_feature_names`
        version = await run_in_threadpool(models.push, principal, name, body, feature_names=names)
    else:
        raise BadRequest(
            "send the ONNX file as application/octet-stream, or JSON with artifact_uri", field="content-type"
        )
    return JSONResponse(version_out(version, roots), status_code=201)


@router.get("/{name}/versions", summary="List a model's versions")
@answers(list[VersionOut])
def list_versions(name: str, principal: AdminDep, models: ModelsDep, roots: RootsDep) -> JSONResponse:
    return JSONResponse([version_out(v, roots) for v in models.list_versions(principal, name)])


@router.get("/{name}/versions/{version}", summary="Get a version ('latest' works)")
@answers(VersionOut)
def get_version(name: str, version: VersionOrLatest, principal: AdminDep, models: ModelsDep, roots: RootsDep) -> JSONResponse:
    return JSONResponse(version_out(models.get_version(principal, name, version), roots))


@router.delete("/{name}/versions/{version}", status_code=204, summary="Delete a version no deployment uses")
def delete_version(name: str, version: VersionNumber, principal: AdminDep, models: ModelsDep) -> None:
    models.delete_version(principal, name, version)


def _names_triton(body: bytes) -> bool:
    """Whether a JSON body registers a Triton server: a `triton_url` field of its own (the
    text anywhere in it, a description saying triton_url, sent a push by URI down this path)."""
    import orjson

    try:
        found = orjson.loads(body)
    except orjson.JSONDecodeError:  # refused by the push's own validation, naming the body
        return False
    return isinstance(found, dict) and "triton_url" in found
