"""JSON responses through orjson, which writes NumPy arrays without a Python-list detour; and
the error answers routes document (every one has the shape of `ErrorOut`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import orjson
from starlette.responses import JSONResponse as _StarletteJSON

from sluice.types.base import ErrorOut

if TYPE_CHECKING:
    from collections.abc import Callable

    from starlette.responses import Response

E = TypeVar("E", bound="Callable[..., Any]")


class JSONResponse(_StarletteJSON):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        try:
            return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
        except orjson.JSONEncodeError:
            # Text UTF-8 cannot carry (a lone surrogate, kept from before it was refused): JSON
            # writes it escaped, so the answer stands rather than failing every later read.
            import json

            return json.dumps(content, default=_plain, ensure_ascii=True, separators=(",", ":")).encode()


def _plain(value: Any) -> Any:
    """What `json` writes for a value orjson writes natively (NumPy arrays and numbers)."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    raise TypeError(f"{type(value).__name__} is not JSON")


def lambda_size_over(response: Response, limit: int) -> int | None:
    """The bytes `response`'s body takes in a Lambda function's result (what Lambda's 6 MB
    response limit counts) where they pass `limit`; None where they do not. A JSON body not
    content-coded goes as a JSON string (Mangum's rule), each `"` and `\\` escaped: orjson
    writes no other character JSON escapes, and the Python runtimes sluice deploys (3.12 on)
    write non-ASCII as it is. Any other body goes base64-encoded, a third larger. The
    characters are counted only where the length alone cannot tell."""
    body = response.body
    size = len(body)
    if 2 * size <= limit:  # neither escaping nor base64 more than doubles it
        return None
    if response.media_type != "application/json" or "content-encoding" in response.headers:
        size = -(-size // 3) * 4
    elif size <= limit:
        text = body if type(body) is bytes else bytes(body)  # a memoryview has no `count`
        size += text.count(b'"') + text.count(b"\\")
    return size if size > limit else None


ERROR_MEANINGS = {
    400: "The request cannot be served as given (e.g. inputs that do not fit the signature)",
    401: "Missing or invalid API key",
    403: "The key's scope or tenant does not allow this",
    404: "No such resource in this tenant",
    408: "The body did not arrive in time; the connection is closed",
    409: "The resource is in use, exists already, or changed meanwhile",
    413: "The body is over the request size limit",
    422: "A path, query or body value does not fit the schema",
    502: "The runtime or service behind sluice failed",
    503: "A service sluice needs is unavailable, or not configured here",
    504: "No answer within the request budget",
}

# What any route that needs a principal may answer; and the management routes besides.
AUTHENTICATED = (401, 403, 404, 413, 422)
MANAGEMENT = (*AUTHENTICATED, 400, 409)


# The error body as the OpenAPI document gives it, a reference rather than `"model": ErrorOut`:
# FastAPI builds a serializer for every `responses=` entry that names a model as it builds the
# route (some 540 of them, half the CPU of building the routers in every process that serves),
# and reads them only to write this same reference. The schema it refers to comes into the
# document with the routes built for the document alone (`documented`).
ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}


def errors(*codes: int, **meanings: str) -> dict[int | str, dict[str, Any]]:
    """`responses=` for FastAPI: each status with the error body. `meanings` override the
    description of a status (`_409="..."`)."""
    return {
        code: {"description": meanings.get(f"_{code}", ERROR_MEANINGS[code]), "content": ERROR_CONTENT}
        for code in sorted(set(codes))
    }


def documented(responses: dict[int | str, dict[str, Any]]) -> dict[int | str, dict[str, Any]]:
    """`responses` for a route built only for the OpenAPI document: its error answers name
    `ErrorOut` as their model, so that the document carries the schema they all refer to."""
    return {code: {"model": ErrorOut, "description": r["description"]} if r.get("content") is ERROR_CONTENT else r for code, r in responses.items()}


def answers(model: Any) -> Callable[[E], E]:
    """The model of a route's answer, for the OpenAPI document alone (in place of FastAPI's
    `response_model=`): the route returns its JSONResponse itself, so FastAPI would serialize
    nothing with the model, yet builds a serializer for it as it builds the route (49 routes,
    a twentieth of a CPU-second in every process that imports the routers). The app's
    `openapi()` gives each such route its response field before it writes the document, which
    is the same, byte for byte."""

    def mark(endpoint: E) -> E:
        endpoint.answers = model  # type: ignore[attr-defined]
        return endpoint

    return mark


def answered_by(route: Any) -> Any:
    """The model `answers` named for a route's endpoint; None where it named none."""
    return getattr(getattr(route, "endpoint", None), "answers", None)
