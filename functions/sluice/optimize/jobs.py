"""Optimize runs started from the API, as jobs in the registry: every worker (process,
container) answers for a job, whichever one runs it, and the job outlives the process.

The run is a thread of the process that took the request. While it runs, a second thread
writes the job's heartbeat every `HEARTBEAT_S`. A process that ends (or is killed) leaves its
job RUNNING with a heartbeat that no longer moves: the first read more than `STALE_AFTER_S`
after its last heartbeat marks it FAILED, saying why, so a caller never polls forever.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import Conflict, SluiceError
from sluice.domain.liveness import HEARTBEAT_S, STALE_AFTER_S, this_worker
from sluice.domain.objects import now
from sluice.domain.optimize_jobs import OptimizeJob, new_optimize_job_id
from sluice.observability import get_logger
from sluice.registry.scope import use_tenant

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.domain import Principal
    from sluice.registry import OptimizeJobRegistry

STOPPED = (
    f"its worker stopped: no heartbeat for more than {STALE_AFTER_S:.0f} s (the process ended, "
    "or could not reach the registry); start it again"
)


class OptimizeJobs:
    def __init__(self, registry: OptimizeJobRegistry, *, heartbeat_s: float = HEARTBEAT_S) -> None:
        self.registry = registry
        self.heartbeat_s = heartbeat_s

    def start(
        self, principal: Principal, work: Callable[[], dict[str, Any]], *, model: str, version: int
    ) -> OptimizeJob:
        principal.require("admin")
        job = self.registry.create_optimize_job(
            OptimizeJob(
                new_optimize_job_id(), principal.tenant, model, version,
                created_by=principal.subject, worker=this_worker(), heartbeat_at=now(),
            )
        )  # fmt: skip
        done = threading.Event()
        threading.Thread(target=self._run, args=(job, work, done), name=f"sluice-{job.id}", daemon=True).start()
        threading.Thread(target=self._beat, args=(job, done), name=f"sluice-{job.id}-beat", daemon=True).start()
        return job

    def get(self, principal: Principal, job_id: str) -> OptimizeJob:
        principal.require("admin")
        return self._settled(self.registry.get_optimize_job(principal.tenant, job_id))

    def list(self, principal: Principal, *, limit: int = 100) -> list[OptimizeJob]:
        principal.require("admin")
        return [self._settled(j) for j in self.registry.list_optimize_jobs(principal.tenant, limit=limit)]

    def _settled(self, job: OptimizeJob) -> OptimizeJob:
        """`job`, or, when its worker has gone silent, `job` marked FAILED."""
        at = now()
        if not job.stale(at):
            return job
        try:
            return self.registry.update_optimize_job(job.tenant, job.id, status="FAILED", error=STOPPED, finished_at=at)
        except Conflict:  # it finished meanwhile: that is the answer
            return self.registry.get_optimize_job(job.tenant, job.id)

    # The registry calls below act for the job's tenant: a thread does not inherit the
    # request's binding, and tenant-confined credentials refuse a call made without one.
    def _run(self, job: OptimizeJob, work: Callable[[], dict[str, Any]], done: threading.Event) -> None:
        with use_tenant(job.tenant):
            try:
                report = work()
                update: dict[str, Any] = {"status": "SUCCEEDED", "report": report}
            except SluiceError as exc:
                update = {"status": "FAILED", "error": exc.message}
            except Exception as exc:  # the text stays out of the answer: it may name server paths
                get_logger().exception("optimize job failed", extra={"job": job.id})
                update = {"status": "FAILED", "error": f"the optimizer failed ({type(exc).__name__})"}
            finally:
                done.set()
            try:
                self.registry.update_optimize_job(job.tenant, job.id, finished_at=now(), **update)
            except Conflict:  # a reader found it silent for too long and marked it FAILED
                get_logger().warning("optimize job finished after it was marked failed", extra={"job": job.id})
            except Exception:  # it stays RUNNING until its heartbeat is stale, then reads as FAILED
                get_logger().exception("optimize job: the outcome was not recorded", extra={"job": job.id})

    def _beat(self, job: OptimizeJob, done: threading.Event) -> None:
        with use_tenant(job.tenant):
            while not done.wait(self.heartbeat_s):
                try:
                    self.registry.update_optimize_job(job.tenant, job.id, heartbeat_at=now())
                except Conflict:  # finished, or marked failed: nothing left to keep alive
                    return
                except Exception:  # a registry hiccup; the next beat tries again
                    get_logger().warning("optimize job heartbeat failed", exc_info=True, extra={"job": job.id})
