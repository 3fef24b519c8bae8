"""When a job has lost the process that runs it: its heartbeat, or its worker's name."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sluice.domain.jobs import BatchJob
from sluice.domain.liveness import STALE_AFTER_S, process_gone, silent, this_worker

JOB = BatchJob(
    id="job-1", tenant="acme", deployment="iris", input_uri="file:///in.csv", output_uri="file:///out/",
    format="csv", output_format="csv", status="RUNNING", created_at=1000.0,
)  # fmt: skip


def test_silence_is_counted_from_the_last_heartbeat_or_else_the_start() -> None:
    assert not silent(None, 1000.0, 1000.0 + STALE_AFTER_S) and silent(None, 1000.0, 1000.0 + STALE_AFTER_S + 1)
    assert not silent(5000.0, 1000.0, 5000.0 + STALE_AFTER_S) and silent(5000.0, 1000.0, 5000.0 + STALE_AFTER_S + 1)


def test_a_job_no_process_claims_is_never_stopped_by_its_heartbeat() -> None:
    assert JOB.stopped(1e12) is None  # PENDING or RUNNING under Step Functions: no worker


def test_a_job_whose_process_on_another_host_went_silent_is_stopped() -> None:
    job = replace(JOB, worker="another-host:4242", heartbeat_at=5000.0)
    assert job.stopped(5000.0 + STALE_AFTER_S) is None  # late, within the bound: at work
    reason = job.stopped(5000.0 + STALE_AFTER_S + 1)
    assert reason is not None and reason.startswith(f"its process stopped: no heartbeat for more than {STALE_AFTER_S:.0f} s")
    assert replace(job, status="FAILED").stopped(1e12) is None  # finished: nothing to find


@pytest.mark.parametrize("worker", ["another-host:4242", "no-pid", "host:", ":0", "host:abc"])
def test_a_worker_this_host_cannot_tell_about_is_not_known_to_be_gone(worker: str) -> None:
    assert not process_gone(worker)


def test_this_process_is_not_gone() -> None:
    assert not process_gone(this_worker())
    assert replace(JOB, worker=this_worker(), heartbeat_at=1000.0).stopped(1000.0 + 1) is None
