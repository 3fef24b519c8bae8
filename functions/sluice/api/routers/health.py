"""Liveness and readiness; the only routes that need no principal."""

from __future__ import annotations

from fastapi import APIRouter

from sluice import __version__
from sluice.api.deps import RegistryDep
from sluice.api.responses import JSONResponse, answers
from sluice.inference.metadata import EXTENSIONS
from sluice.services.health import registry_answers
from sluice.types.v2 import MetadataServerResponse

router = APIRouter(tags=["health"], default_response_class=JSONResponse)


@router.get("/healthz", summary="The process is up")
async def healthz() -> JSONResponse:
    return JSONResponse({"status": "ok"})


@router.get("/readyz", summary="The registry answers")
def readyz(registry: RegistryDep) -> JSONResponse:
    ready = registry_answers(registry)
    return JSONResponse({"status": "ok" if ready else "unavailable"}, status_code=200 if ready else 503)


@router.get("/v2/health/live", summary="v2: server live")
async def v2_live() -> JSONResponse:
    return JSONResponse({"live": True})


@router.get("/v2/health/ready", summary="v2: server ready")
def v2_ready(registry: RegistryDep) -> JSONResponse:
    ready = registry_answers(registry)
    return JSONResponse({"ready": ready}, status_code=200 if ready else 503)


@router.get("/v2", summary="v2: server metadata")
@router.get("/v2/", include_in_schema=False)  # the same, not a redirect: clients differ on the slash
@answers(MetadataServerResponse)
async def v2_server() -> JSONResponse:
    return JSONResponse({"name": "sluice", "version": __version__, "extensions": list(EXTENSIONS)})
