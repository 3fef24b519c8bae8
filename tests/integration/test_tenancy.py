"""No tenant can list, read, call or change another tenant's objects, on any route.

The route table below must cover every route of the app: a new route without a tenancy
case fails `test_every_route_is_covered`.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from sluice.api.app import create_app
from sluice.wiring import Container
from tests.integration.conftest import auth

INFER = {"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
PUBLIC = {"/healthz", "/readyz", "/v2/health/live", "/v2/health/ready", "/v2"}

# (method, path template, body): each touches acme's objects by name.
CASES = [
    ("POST", "/api/v1/predictions", {"deployment": "iris", "inputs": [[1, 2, 3, 4]]}),
    ("GET", "/v2/models/{name}", None),
    ("GET", "/v2/models/{name}/versions/{version}", None),
    ("GET", "/v2/models/{name}/ready", None),
    ("GET", "/v2/models/{name}/versions/{version}/ready", None),
    ("POST", "/v2/models/{name}/infer", INFER),
    ("POST", "/v2/models/{name}/versions/{version}/infer", INFER),
    ("GET", "/v2/models/{name}/config", None),
    ("GET", "/v2/models/{name}/versions/{version}/config", None),
    ("GET", "/v2/models/{name}/stats", None),
    ("GET", "/v2/models/{name}/versions/{version}/stats", None),
    ("POST", "/v2/repository/models/{name}/load", None),
    ("POST", "/v2/repository/models/{name}/unload", None),
    ("GET", "/api/v1/models/{name}", None),
    ("DELETE", "/api/v1/models/{name}", None),
    ("GET", "/api/v1/models/{name}/versions", None),
    ("GET", "/api/v1/models/{name}/versions/{version}", None),
    ("DELETE", "/api/v1/models/{name}/versions/{version}", None),
    ("POST", "/api/v1/models/{name}/versions/{version}/optimize", {"data_uri": "file:///rows.parquet"}),
    ("GET", "/api/v1/optimize-jobs/{job_id}", None),
    ("GET", "/api/v1/deployments/{name}", None),
    ("PUT", "/api/v1/deployments/{name}", {"model": "iris", "version": 1}),
    ("DELETE", "/api/v1/deployments/{name}", None),
    ("GET", "/api/v1/deployments/{name}/history", None),
    ("GET", "/api/v1/deployments/{name}/stats", None),
    ("GET", "/api/v1/deployments/{name}/cost", None),
    ("POST", "/api/v1/deployments/{name}/promote", {"mirror": "m"}),
    ("POST", "/api/v1/deployments/{name}/feedback", {"request_id": "r", "reward": 1}),
    ("PUT", "/api/v1/deployments/{name}/baseline", {"inputs": [[5.1, 3.5, 1.4, 0.2]]}),
    ("GET", "/api/v1/deployments/{name}/baseline", None),
    ("GET", "/api/v1/deployments/{name}/monitor", None),
    ("GET", "/api/v1/deployments/{name}/monitor/history", None),
    ("POST", "/api/v1/deployments/{name}/follow", {"registry": "models:/iris@champion", "rollout": "10,100 every 1m gate error_rate<=0.01", "tracking_uri": "http://mlflow.example.com"}),
    ("GET", "/api/v1/deployments/{name}/follow", None),
    ("DELETE", "/api/v1/deployments/{name}/follow", None),
    ("POST", "/api/v1/deployments/{name}/labels", {"labels": [{"request_id": "r", "label": "setosa"}]}),
    ("POST", "/api/v1/deployments/{name}/rollout", {"to": "iris:1", "gate": "error_rate<=0.01"}),
    ("GET", "/api/v1/deployments/{name}/rollout", None),
    ("POST", "/api/v1/deployments/{name}/rollout/pause", None),
    ("POST", "/api/v1/deployments/{name}/rollout/resume", None),
    ("POST", "/api/v1/deployments/{name}/rollout/abort", None),
    ("POST", "/api/v1/deployments/{name}/replay", {"since": "1h", "against": "iris:1"}),
    ("POST", "/api/v1/deployments/{name}/endpoint", {"instance_type": "ml.g5.xlarge"}),
    ("GET", "/api/v1/deployments/{name}/endpoint", None),
    ("DELETE", "/api/v1/deployments/{name}/endpoint", None),
    ("PUT", "/api/v1/deployments/{name}/scale", {"min_instances": 1, "max_instances": 2}),
    ("DELETE", "/api/v1/keys/{key_id}", None),
    ("GET", "/api/v1/batch-jobs/{job_id}", None),
    ("POST", "/api/v1/batch-jobs/{job_id}/cancel", None),
    ("GET", "/api/v1/batch-jobs/{job_id}/errors", None),
    ("GET", "/api/v1/results/{result_id}", None),
    ("POST", "/api/v1/uploads", {"deployment": "iris", "size": 10}),
    ("GET", "/api/v1/batch-schedules/{name}", None),
    ("DELETE", "/api/v1/batch-schedules/{name}", None),
    ("POST", "/api/v1/batch-schedules/{name}/pause", None),
    ("POST", "/api/v1/batch-schedules/{name}/resume", None),
]
# Routes that only ever act inside the caller's tenant (lists and creates).
OWN_TENANT = {
    ("GET", "/api/v1/models"),
    ("POST", "/api/v1/models"),
    ("POST", "/api/v1/models/{name}/versions"),
    ("GET", "/api/v1/deployments"),
    ("POST", "/api/v1/deployments"),
    ("GET", "/api/v1/keys"),
    ("POST", "/api/v1/keys"),
    ("GET", "/api/v1/batch-jobs"),
    ("POST", "/api/v1/batch-jobs"),
    ("GET", "/api/v1/optimize-jobs"),  # tests/integration/test_optimize_jobs.py
    ("GET", "/api/v1/batch-schedules"),
    ("GET", "/api/v1/follows"),  # tests/integration/test_follows_api.py
    ("POST", "/api/v1/batch-schedules"),
    ("GET", "/api/v1/session"),  # the caller's own key: tests/integration/test_console.py
    ("GET", "/metrics"),  # the caller's series only: tests/integration/test_metrics.py
    # No key: a form signed for one upload writes that upload's body alone, and an upload id
    # of another tenant is not found where predictions name it (tests/integration/test_uploads.py).
    ("POST", "/api/v1/uploads/{upload_id}/body"),
    ("GET", "/v2/models/stats"),
    ("POST", "/v2/repository/index"),
}


def test_every_route_is_covered() -> None:
    paths = create_app().openapi()["paths"]
    routes = {(method.upper(), path) for path, ops in paths.items() for method in ops}
    assert len(routes) > 20
    covered = {(m, p) for m, p, _ in CASES} | OWN_TENANT | {("GET", p) for p in PUBLIC}
    assert routes - covered == set()


@pytest.mark.parametrize(("method", "template", "body"), CASES, ids=[f"{m} {p}" for m, p, _ in CASES])
def test_another_tenant_gets_not_found(
    client: TestClient, keys: dict[str, str], demo: object, method: str, template: str, body: dict | None
) -> None:
    acme_key_id = keys["acme"].split("_")[1]
    acme_schedule(demo)
    path = template.format(
        name="iris", version=1, key_id=acme_key_id, job_id=acme_jobs(demo), result_id=acme_result(demo)
    )
    r = client.request(method, path, json=body, headers=auth(keys["globex"]))
    assert r.status_code == 404, (path, r.text)
    # And acme's objects are untouched: acme still predicts and reads them.
    check = client.post("/api/v1/predictions", json={"deployment": "iris", "inputs": [[1, 2, 3, 4]]}, headers=auth(keys["acme"]))
    assert check.status_code == 200
    assert client.get("/api/v1/keys", headers=auth(keys["acme"])).json()[0]["revoked_at"] is None
    assert client.get("/api/v1/batch-jobs", headers=auth(keys["acme"])).json()[0]["status"] == "PENDING"
    assert client.get("/api/v1/batch-schedules/iris", headers=auth(keys["acme"])).json()["state"] == "ENABLED"
    assert client.get("/api/v1/optimize-jobs/job-acme", headers=auth(keys["acme"])).json()["status"] == "RUNNING"


def acme_result(container: Any) -> str:
    """An asynchronous result of acme's, answered (its record and its output)."""
    import json

    from sluice.storage.results import RECORD, results_for

    store, rid = results_for(container.store), "a" * 32
    output = store.put("acme", rid, "output", b'{"outputs": []}', content_type="application/json")
    record = {"id": rid, "tenant": "acme", "expires_at": 9e18, "output": output, "failure": None}
    store.put("acme", rid, RECORD, json.dumps(record).encode())
    return rid


def acme_schedule(container: Any) -> None:
    """A batch schedule of acme's named like its deployment (nothing runs it here)."""
    from sluice.domain.errors import NotFound
    from sluice.domain.schedules import Schedule

    try:
        container.registry.get_schedule("acme", "iris")
    except NotFound:
        container.registry.create_schedule(Schedule("acme", "iris", "iris", "file:///in-{date}.csv", "rate(1 day)"))


def acme_batch_job(container: Any) -> str:
    """A batch job of acme's (a record only: nothing runs it)."""
    from sluice.domain.errors import NotFound
    from sluice.domain.jobs import BatchJob

    try:
        return container.registry.get_job("acme", "job-acme").id
    except NotFound:
        job = BatchJob(id="job-acme", tenant="acme", deployment="iris", input_uri="file:///in.csv",
                       output_uri="file:///out/", format="csv", output_format="csv")  # fmt: skip
        return container.registry.create_job(job).id


def acme_jobs(container: Any) -> str:
    """A batch job and an optimize job of acme's under one id, the `{job_id}` of both routes
    (records only: nothing runs them)."""
    import time

    from sluice.domain.errors import NotFound
    from sluice.domain.optimize_jobs import OptimizeJob

    job_id = acme_batch_job(container)
    try:
        container.registry.get_optimize_job("acme", job_id)
    except NotFound:
        container.registry.create_optimize_job(OptimizeJob(job_id, "acme", "iris", 1, heartbeat_at=time.time()))
    return job_id


def test_lists_show_only_the_callers_tenant(client: TestClient, keys: dict[str, str]) -> None:
    g = auth(keys["globex"])
    assert client.get("/api/v1/models", headers=g).json() == []
    assert client.get("/api/v1/deployments", headers=g).json() == []
    assert {k["tenant"] for k in client.get("/api/v1/keys", headers=g).json()} == {"globex"}
    assert client.get("/v2/models/stats", headers=g).json() == {"model_stats": []}
    assert client.post("/v2/repository/index", headers=g).json() == []
    assert [e["name"] for e in client.post("/v2/repository/index", headers=auth(keys["acme"])).json()] == ["diabetes", "iris"]


def test_same_names_in_two_tenants_are_different_objects(client: TestClient, keys: dict[str, str]) -> None:
    from tests.conftest import MODELS

    g = auth(keys["globex"])
    r = client.post("/api/v1/models/iris/versions", content=(MODELS / "iris_forest.onnx").read_bytes(), headers={**g, "content-type": "application/octet-stream"})
    assert r.status_code == 201 and r.json()["version"] == 1
    assert client.post("/api/v1/deployments", json={"name": "iris", "model": "iris"}, headers=g).status_code == 201
    mine = client.get("/api/v1/models/iris/versions/1", headers=g).json()["sha256"]
    theirs = client.get("/api/v1/models/iris/versions/1", headers=auth(keys["acme"])).json()["sha256"]
    assert mine != theirs


def test_push_by_uri_cannot_read_another_tenants_artifact(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    shown = client.get("/api/v1/models/iris/versions/1", headers=auth(keys["acme"])).json()["artifact_uri"]
    assert shown.startswith("store/sha256/")  # named by the tenant's root, not by the server's path
    r = client.post("/api/v1/models/stolen/versions", json={"artifact_uri": shown}, headers=auth(keys["globex"]))
    assert r.status_code == 404 and r.json()["field"] == "artifact_uri"  # globex's own store/…: nothing there
    acme_uri = demo.registry.get_version("acme", "iris", 1).artifact_uri  # the server's path, guessed
    for uri in (acme_uri, acme_uri.replace("/tenants/acme/", "/tenants/globex/%2e%2e/acme/")):
        r = client.post("/api/v1/models/stolen/versions", json={"artifact_uri": uri}, headers=auth(keys["globex"]))
        assert r.status_code in (400, 403) and r.json()["field"] == "artifact_uri", r.text
