"""The dependencies routes declare: the acting principal, and each service of the container
on its own (`ModelsDep`, `DeploymentsDep`, …), so that a route names what it uses and
nothing else."""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from sluice.caching import keep
from sluice.domain import Principal
from sluice.domain.errors import BadRequest, InvalidRequest, Unauthenticated
from sluice.domain.locations import Roots
from sluice.domain.requests import MAX_REQUEST_ID
from sluice.inference.predictions import PredictionService
from sluice.services.deployments import DeploymentService
from sluice.services.keys import KeyService
from sluice.services.models import ModelService
from sluice.settings import Settings
from sluice.wiring import Container

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from starlette.datastructures import Headers
    from starlette.types import Scope

    # Built on first use: named here only as types (importing them would cost every cold start).
    from sluice.batch.schedules import ScheduleService
    from sluice.batch.service import BatchService
    from sluice.cost.service import CostService
    from sluice.inference.results import ResultService
    from sluice.inference.uploads import UploadService
    from sluice.observability import Telemetry
    from sluice.optimize.jobs import OptimizeJobs
    from sluice.optimize.service import OptimizeService
    from sluice.registry import Registry
    from sluice.replay import ReplayService
    from sluice.runtimes import Runtime
    from sluice.services.endpoints import EndpointService
    from sluice.services.follows import FollowService
    from sluice.services.monitoring import MonitorService
    from sluice.services.rollouts import RolloutService
    from sluice.services.triton_ext import TritonExtensions

M = TypeVar("M", bound=BaseModel)


def _authorizer_context(event: dict[str, Any]) -> dict[str, Any] | None:
    """The context a Lambda authorizer attached: REST APIs put it under `authorizer`,
    HTTP APIs under `authorizer.lambda`."""
    authorizer = (event.get("requestContext") or {}).get("authorizer") or {}
    context = authorizer.get("lambda") or authorizer
    return context if context.get("tenant") else None


def header(headers: Mapping[str, str], name: bytes) -> str | None:
    """`headers.get(name)` for a lower-case name (ASGI's header names are): on Starlette's
    headers without the exception its lookup raises and catches for a header that is not
    there; any other mapping (gRPC metadata) is asked as it is."""
    raw = getattr(headers, "raw", None)
    if raw is None:
        return headers.get(name.decode("latin-1"))
    for key, value in raw:
        if key == name:
            return value.decode("latin-1")
    return None


MISSING_KEY = "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'"


def _bearer(headers: Headers) -> str | None:
    """The request's key: `Authorization: Bearer <key>`, else `x-api-key`. Either header given
    twice is refused (400): a proxy in front that read the other copy would disagree about
    whose request it is."""
    raw = getattr(headers, "raw", None)
    if raw is None:  # a mapping (gRPC metadata): one value a name
        auth, key = header(headers, b"authorization"), header(headers, b"x-api-key")
    else:
        auth = key = None
        for name, value in raw:
            if name == b"authorization":
                if auth is not None:
                    raise BadRequest("the Authorization header is given twice: send one", field="authorization")
                auth = value.decode("latin-1")
            elif name == b"x-api-key":
                if key is not None:
                    raise BadRequest("the x-api-key header is given twice: send one", field="x-api-key")
                key = value.decode("latin-1")
    if auth:
        scheme, _, token = auth.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return key or None


async def get_principal(request: Request) -> Principal:
    # The edge authenticated the request before its body was read.
    found = request.scope.get("sluice.principal")
    return found if found is not None else await authenticate(request.scope, request.headers, container_of(request.app))


def container_of(app: Any) -> Container:
    container = app.state.container
    if container is None:
        from sluice.wiring import get_container as build

        container = app.state.container = build().serving()  # its prediction path before its first request
    return container


def known_principal(scope: Scope, headers: Headers, container: Container) -> Principal | None:
    """The principal when it needs no registry read (an authorizer's context, a key checked
    recently), else None; raises when there is no credential at all."""
    if scope.get("aws.event") is None:
        key = _bearer(headers)
        if key:
            return container.keys.cached(key)
    return principal_of(scope, headers, container)


async def authenticate(scope: Scope, headers: Headers, container: Container) -> Principal:
    """`principal_of` for the event loop: a key not cached is looked up in a thread."""
    found = known_principal(scope, headers, container)
    if found is not None:
        return found
    return await asyncio.to_thread(container.keys.authenticate, _bearer(headers) or "")


def principal_of(scope: Scope, headers: Headers, container: Container) -> Principal:
    # Only API Gateway can put an authorizer context in the Lambda event; a client cannot
    # forge it through headers, and locally there is no event at all.
    event = scope.get("aws.event")
    if event:
        context = _authorizer_context(event)
        if context is not None:
            return _authorized(context["tenant"], context.get("scopes", ""), context.get("subject") or context.get("principalId") or "")
    key = _bearer(headers)
    if not key:
        raise Unauthenticated(MISSING_KEY)
    return container.keys.authenticate(key)


def _authorized(tenant: Any, scopes: Any, subject: Any) -> Principal:
    """The principal of an authorizer's context values; the same text values (every request of
    a caller) give the one principal made for them (immutable), not a new one per request."""
    key = (tenant, scopes, subject)
    cacheable = type(tenant) is str and type(scopes) is str and type(subject) is str
    if cacheable:
        found = _PRINCIPALS.get(key)
        if found is not None:
            return found
    if isinstance(scopes, str):
        scopes = scopes.replace(",", " ").split()
    elif not isinstance(scopes, list | tuple):  # null, a number: no scopes (a 403 where one is needed), never a 500
        scopes = ()
    principal = Principal(str(tenant), frozenset(str(s) for s in scopes), str(subject))
    if cacheable:
        keep(_PRINCIPALS, key, principal, MAX_PRINCIPALS)
    return principal


MAX_PRINCIPALS = 1024  # callers seen by one container: a bound, whatever the traffic
_PRINCIPALS: dict[tuple[str, str, str], Principal] = {}


async def get_admin(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    principal.require("admin")
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]
AdminDep = Annotated[Principal, Depends(get_admin)]


async def get_roots(principal: PrincipalDep, request: Request) -> Roots:
    """The caller's roots (`sluice.domain.locations`): responses name locations by them."""
    return container_of(request.app).layout.roots(principal.tenant)


RootsDep = Annotated[Roots, Depends(get_roots)]


# The services, one dependency each. Every one is `async` (a plain `def` dependency would
# cost a thread hop on every request). Those the container builds with itself are read as
# they are; those it builds on first use are built on a worker thread the first time (some
# import and build a good deal), so that building never holds the event loop.


def _with_container(name: str) -> Callable[[Request], Awaitable[Any]]:
    """The dependency answering with the container's `name`, which it builds with itself."""

    async def dependency(request: Request) -> Any:
        return getattr(container_of(request.app), name)

    dependency.__name__ = dependency.__qualname__ = f"get_{name}"
    return dependency


def _on_first_use(name: str) -> Callable[[Request], Awaitable[Any]]:
    """The dependency answering with the container's `name`, which it builds on first use:
    on a worker thread, the first time."""

    async def dependency(request: Request) -> Any:
        container = container_of(request.app)
        found = vars(container).get(name)  # what a `cached_property` has built, kept on the instance
        return found if found is not None else await run_in_threadpool(getattr, container, name)

    dependency.__name__ = dependency.__qualname__ = f"get_{name}"
    return dependency


get_settings = _with_container("settings")
get_registry = _with_container("registry")
get_runtimes = _with_container("runtimes")
get_telemetry = _with_container("telemetry")
get_predictions = _with_container("predictions")
get_models = _with_container("models")
get_deployments = _with_container("deployments")
get_keys = _with_container("keys")


async def get_triton_extensions(request: Request) -> TritonExtensions:
    from sluice.services.triton_ext import TritonExtensions

    container = container_of(request.app)
    return TritonExtensions(container.predictions, container.deployments, container.runtimes)


get_endpoints = _on_first_use("endpoints")
get_rollouts = _on_first_use("rollouts")
get_follows = _on_first_use("follows")
get_replay = _on_first_use("replay")
get_cost = _on_first_use("cost")
get_results = _on_first_use("results")
get_uploads = _on_first_use("uploads")
get_batch = _on_first_use("batch")
get_schedules = _on_first_use("schedules")
get_optimizer = _on_first_use("optimizer")
get_optimize_jobs = _on_first_use("optimize_jobs")
get_monitor = _on_first_use("monitor")


# The types of services built on first use are named as strings: FastAPI reads no further
# than the dependency, and this module imports none of them.
SettingsDep = Annotated[Settings, Depends(get_settings)]
RegistryDep = Annotated["Registry", Depends(get_registry)]
RuntimesDep = Annotated["dict[str, Runtime]", Depends(get_runtimes)]
TelemetryDep = Annotated["Telemetry | None", Depends(get_telemetry)]
PredictionsDep = Annotated[PredictionService, Depends(get_predictions)]
ModelsDep = Annotated[ModelService, Depends(get_models)]
DeploymentsDep = Annotated[DeploymentService, Depends(get_deployments)]
KeysDep = Annotated[KeyService, Depends(get_keys)]
TritonExtensionsDep = Annotated["TritonExtensions", Depends(get_triton_extensions)]
EndpointsDep = Annotated["EndpointService", Depends(get_endpoints)]
RolloutsDep = Annotated["RolloutService", Depends(get_rollouts)]
FollowsDep = Annotated["FollowService", Depends(get_follows)]
ReplayDep = Annotated["ReplayService", Depends(get_replay)]
CostDep = Annotated["CostService", Depends(get_cost)]
ResultsDep = Annotated["ResultService", Depends(get_results)]
UploadsDep = Annotated["UploadService", Depends(get_uploads)]
BatchDep = Annotated["BatchService", Depends(get_batch)]
SchedulesDep = Annotated["ScheduleService", Depends(get_schedules)]
OptimizerDep = Annotated["OptimizeService", Depends(get_optimizer)]
OptimizeJobsDep = Annotated["OptimizeJobs", Depends(get_optimize_jobs)]
MonitorDep = Annotated["MonitorService", Depends(get_monitor)]


def parse_body(model: type[M], raw: bytes) -> M:
    """Validate a JSON body in one pass (pydantic-core parses it), whatever its Content-Type;
    errors take the same 422 path as FastAPI's own body validation."""
    try:
        return model.model_validate_json(raw or b"null")
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]) from None


_HEADER_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")  # visible ASCII, less the escape


def id_header(rid: str) -> str:
    """A request id as its `x-request-id` header's value: as it is where it is visible ASCII
    (what ids are), else percent-encoded (UTF-8), so that no id a caller gives can end the
    header or the response (CR, LF, NUL) or be refused by the server (beyond latin-1)."""
    if rid.isascii() and rid.isprintable() and " " not in rid and "%" not in rid:
        return rid
    from urllib.parse import quote

    return quote(rid, safe=_HEADER_SAFE)


def request_id(scope: Scope, headers: Headers, given: str | None = None, *, field: str = "request_id") -> str:
    """The caller's id if it sent one (at most MAX_REQUEST_ID characters, else refused naming
    `field`), else its header's (cut to that), else API Gateway's, else a fresh one."""
    if given:
        if len(given) > MAX_REQUEST_ID:
            raise InvalidRequest(f"{field}: a string of at most {MAX_REQUEST_ID} characters", field=field)
        return given
    given = header(headers, b"x-request-id")
    if given:
        return given[:MAX_REQUEST_ID]
    event = scope.get("aws.event")
    if event:
        rid = (event.get("requestContext") or {}).get("requestId")
        if rid:
            return str(rid)
    return os.urandom(16).hex()
