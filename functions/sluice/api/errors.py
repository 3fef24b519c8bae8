"""The one table that turns errors into responses. Raw exception text never reaches a client."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException

from sluice.api.responses import JSONResponse
from sluice.domain.errors import SluiceError
from sluice.observability import get_logger

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fastapi import FastAPI, Request


def _field(loc: tuple[object, ...] | list[object]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def sluice_error_response(exc: SluiceError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse(exc.to_dict(), status_code=exc.status, headers=headers)


def validation_error_response(errors: Sequence[Any]) -> JSONResponse:
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    problems = [{"field": _field(e.get("loc", ())), "message": e.get("msg", "")} for e in errors[:20]]
    return JSONResponse(
        {
            "error": f"{_field(first.get('loc', ()))}: {first.get('msg', 'invalid')}",
            "code": "invalid_request",
            "field": _field(first.get("loc", ())),
            "details": {"problems": problems},
        },
        status_code=422,
    )


def unexpected_error_response(path: str) -> JSONResponse:
    get_logger().exception("unhandled error", extra={"path": path})
    return JSONResponse({"error": "internal error; it has been logged", "code": "internal_error"}, status_code=500)


async def sluice_error(request: Request, exc: SluiceError) -> JSONResponse:
    return sluice_error_response(exc)


async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    return validation_error_response(exc.errors())


async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return JSONResponse(
        {"error": str(exc.detail), "code": code}, status_code=exc.status_code, headers=exc.headers
    )


async def unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    return unexpected_error_response(request.url.path)


def install(app: FastAPI) -> None:
    app.add_exception_handler(SluiceError, sluice_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, http_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, unexpected_error)
