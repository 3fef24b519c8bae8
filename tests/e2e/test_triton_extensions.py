"""Triton's own extensions (model configuration, statistics, repository index) as tools call
them: `tritonclient.http` against a real `sluice serve --demo` (the one the e2e tests share),
one tenant never seeing another's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from sluice.demo import install_demo
from sluice.domain import Principal
from sluice.settings import Settings
from sluice.wiring import Container
from tests.conftest import MODELS

if TYPE_CHECKING:
    from pathlib import Path

EXT = Principal("ext", frozenset({"admin", "predict"}), "test-ext")
BETA = Principal("beta", frozenset({"admin", "predict"}), "test-beta")


@pytest.fixture(scope="module")
def service(demo_serve: tuple[int, str, Path]) -> tuple[str, str, str]:
    """(the server's address, an admin key of a tenant with the demo's deployments and no
    others, a predict key of another tenant). The server is shared: its own tenant's
    deployments are this module's alone, written straight in the shared registry."""
    port, _, home = demo_serve
    registry = Container.from_settings(Settings(mode="local", home=home))
    install_demo(registry, EXT, MODELS)
    _, key = registry.keys.create("ext", ["admin", "predict"])
    # Another tenant, in the same registry: its deployment must stay out of sight.
    registry.models.push(BETA, "secret-model", (MODELS / "iris.onnx").read_bytes())
    registry.deployments.create(BETA, "beta-secret", {"model": "secret-model", "version": 1})
    _, beta_key = registry.keys.create("beta", ["predict"])
    return f"127.0.0.1:{port}", key, beta_key


def _client(url: str) -> Any:
    import tritonclient.http as httpclient

    return httpclient.InferenceServerClient(url=url)


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_model_config_is_triton_shaped(service: tuple[str, str, str]) -> None:
    url, key, _ = service
    config = _client(url).get_model_config("diabetes", headers=_auth(key))
    assert (config["name"], config["platform"], config["max_batch_size"]) == ("diabetes", "onnxruntime_onnx", 64)
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [("input", "TYPE_FP32", [10])]
    assert [t["data_type"] for t in config["output"]] == ["TYPE_FP32"]
    pinned = _client(url).get_model_config("diabetes", "1", headers=_auth(key))
    assert pinned["input"] == config["input"]


def test_statistics_count_the_tenants_own_predictions(service: tuple[str, str, str]) -> None:
    import tritonclient.http as httpclient

    url, key, _ = service
    client = _client(url)
    before = client.get_inference_statistics("diabetes", headers=_auth(key))["model_stats"][0]
    rows = np.random.default_rng(0).normal(0, 0.05, size=(3, 10)).astype(np.float32)
    for _ in range(2):
        tensor = httpclient.InferInput("input", list(rows.shape), "FP32")
        tensor.set_data_from_numpy(rows, binary_data=False)  # JSON: binary tensors are another part of the issue
        wanted = httpclient.InferRequestedOutput("variable", binary_data=False)
        client.infer("diabetes", [tensor], outputs=[wanted], headers=_auth(key))
    after = client.get_inference_statistics("diabetes", headers=_auth(key))["model_stats"][0]
    assert after["name"] == "diabetes" and after["version"] == before["version"]
    assert after["execution_count"] == before["execution_count"] + 2
    assert after["inference_count"] == before["inference_count"] + 6  # rows
    success, earlier = after["inference_stats"]["success"], before["inference_stats"]["success"]
    assert success["count"] == earlier["count"] + 2 and success["ns"] > earlier["ns"]
    everything = client.get_inference_statistics(headers=_auth(key))["model_stats"]
    assert {s["name"] for s in everything} == {"iris", "diabetes"}  # the demo's, never beta's


def test_repository_index_and_control(service: tuple[str, str, str]) -> None:
    from tritonclient.utils import InferenceServerException

    url, key, beta_key = service
    client = _client(url)
    index = client.get_model_repository_index(headers=_auth(key))
    assert sorted((e["name"], e["state"]) for e in index) == [("diabetes", "READY"), ("iris", "READY")]
    assert all(e["version"].isdigit() for e in index)
    assert [e["name"] for e in client.get_model_repository_index(headers=_auth(beta_key))] == ["beta-secret"]
    with pytest.raises(InferenceServerException) as unknown:
        client.get_model_config("beta-secret", headers=_auth(key))
    assert unknown.value.status() == "404"
    with pytest.raises(InferenceServerException) as hidden:
        client.get_inference_statistics("beta-secret", headers=_auth(key))
    assert hidden.value.status() == "404"
    with pytest.raises(InferenceServerException) as load:
        client.load_model("diabetes", headers=_auth(key))
    assert load.value.status() == "503" and "load" in load.value.message()  # as Triton answers a load it does not serve
    with pytest.raises(InferenceServerException) as anonymous:
        client.get_model_repository_index()
    assert anonymous.value.status() == "401"
