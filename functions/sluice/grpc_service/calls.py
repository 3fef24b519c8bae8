"""A gRPC call as the service reads and answers it: its metadata (a key's entry given twice
refused, as the same header twice is over HTTP) and the status, message and trailing metadata
an error becomes, bounded so that a client always reads the code."""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

import grpc

from sluice.domain.errors import Accepted, BadRequest, SluiceError
from sluice.observability import get_logger

if TYPE_CHECKING:
    from grpc.aio import ServicerContext

    from sluice.domain import Principal

__all__ = ["CALLER", "CODES", "GRPC_MISSING_KEY", "Code", "call_metadata", "status_of"]

Code = grpc.StatusCode
CODES = {
    400: Code.INVALID_ARGUMENT,
    422: Code.INVALID_ARGUMENT,
    401: Code.UNAUTHENTICATED,
    403: Code.PERMISSION_DENIED,
    404: Code.NOT_FOUND,
    413: Code.RESOURCE_EXHAUSTED,
    429: Code.RESOURCE_EXHAUSTED,
    502: Code.UNAVAILABLE,
    503: Code.UNAVAILABLE,
    504: Code.DEADLINE_EXCEEDED,
}
INTERNAL = "internal error; it has been logged"
Caller = tuple["Principal", dict[str, str]]
# A unary call's caller and metadata, as the server authenticated them when the call opened
# (`sluice.grpc_service.server.Guard`, which sets it for the handler's run in the call's own
# task): the key is read once a call. None where the server did not (a public RPC, a stream).
CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("sluice_grpc_caller", default=None)
GRPC_MISSING_KEY = "missing API key: send 'authorization: Bearer <key>' or 'x-api-key: <key>' metadata"
KEY_METADATA = ("authorization", "x-api-key")


def call_metadata(context: ServicerContext) -> dict[str, str]:
    """The call's metadata, keys lowercased, text values only. A key's entry (`authorization`,
    `x-api-key`) given twice is refused (INVALID_ARGUMENT), as the same header twice is over
    HTTP (`sluice.api.deps._bearer`): a proxy in front that read the other copy would disagree
    about whose call it is."""
    metadata: dict[str, str] = {}
    for name, value in context.invocation_metadata() or ():
        if not isinstance(value, str):
            continue
        name = name.lower()
        if name in KEY_METADATA and name in metadata:
            raise BadRequest(f"the {name} metadata is given twice: send one", field=name)
        metadata[name] = value
    return metadata


# A status travels in the call's trailers, which a client refuses past its metadata limit (8 KiB
# by default: the whole call then reads RESOURCE_EXHAUSTED, the error lost). A message or field
# echoing a caller's long name is cut to these (in UTF-8; the message is percent-encoded).
MAX_MESSAGE_BYTES, MAX_FIELD_BYTES = 1024, 256


def _within(text: str, limit: int) -> str:
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode("utf-8", "ignore") + "\N{HORIZONTAL ELLIPSIS}"


_PRINTABLE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")


def _printable(text: str) -> str:
    """A metadata value gRPC can carry (printable ASCII; grpcio ends a call whose trailer holds
    anything else with INTERNAL): other characters percent-encoded as UTF-8, as `grpc-message` is."""
    if text.isascii() and text.isprintable() and "%" not in text:
        return text
    from urllib.parse import quote

    return quote(text, safe=_PRINTABLE)


def status_of(exc: Exception) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]:
    """An exception as the status, message and trailing metadata a client sees."""
    if isinstance(exc, Accepted):
        # gRPC has no 202: the request was queued for asynchronous inference all the same, so
        # say where its result will be rather than fail it.
        message = f"{exc.message}: GET {exc.location}"
        return Code.FAILED_PRECONDITION, message, (("sluice-code", exc.code), ("sluice-result", exc.location))
    if isinstance(exc, SluiceError):
        code = CODES.get(exc.status)
        if exc.status == 409:
            code = Code.ALREADY_EXISTS if "already" in exc.message else Code.FAILED_PRECONDITION
        if code is None:
            return Code.INTERNAL, INTERNAL, ()
        trailer = [("sluice-code", exc.code)]
        if exc.field is not None:
            trailer.append(("sluice-field", _printable(_within(exc.field, MAX_FIELD_BYTES))))
        retry = exc.details.get("retry_after_s")
        if retry is not None:
            trailer.append(("retry-after", str(retry)))
        message = exc.protocol_message or exc.message  # Triton's words where its clients test them
        return code, _within(message, MAX_MESSAGE_BYTES), tuple(trailer)
    get_logger().exception("unhandled gRPC error")
    return Code.INTERNAL, INTERNAL, ()
