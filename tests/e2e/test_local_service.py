"""`sluice serve --demo` as a user runs it: a real process, real HTTP, two workers, and a
standard Open Inference Protocol client (tritonclient) talking to the v2 endpoints."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import httpx
import numpy as np
import pytest

from tests.conftest import MODELS
from tests.e2e.conftest import running_sluice

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

SETOSA = {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    home: Path = tmp_path_factory.mktemp("home")
    with running_sluice(home, dict(os.environ), "--demo", "--workers", "2") as (port, key):
        yield f"http://127.0.0.1:{port}", key


def test_simple_json_over_http(service: tuple[str, str]) -> None:
    base, key = service
    r = httpx.post(f"{base}/api/v1/predictions", json={"deployment": "iris", "features": SETOSA}, headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["prediction"] == "setosa" and body["model"] == "iris" and body["version"] >= 1 and body["latency_ms"] > 0
    assert r.headers["x-request-id"] == body["request_id"]


def test_open_inference_protocol_client(service: tuple[str, str]) -> None:
    import tritonclient.http as httpclient

    base, key = service
    client = httpclient.InferenceServerClient(url=base.removeprefix("http://"))
    headers = {"Authorization": f"Bearer {key}"}
    assert client.is_server_live()
    assert client.is_model_ready("diabetes", headers=headers)
    meta = client.get_model_metadata("diabetes", headers=headers)
    assert meta["inputs"][0]["shape"] == [-1, 10]
    rows = np.random.default_rng(0).normal(0, 0.05, size=(3, 10)).astype(np.float32)
    tensor = httpclient.InferInput("input", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows, binary_data=False)
    wanted = httpclient.InferRequestedOutput("variable", binary_data=False)
    result = client.infer("diabetes", [tensor], outputs=[wanted], headers=headers)
    import onnxruntime as ort

    (expected,) = ort.InferenceSession(str(MODELS / "diabetes_mlp.onnx")).run(None, {"input": rows})
    np.testing.assert_allclose(result.as_numpy("variable"), expected, rtol=1e-5)


def test_push_point_and_switch_with_no_restart(service: tuple[str, str]) -> None:
    base, key = service
    h = {"Authorization": f"Bearer {key}"}
    pushed = httpx.post(
        f"{base}/api/v1/models/iris/versions",
        content=(MODELS / "iris_forest.onnx").read_bytes(),
        headers={**h, "content-type": "application/octet-stream"},
    )
    assert pushed.status_code == 201, pushed.text
    version = pushed.json()["version"]
    r = httpx.put(f"{base}/api/v1/deployments/iris", json={"model": "iris", "version": version}, headers=h)
    assert r.status_code == 200
    # Each worker trusts what it read for at most the deployment cache TTL (1 s by default).
    deadline = time.monotonic() + 10
    seen: set[int] = set()
    while time.monotonic() < deadline:
        seen = {
            httpx.post(f"{base}/api/v1/predictions", json={"deployment": "iris", "features": SETOSA}, headers=h).json()["version"]
            for _ in range(10)
        }
        if seen == {version}:
            break
        time.sleep(0.2)
    assert seen == {version}


def test_errors_over_http_are_json(service: tuple[str, str]) -> None:
    base, key = service
    r = httpx.post(f"{base}/api/v1/predictions", json={"deployment": "iris", "features": {"x": 1}}, headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 400 and r.json()["field"].startswith("features.")
    assert httpx.get(f"{base}/api/v1/models").status_code == 401
    assert httpx.get(f"{base}/openapi.json").json()["info"]["title"] == "sluice"
