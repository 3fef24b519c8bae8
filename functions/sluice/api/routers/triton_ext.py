"""Triton's own REST extensions that tools call (`tritonclient`'s get_model_config,
get_inference_statistics, get_model_repository_index), for the caller's tenant only.
Included before the v2 router: `/v2/models/stats` must not read as a model named `stats`."""

from __future__ import annotations

from fastapi import APIRouter, Request

from sluice.api.deps import DeploymentsDep, PrincipalDep, TritonExtensionsDep, parse_body
from sluice.api.responses import AUTHENTICATED, JSONResponse, answers, errors
from sluice.domain.values import VersionNumber
from sluice.services.triton_ext import control_refused
from sluice.types.triton import (
    ModelConfigResponse,
    ModelStatsResponse,
    RepositoryIndexEntry,
    RepositoryIndexRequest,
)

router = APIRouter(tags=["v2 (Triton extensions)"], responses=errors(*AUTHENTICATED, 502, 503, 504), default_response_class=JSONResponse)


@router.get("/v2/models/stats", summary="Triton: statistics of every deployment")
@answers(ModelStatsResponse)
async def all_stats(principal: PrincipalDep, extensions: TritonExtensionsDep) -> JSONResponse:
    return JSONResponse(await extensions.stats(principal))


@router.get("/v2/models/{name}/stats", summary="Triton: a deployment's statistics")
@answers(ModelStatsResponse)
async def model_stats(name: str, principal: PrincipalDep, extensions: TritonExtensionsDep) -> JSONResponse:
    return JSONResponse(await extensions.stats(principal, name))


@router.get("/v2/models/{name}/versions/{version}/stats", summary="Triton: statistics, version pinned")
@answers(ModelStatsResponse)
async def model_version_stats(name: str, version: VersionNumber, principal: PrincipalDep, extensions: TritonExtensionsDep) -> JSONResponse:
    return JSONResponse(await extensions.stats(principal, name, version))


@router.get("/v2/models/{name}/config", summary="Triton: model configuration")
@answers(ModelConfigResponse)
async def model_config(name: str, principal: PrincipalDep, extensions: TritonExtensionsDep) -> JSONResponse:
    return JSONResponse(await extensions.config(principal, name))


@router.get("/v2/models/{name}/versions/{version}/config", summary="Triton: model version configuration")
@answers(ModelConfigResponse)
async def model_version_config(name: str, version: VersionNumber, principal: PrincipalDep, extensions: TritonExtensionsDep) -> JSONResponse:
    return JSONResponse(await extensions.config(principal, name, version))


@router.post("/v2/repository/index", summary="Triton: the tenant's deployments")
@answers(list[RepositoryIndexEntry])
async def repository_index(request: Request, principal: PrincipalDep, extensions: TritonExtensionsDep) -> JSONResponse:
    raw = await request.body()
    body = parse_body(RepositoryIndexRequest, raw) if raw.strip() else RepositoryIndexRequest()
    return JSONResponse(await extensions.index(principal, ready=body.ready))


@router.post("/v2/repository/models/{name}/load", summary="Triton: explicit load (not supported)", responses=errors(503))
@router.post("/v2/repository/models/{name}/unload", summary="Triton: explicit unload (not supported)", responses=errors(503))
async def repository_control(name: str, principal: PrincipalDep, deployments: DeploymentsDep) -> JSONResponse:
    # As a Triton server without explicit model control answers: 503 with an error body.
    deployments.get(principal, name)  # another tenant's name, or none: 404 first
    raise control_refused()
