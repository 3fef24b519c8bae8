"""The hot routes without the framework around them.

`POST /api/v1/predictions` and `POST /v2/models/{name}[/versions/{v}]/infer` are answered
here, in front of FastAPI's routing, dependency injection and body handling, by the same
functions the FastAPI routes call (which remain, and document them in OpenAPI). Everything
else, and every body over the synchronous limit (413), is decided here too: one middleware
instead of two.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from starlette.datastructures import Headers

from sluice.api.deps import container_of, principal_of
from sluice.api.errors import (
    sluice_error_response,
    unexpected_error_response,
    validation_error_response,
)
from sluice.api.responses import JSONResponse
from sluice.domain.errors import SluiceError

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

V2 = "/v2/models/"


def _too_large(limit: int) -> JSONResponse:
    return JSONResponse(
        {
            "error": f"request body is over {limit} bytes: send large inputs as a batch job, "
            "and large model files by artifact_uri",
            "code": "payload_too_large",
            "field": "body",
        },
        status_code=413,
    )


def _v2_target(path: str) -> tuple[str, str | None] | None:
    """`/v2/models/{name}[/versions/{v}]/infer` -> (name, v), else None."""
    if not (path.startswith(V2) and path.endswith("/infer")):
        return None
    parts = path[len(V2) : -len("/infer")].split("/")
    if len(parts) == 1 and parts[0]:
        return parts[0], None
    if len(parts) == 3 and parts[0] and parts[1] == "versions" and parts[2]:
        return parts[0], parts[2]
    return None


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


class FastPath:
    """Answers the hot routes and refuses oversized bodies; hands everything else to `app`."""

    def __init__(self, app: ASGIApp, host: Any, max_bytes: int | None) -> None:
        self.app = app
        self.host = host  # the FastAPI app whose state holds the container
        self.max_bytes = max_bytes

    def _limit(self) -> int:
        return self.max_bytes or container_of(self.host).settings.max_request_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        limit = self._limit()
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _too_large(limit)(scope, receive, send)
            return
        path = scope["path"]
        v2 = _v2_target(path) if scope["method"] == "POST" else None
        if not (v2 or (path == "/api/v1/predictions" and scope["method"] == "POST")):
            await self.app(scope, receive, send)
            return
        raw = await _read_body(receive, limit)
        if raw is None:
            await _too_large(limit)(scope, receive, send)
            return
        response = await self._answer(scope, headers, raw, v2)
        await response(scope, receive, send)

    async def _answer(self, scope: Scope, headers: Headers, raw: bytes, v2: tuple[str, str | None] | None) -> JSONResponse:
        from sluice.api.predict import infer_core, predict_core
        from sluice.types.api import PredictionRequest
        from sluice.types.v2 import InferenceRequest

        try:
            container = container_of(self.host)
            principal = principal_of(scope, headers, container)
            if v2 is None:
                body = PredictionRequest.model_validate_json(raw or b"null")
                return await predict_core(container, principal, body, scope, headers)
            request = InferenceRequest.model_validate_json(raw or b"null")
            return await infer_core(container, principal, request, scope, headers, *v2)
        except SluiceError as exc:
            return sluice_error_response(exc)
        except ValidationError as exc:
            return validation_error_response(
                [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
            )
        except Exception:
            return unexpected_error_response(scope["path"])
