"""`/metrics` through the ASGI app: what Telemetry reports, as Prometheus series, for the
caller's tenant alone and only with the admin scope."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from sluice.api.app import create_app
from sluice.metrics import PrometheusMetrics
from sluice.settings import Settings
from sluice.wiring import Container
from tests.conftest import EVENTS, MODELS, REPO
from tests.integration.batch.inputs import iris_rows, write_input
from tests.integration.batch.jobs import run_job
from tests.integration.conftest import auth

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal

SETOSA = {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}


@pytest.fixture
def metered(demo: Container, globex: Principal) -> Container:
    """The demo container with Prometheus on; globex has a deployment of its own."""
    demo.telemetry.sink = PrometheusMetrics()  # type: ignore[union-attr]
    version = demo.models.push(globex, "globex-fraud", (MODELS / "iris.onnx").read_bytes())
    demo.deployments.create(globex, "globex-fraud", {"kind": "single", "model": "globex-fraud", "version": version.version})
    return demo


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels`."""
    return sum(v for (n, ls), v in samples(text).items() if n == name and set(labels.items()) <= ls)


def test_predictions_show_as_the_callers_series(metered: Container, keys: dict[str, str]) -> None:
    client = TestClient(create_app(metered))
    for _ in range(3):
        r = client.post("/api/v1/predictions", json={"deployment": "iris", "features": SETOSA}, headers=auth(keys["acme"]))
        assert r.status_code == 200, r.text
    r = client.post("/api/v1/predictions", json={"deployment": "iris", "batch": [SETOSA, SETOSA]}, headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    r = client.post("/api/v1/predictions", json={"deployment": "globex-fraud", "features": SETOSA}, headers=auth(keys["globex"]))
    assert r.status_code == 200, r.text

    r = client.get("/metrics", headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = r.text
    series = {"tenant": "acme", "deployment": "iris", "model": "iris", "version": "1", "variant": ""}
    assert value(text, "ml_inference_requests_total", **series) == 4
    assert value(text, "ml_inference_latency_ms_count", **series) == 4
    assert value(text, "ml_inference_latency_ms_bucket", le="+Inf", **series) == 4
    assert value(text, "ml_inference_latency_ms_sum", **series) > 0
    assert value(text, "ml_inference_rows_scored_total", source="online", **series) == 5
    # The ONNX session cache: every prediction either found the session loaded or loaded it.
    found = value(text, "ml_inference_model_cache_hits_total", tenant="acme", deployment="iris")
    loaded = value(text, "ml_inference_model_cache_misses_total", tenant="acme", deployment="iris")
    assert found + loaded == 4 and loaded <= 1
    # Nothing of globex: not its tenant, not its deployment's name.
    assert "globex" not in text
    assert {dict(ls)["tenant"] for (_, ls) in samples(text)} == {"acme"}

    theirs = client.get("/metrics", headers=auth(keys["globex"])).text
    assert value(theirs, "ml_inference_requests_total", tenant="globex", deployment="globex-fraud") == 1
    assert "acme" not in theirs and 'deployment="iris"' not in theirs


def test_a_prediction_counts_its_own_model_cache_lookups_not_another_tenants(tmp_path: Path, acme: Principal, globex: Principal) -> None:
    """Sessions are counted with the prediction that looked them up: what globex's batch job
    loads and finds in between never shows in acme's series."""
    from sluice.demo import install_demo

    settings = Settings(
        mode="local", home=tmp_path / "home", registry="", store="", deployment_cache_ttl_s=0, batch_chunk_rows=700,
        batch_chunk_bytes=64 * 1024, batch_infer_rows=100,
    )  # fmt: skip
    container = Container.from_settings(settings)
    container.telemetry.sink = PrometheusMetrics()  # type: ignore[union-attr]
    install_demo(container, acme, MODELS)
    version = container.models.push(globex, "gx", (MODELS / "iris_forest.onnx").read_bytes())
    container.deployments.create(globex, "gx", {"kind": "single", "model": "gx", "version": version.version})
    _, key = container.keys.create("acme", ["admin", "predict"])
    client = TestClient(create_app(container))

    def acmes() -> tuple[float, float]:
        text = client.get("/metrics", headers=auth(key)).text
        return tuple(value(text, f"ml_inference_model_cache_{kind}_total", tenant="acme", deployment="iris") for kind in ("hits", "misses"))  # type: ignore[return-value]

    def predict() -> None:
        r = client.post("/api/v1/predictions", json={"deployment": "iris", "features": SETOSA}, headers=auth(key))
        assert r.status_code == 200, r.text

    predict()
    predict()
    assert acmes() == (1, 1)  # loaded by the first, found by the second
    job = run_job(container, globex, write_input(tmp_path / "in.jsonl", iris_rows(2000)), deployment="gx")
    assert job.status == "SUCCEEDED", job.error
    predict()
    assert acmes() == (2, 1)  # acme's one prediction: one session found


def test_failures_are_counted_by_status_and_code(metered: Container, keys: dict[str, str], acme: Principal) -> None:
    version = metered.models.push(acme, "broken", (MODELS / "iris.onnx").read_bytes())
    metered.deployments.create(acme, "broken", {"kind": "single", "model": "broken", "version": version.version})
    for stored in (metered.settings.home_path / "artifacts").rglob("*.onnx"):
        if stored.read_bytes() == (MODELS / "iris.onnx").read_bytes():
            stored.write_bytes(b"not a model")  # the checksum no longer matches: a 502
    client = TestClient(create_app(metered))
    r = client.post("/api/v1/predictions", json={"deployment": "broken", "features": SETOSA}, headers=auth(keys["acme"]))
    assert r.status_code == 502, r.text
    text = client.get("/metrics", headers=auth(keys["acme"])).text
    assert value(text, "ml_inference_errors_total", tenant="acme", deployment="broken", status="502", code=r.json()["code"]) == 1
    assert value(text, "ml_inference_requests_total", tenant="acme", deployment="broken") == 1
    assert value(text, "ml_inference_latency_ms_count", deployment="broken") == 0  # answered predictions only


def test_metrics_need_an_admin_key(metered: Container, keys: dict[str, str]) -> None:
    client = TestClient(create_app(metered))
    assert client.get("/metrics").status_code == 401
    refused = client.get("/metrics", headers=auth(keys["acme_predict"]))
    assert refused.status_code == 403 and "admin" in refused.json()["error"]


def test_without_the_local_service_there_is_no_metrics_page(demo: Container, keys: dict[str, str]) -> None:
    assert demo.telemetry is not None and demo.telemetry.sink is None
    r = TestClient(create_app(demo)).get("/metrics", headers=auth(keys["acme"]))
    assert r.status_code == 404 and "EMF" in r.json()["error"]


def test_batch_chunks_are_timed_and_their_rows_counted(tmp_path: Path, acme: Principal) -> None:
    from sluice.demo import install_demo

    settings = Settings(
        mode="local", home=tmp_path / "home", deployment_cache_ttl_s=0, batch_chunk_rows=700,
        batch_chunk_bytes=64 * 1024, batch_infer_rows=512,
    )  # fmt: skip
    container = Container.from_settings(settings)
    container.telemetry.sink = sink = PrometheusMetrics()  # type: ignore[union-attr]
    install_demo(container, acme, MODELS)
    job = run_job(container, acme, write_input(tmp_path / "in.jsonl", iris_rows(2000)), deployment="iris")
    assert job.status == "SUCCEEDED", job.error
    text = sink.exposition("acme").decode()
    assert value(text, "ml_inference_batch_duration_s_count", tenant="acme", deployment="iris") == job.chunks_total > 1
    assert value(text, "ml_inference_rows_scored_total", tenant="acme", deployment="iris", source="batch") == 2000
    # A chunk's calls are not requests.
    assert value(text, "ml_inference_requests_total", tenant="acme") == 0
    assert sink.exposition("globex").decode().count("tenant=") == 0


def test_the_api_lambda_never_imports_prometheus_client(tmp_path: Path) -> None:
    # A stand-in client on the path that fails if imported, and the multiprocess folder set as
    # if a stray one were: the Lambda still predicts (EMF) without ever loading it.
    (tmp_path / "prometheus_client").mkdir()
    (tmp_path / "prometheus_client" / "__init__.py").write_text("raise ImportError('prometheus_client in the API Lambda')\n")
    script = f"""
import importlib.util, json, pathlib, sys
assert importlib.util.find_spec("prometheus_client") is not None
import sluice.handlers.api as api
from sluice.demo import install_demo
from sluice.domain import Principal
from sluice.settings import Settings
from sluice.wiring import Container
from tests.support import LambdaContext
container = Container.from_settings(Settings(mode="local", home={str(tmp_path / "home")!r}))
install_demo(container, Principal("acme", frozenset({{"admin", "predict"}}), "t"), pathlib.Path({str(MODELS)!r}))
api.app.state.container = container
event = json.loads(open({str(EVENTS / "api_rest_predict.json")!r}).read())
response = api.handler(event, LambdaContext())
assert response["statusCode"] == 200, response
assert container.telemetry.sink is None
assert "prometheus_client" not in sys.modules, "prometheus_client was imported"
print("ok")
"""
    env = {
        "PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "eu-west-1", "SLUICE_LOG_LEVEL": "WARNING",
        "AWS_LAMBDA_FUNCTION_NAME": "sluice-api", "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "SLUICE_MODE": "local",
        "SLUICE_HOME": str(tmp_path / "home"),
        "PYTHONPATH": f"{tmp_path}:{REPO / 'functions'}:{REPO}",
    }  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]


def test_a_variant_named_all_keeps_its_own_quality_series() -> None:
    """Every variant together is `variant=""`: a split's variant may be named `all`, and its
    accuracy must not read as (or overwrite) the deployment's."""
    quality = {"shop": {"accuracy": 0.5, "variants": {"all": {"accuracy": 0.9}, "b": {"accuracy": 0.1}}}}
    text = PrometheusMetrics().exposition("acme", quality=quality).decode()
    found = {
        s.labels["variant"]: s.value
        for family in text_string_to_metric_families(text) if family.name == "ml_inference_model_quality"
        for s in family.samples if s.labels["metric"] == "accuracy"
    }  # fmt: skip
    assert found == {"": 0.5, "all": 0.9, "b": 0.1}
