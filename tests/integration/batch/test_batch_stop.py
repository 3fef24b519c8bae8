"""The local orchestrator as `sluice serve` stops it: no new job and no new chunk; the chunk in
flight finishes and is recorded; the job ends FAILED saying the service stopped, never left
RUNNING. The inbox, once told to stop, takes no more files (they wait for the next start)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from sluice.batch.inbox import InboxWatcher
from sluice.batch.orchestrators import LocalOrchestrator
from sluice.batch.score import ChunkScorer
from sluice.domain.errors import Unavailable
from tests.integration.batch.inputs import iris_rows, write_input

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.batch.plan import Chunk, JobSpec
    from sluice.domain import Principal
    from sluice.wiring import Container


def test_a_job_running_when_the_service_stops_records_its_chunk_then_fails_saying_why(
    batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_input(tmp_path / "in.csv", iris_rows(3000))
    job = batch.batch.submit(acme, deployment="iris", input_uri=str(path), operator=True, start=False, output_uri=str(tmp_path / "out"))
    jobs = LocalOrchestrator(batch.batch_runner, concurrency=1)
    real = ChunkScorer.score

    def stop_during_first(self: ChunkScorer, spec: JobSpec, chunk: Chunk, **kw: Any) -> Any:
        if chunk.index == 0:
            jobs.stop_starting()  # the signal comes while chunk 0 is being scored
        return real(self, spec, chunk, **kw)

    monkeypatch.setattr(ChunkScorer, "score", stop_during_first)
    jobs.run(acme.tenant, job.id)

    done = batch.batch.get(acme, job.id)
    assert done.status == "FAILED" and done.finished_at is not None
    assert done.error is not None and done.error.startswith("ServiceStopped: the service stopped before the job finished")
    assert done.chunks_total is not None and done.chunks_total > 1
    assert done.chunks_done == 1 and f"{done.chunks_total - 1} of {done.chunks_total} chunks not scored" in done.error
    assert done.rows_in == done.rows_out + done.rows_failed > 0  # the chunk in flight counts
    assert not (tmp_path / "out" / "_SUCCESS").exists()
    assert jobs.shutdown(grace_s=0) == [job.id]


def test_once_stopping_a_job_is_refused_and_recorded_failed(batch: Container, acme: Principal, tmp_path: Path) -> None:
    jobs = batch.batch.orchestrator
    assert isinstance(jobs, LocalOrchestrator)
    assert jobs.shutdown(grace_s=0) == []
    path = write_input(tmp_path / "in.csv", iris_rows(10))
    with pytest.raises(Unavailable, match="the service is stopping"):
        batch.batch.submit(acme, deployment="iris", input_uri=str(path), operator=True, output_uri=str(tmp_path / "out"))
    [job] = batch.batch.list(acme)
    assert job.status == "FAILED" and job.error == "ServiceStopped: the service stopped before the job started"


def test_the_inbox_told_to_stop_takes_no_more_files(batch: Container, acme: Principal, tmp_path: Path) -> None:
    folder = tmp_path / "inbox"
    watcher = InboxWatcher(batch.batch, folder, acme.tenant, interval_s=60)
    (folder / "iris").mkdir(parents=True)
    write_input(folder / "iris" / "a.csv", iris_rows(10))
    assert watcher.scan_once() == []  # seen once: it waits until the file has settled
    watcher.stop_starting()
    assert watcher.scan_once() == [] and batch.batch.list(acme) == []
    after = InboxWatcher(batch.batch, folder, acme.tenant, interval_s=60)  # the next start
    after.scan_once()
    [started] = after.scan_once()  # the file waited for it
    jobs = batch.batch.orchestrator
    assert isinstance(jobs, LocalOrchestrator)
    jobs.wait(started.id)
    assert batch.batch.get(acme, started.id).status == "SUCCEEDED"
