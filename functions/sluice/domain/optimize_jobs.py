"""The optimize job record: one run of the optimizer started from the API, kept in the
registry so that every worker (process, container) answers for it, not only the one running it.

Status moves RUNNING -> SUCCEEDED | FAILED; a finished job never changes again. The worker
running a job (`worker`: host and process id) writes `heartbeat_at` every `HEARTBEAT_S` while
it runs; a RUNNING job whose last sign of life is older than `STALE_AFTER_S` has lost its
worker (`stale`), and a reader may mark it FAILED. The bounds are `sluice.domain.liveness`'s,
which batch jobs share.

What is stored is bounded, so that one DynamoDB item (400 KB) always holds it: the error to
`ERROR_CHARS`, the report to `REPORT_BYTES` of JSON (`stored_report`).
"""

from __future__ import annotations

import json
import math
import numbers
import secrets
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from sluice.domain.errors import Conflict
from sluice.domain.liveness import silent
from sluice.domain.objects import now

OptimizeStatus = Literal["RUNNING", "SUCCEEDED", "FAILED"]
TERMINAL: frozenset[str] = frozenset({"SUCCEEDED", "FAILED"})
# The fields `Registry.update_optimize_job` may set besides the status.
UPDATABLE: frozenset[str] = frozenset({"heartbeat_at", "finished_at", "error", "report"})
ERROR_CHARS = 2000
REPORT_BYTES = 256 * 1024


def new_optimize_job_id() -> str:
    return f"opt-{secrets.token_hex(8)}"


def check_optimize_move(job_id: str, current: str, target: str) -> None:
    """Raise Conflict unless a job may go from `current` to `target` (a running job may stay
    running: a heartbeat)."""
    if current in TERMINAL:
        raise Conflict(f"optimize job '{job_id}' is already {current}", field="status")
    if target not in TERMINAL and target != current:
        raise Conflict(f"optimize job '{job_id}' cannot go from {current} to {target}", field="status")


@dataclass(frozen=True, slots=True)
class OptimizeJob:
    id: str
    tenant: str
    model: str
    version: int
    status: OptimizeStatus = "RUNNING"
    created_by: str = ""  # the key (or authorizer principal) that started it
    worker: str = ""  # `<host>:<pid>` of the process running it; never shown to callers
    created_at: float = field(default_factory=now)
    heartbeat_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    report: dict[str, Any] | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def stale(self, at: float) -> bool:
        """Running, with no sign of life from its worker for `STALE_AFTER_S` before `at`."""
        return self.status == "RUNNING" and silent(self.heartbeat_at, self.created_at, at)


def bounded(job: OptimizeJob) -> OptimizeJob:
    """`job` as the registry stores it: its error and its report within their bounds."""
    return replace(
        job,
        error=None if job.error is None else bounded_error(job.error),
        report=None if job.report is None else stored_report(job.report),
    )


def bounded_error(message: str) -> str:
    return message if len(message) <= ERROR_CHARS else message[: ERROR_CHARS - 1] + "…"


def stored_report(report: dict[str, Any]) -> dict[str, Any]:
    """The report as it is stored: plain JSON data (a number JSON cannot hold, NaN or
    infinity, becomes null, as the API would answer it), within `REPORT_BYTES`. A larger
    report loses its largest top-level parts, one at a time, until it fits; `omitted` names
    them (the candidates' table and the tuning are the large ones; the verdict and what was
    registered are small and stay)."""
    kept: dict[str, Any] = _plain(report)
    omitted: list[str] = []
    while _size(kept) > REPORT_BYTES and set(kept) - {"omitted"}:
        largest = max((k for k in kept if k != "omitted"), key=lambda k: _size(kept[k]))
        omitted.append(largest)
        kept = {k: v for k, v in kept.items() if k != largest} | {"omitted": omitted}
    return kept


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _plain(value: Any) -> Any:
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # a numpy scalar
        value = value.item()
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)
