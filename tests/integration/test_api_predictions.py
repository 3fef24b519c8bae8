"""Predictions over the app, simple JSON and Open Inference Protocol v2, with real ONNX models."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from fastapi.testclient import TestClient

from tests.conftest import MODELS
from tests.integration.conftest import app_for, auth

SETOSA = {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}
VIRGINICA = [6.7, 3.0, 5.2, 2.3]


def raw_ort(model: str, rows: list[list[float]]) -> list[object]:
    session = ort.InferenceSession(str(MODELS / model), providers=["CPUExecutionProvider"])
    return session.run(None, {"input": np.asarray(rows, dtype=np.float32)})


def test_simple_json_features(client: TestClient, keys: dict[str, str]) -> None:
    r = client.post("/api/v1/predictions", json={"deployment": "iris", "features": SETOSA, "request_id": "r-1"}, headers=auth(keys["acme_predict"]))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["prediction"] == "setosa"
    assert set(body["probabilities"]) == {"setosa", "versicolor", "virginica"}
    assert body["confidence"] == pytest.approx(max(body["probabilities"].values()))
    assert (body["deployment"], body["model"], body["version"], body["request_id"]) == ("iris", "iris", 1, "r-1")
    assert body["latency_ms"] > 0
    label, probs = raw_ort("iris.onnx", [list(SETOSA.values())])
    assert body["prediction"] == label[0]
    assert body["probabilities"]["setosa"] == pytest.approx(probs[0]["setosa"])


def test_simple_json_rows_and_batch(client: TestClient, keys: dict[str, str]) -> None:
    r = client.post("/api/v1/predictions", json={"deployment": "iris", "inputs": [list(SETOSA.values()), VIRGINICA]}, headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    assert [p["prediction"] for p in r.json()["predictions"]] == ["setosa", "virginica"]
    r = client.post("/api/v1/predictions", json={"deployment": "iris", "batch": [SETOSA], "options": {"return_probabilities": False}}, headers=auth(keys["acme"]))
    (row,) = r.json()["predictions"]
    assert row["prediction"] == "setosa" and "probabilities" not in row and row["confidence"] > 0.5


def test_regressor_gives_a_number(client: TestClient, keys: dict[str, str]) -> None:
    rows = [[0.03, 0.05, 0.06, 0.02, -0.04, -0.03, -0.04, -0.002, 0.02, -0.02]]
    r = client.post("/api/v1/predictions", json={"deployment": "diabetes", "inputs": rows}, headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    (expected,) = raw_ort("diabetes_mlp.onnx", rows)
    assert r.json()["prediction"] == pytest.approx(float(expected.reshape(-1)[0]), rel=1e-5)


def test_v2_infer_matches_onnx_runtime(client: TestClient, keys: dict[str, str]) -> None:
    body = {
        "id": "req-7",
        "inputs": [{"name": "input", "shape": [2, 4], "datatype": "FP32", "data": list(SETOSA.values()) + VIRGINICA}],
    }
    r = client.post("/v2/models/iris/infer", json=body, headers=auth(keys["acme_predict"]))
    assert r.status_code == 200, r.text
    out = r.json()
    assert (out["model_name"], out["model_version"], out["id"]) == ("iris", "1", "req-7")
    assert out["parameters"]["model"] == "iris" and out["parameters"]["latency_ms"] > 0
    tensors = {o["name"]: o for o in out["outputs"]}
    assert tensors["output_label"]["datatype"] == "BYTES"
    assert tensors["output_label"]["data"] == ["setosa", "virginica"]
    probs = tensors["output_probability"]
    assert probs["shape"] == [2, 3] and probs["parameters"]["classes"] == ["setosa", "versicolor", "virginica"]
    _, expected = raw_ort("iris.onnx", [list(SETOSA.values()), VIRGINICA])
    assert probs["data"][3:] == pytest.approx([expected[1][c] for c in ("setosa", "versicolor", "virginica")], rel=1e-6)


def test_v2_requested_outputs_and_pinned_version(client: TestClient, keys: dict[str, str], demo: object) -> None:
    body = {"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": VIRGINICA}], "outputs": [{"name": "output_label"}]}
    r = client.post("/v2/models/iris/versions/1/infer", json=body, headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    assert [o["name"] for o in r.json()["outputs"]] == ["output_label"]
    r = client.post("/v2/models/iris/versions/9/infer", json=body, headers=auth(keys["acme"]))
    assert r.status_code == 404 and r.json()["field"] == "version"


def test_v2_metadata_ready_and_health(client: TestClient, keys: dict[str, str]) -> None:
    assert client.get("/v2/health/live").json() == {"live": True}
    assert client.get("/v2/health/ready").status_code == 200
    assert client.get("/v2").json()["name"] == "sluice"
    meta = client.get("/v2/models/iris", headers=auth(keys["acme"])).json()
    assert meta["name"] == "iris" and meta["versions"] == ["1"] and meta["platform"] == "onnxruntime_onnx"
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}]
    assert client.get("/v2/models/iris/versions/1", headers=auth(keys["acme"])).status_code == 200
    assert client.get("/v2/models/iris/ready", headers=auth(keys["acme"])).json() == {"name": "iris", "ready": True}
    assert client.get("/healthz").status_code == 200 and client.get("/readyz").status_code == 200


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        ("/api/v1/predictions", {"deployment": "iris", "features": {**SETOSA, "petal_width": None}}, 400, "inputs.input"),
        ("/api/v1/predictions", {"deployment": "iris", "features": {"sepal_length": 1}}, 400, "features.sepal_width"),
        ("/api/v1/predictions", {"deployment": "iris", "inputs": [[1, 2, 3]]}, 400, "inputs.input.shape"),
        ("/api/v1/predictions", {"deployment": "iris", "inputs": [[1, 2, 3, float("nan")]]}, 400, "inputs.input"),
        ("/api/v1/predictions", {"deployment": "nope", "inputs": [[1, 2, 3, 4]]}, 404, "deployment"),
        ("/api/v1/predictions", {"inputs": [[1, 2, 3, 4]]}, 422, "deployment"),
        ("/api/v1/predictions", {"deployment": "iris", "inputs": [[1, 2, 3, 4]], "colour": "red"}, 422, "colour"),
        ("/v2/models/iris/infer", {"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP64", "data": [1, 2, 3, 4]}]}, 400, "inputs.input.datatype"),
        ("/v2/models/iris/infer", {"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3]}]}, 400, "inputs.input.data"),
        ("/v2/models/iris/infer", {"inputs": [{"name": "other", "shape": [1], "datatype": "FP32", "data": [1]}]}, 400, "inputs.other"),
        ("/v2/models/iris/infer", {"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}], "outputs": [{"name": "x"}]}, 400, "outputs.x"),
        ("/v2/models/iris/infer", {"inputs": "nope"}, 422, "inputs"),
        ("/v2/models/iris/versions/x/infer", {"inputs": []}, 422, "version"),
    ],
)
def test_bad_requests_get_a_4xx_naming_the_field(client: TestClient, keys: dict[str, str], path: str, body: dict, status: int, field: str) -> None:
    import json

    r = client.post(path, content=json.dumps(body, allow_nan=True), headers={**auth(keys["acme"]), "content-type": "application/json"})
    assert r.status_code == status, r.text
    payload = r.json()
    assert payload["field"] == field
    assert payload["error"] and payload["code"]


def test_malformed_json_is_422_not_500(client: TestClient, keys: dict[str, str]) -> None:
    r = client.post("/api/v1/predictions", content=b"{not json", headers={**auth(keys["acme"]), "content-type": "application/json"})
    assert r.status_code == 422 and r.json()["code"] == "invalid_request"


def test_oversized_requests_get_413_pointing_to_batch(client: TestClient, keys: dict[str, str], demo: object) -> None:
    big = b'{"deployment": "iris", "inputs": [' + b",".join([b"[1,2,3,4]"] * 700_000) + b"]}"
    r = client.post("/api/v1/predictions", content=big, headers={**auth(keys["acme"]), "content-type": "application/json"})
    assert r.status_code == 413 and "batch" in r.json()["error"]


def test_auth_is_required_and_checked(client: TestClient, keys: dict[str, str]) -> None:
    body = {"deployment": "iris", "features": SETOSA}
    r = client.post("/api/v1/predictions", json=body)
    assert r.status_code == 401 and r.json()["code"] == "unauthenticated"
    assert client.post("/api/v1/predictions", json=body, headers=auth("sk_bogus_key")).status_code == 401
    assert client.post("/api/v1/predictions", json=body, headers={"x-api-key": keys["acme"]}).status_code == 200
    forged = keys["acme"][:-4] + "AAAA"
    assert client.post("/api/v1/predictions", json=body, headers=auth(forged)).status_code == 401


def test_predict_scope_cannot_manage(client: TestClient, keys: dict[str, str]) -> None:
    r = client.get("/api/v1/models", headers=auth(keys["acme_predict"]))
    assert r.status_code == 403 and r.json()["field"] == "scope"


def test_openapi_documents_both_apis(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert "/api/v1/predictions" in paths and "/v2/models/{name}/infer" in paths
    assert client.get("/docs").status_code == 200


def test_the_docs_page_runs_only_pinned_checked_code_on_the_consoles_origin(client: TestClient) -> None:
    """The console keeps its key in the tab's session storage: a script this origin runs could
    read it. /docs loads one Swagger UI release, bytes checked, under a CSP; no ReDoc page."""
    import re

    page = client.get("/docs")
    policy = page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy and "'unsafe-eval'" not in policy
    scripts = re.findall(r"<script([^>]*)>", page.text)
    external = [s for s in scripts if "src=" in s]
    assert external and all("integrity=\"sha384-" in s and "@5." in s for s in external)  # an exact release
    script_src = next(d for d in policy.split(";") if d.strip().startswith("script-src")).split()[1:]
    assert all(src.startswith("'sha256-") or src.endswith("/swagger-ui-bundle.js") for src in script_src)
    assert client.get("/redoc").status_code in (401, 404)


@pytest.mark.parametrize("rows", [1, 2, 3, 5])
def test_outputs_that_are_not_one_value_per_row_are_given_whole_to_every_row(client: TestClient, keys: dict[str, str], demo: Any, acme: Any, rows: int) -> None:
    """A model answering beside its rows a constant ([3]) and a summary (a scalar): each row
    of a plain answer holds its own `y` and the whole `bias` and `mean`, however many rows (the
    constant was split across three rows, and a 500 at one or two), as over v2 the tensors are."""
    from tests.models import BIAS, with_constants_model

    demo.models.push(acme, "constants", with_constants_model())
    demo.deployments.create(acme, "constants", {"kind": "single", "model": "constants", "version": 1})
    x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    r = client.post("/api/v1/predictions", json={"deployment": "constants", "batch": x.tolist()}, headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    answers = [p["prediction"] for p in r.json()["predictions"]]
    assert len(answers) == rows
    for i, answer in enumerate(answers):
        assert answer["y"] == pytest.approx((x[i] + BIAS).tolist())
        assert answer["bias"] == BIAS.tolist() and answer["mean"] == pytest.approx(float(x.mean()))


def test_a_model_that_fails_to_load_leaves_nothing_behind_and_loads_once_it_can(demo: Any, keys: dict[str, str], acme: Any) -> None:
    """A session whose load failed (its artifact no longer what was pushed: a 502) leaves no
    entry or lock of its own in the session cache; the next request loads it afresh, and
    answers once the artifact is whole again."""
    good = (MODELS / "iris.onnx").read_bytes()
    version = demo.models.push(acme, "flaky", good)
    demo.deployments.create(acme, "flaky", {"kind": "single", "model": "flaky", "version": version.version})
    stored = [p for p in (demo.settings.home_path / "artifacts").rglob("*.onnx") if p.read_bytes() == good]
    cache = demo.runtimes["onnx"].cache
    client = TestClient(app_for(demo))
    body = {"deployment": "flaky", "features": SETOSA}
    for path in stored:
        path.write_bytes(b"not a model")
    for _ in range(2):
        r = client.post("/api/v1/predictions", json=body, headers=auth(keys["acme"]))
        assert r.status_code == 502, r.text
        assert cache._loading == {}, cache._loading
    for path in stored:
        path.write_bytes(good)
    r = client.post("/api/v1/predictions", json=body, headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    assert cache._loading == {}
