"""What telemetry is told of a prediction request once it has ended (`PredictionService`'s
one place for it): an answered request's line and metrics (`Telemetry.prediction`), written now,
or, where counts are held (a stream's micro-batch, a bulk call that may be split:
`sluice.stats.held`), once its answer stands, with its statistics; a failure of the run itself,
counted through `Outcomes` (for a batch job's calls too); and a request's lookups, on lines of
their own wherever no prediction line took them (a failure, a line dropped: their store calls
were made all the same)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.inference.outcomes import mark
from sluice.stats.held import CALL, HELD, LINE

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.domain import Deployment
    from sluice.domain.errors import SluiceError
    from sluice.inference.execution import Call
    from sluice.inference.outcomes import Outcomes
    from sluice.observability import Telemetry
    from sluice.runtimes.lookups import LookupSteps


class Reports:
    def __init__(self, telemetry: Telemetry, outcomes: Outcomes, lookups: Callable[[], LookupSteps | None]) -> None:
        self.telemetry = telemetry
        self.outcomes = outcomes
        self.lookups = lookups  # the container's lookup steps, where it has them

    def answered(
        self, fields: dict[str, Any], latency_ms: float, rows: int, cached: bool | None, sources: tuple[int, int] | None, call: Call | None
    ) -> None:
        """The answered request's line and metrics, now; or, where counts are held, once its
        answer stands (`line`, or `unanswered` if it is dropped)."""
        held = HELD.get()
        if held is not None:
            held.append((self, CALL.get(), LINE, (fields, latency_ms, rows, cached, sources, call)))
        else:
            self.line(fields, latency_ms, rows, cached, sources, call)

    def line(
        self, fields: dict[str, Any], latency_ms: float, rows: int, cached: bool | None, sources: tuple[int, int] | None, call: Call | None
    ) -> None:
        """The answered request's line and metrics; `call`: None for a prediction cache hit (no
        lookups, no sessions)."""
        looked, sessions = (call.looked or (), call.sessions) if call is not None else ((), None)
        if not self.telemetry.prediction(fields=fields, latency_ms=latency_ms, rows=rows, cached=cached, sources=sources, looked=looked, sessions=sessions) and call is not None:
            self.unreported(call)

    def unanswered(self, call: Call | None) -> None:
        """A held line dropped (its call split, or its records to come again): its lookups are
        reported all the same."""
        if call is not None:
            self.unreported(call)

    def runtime_failed(self, dep: Deployment, fields: dict[str, Any], error: SluiceError, call: Call) -> None:
        """A failure of the run itself: counted for batch jobs' calls too, as it always was."""
        mark(error)
        self.unreported(call)
        self.outcomes.failed_as(dep.tenant, dep, error.status, error.code, fields)

    def unreported(self, call: Call) -> None:
        """The request's lookups, where no prediction line took them: a line each."""
        lookups = self.lookups()
        if call.looked and lookups is not None:
            lookups.report(call.tenant, call.looked)
