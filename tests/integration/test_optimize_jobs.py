"""Optimize jobs live in the registry: any worker answers for a job another one runs, a job
whose worker stopped reads as FAILED, and another tenant's job is missing."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import TYPE_CHECKING

from fastapi.testclient import TestClient

from sluice.api.app import create_app
from sluice.domain import Principal
from sluice.domain.liveness import STALE_AFTER_S
from sluice.domain.optimize_jobs import OptimizeJob
from sluice.optimize.jobs import STOPPED, OptimizeJobs
from sluice.registry.sqlite import SqliteRegistry
from sluice.services.keys import split_key
from sluice.wiring import Container
from tests.integration.conftest import auth
from tests.integration.test_optimize import iris_rows

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.settings import Settings

QUICK = {"candidates": ["graph"], "seconds": 0.02, "tune": False, "calibration_rows": 50, "evaluation_rows": 50}


def start(client: TestClient, key: str, data: Path) -> dict:  # type: ignore[type-arg]
    started = client.post("/api/v1/models/iris/versions/latest/optimize", json={"data_uri": data.as_uri(), **QUICK}, headers=auth(key))
    assert started.status_code == 202, started.text
    return started.json()  # type: ignore[no-any-return]


def test_a_second_worker_answers_for_a_job_the_first_one_runs(
    demo: Container, settings: Settings, keys: dict[str, str], tmp_path: Path
) -> None:
    imports = demo.settings.home_path / "imports" / "acme"
    imports.mkdir(parents=True)
    data = iris_rows(imports / "rows.csv", 120)
    first = TestClient(create_app(demo))
    second = TestClient(create_app(Container.from_settings(settings)))  # another worker, the same home
    job = start(first, keys["acme"], data)
    url = f"/api/v1/optimize-jobs/{job['id']}"

    seen = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        here, there = first.get(url, headers=auth(keys["acme"])), second.get(url, headers=auth(keys["acme"]))
        assert there.status_code == 200, there.text
        seen.append(there.json()["status"])
        if here.json()["status"] == there.json()["status"] != "RUNNING":
            break
        time.sleep(0.1)
    assert seen[-1] == "SUCCEEDED", seen
    assert here.json() == there.json()
    done = there.json()
    assert done["created_by"] == split_key(keys["acme"])  # the key that started it, never the worker
    assert set(done) == {"id", "model", "version", "status", "created_by", "created_at", "heartbeat_at", "finished_at", "error", "report"}
    assert [r["candidate"] for r in done["report"]["candidates"]] == ["original", "graph"]
    assert done["finished_at"] >= done["created_at"]


def test_a_job_whose_worker_died_reads_as_failed_on_any_worker(demo: Container, keys: dict[str, str]) -> None:
    """A worker that ended mid-run left its job RUNNING; the first read after its heartbeat
    went stale says so, once, and every later read agrees."""
    silent = time.time() - STALE_AFTER_S - 5
    demo.registry.create_optimize_job(OptimizeJob("opt-dead", "acme", "iris", 1, worker="gone:1", created_at=silent - 30, heartbeat_at=silent))
    demo.registry.create_optimize_job(OptimizeJob("opt-slow", "acme", "iris", 1, worker="busy:2", created_at=silent - 30, heartbeat_at=time.time() - 5))
    client = TestClient(create_app(demo))
    dead = client.get("/api/v1/optimize-jobs/opt-dead", headers=auth(keys["acme"])).json()
    assert (dead["status"], dead["error"]) == ("FAILED", STOPPED) and dead["finished_at"] > dead["heartbeat_at"]
    assert client.get("/api/v1/optimize-jobs/opt-dead", headers=auth(keys["acme"])).json() == dead
    assert demo.registry.get_optimize_job("acme", "opt-dead").status == "FAILED"
    # A heartbeat within the bound is a worker at work, however long the job has run.
    assert client.get("/api/v1/optimize-jobs/opt-slow", headers=auth(keys["acme"])).json()["status"] == "RUNNING"
    listed = client.get("/api/v1/optimize-jobs", headers=auth(keys["acme"])).json()
    assert {j["id"]: j["status"] for j in listed} == {"opt-dead": "FAILED", "opt-slow": "RUNNING"}


def test_the_running_worker_beats_and_the_other_sees_it(settings: Settings, acme: Principal) -> None:
    shared = settings.home_path / "registry.db"  # two processes' registries on one file
    running, other = OptimizeJobs(SqliteRegistry(shared), heartbeat_s=0.05), OptimizeJobs(SqliteRegistry(shared))
    release = threading.Event()
    job = running.start(acme, lambda: {"waited": release.wait(30)}, model="iris", version=1)
    first = other.get(acme, job.id).heartbeat_at
    deadline = time.monotonic() + 10
    while other.get(acme, job.id).heartbeat_at == first:
        assert time.monotonic() < deadline, "no heartbeat"
        time.sleep(0.05)
    assert other.get(acme, job.id).worker == f"{socket.gethostname()}:{os.getpid()}"
    release.set()
    while (done := other.get(acme, job.id)).status == "RUNNING":
        assert time.monotonic() < deadline, "the job did not finish"
        time.sleep(0.05)
    assert (done.status, done.report, done.created_by) == ("SUCCEEDED", {"waited": True}, acme.subject)


def test_another_tenants_job_is_missing_with_the_same_body(demo: Container, keys: dict[str, str]) -> None:
    demo.registry.create_optimize_job(OptimizeJob("opt-acme", "acme", "iris", 1, heartbeat_at=time.time()))
    client = TestClient(create_app(demo))
    theirs = client.get("/api/v1/optimize-jobs/opt-acme", headers=auth(keys["globex"]))
    assert theirs.status_code == 404
    missing = client.get("/api/v1/optimize-jobs/opt-nobody", headers=auth(keys["globex"]))
    assert theirs.json() == {**missing.json(), "error": missing.json()["error"].replace("opt-nobody", "opt-acme")}
    assert theirs.json() == {"error": "optimize job 'opt-acme' not found", "code": "not_found", "field": "job_id"}
    assert client.get("/api/v1/optimize-jobs", headers=auth(keys["globex"])).json() == []
    assert client.get("/api/v1/optimize-jobs/opt-acme", headers=auth(keys["acme_predict"])).status_code == 403
    assert client.get("/api/v1/optimize-jobs?limit=0", headers=auth(keys["acme"])).json()["field"] == "limit"
