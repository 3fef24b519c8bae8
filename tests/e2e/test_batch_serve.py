"""`sluice serve` and batch jobs its home was left with: one whose process is gone is FAILED
before the server answers, saying why."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

from sluice.domain.jobs import BatchJob
from sluice.registry.sqlite import SqliteRegistry
from tests.e2e.conftest import running_sluice

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(os.name != "posix", reason="a process of this host is looked up by its id")


def test_sluice_serve_marks_failed_the_jobs_whose_process_is_gone(tmp_path: Path) -> None:
    home = tmp_path / "home"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    registry = SqliteRegistry(home / "registry.db")
    for job_id, worker in [("job-left", f"{socket.gethostname()}:{gone.pid}"), ("job-alive", f"{socket.gethostname()}:{os.getpid()}")]:
        registry.create_job(BatchJob(
            id=job_id, tenant="acme", deployment="iris", input_uri=(tmp_path / "in.csv").as_uri(),
            output_uri=(tmp_path / job_id).as_uri() + "/", format="csv", output_format="csv", status="RUNNING",
            source="cli", worker=worker, heartbeat_at=time.time(),
        ))  # fmt: skip
    log = tmp_path / "serve.log"
    with log.open("w") as out, running_sluice(home, dict(os.environ), "--workers", "1", stdout=out, stderr=subprocess.STDOUT):
        left = registry.get_job("acme", "job-left")  # before any read: serve looked as it started
        assert left.status == "FAILED", left
        assert (left.error or "").startswith(f"its process stopped: process {gone.pid} on this host is gone")
        assert registry.get_job("acme", "job-alive").status == "RUNNING"  # this test's process: alive
        assert registry.output_holder("acme", (tmp_path / "job-left").as_uri() + "/") is None
    assert "now FAILED: job-left" in log.read_text()
