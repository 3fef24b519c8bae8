"""Batch jobs over HTTP: submit from the inbox, follow, list, cancel; tenant-scoped."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient

from sluice.api.app import create_app
from sluice.batch.uris import local_path
from tests.integration.batch.conftest import iris_rows, write_input
from tests.integration.conftest import auth

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.wiring import Container


@pytest.fixture
def client(batch: Container) -> TestClient:
    return TestClient(create_app(batch))


@pytest.fixture
def keys(batch: Container) -> dict[str, str]:
    _, acme = batch.keys.create("acme", ["predict"])
    _, globex = batch.keys.create("globex", ["admin", "predict"])
    return {"acme": acme, "globex": globex}


def inbox_file(batch: Container, tenant: str, name: str, rows: int = 2500) -> str:
    path = local_path(batch.batch.paths.inbox(tenant)) / "iris" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_input(path, iris_rows(rows)).as_uri()


def wait_done(client: TestClient, key: str, job_id: str, timeout_s: float = 30) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        job = client.get(f"/api/v1/batch-jobs/{job_id}", headers=auth(key)).json()
        if job["status"] in ("SUCCEEDED", "FAILED", "CANCELLED") or time.monotonic() > deadline:
            return job
        time.sleep(0.05)


def test_a_job_submitted_over_http_runs_to_its_manifest(client: TestClient, keys: dict[str, str], batch: Container) -> None:
    uri = inbox_file(batch, "acme", "day-1.csv")
    r = client.post("/api/v1/batch-jobs", json={"deployment": "iris", "input_uri": uri, "output_format": "parquet", "key_columns": ["id"]}, headers=auth(keys["acme"]))
    assert r.status_code == 202, r.text
    created = r.json()
    assert created["status"] in ("PENDING", "RUNNING") and created["format"] == "csv" and created["output_format"] == "parquet"
    assert created["output_uri"].endswith(f"/outbox/acme/{created['id']}/")
    job = wait_done(client, keys["acme"], created["id"])
    assert job["status"] == "SUCCEEDED", job
    assert job["progress"] == {"chunks_done": job["progress"]["chunks_total"], "chunks_total": job["progress"]["chunks_total"], "rows_done": 2500, "rows_total": 2500}
    assert job["counts"] == {"rows_in": 2500, "rows_out": 2500, "rows_failed": 0}
    assert job["timings"]["finished_at"] >= job["timings"]["started_at"] >= job["timings"]["created_at"]
    assert (local_path(job["output_uri"]) / "_SUCCESS").exists()
    listed = client.get("/api/v1/batch-jobs", headers=auth(keys["acme"])).json()
    assert [j["id"] for j in listed] == [created["id"]]
    r = client.post(f"/api/v1/batch-jobs/{created['id']}/cancel", headers=auth(keys["acme"]))
    assert r.status_code == 409 and r.json()["error"] == f"batch job '{created['id']}' is already SUCCEEDED"


def test_another_tenant_cannot_see_cancel_or_read_from_a_job_or_an_inbox(
    client: TestClient, keys: dict[str, str], batch: Container, acme: Principal, globex: Principal
) -> None:
    uri = inbox_file(batch, "acme", "day-2.jsonl", rows=10)
    job = batch.batch.submit(acme, deployment="iris", input_uri=uri, start=False)
    g = auth(keys["globex"])
    assert client.get(f"/api/v1/batch-jobs/{job.id}", headers=g).status_code == 404
    assert client.post(f"/api/v1/batch-jobs/{job.id}/cancel", headers=g).status_code == 404
    assert client.get("/api/v1/batch-jobs", headers=g).json() == []
    assert batch.registry.get_job("acme", job.id).status == "PENDING"
    # globex has an iris deployment of its own, and still cannot read acme's inbox
    batch.models.push(globex, "iris", (Path(__file__).parents[3] / "models" / "iris.onnx").read_bytes())
    batch.deployments.create(globex, "iris", {"kind": "single", "model": "iris", "version": 1})
    r = client.post("/api/v1/batch-jobs", json={"deployment": "iris", "input_uri": uri}, headers=g)
    assert r.status_code == 403 and r.json()["field"] == "input_uri"
    sneaky = uri.replace("/inbox/acme/", "/inbox/globex/../acme/")
    assert client.post("/api/v1/batch-jobs", json={"deployment": "iris", "input_uri": sneaky}, headers=g).status_code == 403


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"deployment": "nope", "input_uri": "INBOX/a.csv"}, 404, "deployment"),
        ({"deployment": "iris", "input_uri": "/etc/passwd.csv"}, 403, "input_uri"),
        ({"deployment": "iris", "input_uri": "INBOX/a.txt"}, 400, "format"),
        ({"deployment": "iris", "input_uri": "INBOX/a.csv", "format": "xml"}, 422, "format"),
        ({"deployment": "iris", "input_uri": "INBOX/a.csv", "output_uri": "s3://x/y"}, 422, "output_uri"),
    ],
)
def test_bad_submissions_say_what_is_wrong(client: TestClient, keys: dict[str, str], batch: Container, body: dict, status: int, field: str) -> None:
    body = {k: v.replace("INBOX/", batch.batch.paths.inbox("acme")) if isinstance(v, str) else v for k, v in body.items()}
    r = client.post("/api/v1/batch-jobs", json=body, headers=auth(keys["acme"]))
    assert r.status_code == status, r.text
    assert r.json()["field"] == field


def test_cancel_stops_a_pending_job(client: TestClient, keys: dict[str, str], batch: Container, acme: Principal) -> None:
    job = batch.batch.submit(acme, deployment="iris", input_uri=inbox_file(batch, "acme", "d.csv", rows=5), start=False)
    r = client.post(f"/api/v1/batch-jobs/{job.id}/cancel", headers=auth(keys["acme"]))
    assert r.status_code == 200 and r.json()["status"] == "CANCELLED"
    assert client.post(f"/api/v1/batch-jobs/{job.id}/cancel", headers=auth(keys["acme"])).status_code == 409
