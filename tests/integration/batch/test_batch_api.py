"""Batch jobs over HTTP: submit from the inbox, follow, list, cancel; tenant-scoped."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient

from sluice.batch.uris import local_path
from tests.integration.batch.inputs import iris_rows, write_input
from tests.integration.conftest import auth

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.wiring import Container


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
    # Locations are named by the tenant's roots, never as the server's paths.
    assert created["input_uri"] == "inbox/iris/day-1.csv" and created["output_uri"] == f"outbox/{created['id']}/"
    job = wait_done(client, keys["acme"], created["id"])
    assert job["status"] == "SUCCEEDED", job
    assert job["progress"] == {"chunks_done": job["progress"]["chunks_total"], "chunks_total": job["progress"]["chunks_total"], "rows_done": 2500, "rows_total": 2500}
    assert job["counts"] == {"rows_in": 2500, "rows_out": 2500, "rows_failed": 0}
    assert job["timings"]["finished_at"] >= job["timings"]["started_at"] >= job["timings"]["created_at"]
    assert (local_path(batch.batch.paths.outbox("acme", job["id"])) / "_SUCCESS").exists()
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
        ({"deployment": "iris", "input_uri": "INBOX/a.csv", "key_columns": ["k" * 128, "x" * 129]}, 400, "key_columns"),
        ({"deployment": "iris", "input_uri": "INBOX/a.csv", "key_columns": [f"k{i}" for i in range(17)]}, 400, "key_columns"),
        ({"deployment": "iris", "input_uri": "INBOX/a.csv", "key_columns": ["id", "reason"]}, 400, "key_columns"),
        ({"deployment": "iris", "input_uri": "INBOX/a.csv", "key_columns": ["input"]}, 400, "key_columns"),
        ({"deployment": "iris", "input_uri": "INBOX/a.csv", "key_columns": ["prediction"]}, 400, "key_columns"),
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


def bad_rows_file(batch: Container, tenant: str, name: str) -> str:
    """2,500 rows of which every 100th has no `sepal_length` (25 failed rows, in several chunks)."""
    rows = iris_rows(2500)
    for i in range(0, 2500, 100):
        rows[i]["sepal_length"] = None
    path = local_path(batch.batch.paths.inbox(tenant)) / "iris" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_input(path, rows).as_uri()


def test_the_first_rows_of_a_jobs_error_files_are_served_to_its_tenant_only(
    client: TestClient, keys: dict[str, str], batch: Container
) -> None:
    uri = bad_rows_file(batch, "acme", "bad.jsonl")
    created = client.post("/api/v1/batch-jobs", json={"deployment": "iris", "input_uri": uri, "key_columns": ["id"]}, headers=auth(keys["acme"])).json()
    job = wait_done(client, keys["acme"], created["id"])
    assert job["status"] == "SUCCEEDED" and job["counts"]["rows_failed"] == 25, job
    r = client.get(f"/api/v1/batch-jobs/{job['id']}/errors", headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["job"] == job["id"] and body["rows_failed"] == 25 and body["truncated"] is True
    assert len(body["rows"]) == 20  # the default
    assert [e["row"] for e in body["rows"]] == list(range(0, 2000, 100))
    assert body["rows"][0] == {"row": 0, "id": "r000000", "reason": "missing value for 'sepal_length'"}
    assert all(f.startswith(f"outbox/{job['id']}/errors/part-") for f in body["files"]) and len(body["files"]) >= 2
    few = client.get(f"/api/v1/batch-jobs/{job['id']}/errors?limit=3", headers=auth(keys["acme"])).json()
    assert [e["row"] for e in few["rows"]] == [0, 100, 200] and few["files"] == body["files"][:1]
    every = client.get(f"/api/v1/batch-jobs/{job['id']}/errors?limit=100", headers=auth(keys["acme"])).json()
    assert len(every["rows"]) == 25 and every["truncated"] is False
    # another tenant's job is not found; a bad limit names the field
    assert client.get(f"/api/v1/batch-jobs/{job['id']}/errors", headers=auth(keys["globex"])).status_code == 404
    for bad in ("0", "101", "x"):
        r = client.get(f"/api/v1/batch-jobs/{job['id']}/errors?limit={bad}", headers=auth(keys["acme"]))
        assert r.status_code == 422 and r.json()["field"] == "limit", r.text
    assert client.get("/api/v1/batch-jobs/nope/errors", headers=auth(keys["acme"])).status_code == 404


def test_a_job_without_failed_rows_has_no_error_rows(client: TestClient, keys: dict[str, str], batch: Container) -> None:
    created = client.post("/api/v1/batch-jobs", json={"deployment": "iris", "input_uri": inbox_file(batch, "acme", "ok.csv", rows=50)}, headers=auth(keys["acme"])).json()
    assert wait_done(client, keys["acme"], created["id"])["status"] == "SUCCEEDED"
    body = client.get(f"/api/v1/batch-jobs/{created['id']}/errors", headers=auth(keys["acme"])).json()
    assert body == {"job": created["id"], "rows_failed": 0, "rows": [], "files": [], "truncated": False}


def test_error_rows_are_read_a_window_at_a_time_never_whole(batch: Container, acme: Principal, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long error file: the first rows come from its first window alone."""
    import dataclasses
    import json

    from sluice.batch.error_files import ERROR_WINDOW

    job = batch.batch.submit(acme, deployment="iris", input_uri=inbox_file(batch, "acme", "long.csv", rows=5), start=False)
    failed = dataclasses.replace(job, rows_failed=100_000)
    monkeypatch.setattr(batch.registry, "get_job", lambda tenant, job_id: failed)
    errors = local_path(job.output_uri) / "errors" / "part-00000.jsonl"
    errors.parent.mkdir(parents=True)
    errors.write_text("".join(json.dumps({"row": i, "reason": "x" * 200}) + "\n" for i in range(100_000)))  # ~22 MB
    files = batch.batch.files
    assert files is not None
    reads: list[tuple[int, int | None]] = []
    real = files.read_blocks
    monkeypatch.setattr(files, "read_blocks", lambda uri, version, start, end=None: reads.append((start, end)) or real(uri, version, start, end))
    out = batch.batch.error_rows(acme, job.id, limit=100)
    assert [r["row"] for r in out["rows"]] == list(range(100)) and out["truncated"] is True
    assert reads == [(0, ERROR_WINDOW)]


# The security review's findings 1 and 9: a location is confined after decoding, and no
# response names a server path. Each of these was admitted, or shown, before.
@pytest.mark.parametrize(
    "spelling",
    [
        "{inbox}%2e%2e/globex/iris/private.csv",
        "{inbox}%2E%2E/globex/iris/private.csv",
        "{inbox}.%2e/globex/iris/private.csv",
        "{inbox}iris/%2e%2e/%2e%2e/globex/iris/private.csv",
        "{inbox}..",
        "{inbox}%2e%2e/%2e%2e/%2e%2e/admin-key",
        "{path}../globex/iris/private.csv",
        "inbox/../globex/iris/private.csv",
    ],
)
def test_an_encoded_climb_out_of_the_inbox_is_refused_and_reads_nothing(
    client: TestClient, keys: dict[str, str], batch: Container, spelling: str
) -> None:
    inbox_file(batch, "globex", "private.csv", rows=5)
    home = batch.settings.home_path
    (home / "admin-key").write_text("sk_not_yours\n")
    inbox = batch.batch.paths.inbox("acme")
    uri = spelling.format(inbox=inbox, path=str(local_path(inbox)) + "/")
    r = client.post("/api/v1/batch-jobs", json={"deployment": "iris", "input_uri": uri, "format": "csv"}, headers=auth(keys["acme"]))
    assert r.status_code in (400, 403) and r.json()["field"] == "input_uri", r.text
    assert str(home) not in r.text and "sk_" not in r.text
    assert batch.registry.list_jobs("acme") == []  # no job was made to read it


def test_a_schedule_or_an_execution_naming_a_location_outside_the_inbox_is_refused(
    client: TestClient, keys: dict[str, str], batch: Container
) -> None:
    inbox = batch.batch.paths.inbox("acme")
    body = {"name": "nightly", "deployment": "iris", "input_uri": inbox + "%2e%2e/globex/iris/dt={date}.csv", "expression": "rate(1 hour)"}
    r = client.post("/api/v1/batch-schedules", json=body, headers=auth(keys["acme"]))
    assert r.status_code == 403 and r.json()["field"] == "input_uri", r.text
    from sluice.domain.errors import Forbidden

    spec = {"tenant": "acme", "deployment": "iris", "input_uri": inbox + "iris/%2e%2e/%2e%2e/globex/iris/private.csv"}
    with pytest.raises(Forbidden):
        batch.batch.create_for_execution(spec, execution="arn:aws:states:eu-west-1:1:execution:m:e")


@pytest.mark.parametrize("given", ["inbox/iris/dt={date}/customers.csv", "inbox/nightly.csv", "inbox/iris/"])
def test_a_schedule_reads_its_input_back_as_it_was_given(client: TestClient, keys: dict[str, str], batch: Container, given: str) -> None:
    """Relative to the inbox, as batch.md writes it: the same text in every answer (created,
    shown, listed, paused, resumed), not the last segment of a path."""
    a = auth(keys["acme"])
    body = {"name": "nightly", "deployment": "iris", "input_uri": given, "expression": "cron(0 2 * * *)"}
    r = client.post("/api/v1/batch-schedules", json=body, headers=a)
    assert r.status_code == 201, r.text
    said = [
        r.json()["input_uri"],
        client.get("/api/v1/batch-schedules/nightly", headers=a).json()["input_uri"],
        client.get("/api/v1/batch-schedules", headers=a).json()[0]["input_uri"],
        client.post("/api/v1/batch-schedules/nightly/pause", headers=a).json()["input_uri"],
        client.post("/api/v1/batch-schedules/nightly/resume", headers=a).json()["input_uri"],
    ]
    assert said == [given] * 5
    assert client.delete("/api/v1/batch-schedules/nightly", headers=a).status_code == 204


def test_a_manifest_listing_an_encoded_climb_fails_its_job_having_read_nothing(
    client: TestClient, keys: dict[str, str], batch: Container
) -> None:
    import json

    inbox_file(batch, "globex", "private.csv", rows=5)
    mine = inbox_file(batch, "acme", "mine.csv", rows=5)
    manifest = local_path(batch.batch.paths.inbox("acme")) / "iris" / "list.json"
    manifest.write_text(json.dumps({"files": [mine, mine.replace("/inbox/acme/iris/mine.csv", "/inbox/acme/%2e%2e/globex/iris/private.csv")]}))
    created = client.post("/api/v1/batch-jobs", json={"deployment": "iris", "input_uri": "inbox/iris/list.json"}, headers=auth(keys["acme"])).json()
    job = wait_done(client, keys["acme"], created["id"])
    assert job["status"] == "FAILED" and job["counts"]["rows_in"] == 0, job
    assert "outside your inbox" in job["error"] and str(batch.settings.home_path) not in job["error"]


def test_a_job_names_its_locations_by_root_in_every_answer_even_its_errors(
    client: TestClient, keys: dict[str, str], batch: Container
) -> None:
    created = client.post("/api/v1/batch-jobs", json={"deployment": "iris", "input_uri": "inbox/iris/missing.csv"}, headers=auth(keys["acme"])).json()
    job = wait_done(client, keys["acme"], created["id"])
    assert job["status"] == "FAILED" and job["input_uri"] == "inbox/iris/missing.csv", job
    assert "inbox/iris/missing.csv" in job["error"]
    home = str(batch.settings.home_path)
    for path in ("/api/v1/batch-jobs", f"/api/v1/batch-jobs/{job['id']}", f"/api/v1/batch-jobs/{job['id']}/errors"):
        assert home not in client.get(path, headers=auth(keys["acme"])).text
