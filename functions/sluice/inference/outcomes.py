"""Every prediction request counted once, by outcome: the one rule.

A request that reached a door (HTTP simple JSON and v2, gRPC unary and streamed, a WebSocket
message) and passed authentication ends in one of two ways, and each is counted once:

- answered: `PredictionService.predict` counts it (`Telemetry.prediction`, the deployment's
  statistics) as it always has;
- failed, wherever it failed (resolving the deployment, reading the body, decoding tensors,
  checking inputs, the runtime, the deadline, admission refusing it): `Outcomes.failed`, called
  by `predict` for what fails inside it and by each door's one error path for what fails
  before or around it. The exception is marked counted, so a failure that passes through both
  is counted by the first.

What can refuse an answer's presentation is checked before `predict` counts it where the
request tells (an output asked as classes that cannot be ranked); a refusal after the count
(`presenting`, `counted_already`) is not counted again.

A failure is counted in Prometheus (`ml_inference_requests_total` with its status class,
`ml_inference_errors_total` by status and code), in the EMF line (`Requests`, `Errors`,
`ClientErrors` or `BackendErrors`) and in the deployment's statistics (`requests`, `errors`,
and `invalid_inputs` for a refused input: the rollout gate `invalid_input_rate`). The
deployment it is counted under is one the tenant has: a name that resolves to none (or no name,
a body that never parsed) is counted under the empty deployment, never under whatever a
caller wrote, so a scan of made-up names makes no new series.

Batch jobs score through `predict` with `BatchTelemetry` (`counts_requests` false): their
calls are not requests, so only runtime failures reach the statistics, as before, and their
chunks are what Prometheus counts. Streams score with the service's own telemetry: each call is
a request, its answer counted once its records' outputs stand (`sluice.stats.held`); a call the
bulk call splits because it was refused counts nothing, its parts do (`Splittable`), so a
refused record is one failed request however many halvings found it.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import Accepted, NotFound, Overloaded, RateLimited, SluiceError
from sluice.stats.held import CALL, FAILURE, HELD

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sluice.domain import Deployment
    from sluice.domain.policy import Node
    from sluice.observability import Telemetry
    from sluice.stats.recorder import StatsRecorder

COUNTED = "_sluice_counted"
# A request given up while it was worked on (its client left, its call was cancelled): counted as
# failed with this status (nginx's "client closed request") and code `cancelled`; never sent.
CANCELLED = 499
# A request refused for what it carries (the caller's to fix): `invalid_input_rate`'s numerator.
INPUT_CODES = frozenset({"bad_request", "invalid_input", "invalid_request", "unprocessable", "payload_too_large"})


def status_and_code(exc: BaseException) -> tuple[int, str]:
    """The HTTP status and error code a failure is answered with (the gRPC and WebSocket doors
    answer the same table; the HTTP door passes what `error_content` said)."""
    if isinstance(exc, SluiceError):
        return exc.status, exc.code
    if type(exc).__name__ in ("ValidationError", "RequestValidationError"):  # pydantic's, FastAPI's: 422
        return 422, "invalid_request"
    return 500, "internal_error"


def status_class(status: int) -> str:
    return f"{status // 100}xx"


def refused_input(code: str) -> bool:
    return code in INPUT_CODES


def counted(exc: BaseException) -> bool:
    return bool(getattr(exc, COUNTED, False))


def mark(exc: BaseException) -> None:
    with contextlib.suppress(AttributeError):  # an exception without a __dict__: counted all the same
        setattr(exc, COUNTED, True)


def counted_already(exc: SluiceError) -> SluiceError:
    """`exc`, marked: a failure after the request was counted as answered (an answer too large
    for its transport) is not counted a second time."""
    mark(exc)
    return exc


class _Presenting:
    """Around writing an answer `predict` counted already: whatever refuses it there (an output
    its wire cannot carry) is not counted a second time, as a failure. A plain class: on every
    answer's path, where a generator-based context manager costs several times more."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        if isinstance(exc, Exception):
            mark(exc)
        return False  # raised on, as it came


_PRESENTING = _Presenting()


def presenting() -> _Presenting:
    return _PRESENTING


class Outcomes:
    """The rule, for one process's predictions: `failed` (a door's, awaited: it may read the
    deployment, cached for `deployment_cache_ttl_s`) and `failed_as` (with the deployment at
    hand, or none)."""

    def __init__(
        self,
        telemetry: Telemetry,
        stats: StatsRecorder,
        deployment_of: Callable[[str, str], Awaitable[tuple[Deployment, Node]]],
        cached: Callable[[str, str], tuple[Deployment, Node] | None],
    ) -> None:
        self.telemetry = telemetry
        self.stats = stats
        self.deployment_of = deployment_of
        self.cached = cached

    @property
    def online(self) -> bool:
        """Whether these are requests (False for a batch job's calls: see the module)."""
        return self.telemetry.counts_requests

    async def failed(
        self,
        tenant: str,
        name: str | None,
        exc: BaseException,
        *,
        status: int | None = None,
        code: str | None = None,
        fields: dict[str, Any] | None = None,
    ) -> None:
        """Count one failed request, once, unless it was counted already (or is not a failure:
        `Accepted`, queued for asynchronous inference)."""
        if counted(exc) or isinstance(exc, Accepted) or not self.online:
            return
        if isinstance(exc, (Overloaded, RateLimited)):  # refused under load: nothing read for it
            self.refused(tenant, name, exc)
            return
        mark(exc)
        if status is None or code is None:
            status, code = status_and_code(exc)
        dep = None
        unknown = isinstance(exc, NotFound) and exc.field == "deployment"  # nothing to read again
        if isinstance(name, str) and name and not unknown:
            found = self.cached(tenant, name)
            if found is None:
                try:
                    found = await self.deployment_of(tenant, name)
                except Exception:  # no such deployment, or the registry down: counted under none
                    found = None
            dep = found[0] if found is not None else None
        self.failed_as(tenant, dep, status, code, fields)

    def failed_with(self, tenant: str, dep: Deployment | None, exc: BaseException) -> None:
        """`failed`, where the deployment is at hand (a stream record refused as it is read:
        the stream's deployment): nothing read for it."""
        if counted(exc) or isinstance(exc, Accepted) or not self.online:
            return
        mark(exc)
        status, code = status_and_code(exc)
        self.failed_as(tenant, dep, status, code, None)

    def refused(self, tenant: str, name: str | None, exc: BaseException) -> None:
        """A request admission refused (its body unread): counted with the deployment only
        where this process has it at hand, as nothing is read for a refused request."""
        if counted(exc) or not self.online:
            return
        mark(exc)
        status, code = status_and_code(exc)
        found = self.cached(tenant, name) if isinstance(name, str) and name else None
        self.failed_as(tenant, found[0] if found is not None else None, status, code, None, refused=True)

    def failed_as(
        self, tenant: str, dep: Deployment | None, status: int, code: str, fields: dict[str, Any] | None, *, stats: bool = True, refused: bool = False
    ) -> None:
        line = {**(fields or {}), "tenant": tenant, "deployment": dep.name if dep is not None else ""}
        held = HELD.get()
        if held is not None:  # with the call's statistics (`sluice.stats.held`): a failure counted at once, unless its call is split
            held.append((self, CALL.get(), FAILURE, (line, status, code, refused)))
        else:
            self._failure(line, status, code, refused)
        if dep is not None and stats:
            self.stats.request((dep.tenant, dep.name, dep.revision, "deployment"), 0.0, ok=False, invalid=refused_input(code))

    def _failure(self, line: dict[str, Any], status: int, code: str, refused: bool) -> None:
        self.telemetry.failure(fields=line, status=status, code=code, refused=refused)
