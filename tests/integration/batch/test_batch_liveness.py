"""One job per output folder, and jobs whose process died, with real processes: a second
`sluice batch run` into a folder in use, a run killed with SIGKILL mid-job, a schedule's run
killed, `sluice serve` killed during two schedules' runs and started again, and a job whose
process went silent on another host.

A process is held mid-job with SIGSTOP before anything else is done to it: it is then alive
and RUNNING for as long as the test needs, whatever the machine's speed."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.csv as pv
import pytest
from fastapi.testclient import TestClient

from sluice import cli
from sluice.api.errors import error_content
from sluice.batch.orchestrators import LocalOrchestrator
from sluice.batch.score import ChunkScorer
from sluice.batch.uris import local_path
from sluice.batch.writers import PartWriter
from sluice.domain.jobs import BatchJob
from sluice.domain.liveness import STALE_AFTER_S
from sluice.domain.schedules import Schedule
from sluice.wiring import get_container
from tests.conftest import MODELS
from tests.e2e.conftest import start_sluice
from tests.integration.batch.inputs import iris_rows, write_input
from tests.integration.conftest import app_for, auth
from tests.support import connection_refused

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sluice.domain import Principal
    from sluice.wiring import Container

pytestmark = pytest.mark.skipif(os.name != "posix", reason="holds and kills processes with POSIX signals")

ROWS = 200_000  # a CSV of about 8 MB: over a hundred chunks of 64 KiB
AHEAD_S = 15.0  # a scheduled run this far ahead comes after `sluice serve` has started, been killed and started again


@pytest.fixture
def home(home: Path) -> Path:
    """The batch home with iris deployed, for this process's CLI and for the processes it starts."""
    assert cli.main(["--tenant", "acme", "models", "push", "iris", str(MODELS / "iris.onnx")]) == 0
    assert cli.main(["--tenant", "acme", "deployments", "create", "iris", "--model", "iris"]) == 0
    return home


@pytest.fixture(scope="module")
def big_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ROWS iris rows as CSV, written once for the module (~2 CPU-s each time): each test
    links it where it wants it, and nothing writes to it."""
    return write_input(tmp_path_factory.mktemp("inputs") / "big.csv", iris_rows(ROWS))


def big_input(big_csv: Path, path: Path) -> Path:
    """The module's big input at `path` (a hard link)."""
    os.link(big_csv, path)
    return path


def sluice(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["--tenant", "acme", *args])
    out, err = capsys.readouterr()
    return code, out, err


def batch_args(source: Path, out: Path) -> list[str]:
    return ["batch", "run", str(source), "--deployment", "iris", "--key", "id", "--out", str(out), "--concurrency", "1"]


def batch_run(source: Path, out: Path) -> list[str]:
    """`sluice batch run` as a process of its own (to be held, killed or found dead)."""
    return [sys.executable, "-m", "sluice.cli", "--tenant", "acme", *batch_args(source, out)]


def spawn(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def mid_run(proc: subprocess.Popen[str]) -> BatchJob:
    """The job `proc` runs, once it has scored a chunk, with `proc` stopped (SIGSTOP) there,
    outside any write to the registry (a process stopped inside one would hold its lock)."""
    container = get_container()
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, f"the run ended first: {proc.communicate()}"
        assert time.monotonic() < deadline, "the job never got going"
        going = [j for j in container.registry.list_jobs("acme") if j.status == "RUNNING" and j.chunks_done]
        if going:
            os.kill(proc.pid, signal.SIGSTOP)
            if _writable(container.settings.home_path / "registry.db"):
                (job,) = going
                held = container.registry.get_job("acme", job.id)
                assert held.status == "RUNNING" and held.chunks_done < (held.chunks_total or 0), held
                return held
            os.kill(proc.pid, signal.SIGCONT)  # stopped mid-write: let it finish, stop it again
        time.sleep(0.02)


def _writable(path: Path) -> bool:
    conn = sqlite3.connect(path, timeout=0.2, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


@contextmanager
def stopped(proc: subprocess.Popen[str]) -> Iterator[BatchJob]:
    """`proc` held mid-job for the block, then let go on."""
    job = mid_run(proc)
    try:
        yield job
    finally:
        os.kill(proc.pid, signal.SIGCONT)


def rows_on_disk(out: Path) -> int:
    manifest = json.loads((out / "_manifest.json").read_text())
    return sum(pv.read_csv(local_path(p["uri"])).num_rows for p in manifest["parts"])


def test_a_second_run_into_a_folder_in_use_is_refused_and_the_first_keeps_every_part(
    home: Path, big_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = big_input(big_csv, tmp_path / "big.csv")
    out = tmp_path / "scored"
    first = spawn(batch_run(source, out))
    with stopped(first) as job:
        code, _, err = sluice(capsys, *batch_args(source, out))  # the second, in this process
        assert code != 0, err[-2000:]
        assert f"is being written by batch job {job.id} (RUNNING)" in err, err[-2000:]
        assert [j.id for j in get_container().registry.list_jobs("acme")] == [job.id]  # refused whole
    report, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-2000:]
    done = json.loads(report)
    assert done["status"] == "SUCCEEDED" and done["counts"] == {"rows_in": ROWS, "rows_out": ROWS, "rows_failed": 0}
    assert (out / "_SUCCESS").exists() and rows_on_disk(out) == ROWS


def test_a_run_killed_with_sigkill_reads_as_failed_and_its_folder_can_be_used_again(
    home: Path, big_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = big_input(big_csv, tmp_path / "big.csv")
    out = tmp_path / "scored"
    proc = spawn(batch_run(source, out))
    job = mid_run(proc)
    proc.kill()  # SIGKILL: no handler, no finally, nothing recorded
    proc.communicate()
    assert get_container().registry.get_job("acme", job.id).status == "RUNNING"  # as the process left it

    code, shown, _ = sluice(capsys, "batch", "status", job.id)
    status = json.loads(shown)
    assert code == 0 and status["status"] == "FAILED", status
    assert status["error"].startswith(f"its process stopped: process {proc.pid} on this host is gone"), status["error"]
    assert "chunks not scored" in status["error"]
    assert not (out / "_SUCCESS").exists() and json.loads((out / "_manifest.json").read_text())["status"] == "FAILED"
    _, listed, _ = sluice(capsys, "batch", "list")
    assert job.id in listed and "FAILED" in listed and "RUNNING" not in listed

    code, report, err = sluice(capsys, *batch_args(source, out))  # again, in this process
    assert code == 0, err[-2000:]
    assert json.loads(report)["counts"]["rows_out"] == ROWS and rows_on_disk(out) == ROWS


def test_a_process_of_this_home_found_dead_when_sluice_serve_starts(home: Path, big_csv: Path, tmp_path: Path) -> None:
    source = big_input(big_csv, tmp_path / "big.csv")
    proc = spawn(batch_run(source, tmp_path / "scored"))
    job = mid_run(proc)
    proc.kill()
    proc.communicate()
    container = get_container()
    assert [j.id for j in container.batch.liveness.reap_stopped()] == [job.id]  # what `sluice serve` does first
    assert container.registry.get_job("acme", job.id).status == "FAILED"
    assert container.batch.liveness.reap_stopped() == []


START_SCHEDULED_RUN = """
import sys, time
from sluice.wiring import get_container

container = get_container()
schedule = container.registry.get_schedule("acme", "hourly")
(job,) = container.schedules.run_due(float(sys.argv[1]))  # as `sluice serve`'s scheduler does
print(job.id, flush=True)
time.sleep(3600)
"""


def test_a_scheduled_run_whose_process_was_killed_does_not_skip_every_later_run(home: Path, big_csv: Path, tmp_path: Path) -> None:
    big_input(big_csv, tmp_path / "in-02.csv")
    write_input(tmp_path / "in-03.csv", iris_rows(300))
    created = datetime.fromisoformat("2026-11-25T01:00:00+00:00").timestamp()
    container = get_container()
    container.registry.create_schedule(
        Schedule("acme", "hourly", "iris", f"file://{tmp_path}/in-{{hour}}.csv", "rate(1 hour)", operator=True, created_at=created)
    )
    proc = spawn([sys.executable, "-c", START_SCHEDULED_RUN, str(created + 3600 + 1)])  # the 02:00 run
    killed = mid_run(proc)
    proc.kill()
    proc.communicate()
    assert killed.schedule == "hourly" and killed.input_uri.endswith("in-02.csv")

    (next_run,) = container.schedules.run_due(created + 2 * 3600 + 1)  # 03:00: not skipped
    assert next_run.scheduled_for == created + 2 * 3600 and next_run.input_uri.endswith("in-03.csv")
    assert container.registry.get_schedule("acme", "hourly").skipped == 0
    assert container.registry.get_job("acme", killed.id).status == "FAILED"
    container.batch.orchestrator.wait(next_run.id)  # type: ignore[union-attr]
    assert container.registry.get_job("acme", next_run.id).status == "SUCCEEDED"


def test_sluice_serve_killed_mid_run_comes_back_with_its_runs_failed_and_their_schedules_going_on(
    home: Path, big_csv: Path, tmp_path: Path
) -> None:
    """The scenario as an operator meets it: `sluice serve --workers 2` killed with SIGKILL while
    two schedules' runs score (one schedule skips a run that would overlap, one queues it). Its
    workers let go of the port; started again on that port, it has marked both runs FAILED,
    saying why, before it answers; and each schedule's next run starts at its time and succeeds.

    No minute is waited for: the first server looks for due runs once, as it starts (its scan
    interval is an hour), and the schedules, made just before it, run every minute from a
    moment placed so that a run is due then and the next one AHEAD_S seconds later, while the
    server is down or just back. A start slower than that runs the later time instead (missed
    times collapse into the latest); the story holds with the time after it."""
    big = big_input(big_csv, tmp_path / "big.csv")
    created = time.time() + AHEAD_S - 120  # every minute from then: one run due now, the next in AHEAD_S
    candidates = [created + 60, created + 120]  # what the first server's one look may start
    for moment in candidates:
        os.link(big, tmp_path / f"in-{_hhmm(moment)}.csv")
    container = get_container()
    for overlap in ("skip", "queue"):
        container.registry.create_schedule(Schedule(
            "acme", overlap, "iris", f"file://{tmp_path}/in-{{time}}.csv", "rate(1 minute)",
            overlap=overlap, operator=True, created_at=created,  # type: ignore[arg-type]
        ))  # fmt: skip
    argv = ["--tenant", "acme", "serve", "--workers", "2"]
    once = {**os.environ, "SLUICE_BATCH_SCHEDULE_POLL_S": "3600"}
    first, port = start_sluice(home, once, argv, log=tmp_path / "serve.log")
    try:
        deadline = time.monotonic() + 120
        while len(going := [j for j in container.registry.list_jobs("acme") if j.status == "RUNNING" and j.chunks_done]) < 2:
            assert first.poll() is None and time.monotonic() < deadline, f"the runs never got going: {going}"
            time.sleep(0.05)
        workers = _children(first.pid)
        first.kill()  # SIGKILL: no handler, no drain, nothing recorded
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
    killed = {j.schedule: j for j in going}
    assert {j.status for j in container.registry.list_jobs("acme")} == {"RUNNING"}  # as the process left them
    (fired,) = {j.scheduled_for for j in going}
    assert fired in candidates, (fired, candidates)
    runs = [fired, fired + 60]
    following = tmp_path / f"in-{_hhmm(runs[1])}.csv"
    following.unlink(missing_ok=True)  # (a link to the big input)
    write_input(following, iris_rows(300))
    try:
        deadline = time.monotonic() + 30
        while not connection_refused(port):  # its workers saw it gone: they drained and let go of the port
            assert time.monotonic() < deadline, "the killed server's workers still hold its port"
            time.sleep(0.1)
    finally:
        for pid in workers:  # none is left behind, whatever happened
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    env = {**os.environ, "SLUICE_BATCH_SCHEDULE_POLL_S": "0.5"}
    again, _ = start_sluice(home, env, ["--tenant", "acme", "serve", "--workers", "1"], log=tmp_path / "serve.log", port=port)
    try:
        for schedule, job in killed.items():  # before any read: serve looked as it started
            stopped = container.registry.get_job("acme", job.id)
            assert stopped.status == "FAILED", (schedule, stopped)
            assert (stopped.error or "").startswith(f"its process stopped: process {first.pid} on this host is gone"), stopped.error
        deadline = time.monotonic() + max(0.0, runs[1] - time.time()) + 120
        for schedule in killed:
            while not (nexts := [j for j in container.registry.list_jobs("acme") if j.schedule == schedule and j.scheduled_for == runs[1]]) or not nexts[0].terminal:
                assert again.poll() is None and time.monotonic() < deadline, f"schedule {schedule}: no next run: {nexts}"
                time.sleep(0.2)
            assert nexts[0].status == "SUCCEEDED" and nexts[0].rows_out == 300, nexts[0]
            assert container.registry.get_schedule("acme", schedule).skipped == 0
    finally:
        again.terminate()
        again.wait(60)
    assert "Batch jobs whose process had stopped, now FAILED: " in (tmp_path / "serve.log").read_text()


def _hhmm(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%H%M")


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux's /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError):
            if int(stat.read_text().rpartition(")")[2].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


# A process on another host: only its heartbeat can tell -------------------------------------
def silent_job(container: Container, job_id: str, out: Path, *, beat_ago: float) -> BatchJob:
    now = time.time()
    job = BatchJob(
        id=job_id, tenant="acme", deployment="iris", input_uri=(out.parent / "in.csv").as_uri(),
        output_uri=out.as_uri() + "/", format="csv", output_format="csv", status="RUNNING", source="cli",
        worker="another-host:4242", created_at=now - 3600, started_at=now - 3600, heartbeat_at=now - beat_ago,
    )  # fmt: skip
    return container.registry.create_job(job)


def test_a_job_whose_process_went_silent_reads_as_failed_through_the_api(
    batch: Container, keys: dict[str, str], tmp_path: Path
) -> None:
    silent_job(batch, "job-silent", tmp_path / "a", beat_ago=STALE_AFTER_S + 5)
    silent_job(batch, "job-busy", tmp_path / "b", beat_ago=5)  # a long job whose process beats: at work
    app = app_for(batch)  # the worker's shared app: its routes built once
    try:
        with TestClient(app) as client:
            dead = client.get("/api/v1/batch-jobs/job-silent", headers=auth(keys["acme"])).json()
            listed = client.get("/api/v1/batch-jobs", headers=auth(keys["acme"])).json()
    finally:
        app.state.container = None
    assert dead["status"] == "FAILED" and dead["timings"]["finished_at"] is not None
    assert dead["error"].startswith(f"its process stopped: no heartbeat for more than {STALE_AFTER_S:.0f} s"), dead["error"]
    assert {j["id"]: j["status"] for j in listed} == {"job-silent": "FAILED", "job-busy": "RUNNING"}
    assert batch.registry.output_holder("acme", (tmp_path / "a").as_uri() + "/") is None


def test_a_folder_held_by_a_silent_job_is_taken_over_and_one_held_by_a_busy_job_is_not(
    batch: Container, acme: Principal, tmp_path: Path
) -> None:
    source = write_input(tmp_path / "in.csv", iris_rows(800))
    silent = silent_job(batch, "job-silent", tmp_path / "a", beat_ago=STALE_AFTER_S + 5)
    silent_job(batch, "job-busy", tmp_path / "b", beat_ago=5)
    job = batch.batch.submit(acme, deployment="iris", input_uri=str(source), operator=True, source="cli",
                             start=False, runs_here=True, output_uri=str(tmp_path / "a"))  # fmt: skip
    assert batch.registry.get_job("acme", silent.id).status == "FAILED"
    LocalOrchestrator(batch.batch_runner, concurrency=2).run("acme", job.id)
    assert batch.registry.get_job("acme", job.id).status == "SUCCEEDED"
    from sluice.domain.jobs import OutputInUse

    with pytest.raises(OutputInUse) as refused:
        batch.batch.submit(acme, deployment="iris", input_uri=str(source), operator=True, source="cli",
                           start=False, output_uri=str(tmp_path / "b"))  # fmt: skip
    assert refused.value.field == "output_uri" and refused.value.holder == "job-busy"
    assert "being written by batch job job-busy (RUNNING)" in refused.value.message
    status, body, _ = error_content(refused.value)  # as the API would answer it
    assert (status, body["code"], body["field"], body["details"]) == (409, "output_in_use", "output_uri", {"job": "job-busy"})


def test_a_job_found_dead_while_still_scoring_never_touches_the_folder_its_successor_took(
    batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process too busy to beat (a machine suspended, say) is found dead while it scores a
    chunk, and another job takes its folder and runs to the end; when the first wakes, its
    chunk must not write, or take back, files of the same names."""
    out = tmp_path / "out"
    source = write_input(tmp_path / "in.parquet", iris_rows(2100), row_group_rows=700)
    first = batch.batch.submit(acme, deployment="iris", input_uri=str(source), operator=True, source="cli",
                               start=False, output_uri=str(out))  # fmt: skip
    successor: list[BatchJob] = []
    real_score, real_close = ChunkScorer.score, PartWriter.close
    scoring: list[tuple[str, int]] = []

    def score(self: ChunkScorer, spec: Any, chunk: Any, **kw: Any) -> Any:
        scoring.append((spec.job_id, chunk.index))
        try:
            return real_score(self, spec, chunk, **kw)
        finally:
            scoring.pop()

    def close(self: PartWriter) -> int:  # the chunk is scored, its part not yet in the folder
        if scoring[-1] == (first.id, 1) and not successor:
            batch.registry.update_job("acme", first.id, status="FAILED", error="its process stopped")  # found silent
            second = batch.batch.submit(acme, deployment="iris", input_uri=str(source), operator=True, source="cli",
                                        start=False, output_uri=str(out))  # fmt: skip
            LocalOrchestrator(batch.batch_runner, concurrency=1).run("acme", second.id)
            successor.append(batch.registry.get_job("acme", second.id))
        return real_close(self)

    monkeypatch.setattr(ChunkScorer, "score", score)
    monkeypatch.setattr(PartWriter, "close", close)
    LocalOrchestrator(batch.batch_runner, concurrency=1).run("acme", first.id)  # wakes, goes on
    (second,) = successor
    assert second.status == "SUCCEEDED" and batch.registry.get_job("acme", first.id).status == "FAILED"
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["job"] == second.id and manifest["status"] == "SUCCEEDED" and (out / "_SUCCESS").exists()
    for chunk in batch.registry.list_chunks("acme", second.id):
        assert batch.batch_runner.files.stat(chunk.part).version == chunk.part_version  # type: ignore[arg-type]


def test_the_running_process_beats_for_its_job(batch: Container, acme: Principal, tmp_path: Path) -> None:
    source = write_input(tmp_path / "in.parquet", iris_rows(1400), row_group_rows=700)
    job = batch.batch.submit(acme, deployment="iris", input_uri=str(source), operator=True, source="cli",
                             start=False, output_uri=str(tmp_path / "out"))  # fmt: skip
    assert (job.worker, job.heartbeat_at) == ("", None)  # created, not yet run by any process
    beats: list[float | None] = []
    real = batch.batch_runner.score

    def score_after_a_beat(spec: Any, chunk: Any, **kw: Any) -> Any:
        """The first chunk waits for the heartbeat to move while the job runs."""
        first = batch.registry.get_job("acme", job.id).heartbeat_at
        deadline = time.monotonic() + 60
        while not beats and batch.registry.get_job("acme", job.id).heartbeat_at == first:
            assert time.monotonic() < deadline, "no heartbeat while the job ran"
            time.sleep(0.01)
        beats.append(first)
        return real(spec, chunk, **kw)

    batch.batch_runner.score = score_after_a_beat  # type: ignore[method-assign]
    LocalOrchestrator(batch.batch_runner, concurrency=1, heartbeat_s=0.01).run("acme", job.id)
    done = batch.registry.get_job("acme", job.id)
    assert done.status == "SUCCEEDED" and done.worker == f"{socket.gethostname()}:{os.getpid()}"
    assert beats[0] is not None and done.heartbeat_at is not None and done.heartbeat_at > beats[0]
