"""`sluice serve --demo` as a user runs it: a real process, real HTTP, two workers, and a
standard Open Inference Protocol client (tritonclient) talking to the v2 endpoints."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import pytest

from tests.conftest import MODELS
from tests.support import http

if TYPE_CHECKING:
    from pathlib import Path

SETOSA = {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}


@pytest.fixture
def service(demo_serve: tuple[int, str, Path]) -> tuple[str, str]:
    port, key, _ = demo_serve
    return f"http://127.0.0.1:{port}", key


def test_simple_json_over_http(service: tuple[str, str]) -> None:
    base, key = service
    r = http("POST", f"{base}/api/v1/predictions", json={"deployment": "iris", "features": SETOSA}, headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["prediction"] == "setosa" and body["model"] == "iris" and body["version"] >= 1 and body["latency_ms"] > 0
    assert r.headers["x-request-id"] == body["request_id"]


def _diabetes_rows() -> np.ndarray:
    return np.random.default_rng(0).normal(0, 0.05, size=(3, 10)).astype(np.float32)


def _diabetes_expected(rows: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    (expected,) = ort.InferenceSession(str(MODELS / "diabetes_mlp.onnx")).run(None, {"input": rows})
    return expected


def test_open_inference_protocol_client(service: tuple[str, str]) -> None:
    """tritonclient as it comes: binary tensors in, every output binary."""
    import tritonclient.http as httpclient

    base, key = service
    client = httpclient.InferenceServerClient(url=base.removeprefix("http://"))
    headers = {"Authorization": f"Bearer {key}"}
    assert client.is_server_live()
    assert client.is_model_ready("diabetes", headers=headers)
    meta = client.get_model_metadata("diabetes", headers=headers)
    assert meta["inputs"][0]["shape"] == [-1, 10]
    rows = _diabetes_rows()
    tensor = httpclient.InferInput("input", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    result = client.infer("diabetes", [tensor], headers=headers)
    assert result.get_output("variable")["parameters"]["binary_data_size"] == rows.shape[0] * 4
    np.testing.assert_allclose(result.as_numpy("variable"), _diabetes_expected(rows), rtol=1e-5)
    # A classifier: requested outputs in binary, its classes beside them.
    iris = httpclient.InferInput("input", [1, 4], "FP32")
    iris.set_data_from_numpy(np.array([[6.7, 3.0, 5.2, 2.3]], dtype=np.float32))
    wanted = [httpclient.InferRequestedOutput("output_label"), httpclient.InferRequestedOutput("output_probability")]
    result = client.infer("iris", [iris], outputs=wanted, model_version="1", headers=headers)
    assert result.as_numpy("output_label").tolist() == [b"virginica"]
    assert result.get_output("output_probability")["parameters"]["classes"] == ["setosa", "versicolor", "virginica"]
    assert int(result.as_numpy("output_probability").argmax()) == 2


def test_open_inference_protocol_client_json_tensors(service: tuple[str, str]) -> None:
    import tritonclient.http as httpclient

    base, key = service
    client = httpclient.InferenceServerClient(url=base.removeprefix("http://"))
    rows = _diabetes_rows()
    tensor = httpclient.InferInput("input", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows, binary_data=False)
    wanted = httpclient.InferRequestedOutput("variable", binary_data=False)
    result = client.infer("diabetes", [tensor], outputs=[wanted], headers={"Authorization": f"Bearer {key}"})
    assert "data" in result.get_output("variable")
    np.testing.assert_allclose(result.as_numpy("variable"), _diabetes_expected(rows), rtol=1e-5)


def test_asyncio_client_with_bytes_tensors(service: tuple[str, str]) -> None:
    """tritonclient.http.aio, defaults on: a BYTES model (pushed over HTTP) and FP32 alike."""
    import asyncio
    import sys

    import tritonclient.http.aio as aioclient

    base, key = service
    h = {"Authorization": f"Bearer {key}"}
    sys.path.insert(0, str(MODELS.parent / "scripts"))
    try:
        from make_demo_models import words
    finally:
        sys.path.pop(0)
    pushed = http("POST", f"{base}/api/v1/models/words/versions", content=words(), headers={**h, "content-type": "application/octet-stream"})
    assert pushed.status_code == 201, pushed.text
    made = http("POST", f"{base}/api/v1/deployments", json={"name": "words", "model": "words"}, headers=h)
    assert made.status_code == 201, made.text

    async def talk() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        client = aioclient.InferenceServerClient(url=base.removeprefix("http://"))
        try:
            text = aioclient.InferInput("text", [3, 1], "BYTES")
            text.set_data_from_numpy(np.array([["green"], ["nope"], ["red"]], dtype=object))
            words_result = await client.infer("words", [text], headers=h)
            rows = _diabetes_rows()
            tensor = aioclient.InferInput("input", list(rows.shape), "FP32")
            tensor.set_data_from_numpy(rows)
            mlp = await client.infer("diabetes", [tensor], headers=h)
            return words_result.as_numpy("code"), words_result.as_numpy("echo"), mlp.as_numpy("variable")
        finally:
            await client.close()

    code, echo, variable = asyncio.run(talk())
    assert code.reshape(-1).tolist() == [1, -1, 0]
    assert echo.reshape(-1).tolist() == [b"green", b"nope", b"red"]
    np.testing.assert_allclose(variable, _diabetes_expected(_diabetes_rows()), rtol=1e-5)


def test_push_point_and_switch_with_no_restart(service: tuple[str, str]) -> None:
    base, key = service
    h = {"Authorization": f"Bearer {key}"}
    # A deployment of its own (the server is shared), read by the workers before the switch.
    made = http("POST", f"{base}/api/v1/deployments", json={"name": "iris-switch", "policy": {"kind": "single", "model": "iris", "version": 1}}, headers=h)
    assert made.status_code == 201, made.text
    for _ in range(10):  # a fresh connection each: both workers read it
        r = http("POST", f"{base}/api/v1/predictions", json={"deployment": "iris-switch", "features": SETOSA}, headers=h)
        assert r.json()["version"] == 1, r.text
    pushed = http("POST", 
        f"{base}/api/v1/models/iris/versions",
        content=(MODELS / "iris_forest.onnx").read_bytes(),
        headers={**h, "content-type": "application/octet-stream"},
    )
    assert pushed.status_code == 201, pushed.text
    version = pushed.json()["version"]
    r = http("PUT", f"{base}/api/v1/deployments/iris-switch", json={"model": "iris", "version": version}, headers=h)
    assert r.status_code == 200
    # Each worker trusts what it read for at most the deployment cache TTL (1 s by default).
    deadline = time.monotonic() + 10
    seen: set[int] = set()
    while time.monotonic() < deadline:
        seen = {
            http("POST", f"{base}/api/v1/predictions", json={"deployment": "iris-switch", "features": SETOSA}, headers=h).json()["version"]
            for _ in range(10)
        }
        if seen == {version}:
            break
        time.sleep(0.2)
    assert seen == {version}


def test_errors_over_http_are_json(service: tuple[str, str]) -> None:
    base, key = service
    r = http("POST", f"{base}/api/v1/predictions", json={"deployment": "iris", "features": {"x": 1}}, headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 400 and r.json()["field"].startswith("features.")
    assert http("GET", f"{base}/api/v1/models").status_code == 401
    # The first request for the schema builds it (the policy grammar is large): give it time on a busy machine.
    assert http("GET", f"{base}/openapi.json", timeout=60).json()["info"]["title"] == "sluice"
