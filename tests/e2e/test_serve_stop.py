"""`sluice serve` stopped by SIGTERM while a batch job runs: the job scores no more chunks, the
chunks it recorded stand, and it is recorded FAILED saying the service stopped; none is left
RUNNING. A job from the inbox runs in the serving process; one started through the API runs
in the HTTP worker that took the request."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sluice.settings import Settings
from sluice.wiring import Container
from tests.conftest import REPO
from tests.e2e.conftest import free_port, wait_healthy
from tests.support import http

if TYPE_CHECKING:
    from collections.abc import Iterator

ROWS = 600_000  # at 64 KiB a chunk, a couple of hundred chunks scored one at a time


@pytest.fixture(scope="module")
def flowers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The input, written once for the module; nothing writes to it."""
    path = tmp_path_factory.mktemp("input") / "flowers.csv"
    with path.open("w") as out:
        out.write("id,sepal_length,sepal_width,petal_length,petal_width\n")
        out.writelines(f"r{i},5.1,3.5,1.4,0.2\n" for i in range(ROWS))
    return path


@pytest.fixture
def big_csv(flowers: Path, tmp_path: Path) -> Path:
    """The module's input, as this test's own file (a hard link: the test moves it)."""
    path = tmp_path / "flowers.csv"
    os.link(flowers, path)
    return path


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[tuple[Path, list[subprocess.Popen[bytes]]]]:
    home = tmp_path / "home"
    started: list[subprocess.Popen[bytes]] = []
    yield home, started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _start(home: Path, workers: int, started: list[subprocess.Popen[bytes]]) -> tuple[subprocess.Popen[bytes], str, dict[str, str]]:
    port = free_port()
    env = {
        **os.environ,
        "SLUICE_HOME": str(home),
        "SLUICE_BATCH_CHUNK_BYTES": str(64 * 1024),
        "SLUICE_BATCH_CONCURRENCY": "1",
        "SLUICE_BATCH_INBOX_POLL_S": "0.2",
        "PYTHONPATH": os.pathsep.join([str(REPO / "functions"), os.environ.get("PYTHONPATH", "")]),
    }
    log = (home.parent / "serve.log").open("wb")
    args = [sys.executable, "-m", "sluice.cli", "--tenant", "acme", "serve", "--demo", "--port", str(port), "--workers", str(workers)]
    proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
    started.append(proc)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc, home.parent / "serve.log")
    return proc, url, {"Authorization": f"Bearer {(home / 'admin-key').read_text().strip()}"}


def _running(url: str, headers: dict[str, str]) -> dict[str, object]:
    """The one job, once it is RUNNING and has recorded a chunk (it has many more to go)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        jobs = http("GET", f"{url}/api/v1/batch-jobs", headers=headers, timeout=10).json()
        if jobs and jobs[0]["status"] == "RUNNING" and jobs[0]["progress"]["chunks_done"] >= 1:
            return jobs[0]
        assert not jobs or jobs[0]["status"] in ("PENDING", "RUNNING"), jobs[0]
        time.sleep(0.1)
    raise AssertionError("the job never got going")


@pytest.mark.parametrize("workers", [1, 2], ids=["inbox-job-1-worker", "api-job-2-workers"])
def test_sigterm_records_the_running_job_failed_saying_the_service_stopped(
    serve: tuple[Path, list[subprocess.Popen[bytes]]], big_csv: Path, workers: int
) -> None:
    home, started = serve
    proc, url, headers = _start(home, workers, started)
    if workers == 1:  # dropped in the folder the server watches
        (home / "inbox" / "iris").mkdir(parents=True, exist_ok=True)
        big_csv.rename(home / "inbox" / "iris" / "flowers.csv")
    else:  # submitted through the API from the tenant's inbox
        inbox = home / "batch" / "inbox" / "acme" / "iris"
        inbox.mkdir(parents=True)
        big_csv.rename(inbox / "flowers.csv")
        answer = http("POST", f"{url}/api/v1/batch-jobs", headers=headers, json={"deployment": "iris", "input_uri": (inbox / "flowers.csv").as_uri()}, timeout=30)
        assert answer.status_code == 202, answer.text
    job_id = str(_running(url, headers)["id"])

    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=120)

    log = (home.parent / "serve.log").read_text()
    assert code == 0, log
    job = Container.from_settings(Settings(mode="local", home=home, registry="", store="")).registry.get_job("acme", job_id)
    assert job.status == "FAILED", job
    assert job.error is not None and job.error.startswith("ServiceStopped: the service stopped before the job finished"), job.error
    assert job.chunks_total is not None and 1 <= job.chunks_done < job.chunks_total
    assert job.rows_in == job.rows_out + job.rows_failed
    assert 0 < job.rows_in < ROWS
    from sluice.batch.uris import local_path

    out = local_path(job.output_uri)
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["status"] == "FAILED" and "the service stopped" in manifest["error"]
    assert not (out / "_SUCCESS").exists()
    if workers == 1:
        assert f"Stopped 1 local batch job(s): {job_id}" in log
