"""The dependencies routes declare: the container of services and the acting principal."""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from sluice.domain import Principal
from sluice.domain.errors import Unauthenticated
from sluice.domain.locations import Roots
from sluice.wiring import Container

if TYPE_CHECKING:
    from collections.abc import Mapping

    from starlette.datastructures import Headers
    from starlette.types import Scope

M = TypeVar("M", bound=BaseModel)


async def get_container(request: Request) -> Container:
    # async: a plain `def` dependency would cost a thread hop on every request.
    return container_of(request.app)


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


def _bearer(headers: Headers) -> str | None:
    auth = header(headers, b"authorization")
    if auth:
        scheme, _, token = auth.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return header(headers, b"x-api-key") or None


async def get_principal(request: Request, container: Annotated[Container, Depends(get_container)]) -> Principal:
    # The edge authenticated the request before its body was read.
    found = request.scope.get("sluice.principal")
    return found if found is not None else await authenticate(request.scope, request.headers, container)


def container_of(app: Any) -> Container:
    container = app.state.container
    if container is None:
        from sluice.wiring import get_container as build

        container = app.state.container = build()
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
            scopes = context.get("scopes", "")
            if isinstance(scopes, str):
                scopes = scopes.replace(",", " ").split()
            return Principal(str(context["tenant"]), frozenset(scopes), str(context.get("subject") or context.get("principalId") or ""))
    key = _bearer(headers)
    if not key:
        raise Unauthenticated("missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'")
    return container.keys.authenticate(key)


async def get_admin(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    principal.require("admin")
    return principal


ContainerDep = Annotated[Container, Depends(get_container)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
AdminDep = Annotated[Principal, Depends(get_admin)]


async def get_roots(principal: PrincipalDep, container: ContainerDep) -> Roots:
    """The caller's roots (`sluice.domain.locations`): responses name locations by them."""
    return container.layout.roots(principal.tenant)


RootsDep = Annotated[Roots, Depends(get_roots)]


def parse_body(model: type[M], raw: bytes) -> M:
    """Validate a JSON body in one pass (pydantic-core parses it), whatever its Content-Type;
    errors take the same 422 path as FastAPI's own body validation."""
    try:
        return model.model_validate_json(raw or b"null")
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]) from None


def request_id(scope: Scope, headers: Headers, given: str | None = None) -> str:
    """The caller's id if it sent one, else API Gateway's, else a fresh one."""
    if given:
        return given
    given = header(headers, b"x-request-id")
    if given:
        return given[:128]
    event = scope.get("aws.event")
    if event:
        rid = (event.get("requestContext") or {}).get("requestId")
        if rid:
            return str(rid)
    return os.urandom(16).hex()
