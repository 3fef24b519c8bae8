"""The HTTP edge: what every request meets before the framework, behind the body limit
(`sluice.api.bodies.BodyLimit`).

- `Edge` authenticates every request that needs a principal before its body is read, holds
  each key to its rate when `SLUICE_RATE_LIMIT` is set and to its requests in flight
  (`SLUICE_MAX_IN_FLIGHT_PER_KEY`; both 429 with Retry-After, body unread), admits a
  prediction only while the worker has room for it (`sluice.services.admission`: 503
  `overloaded`, or 429 `tenant_overloaded` past a tenant's share; body unread), and
  answers the hot routes (`HotRoute`: simple-JSON predictions and v2 inference) itself: no
  framework routing, dependency solving or second body parse on the path that must be fast.
  In Lambda, an answer larger than its result may carry is refused (413) rather than left to
  fail there, which API Gateway would answer with a bare 502.
  The same declarations document those routes in the OpenAPI document (`openapi_routes`).
  Everything else goes on to FastAPI.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError
from starlette.datastructures import Headers
from starlette.routing import compile_path

from sluice.api.bodies import BodyTooLarge, timed, too_large, upload_body
from sluice.api.departures import CLIENT_GONE, CLIENT_LEFT, EVICTED, body_unless_evicted, leaving
from sluice.api.encoding import behind_api_gateway, gzip_wanted, gzip_whole
from sluice.api.errors import error_content, error_response
from sluice.api.responses import JSONResponse, lambda_size_over
from sluice.codecs.binary import HEADER, split_body
from sluice.domain.errors import PayloadTooLarge
from sluice.registry.scope import bind_tenant, unbind_tenant

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from pydantic import BaseModel
    from starlette.responses import Response
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from sluice.domain import Principal
    from sluice.wiring import Container

# Routes that answer without a principal: liveness, readiness, server metadata, the docs.
LONG_BODY = 1024  # from this many bytes, `holds_true_or_false` looks for the words' first letters first
CANDIDATES = 4  # a letter found this many times not starting its word: the words looked for whole


def holds_true_or_false(text: bytes) -> bool:
    """Whether `text` holds `true` or `false` anywhere (a JSON body: `false` inside a string
    counts too, so the answer may be yes where the values hold none, never no where they do).

    `bytes.find` of a word walks a body of numbers about a byte at a time (the digits 2, 4, 5
    and 3 share its skip table's bits with t, u, r and s): ~6 µs for 256 floats, a twentieth
    of a request. A letter alone is found by `memchr`, and in a body of numbers `t` and `f`
    stand only in its keys: a long body is looked through for them first, each place checked
    for its word, and, where a letter stands `CANDIDATES` times elsewhere (rows of objects
    whose keys hold it), for the words whole from there. `find`, never `in`: on bytes `in`
    first reads its operand as an integer (a TypeError made and dropped each time)."""
    if len(text) < LONG_BODY:
        return text.find(b"true") >= 0 or text.find(b"false") >= 0
    for letter, word in ((b"t", b"true"), (b"f", b"false")):
        at, seen = text.find(letter), 0
        while at >= 0:
            if text.startswith(word, at):
                return True
            seen += 1
            if seen == CANDIDATES:
                if text.find(word, at) >= 0:
                    return True
                break
            at = text.find(letter, at + 1)
    return False


PUBLIC = frozenset({"/healthz", "/readyz", "/v2", "/v2/", "/v2/health/live", "/v2/health/ready", "/docs", "/openapi.json"})
PRINCIPAL = "sluice.principal"
JSON_BOOLS = "sluice.json_bools"  # set by the edge for a hot route's handler: see `Edge._answer`
DEPLOYMENT = "sluice.deployment"  # the deployment a parsed simple-JSON body names (failures are counted by it)


@dataclass(frozen=True)
class HotRoute:
    """A route the edge answers. `handler(container, principal, body, scope, headers, **path)`;
    `params` types path parameters (default: a string), validated before the handler runs and
    documented as such. A `binary` route also takes a JSON header followed by raw bytes (the
    binary tensor extension): `body` is then the header, and `binary=` the bytes after it.
    `rows(body)` names the field a request carries its rows in (`inputs` by default)."""

    method: str
    path: str
    body: type[BaseModel]
    response: type[BaseModel]
    handler: Callable[..., Awaitable[Response]]
    summary: str
    tags: tuple[str, ...] = ()
    responses: dict[int | str, dict[str, Any]] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    binary: bool = False
    rows: Callable[[Any], str] = lambda _: "inputs"

    def __post_init__(self) -> None:
        regex, _, _ = compile_path(self.path)
        object.__setattr__(self, "_regex", regex)
        object.__setattr__(self, "_prefix", self.path.split("{", 1)[0])
        object.__setattr__(self, "_adapters", {name: TypeAdapter(kind) for name, kind in self.params.items()})

    def parse_params(self, raw: dict[str, str]) -> dict[str, Any]:
        """Path values as their declared types; a bad one is a 422 naming it, as FastAPI's are."""
        if not self._adapters:  # type: ignore[attr-defined]
            return raw
        out: dict[str, Any] = dict(raw)
        problems: list[Any] = []
        for name, adapter in self._adapters.items():  # type: ignore[attr-defined]
            if name in raw:
                try:
                    out[name] = adapter.validate_python(raw[name])
                except ValidationError as exc:
                    problems += [{**e, "loc": ("path", name, *e["loc"])} for e in exc.errors(include_url=False)]
        if problems:
            raise RequestValidationError(problems)
        return out

    def match(self, method: str, path: str) -> dict[str, str] | None:
        if method != self.method or not path.startswith(self._prefix):  # type: ignore[attr-defined]
            return None
        found = self._regex.match(path)  # type: ignore[attr-defined]
        return found.groupdict() if found else None


class Edge:
    def __init__(
        self,
        app: ASGIApp,
        routes: Callable[[], list[HotRoute]],
        container: Callable[[], Container],
        authenticate: Callable[[Scope, Headers, Container], Awaitable[Principal]],
        known: Callable[[Scope, Headers, Container], Principal | None] | None = None,
        *,
        wrong_method: Callable[[Scope], Response],
    ) -> None:
        self.app = app
        self.wrong_method = wrong_method  # the 405, its `Allow` the path's every method (`SluiceApp.wrong_method`)
        self.routes = routes
        self.container = container
        self.authenticate = authenticate
        self.known = known  # the synchronous fast path: no coroutine when nothing is read
        self._routes: list[HotRoute] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC or upload_body(scope["path"]):
            await self.app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS":  # no route takes it (no CORS: the console is on the API's origin): a 405 with no principal, on every route
            await (self.app if self._hot(scope) is None else self.wrong_method(scope))(scope, receive, send)
            return
        headers = Headers(scope=scope)
        container, principal, refusal = await self._admit(scope, headers)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        found = self._hot(scope)
        if found is not None and scope["method"] != found[0].method:  # GET .../infer: as every route answers
            await self.wrong_method(scope)(scope, receive, send)
            return
        admission, prediction = container.admission, found is not None
        refused = await self._enter(container, principal, found, scope)  # before a byte of the body is read
        if refused is not None:
            await refused(scope, receive, send)
            return
        token = bind_tenant(principal.tenant)  # the registry acts for this tenant alone
        released = admission is None
        try:
            if found is not None:
                route, params = found
                try:
                    response = await self._answer(route, params, container, principal, scope, headers, receive)
                except asyncio.CancelledError:
                    if not scope.get(CLIENT_LEFT):
                        raise
                    asyncio.current_task().uncancel()  # type: ignore[union-attr]  # nobody to answer: the slot is given back below
                    return
                if not released:

                    async def sending(message: Message) -> None:
                        nonlocal released
                        await send(message)
                        if message["type"] == "http.response.body" and not message.get("more_body") and not released:
                            # Answered: the slot is free before the response's background task
                            # (statistics), as the client, free too, may send its next request.
                            released = True
                            admission.leave(principal, prediction=prediction and not scope.get(EVICTED))  # type: ignore[union-attr]

                    await response(scope, receive, sending)
                else:
                    await response(scope, receive, send)
                return
            # The framework's routes read their bodies in the time a hot route's has.
            await self.app(scope, timed(receive, container.settings.limits.body_timeout_s), send)
        finally:
            unbind_tenant(token)
            if not released:  # a slot taken back while its body came (EVICTED) was given back then: its key's alone
                admission.leave(principal, prediction=prediction and not scope.get(EVICTED))  # type: ignore[union-attr]

    async def answer_whole(self, scope: Scope, body: bytes, receive: Receive | None = None) -> Response | None:
        """A hot route's response when the whole body is already at hand (a Lambda event),
        through the same steps as `__call__` (authentication, rate limit, requests in flight
        where this process counts them, tenant binding, the route) without an ASGI exchange;
        None when the request is not for a hot route (the caller then runs the app). The
        body is read from `receive` where given (a compressed body inflated as it is read,
        once the request is admitted), else it is `body`. The response's background task is
        the caller's to run."""
        if scope["method"] != "POST" or scope["path"] in PUBLIC:
            return None
        found = self._hot(scope)
        if found is None or found[0].method != scope["method"]:
            return None
        headers = Headers(scope=scope)
        container, principal, refusal = await self._admit(scope, headers)
        if refusal is None:
            refusal = await self._enter(container, principal, found, scope)
        if refusal is not None:
            return refusal
        token = bind_tenant(principal.tenant)
        try:
            route, params = found
            return await self._answer(route, params, container, principal, scope, headers, receive, body=body)
        finally:
            unbind_tenant(token)
            if container.admission is not None:  # answered: the slot is free as the answer goes out
                container.admission.leave(principal, prediction=not scope.get(EVICTED))

    async def _enter(self, container: Container, principal: Principal, found: tuple[HotRoute, dict[str, str]] | None, scope: Scope) -> Response | None:
        """The request admitted in flight (`sluice.services.admission`; nothing to admit in
        Lambda), then one request of its key's rate counted (`SLUICE_RATE_LIMIT`, the one the
        gRPC service counts against too), before a byte of the body is read; or the refusal
        (429 with Retry-After, 503), a refused prediction counted (`sluice.inference.outcomes`).
        In that order, so that a request refused for too many in flight takes no slot of its
        key's rate, and one refused by its rate holds no slot in flight."""
        admission, prediction = container.admission, found is not None
        entered = False
        try:
            if admission is not None:
                admission.enter(principal, prediction=prediction)
                entered = True
            rate_limit = container.rate_limit
            if rate_limit is not None:
                await rate_limit.check(principal.subject, principal.tenant)
        except BaseException as exc:
            if entered:
                admission.leave(principal, prediction=prediction)  # type: ignore[union-attr]
            if not isinstance(exc, Exception):  # cancelled: nothing to answer
                raise
            if found is not None:
                container.predictions.outcomes.refused(principal.tenant, found[1].get("name"), exc)
            return error_response(exc, scope["path"])
        return None

    def _hot(self, scope: Scope) -> tuple[HotRoute, dict[str, str]] | None:
        if self._routes is None:
            self._routes = self.routes()
        for route in self._routes:  # matched by path: the caller answers another method
            params = route.match(route.method, scope["path"])
            if params is not None:
                return route, params
        return None

    async def _admit(self, scope: Scope, headers: Headers) -> tuple[Container, Principal, Response | None]:
        """The container and the principal, or the refusal to answer (a 401, the registry
        down): before the body is read."""
        try:
            container = self.container()
            principal = self.known(scope, headers, container) if self.known else None
            if principal is None:
                principal = await self.authenticate(scope, headers, container)
        except Exception as exc:
            return None, None, error_response(exc, scope["path"])  # type: ignore[return-value]
        scope[PRINCIPAL] = principal  # the routes behind read it (`deps.get_principal`)
        return container, principal, None

    async def _answer(
        self,
        route: HotRoute,
        params: dict[str, str],
        container: Container,
        principal: Principal,
        scope: Scope,
        headers: Headers,
        receive: Receive | None = None,
        body: bytes | None = None,
    ) -> Response:
        raw: bytes | memoryview | None = None
        try:
            path = route.parse_params(params)
            if receive is None:
                raw = body
            else:
                raw = await body_unless_evicted(container, principal, scope, receive)
            if route.binary:
                declared = headers.get(HEADER)
                if declared is not None:
                    raw, path["binary"] = split_body(raw, declared)  # type: ignore[arg-type]
            parsed = route.body.model_validate_json(raw or b"null")
            scope[DEPLOYMENT] = getattr(parsed, "deployment", None)
            # Whether the JSON holds a true or false anywhere: where not, decoding need not
            # look at every value for one (JSON booleans are not numbers).
            scope[JSON_BOOLS] = holds_true_or_false(raw if type(raw) is bytes else bytes(raw or b""))
            gone = scope.get(CLIENT_GONE) if receive is not None else None
            if gone is None:
                response = await route.handler(container, principal, parsed, scope, headers, **path)
            else:  # its client leaving cancels the work: the model's call, the slot it holds
                gone.append(leaving(scope))
                try:
                    response = await route.handler(container, principal, parsed, scope, headers, **path)
                finally:
                    gone.clear()
            if gzip_wanted(response, scope):
                await gzip_whole(response)
            if behind_api_gateway(scope):
                return _within_lambda(response, container.settings.limits.max_response_bytes, route.rows(parsed))
            return response
        except BodyTooLarge:
            exc = too_large(container.settings.limits.max_request_bytes)
            await counted(container, principal, params, scope, exc, 413, exc.code)
            return error_response(exc)
        except Exception as exc:
            status, content, headers = error_content(exc, scope["path"])
            if DEPLOYMENT not in scope and raw is not None:  # refused as its body was read: the deployment it names, as a WebSocket message's
                scope[DEPLOYMENT] = _named_deployment(raw)
            await counted(container, principal, params, scope, exc, status, str(content.get("code", "")))  # an Accepted (202) is no failure: not counted
            return JSONResponse(content, status_code=status, headers=headers)


def _within_lambda(response: Response, limit: int, rows: str) -> Response:
    """`response`, or a 413 naming `rows` where it is larger than a Lambda result may carry
    (`lambda_size_over`). Not counted as a failure: the request was counted as answered."""
    size = lambda_size_over(response, limit)
    if size is None:
        return response
    refused = error_response(PayloadTooLarge(
        f"the answer is {size} bytes or more as Lambda returns it, over the {limit} it may be: send the inputs as an upload "
        "(POST /api/v1/uploads), whose answer is then kept as a result, or split them into smaller requests",
        field=rows,
    ))  # fmt: skip
    refused.background = response.background  # the statistics flushed all the same
    return refused


def _named_deployment(raw: bytes | memoryview) -> str | None:
    """The `deployment` a body that was refused names, where it is a JSON object naming one
    with a string (counted under it where the tenant has it, `Outcomes.failed`): read again only
    on this failure path."""
    import orjson

    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    named = body.get("deployment") if isinstance(body, dict) else None
    return named if isinstance(named, str) else None


async def counted(
    container: Container, principal: Principal, params: dict[str, str], scope: Scope, exc: Exception, status: int, code: str
) -> None:
    """A hot route's failure counted once, as answered (`sluice.inference.outcomes`): the
    deployment is the path's (v2) or the parsed body's (simple JSON), where it got that far."""
    name = params.get("name") or scope.get(DEPLOYMENT)
    await container.predictions.outcomes.failed(principal.tenant, name, exc, status=status, code=code)


def openapi_routes(routes: list[HotRoute]) -> list[Any]:
    """FastAPI routes that describe the hot routes in the OpenAPI document. They are built
    from the same declarations the edge serves and are never mounted: only documented."""
    from fastapi import Body, Path
    from fastapi.routing import APIRoute

    from sluice.api.responses import documented

    out = []
    for route in routes:
        names = compile_path(route.path)[2]

        async def endpoint(**_: Any) -> None:  # documentation only
            return None

        endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter("body", inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[route.body, Body()])]
            + [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[route.params.get(n, str), Path()]) for n in names]
        )
        out.append(
            APIRoute(
                route.path,
                endpoint,
                methods=[route.method],
                response_model=route.response,
                response_model_exclude_none=True,
                responses=documented(route.responses),  # they carry `ErrorOut` into the document
                summary=route.summary,
                tags=list(route.tags),
            )
        )
    return out
