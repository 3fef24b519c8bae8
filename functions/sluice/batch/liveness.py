"""Finding a batch job whose process died, when it is read.

Who runs a job answers for its liveness (`sluice.batch.orchestrators`): a process of this
machine names itself on the job and keeps its heartbeat (`BatchJob.stopped` reads them); on
AWS, Step Functions runs it, and its execution is asked (`Orchestrator.ended`). A job found
stopped is marked FAILED as MarkFailed would (a FAILED manifest, no `_SUCCESS`), saying why,
and its last move lets go of its output folder. Every read that decides something does this:
a job's status, a list, a schedule looking at its last run, a job wanting a held folder.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from sluice.domain import now
from sluice.domain.errors import Conflict
from sluice.domain.jobs import ERROR_CHARS

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.batch.orchestrators import Orchestrator
    from sluice.batch.runner import BatchRunner
    from sluice.domain.jobs import BatchJob
    from sluice.registry import JobRegistry

log = logging.getLogger(__name__)


class JobLiveness:
    def __init__(
        self, registry: JobRegistry, orchestrator: Orchestrator | None, runner: BatchRunner | Callable[[], BatchRunner] | None = None
    ) -> None:
        self.registry = registry
        self.orchestrator = orchestrator
        # Marks a dead job FAILED as MarkFailed would (else the record alone); given as what
        # builds it, built only when a job is found dead.
        self._runner = runner

    @property
    def runner(self) -> BatchRunner | None:
        if callable(self._runner):
            self._runner = self._runner()
        return self._runner

    def settled(self, job: BatchJob, *, ask: bool = False) -> BatchJob:
        """`job`, or, when what runs it is gone, `job` marked FAILED saying why: a process of
        its own that stopped (`BatchJob.stopped`), or, with `ask`, a Step Functions execution
        that ended without recording the job's outcome (one call to describe it)."""
        if job.terminal:
            return job
        reason = job.stopped(now())
        if reason is None and ask and job.execution and self.orchestrator is not None:
            reason = self.orchestrator.ended(job)
        if reason is None:
            return job
        return self.fail(job, reason)

    def fail(self, job: BatchJob, reason: str, cause: str = "", *, may_not_withdraw: bool = True) -> BatchJob:
        """`job` marked FAILED saying why (and the message `cause` holds, a Lambda error's
        included), as MarkFailed would; a job that finished meanwhile stays as it finished.
        `may_not_withdraw`: found by whoever reads the job (the API on AWS may not write the
        precomputed table: the execution's end withdraws it, with False)."""
        log.warning("batch job found stopped", extra={"job": job.id, "tenant": job.tenant, "reason": reason})
        if self.runner is not None:
            self.runner.mark_failed(job.tenant, job.id, error=reason, cause=cause, may_not_withdraw=may_not_withdraw)
        else:
            with contextlib.suppress(Conflict):  # it finished meanwhile: that stands
                self.registry.update_job(job.tenant, job.id, status="FAILED", error=reason[:ERROR_CHARS], finished_at=now())
        return self.registry.get_job(job.tenant, job.id)

    def reap_stopped(self) -> list[BatchJob]:
        """Every unfinished job of this machine's registry whose process is gone, marked
        FAILED (`sluice serve` looks when it starts); none where the registry cannot list
        every tenant's jobs (DynamoDB: a job there is found when it is read)."""
        unfinished = getattr(self.registry, "unfinished_jobs", None)
        if unfinished is None:
            return []
        return [done for job in unfinished() if (done := self.settled(job)).terminal]
