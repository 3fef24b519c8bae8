"""The FastAPI app. Built by `create_app()`; nothing heavy happens at import time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from sluice import __version__
from sluice.api import errors
from sluice.api.fast import FastPath
from sluice.api.responses import JSONResponse

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

    from sluice.wiring import Container

DESCRIPTION = """
Serverless model inference. Call a **deployment** with simple JSON (`/api/v1/predictions`)
or the **Open Inference Protocol v2** (`/v2/models/{deployment}/infer`). Authenticate with
`Authorization: Bearer <key>` or `x-api-key: <key>`.
"""


ROUTERS = ("health", "predictions", "v2", "models", "deployments", "endpoints", "keys", "batch")


class SluiceApp(FastAPI):
    """FastAPI with the hot routes answered before its middleware and routing (see api.fast).

    The routers are built on the first request that needs them (or the first look at the
    OpenAPI schema): a Lambda that only predicts never pays for building forty routes at
    cold start."""

    fast: FastPath
    _routed = False

    def _route(self) -> None:
        if not self._routed:
            import importlib

            for name in ROUTERS:
                self.include_router(importlib.import_module(f"sluice.api.routers.{name}").router)
            self._routed = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.fast(scope, receive, send)

    async def framework(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._route()
        await super().__call__(scope, receive, send)

    def openapi(self) -> dict[str, Any]:
        self._route()
        return super().openapi()


def create_app(container: Container | None = None, *, max_request_bytes: int | None = None) -> SluiceApp:
    """The app, with services from `container` or (lazily, on first request) from settings."""
    app = SluiceApp(
        title="sluice",
        version=__version__,
        description=DESCRIPTION,
        default_response_class=JSONResponse,
    )
    app.state.container = container
    errors.install(app)
    limit = max_request_bytes or (container.settings.max_request_bytes if container else None)
    app.fast = FastPath(app.framework, app, limit)
    return app
