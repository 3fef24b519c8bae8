"""Optimize runs started from the API: each on its own thread, its report kept in this process
(the last `KEEP`), visible to its tenant only. A run takes seconds to minutes, longer than a
request should wait; a process that ends loses its runs (start them again)."""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import NotFound, SluiceError

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.domain import Principal
    from sluice.optimize.service import OptimizeService

KEEP = 100


class OptimizeJobs:
    def __init__(self, service: OptimizeService) -> None:
        self.service = service
        self._jobs: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, principal: Principal, work: Callable[[], dict[str, Any]], *, model: str, version: int | str) -> dict[str, Any]:
        principal.require("admin")
        job = {"id": f"opt-{secrets.token_hex(8)}", "tenant": principal.tenant, "model": model, "version": version,
               "status": "RUNNING", "created_at": round(time.time(), 3), "finished_at": None, "error": None, "report": None}  # fmt: skip
        with self._lock:
            self._jobs[job["id"]] = job
            while len(self._jobs) > KEEP:
                self._jobs.popitem(last=False)
        threading.Thread(target=self._run, args=(job, work), name=f"sluice-{job['id']}", daemon=True).start()
        return dict(job)

    def _run(self, job: dict[str, Any], work: Callable[[], dict[str, Any]]) -> None:
        try:
            report = work()
            update = {"status": "SUCCEEDED", "report": report}
        except SluiceError as exc:
            update = {"status": "FAILED", "error": exc.message}
        except Exception as exc:  # the text stays out of the answer: it may name server paths
            update = {"status": "FAILED", "error": f"the optimizer failed ({type(exc).__name__})"}
        with self._lock:
            job.update(update, finished_at=round(time.time(), 3))

    def get(self, principal: Principal, job_id: str) -> dict[str, Any]:
        principal.require("admin")
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job["tenant"] != principal.tenant:
                raise NotFound(f"optimize job '{job_id}' not found", field="job_id")
            return dict(job)
