"""The FastAPI app. Built by `create_app()`; nothing heavy happens at import time."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI

from sluice import __version__
from sluice.api import errors
from sluice.api.responses import JSONResponse
from sluice.api.routers import batch, deployments, endpoints, health, keys, models, predictions, v2

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from sluice.wiring import Container

DESCRIPTION = """
Serverless model inference. Call a **deployment** with simple JSON (`/api/v1/predictions`)
or the **Open Inference Protocol v2** (`/v2/models/{deployment}/infer`). Authenticate with
`Authorization: Bearer <key>` or `x-api-key: <key>`.
"""


class BodyLimit:
    """Refuse bodies over the synchronous limit before reading them (413 points to batch)."""

    def __init__(self, app: ASGIApp, max_bytes: int | None) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT"):
            limit = self.max_bytes or _settings_limit()
            for name, value in scope["headers"]:
                if name == b"content-length" and value.isdigit() and int(value) > limit:
                    response = JSONResponse(
                        {
                            "code": "payload_too_large",
                            "error": f"request body is over {limit} bytes: send large inputs as a batch job, and large model files by artifact_uri",
                            "field": "body",
                        },
                        status_code=413,
                    )
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def _settings_limit() -> int:
    from sluice.settings import get_settings

    return get_settings().max_request_bytes


def create_app(container: Container | None = None, *, max_request_bytes: int | None = None) -> FastAPI:
    """The app, with services from `container` or (lazily, on first request) from settings."""
    app = FastAPI(
        title="sluice",
        version=__version__,
        description=DESCRIPTION,
        default_response_class=JSONResponse,
    )
    app.state.container = container
    errors.install(app)
    for module in (health, predictions, v2, models, deployments, endpoints, keys, batch):
        app.include_router(module.router)
    limit = max_request_bytes or (container.settings.max_request_bytes if container else None)
    app.add_middleware(BodyLimit, max_bytes=limit)
    return app
