"""The one table that turns errors into responses. Raw exception text never reaches a client.

FastAPI's exception handlers and the edge (`sluice.api.edge`) both answer through
`error_response`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from sluice.api.encoding import ACCEPTED, BodyError
from sluice.api.responses import JSONResponse
from sluice.domain.errors import (
    Accepted,
    Overloaded,
    RateLimited,
    SluiceError,
    StorageFault,
    UnsupportedEncoding,
)
from sluice.domain.policy import policy_field
from sluice.observability import get_logger

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fastapi import FastAPI, Request

HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}


def _field(loc: tuple[object, ...] | list[object], kind: str = "") -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    if "policy" in parts:  # a policy's union tags are not fields: policy.variants.0.weight
        at = parts.index("policy")
        parts = [*parts[:at], policy_field(parts[at + 1 :], "policy", kind)]
    return ".".join(parts) or "body"


def _located(error: Any, doc: object = None) -> Any:
    # An unknown policy kind is the `kind` field's fault, not the whole node's.
    if error.get("type") == "policy_kind" and isinstance(error.get("input"), dict):
        return {**error, "loc": (*error.get("loc", ()), "kind")}
    loc = tuple(error.get("loc", ()))
    if error.get("type") == "json_invalid" and len(loc) == 2 and loc[0] == "body" and isinstance(loc[1], int):
        # FastAPI's body that is no JSON, located at its offset: the body's fault, said where
        return {**error, "loc": ("body",), "msg": _invalid_json((error.get("ctx") or {}).get("error", ""), doc, loc[1])}
    return error


def _invalid_json(what: str, doc: object, offset: int) -> str:
    """A body that is no JSON, said as the hot routes' parser says it: `Invalid JSON: <what> at
    line L column C` of the body it read (`doc`)."""
    if not isinstance(doc, str):
        return f"Invalid JSON: {what} at character {offset}"
    line, column = doc.count("\n", 0, offset) + 1, offset - doc.rfind("\n", 0, offset)
    return f"Invalid JSON: {what} at line {line} column {column}"


def _validation(errors: Sequence[Any], doc: object = None) -> tuple[int, dict[str, Any]]:
    errors = [_located(e, doc) for e in errors]
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    problems = [{"field": _field(e.get("loc", ()), e.get("type", "")), "message": e.get("msg", "")} for e in errors[:20]]
    return 422, {
        "error": f"{_field(first.get('loc', ()), first.get('type', ''))}: {first.get('msg', 'invalid')}",
        "code": "invalid_request",
        "field": _field(first.get("loc", ()), first.get("type", "")),
        "details": {"problems": problems},
    }


def error_content(exc: Exception, path: str = "") -> tuple[int, dict[str, Any], dict[str, str] | None]:
    """Any exception as (status, body, headers): the table both the HTTP API and the
    WebSocket answers (`sluice.api.socket`) are read from."""
    if isinstance(exc, BodyError):  # found as the body was read, by whatever read it
        exc = exc.error
    if isinstance(exc, SluiceError):
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        if isinstance(exc, (RateLimited, Overloaded)):
            headers = {"Retry-After": str(exc.retry_after_s)}
        elif exc.status in (429, 503) and type(exc.details.get("retry_after_s")) is int:  # a backend's, where it tells (SageMaker's)
            headers = {"Retry-After": str(exc.details["retry_after_s"])}
        if isinstance(exc, Accepted):
            headers = {"Location": exc.location}
        if isinstance(exc, UnsupportedEncoding):  # RFC 9110: the codings that are taken
            headers = {"Accept-Encoding": ACCEPTED}
        if isinstance(exc, StorageFault):  # the operator's to fix: said where they look
            get_logger().error("storage fault", extra={"path": path, "code": exc.code, "storage": exc.storage, "cause": repr(exc.__cause__)})
        body = exc.to_dict()
        if path.startswith("/v2/") and exc.protocol_message is not None:  # the words Triton's clients test for
            body["error"] = exc.protocol_message
        return exc.status, body, headers
    if isinstance(exc, RequestValidationError):
        return (*_validation(exc.errors(), exc.body), None)
    if isinstance(exc, ValidationError):  # a body parsed by the edge: located under `body`
        return (*_validation([{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]), None)
    if isinstance(exc, HTTPException):
        code = HTTP_CODES.get(exc.status_code, "http_error")
        return exc.status_code, {"error": str(exc.detail), "code": code}, exc.headers
    get_logger().exception("unhandled error", extra={"path": path})
    return 500, {"error": "internal error; it has been logged", "code": "internal_error"}, None


def error_response(exc: Exception, path: str = "") -> JSONResponse:
    """Any exception as the response a client sees."""
    status, body, headers = error_content(exc, path)
    return JSONResponse(body, status_code=status, headers=headers)


async def _handle(request: Request, exc: Exception) -> JSONResponse:
    return error_response(exc, request.url.path)


def install(app: FastAPI) -> None:
    for kind in (SluiceError, RequestValidationError, HTTPException, Exception):
        app.add_exception_handler(kind, _handle)
