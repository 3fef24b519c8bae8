"""A failed botocore call read once, for a step's own mapping to sluice errors: what went wrong
and the service's error code. The raw text goes to the log only."""

from __future__ import annotations

import logging
from typing import Literal, NamedTuple

log = logging.getLogger(__name__)


class AwsFailure(NamedTuple):
    kind: Literal["timeout", "unreachable", "refused", "failed"]
    code: str  # a refusal's error code ("unknown error" where it names none), else the exception's type


def aws_failure(exc: Exception, step: str, **where: str) -> AwsFailure:
    """`exc` from a botocore call, logged as `step` with `where`: no answer in time; the service
    not reachable; the service's refusal (a ClientError), with its error code; any other failure."""
    from botocore.exceptions import ClientError, ConnectionError, ReadTimeoutError

    kind = type(exc).__name__
    if isinstance(exc, ReadTimeoutError):
        log.warning("%s: no answer in time", step, extra={**where, "error_type": kind})
        return AwsFailure("timeout", kind)
    if isinstance(exc, ConnectionError):
        log.warning("%s: not reachable", step, extra={**where, "error_type": kind})
        return AwsFailure("unreachable", kind)
    if not isinstance(exc, ClientError):
        log.warning("%s: call failed", step, extra={**where, "error_type": kind, "error": str(exc)[:500]})
        return AwsFailure("failed", kind)
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    log.warning("%s: %s", step, code or "error", extra={**where, "error": str(error.get("Message", ""))[:500]})
    return AwsFailure("refused", code or "unknown error")
