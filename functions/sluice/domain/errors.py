"""One tree of domain errors; each carries the HTTP status it maps to.

Transports (FastAPI, the CLI, Lambda tasks) translate these in one place each. Messages are
written for the caller; raw exception text from a dependency never goes into them.
"""

from __future__ import annotations

import errno
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator


class SluiceError(Exception):
    status: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, *, field: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        # `error` holds the message, as the Open Inference Protocol's error object does, so
        # v2 clients show it; `code` is the stable, machine-readable name.
        body: dict[str, Any] = {"error": self.message, "code": self.code}
        if self.field is not None:
            body["field"] = self.field
        if self.details:
            body["details"] = self.details
        return body

    @property
    def protocol_message(self) -> str | None:
        """The words the Open Inference Protocol's doors say instead of `message`, where Triton's
        clients test Triton's own (None: `message` itself)."""
        return None


class BadRequest(SluiceError):
    status, code = 400, "bad_request"


class InvalidInput(BadRequest):
    """The request does not match the target version's signature."""

    code = "invalid_input"


class RowInvalid(InvalidInput):
    """An input refused at one of its rows (`row`, counted from the first row of what was run):
    `at` says it of another row, where what was run is a part of the request's rows (a
    precomputed node's live rows), so the message names the request's own row."""

    def __init__(self, before: str, row: int, after: str, *, field: str | None = None) -> None:
        super().__init__(f"{before}row {row}{after}", field=field, row=row)
        self.before, self.row, self.after = before, row, after

    def __reduce__(self) -> tuple[Any, ...]:  # copied or pickled whole: as made, then as said since
        return RowInvalid, (self.before, self.row, self.after), {"message": self.message, "field": self.field, "details": self.details}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.args = (self.message,)

    def at(self, row: int) -> RowInvalid:
        """The same refusal of `row`, with what was said of it since (a step's name before it)."""
        moved = RowInvalid(self.before, row, self.after, field=self.field)
        said, now = f"{self.before}row {self.row}{self.after}", f"{self.before}row {row}{self.after}"
        at = self.message.rfind(said)
        moved.message = self.message if at < 0 else self.message[:at] + now + self.message[at + len(said) :]
        moved.args = (moved.message,)
        moved.details = {**self.details, "row": row}
        return moved


class NotFinite(InvalidInput):
    """An input of floats holds NaN or an infinity (the caller's, unless a step before made it)."""


class Unauthenticated(SluiceError):
    status, code = 401, "unauthenticated"


class Forbidden(SluiceError):
    status, code = 403, "forbidden"


class NotFound(SluiceError):
    status, code = 404, "not_found"


class UnknownDeployment(NotFound):
    """No deployment of that name in the tenant. Triton's clients test an unknown model's
    message for Triton's words: the Open Inference Protocol's doors say it in them
    (`protocol_message`), keeping this code and field."""

    def __init__(self, name: str) -> None:
        super().__init__(f"deployment '{name}' not found", field="deployment")
        self.name = name

    def __reduce__(self) -> tuple[type, tuple[str]]:  # pickled (a process pool's) by its name
        return UnknownDeployment, (self.name,)

    @property
    def protocol_message(self) -> str:
        return f"Request for unknown model: '{self.name}' is not found"


class UnknownVersion(NotFound):
    """A version a request names that the deployment's model does not have: `message` as the
    registry says it (the model's name); the protocol's doors say Triton's words of the
    deployment (the protocol's model) and the version, as Triton's clients test them."""

    def __init__(self, deployment: str, version: int, message: str) -> None:
        super().__init__(message, field="version")
        self.deployment, self.version = deployment, version

    def __reduce__(self) -> tuple[Any, ...]:
        return UnknownVersion, (self.deployment, self.version, self.message)

    @property
    def protocol_message(self) -> str:
        return f"Request for unknown model: '{self.deployment}' version {self.version} is not found"


class RequestTimeout(SluiceError):
    """A body that did not arrive in time: the connection is closed after the answer."""

    status, code = 408, "request_timeout"


class Conflict(SluiceError):
    status, code = 409, "conflict"


class StaleRead(Conflict):
    """A write made on the strength of records read before it (a check's reads) found one of
    them changed meanwhile, and was not made: decide again from a fresh read."""


class PayloadTooLarge(SluiceError):
    status, code = 413, "payload_too_large"


class UnsupportedEncoding(SluiceError):
    """A body in a content coding the server does not read (`Content-Encoding`)."""

    status, code = 415, "unsupported_media_type"


class Unprocessable(SluiceError):
    status, code = 422, "unprocessable"


class InvalidRequest(Unprocessable):
    """A body that does not fit its schema: the same answer FastAPI's own validation gives."""

    code = "invalid_request"


class RateLimited(SluiceError):
    """A key past its request rate; `retry_after_s` is when the next request would pass."""

    status, code = 429, "rate_limited"

    def __init__(self, message: str, *, retry_after_s: int, field: str | None = None, **details: Any) -> None:
        super().__init__(message, field=field, retry_after_s=retry_after_s, **details)
        self.retry_after_s = retry_after_s


class TooManyInFlight(RateLimited):
    """A key with as many requests in flight as it may have at once (`sluice serve`)."""

    code = "too_many_in_flight"


class TenantOverloaded(RateLimited):
    """A tenant holding its share of a process's predictions in flight while another tenant
    wants them (`sluice serve`): its own traffic is over what it may take, not the service's."""

    code = "tenant_overloaded"


class Accepted(SluiceError):
    """Not a failure: the request was queued for asynchronous inference. It travels up the
    call stack like an error so that every transport answers 202 with the result resource the
    caller polls (`GET /api/v1/results/{result_id}`); prediction services let it through
    without counting it as an error."""

    status, code = 202, "accepted"

    def __init__(self, message: str, *, result_id: str, location: str, **details: Any) -> None:
        super().__init__(message, **details)
        self.result_id = result_id
        self.location = location

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.result_id, "status": "pending", "result": self.location, "message": self.message, **self.details}


class BackendError(SluiceError):
    """The runtime behind a version failed while answering."""

    status, code = 502, "backend_error"


class ModelFailed(BackendError):
    """The model itself failed on its input, in process (ONNX Runtime's `Fail` or
    `RuntimeException`: an integer divided by zero, an index out of range inside the graph):
    the same input fails the same way again. A bulk call of many records is split to find the
    record that does, which fails alone (an error record, not retried); a request answers 502."""


class CasesApart(BackendError):
    """Rows of one request took switch cases whose answers cannot share a tensor (other
    classes, other shapes): each case's rows alone would answer. `cases`: each row's case
    (its index among the switch's), for the bulk call to call each run of one case apart."""

    def __init__(self, message: str, *, cases: Any, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.cases = cases


class Unavailable(SluiceError):
    status, code = 503, "unavailable"


class Overloaded(Unavailable):
    """Refused at once because the process has as much work as it takes (`sluice serve`'s
    predictions in flight, a batching queue): nothing of the request was done, and it may be
    sent again after `retry_after_s`, to this service or another."""

    code = "overloaded"

    def __init__(self, message: str, *, retry_after_s: int, field: str | None = None, **details: Any) -> None:
        super().__init__(message, field=field, retry_after_s=retry_after_s, **details)
        self.retry_after_s = retry_after_s


class DeadlineExceeded(SluiceError):
    status, code = 504, "deadline_exceeded"


class StorageFault(SluiceError):
    """The registry or a store could not keep what was asked: its disk is full, read-only or
    failing. The call that met it wrote nothing; what was written before stands. It is the
    operator's to fix, not the caller's: 503 (the service cannot do this now; a client may
    retry later, or elsewhere), with a code saying which and `details.storage` saying where."""

    status, code = 503, "storage_unavailable"

    def __init__(self, message: str, *, storage: str) -> None:
        super().__init__(message, storage=storage)
        self.storage = storage


class StorageFull(StorageFault):
    code = "storage_full"


class StorageReadOnly(StorageFault):
    code = "storage_read_only"


class StorageFailing(StorageFault):
    code = "storage_io_error"


def full(storage: str) -> StorageFull:
    return StorageFull(
        f"the {storage}'s disk is full (or a size or quota limit was reached): nothing was written; free space, then try again",
        storage=storage,
    )


def read_only(storage: str) -> StorageReadOnly:
    return StorageReadOnly(
        f"the {storage} cannot be written (its disk is read-only, or sluice may not write there): nothing was written",
        storage=storage,
    )


def failing(storage: str) -> StorageFailing:
    return StorageFailing(f"the {storage}'s disk failed to read or write (an I/O error)", storage=storage)


_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_NOT_PERMITTED = {errno.EACCES, errno.EPERM}


def storage_fault(exc: OSError, storage: str, *, writing: bool = True) -> StorageFault | None:
    """The fault an operating system error of `storage` (the `registry`, the `artifact
    store`…) is, or None when it is none of these (a missing file, a bad name: another error).
    A permission refused counts as read-only only where the call was writing."""
    if exc.errno in _FULL:
        return full(storage)
    if exc.errno == errno.EROFS or (writing and exc.errno in _NOT_PERMITTED):
        return read_only(storage)
    if exc.errno == errno.EIO:
        return failing(storage)
    return None


@contextmanager
def faults_named(storage: str, *, writing: bool = True) -> Iterator[None]:
    """Operating system errors of a disk that is full, read-only or failing raised as the
    `StorageFault` they are (`storage_fault`); any other error as it was."""
    try:
        yield
    except OSError as exc:
        fault = storage_fault(exc, storage, writing=writing)
        if fault is None:
            raise
        raise fault from exc
