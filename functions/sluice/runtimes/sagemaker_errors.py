"""SageMaker's and the transport's failures as sluice errors (the raw text goes to the log
only), and the one retry sluice makes: on throttling, with full jitter, doubling."""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING, Any, TypeVar

from sluice.domain.errors import (
    BackendError,
    DeadlineExceeded,
    InvalidInput,
    PayloadTooLarge,
    SluiceError,
    Unavailable,
)
from sluice.runtimes.triton_answers import rejected_input

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sluice.runtimes.sagemaker_target import EndpointTarget

log = logging.getLogger(__name__)

T = TypeVar("T")
_THROTTLING = frozenset({"ThrottlingException", "Throttling", "TooManyRequestsException"})


class Throttled(Unavailable):
    pass


class NoCapacity(Unavailable):
    """The inference component has no copy running (scaled to zero): one is starting."""


async def retrying(
    target: EndpointTarget,
    once: Callable[[], Awaitable[T]],
    *,
    retries: int,
    backoff_s: float,
    sleep: Callable[[float], Any],
) -> T:
    """`once()`, again while the endpoint throttles it and `retries` last; every failure
    mapped (`mapped`), throttling past the retries a 503."""
    attempt = 0
    while True:
        try:
            return await once()
        except Exception as exc:
            error = mapped(exc, target)
            throttled = isinstance(error, Throttled)
            if not throttled or attempt >= retries:
                raise (Unavailable("the endpoint is throttling requests; retry later", retry_after_s=1) if throttled else error) from None
            # Full jitter, doubling: spread retries of concurrent callers apart.
            await sleep(random.uniform(0, backoff_s * (2**attempt)))
            attempt += 1


def too_large(size: int, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"the request is {size} bytes encoded, above SageMaker's synchronous limit of {limit} bytes; "
        "send it as a batch job (input file in S3) or through SageMaker asynchronous inference",
        field="inputs",
    )


def mapped(exc: Exception, target: EndpointTarget) -> SluiceError:
    """SageMaker and transport failures as sluice errors; the raw text goes to the log only."""
    from botocore.exceptions import (
        ClientError,
        ConnectionClosedError,
        ConnectTimeoutError,
        EndpointConnectionError,
        ReadTimeoutError,
    )

    if isinstance(exc, SluiceError):
        return exc
    where = {"endpoint": target.endpoint_name}
    if isinstance(exc, ReadTimeoutError):
        return DeadlineExceeded("the endpoint did not answer within the deadline")
    if isinstance(exc, EndpointConnectionError | ConnectTimeoutError | ConnectionClosedError):
        log.warning("sagemaker: endpoint not reachable", extra={**where, "error_type": type(exc).__name__})
        return Unavailable("the SageMaker endpoint is not reachable")
    if not isinstance(exc, ClientError):
        log.warning("sagemaker: invoke failed", extra={**where, "error_type": type(exc).__name__, "error": str(exc)[:500]})
        return BackendError(f"the SageMaker client failed ({type(exc).__name__})")
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))[:64]  # a name of SageMaker's; no more of a server's text than that is repeated
    message = str(error.get("Message", ""))
    log.warning("sagemaker: %s", code or "error", extra={**where, "error": message[:500]})
    if code in _THROTTLING:
        return Throttled("the endpoint is throttling requests")
    if code == "ModelError":
        original = str(exc.response.get("OriginalMessage") or message)
        status = int(exc.response.get("OriginalStatusCode") or 0)
        if "timed out" in original.lower() or "timed out" in message.lower():
            return DeadlineExceeded("the model did not answer within SageMaker's 60 s limit")
        if 400 <= status < 500 and status != 429:
            # Triton's SageMaker port answers 400 for every failed request: name an input
            # only when Triton's own message does.
            rejected = rejected_input(original)
            if rejected is not None:
                return rejected
            if "input" in original.lower():
                return InvalidInput("the model server rejected the request's inputs", field="inputs")
            return BackendError(f"the model container refused the request ({status})")
        if status in (429, 503):
            return Unavailable("the model container is busy; retry shortly", retry_after_s=1)
        return BackendError(f"the model container failed ({status or 'no status'})")
    if code in ("ServiceUnavailable", "ModelNotReadyException"):
        return Unavailable("the SageMaker endpoint is not available right now", retry_after_s=5)
    if code == "ValidationError" and "no capacity" in message.lower():
        return NoCapacity("the endpoint's inference component has scaled to zero; a copy is starting (minutes): retry later", retry_after_s=60)
    if code == "ValidationError" and "not found" in message.lower():
        return BackendError(f"SageMaker endpoint '{target.endpoint_name}' does not exist")
    return BackendError(f"SageMaker failed ({code or 'unknown error'})")
