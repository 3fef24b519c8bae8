"""The FastAPI app. Built by `create_app()`; nothing heavy happens at import time."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from sluice import __version__
from sluice.api import errors
from sluice.api.bodies import BodyLimit
from sluice.api.deps import authenticate, container_of, known_principal
from sluice.api.edge import Edge, openapi_routes
from sluice.api.encoding import gzipping
from sluice.api.responses import JSONResponse, answered_by

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from fastapi import Request
    from starlette.responses import Response
    from starlette.types import Message, Receive, Scope, Send

    from sluice.wiring import Container

DESCRIPTION = """
Serverless model inference. Call a **deployment** with simple JSON (`/api/v1/predictions`)
or the **Open Inference Protocol v2** (`/v2/models/{deployment}/infer`). Authenticate with
`Authorization: Bearer <key>` or `x-api-key: <key>`.
"""


ROUTERS = ("health", "triton_ext", "v2", "models", "optimize", "deployments", "monitor", "rollouts", "follows", "cost", "endpoints", "results", "uploads", "keys", "batch", "schedules", "metrics", "session")


def _hot_routes() -> list[Any]:
    from sluice.api.predict import hot_routes

    return hot_routes()


def _documented(route: Any) -> Any:
    """The route as the OpenAPI document reads it: where `sluice.api.responses.answers` named
    the model of its answer, a copy carrying the response field FastAPI would have built for
    `response_model=` (the route served keeps none)."""
    model = answered_by(route)
    if model is None:
        return route
    import copy

    from fastapi.utils import create_model_field

    documented = copy.copy(route)
    documented.response_model = model
    documented.response_field = create_model_field(name=f"Response_{route.unique_id}", type_=model, mode="serialization")
    return documented


class SluiceApp(FastAPI):
    """FastAPI behind the edge (`sluice.api.edge`): every body bounded, every principal known
    before a body is read, and the hot routes answered before the framework's routing.

    The routers are built on the first request that needs them (or the first look at the
    OpenAPI schema): a Lambda that only predicts never pays for building forty routes at
    cold start."""

    edge: Any
    _routed = False
    _sockets: Any = None

    def _route(self) -> None:
        """The routers' routes served as their decorators built them (each has its full path,
        tags, error answers and this app's response class): `include_router` would have FastAPI
        build every route again for this app (its parameters, body and response models) on
        the first request that reaches its router, a fifth of a CPU-second for all of them."""
        if not self._routed:
            import importlib

            for name in ROUTERS:
                router = importlib.import_module(f"sluice.api.routers.{name}").router
                if router.default_response_class is not JSONResponse or router.dependencies:
                    raise TypeError(f"sluice.api.routers.{name}: a router answers with sluice's JSONResponse and has no router-wide dependencies")
                self.router.routes.extend(router.routes)
            self._routed = True

    def allowed(self, scope: Scope) -> str:
        """The request's path's methods, as a 405's `Allow` names them: those of every route whose
        path matches, the hot routes' too (Starlette's router names the first route it matched)."""
        from starlette.routing import Match

        self._route()
        path = scope["path"]
        methods = {route.method for route in _hot_routes() if route.match(route.method, path) is not None}
        for route in self.router.routes:
            if route.matches(scope)[0] is not Match.NONE:
                methods.update(getattr(route, "methods", None) or ())
        if "GET" in methods:  # answered as GET without the body (`_headless`)
            methods.add("HEAD")
        return ", ".join(sorted(methods))

    def wrong_method(self, scope: Scope) -> Response:
        """The 405 for a method the request's path does not take, whoever found it (the edge, on
        a hot route's path; the framework's router, on any other)."""
        from starlette.exceptions import HTTPException

        return errors.error_response(HTTPException(405, headers={"Allow": self.allowed(scope)}), scope["path"])

    def prepare(self) -> None:
        """Builds now what the first requests would: the hot routes and the routers (with
        their request and response models). SnapStart's before-snapshot hook calls it."""
        _hot_routes()
        self._route()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "HEAD":
            scope, send = _headless(scope, send)
        if scope["type"] == "websocket":  # `/api/v1/stream`: authenticated at connect, not per request
            if self._sockets is None:
                from sluice.api.websocket import Sockets

                self._sockets = Sockets(lambda: container_of(self))
            await self._sockets(scope, receive, send)
            return
        path = scope.get("path", "")  # a lifespan scope has none
        if path.startswith("/console") and (len(path) == 8 or path[8] == "/") and scope["type"] == "http":
            # The web console's static files: public (the pages sign in with a key), never
            # routed through the edge, imported on the first request for them.
            from sluice.console import app as console

            await console(scope, receive, send)
            return
        await self.edge(scope, receive, send)

    async def answer_whole(self, scope: Scope, body: bytes) -> Response | None:
        """The response to an HTTP request whose whole body is at hand (a Lambda event) when
        the edge answers it alone (`BodyLimit.answer_whole`, then `Edge.answer_whole`: a hot
        route, authenticated, rate-limited, admitted, answered); None for any other request:
        run the app. Its responses are those `__call__` would send; their background tasks are
        the caller's to run."""
        return await self.edge.answer_whole(scope, body)

    async def framework(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._route()
        await super().__call__(scope, receive, send)

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            self._route()
            self.openapi_schema = get_openapi(
                title=self.title,
                version=self.version,
                description=self.description,
                routes=[*openapi_routes(_hot_routes()), *map(_documented, self.routes)],
                separate_input_output_schemas=False,  # one schema per model: a policy reads as it is written
            )
        return self.openapi_schema


def _headless(scope: Scope, send: Send) -> tuple[Scope, Send]:
    """A HEAD request answered as its GET would be, without the body (RFC 9110, 9.3.2): the
    same status and headers (`Content-Length` the GET's), on every route, whoever answers it
    (the framework's routes take GET alone; a path that takes no GET answers HEAD with the
    same 405). The server keeps its own scope, which still says HEAD."""

    async def headless(message: Message) -> None:
        if message["type"] == "http.response.body":
            if message.get("more_body"):
                return
            message = {"type": "http.response.body", "body": b"", "more_body": False}
        await send(message)

    return {**scope, "method": "GET"}, headless


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """At shutdown (uvicorn's, after the requests in flight are answered): what this process
    holds is written (`Container.settle`: the shadow jobs handed over finish first, since they
    count statistics too; what the registry still refuses is counted as dropped). Mangum runs
    no lifespan: in Lambda they are flushed per invocation."""
    yield
    container: Container | None = app.state.container  # none if no request built one
    if container is not None:
        await asyncio.to_thread(container.settle)


def create_app(container: Container | None = None, *, max_request_bytes: int | None = None) -> SluiceApp:
    """The app, with services from `container` or (lazily, on first request) from settings."""
    app = SluiceApp(
        title="sluice",
        version=__version__,
        description=DESCRIPTION,
        default_response_class=JSONResponse,
        # A slash redirect is built from the Host header, which the client controls: none.
        redirect_slashes=False,
        lifespan=lifespan,
        # Swagger UI pinned and checked, on the console's origin (`sluice.api.docs_page`).
        docs_url=None,
        redoc_url=None,
    )
    from sluice.api.docs_page import docs

    app.add_api_route("/docs", docs, methods=["GET"], include_in_schema=False)
    app.state.container = container
    errors.install(app)

    async def wrong_method(request: Request, exc: Exception) -> Response:
        return app.wrong_method(request.scope)

    app.add_exception_handler(405, wrong_method)

    known: list[int] = []

    def limit() -> int:
        if not known:  # settings are read once per process
            known.append(max_request_bytes or container_of(app).settings.limits.max_request_bytes)
        return known[0]

    # The framework's responses gzipped by Starlette's middleware for a client that accepts it
    # (streamed ones chunk by chunk); the hot routes' by the edge (`sluice.api.encoding`).
    app.edge = BodyLimit(Edge(gzipping(app.framework), _hot_routes, lambda: container_of(app), authenticate, known_principal, wrong_method=app.wrong_method), limit)
    return app
