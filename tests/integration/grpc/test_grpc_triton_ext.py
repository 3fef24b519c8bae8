"""Triton's model configuration, statistics and repository RPCs over gRPC, through
`tritonclient.grpc`: the REST extensions' answers as protobuf, for the caller's tenant only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import MODELS
from tests.integration.grpc.conftest import auth, fails

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

    from sluice.domain import Principal
    from sluice.wiring import Container

grpcclient = pytest.importorskip("tritonclient.grpc")


@pytest.fixture
def with_globex(served: Container, globex: Principal) -> Container:
    """Another tenant in the same registry, with a deployment acme must never see."""
    served.models.push(globex, "secret-model", (MODELS / "iris.onnx").read_bytes())
    served.deployments.create(globex, "globex-secret", {"model": "secret-model", "version": 1})
    return served


def test_model_config_of_a_deployment(grpc_url: str, keys: dict[str, str]) -> None:
    client = grpcclient.InferenceServerClient(grpc_url)
    config = client.get_model_config("diabetes", headers=auth(keys["acme_predict"])).config
    assert (config.name, config.platform, config.backend, config.max_batch_size) == ("diabetes", "onnxruntime_onnx", "onnxruntime", 64)
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [("input", 11, [10])]  # 11: TYPE_FP32
    assert [t.name for t in config.output] == ["variable"]
    assert list(config.version_policy.specific.versions) == [1]
    assert config.parameters["model"].string_value == "diabetes"
    pinned = client.get_model_config("diabetes", "1", headers=auth(keys["acme"]), as_json=True)["config"]
    assert pinned["input"] == [{"name": "input", "data_type": "TYPE_FP32", "dims": ["10"]}]
    # A string model: BYTES is Triton's TYPE_STRING, and it takes no batch (max_batch_size 0).
    words = client.get_model_config("words", headers=auth(keys["acme"]), as_json=True)["config"]
    assert [t["data_type"] for t in words["input"]] == ["TYPE_STRING"]
    assert fails(client.get_model_config, "diabetes", "9", headers=auth(keys["acme"])).status() == "StatusCode.NOT_FOUND"
    bad = fails(client.get_model_config, "diabetes", "x", headers=auth(keys["acme"]))
    assert bad.status() == "StatusCode.INVALID_ARGUMENT" and "model_version" in bad.message()
    assert fails(client.get_model_config, "diabetes").status() == "StatusCode.UNAUTHENTICATED"


def test_statistics_rise_after_predictions(grpc_url: str, keys: dict[str, str]) -> None:
    client = grpcclient.InferenceServerClient(grpc_url)
    headers = auth(keys["acme_predict"])
    (before,) = client.get_inference_statistics("diabetes", headers=headers).model_stats
    rows = np.random.default_rng(0).normal(0, 0.05, size=(3, 10)).astype(np.float32)
    tensor = grpcclient.InferInput("input", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    for _ in range(2):
        client.infer("diabetes", [tensor], headers=headers)
    (after,) = client.get_inference_statistics("diabetes", "1", headers=headers).model_stats
    assert (after.name, after.version) == ("diabetes", "1")
    assert after.execution_count == before.execution_count + 2
    assert after.inference_count == before.inference_count + 6  # rows
    success, earlier = after.inference_stats.success, before.inference_stats.success
    assert success.count == earlier.count + 2 and success.ns > earlier.ns
    everything = client.get_inference_statistics(headers=headers).model_stats
    assert {s.name for s in everything} == {"iris", "diabetes", "words"}
    assert fails(client.get_inference_statistics, "diabetes").status() == "StatusCode.UNAUTHENTICATED"


def test_index_lists_only_the_callers_deployments(grpc_url: str, keys: dict[str, str], with_globex: Container) -> None:
    client = grpcclient.InferenceServerClient(grpc_url)
    index = client.get_model_repository_index(headers=auth(keys["acme_predict"])).models
    assert sorted((m.name, m.version, m.state) for m in index) == [("diabetes", "1", "READY"), ("iris", "1", "READY"), ("words", "1", "READY")]
    ready = client.get_model_repository_index(headers=auth(keys["acme"]), as_json=True)
    assert {m["name"] for m in ready["models"]} == {"diabetes", "iris", "words"}
    assert [m.name for m in client.get_model_repository_index(headers=auth(keys["globex"])).models] == ["globex-secret"]
    assert fails(client.get_model_repository_index).status() == "StatusCode.UNAUTHENTICATED"


def test_another_tenants_deployment_is_not_found(grpc_url: str, keys: dict[str, str], with_globex: Container) -> None:
    client = grpcclient.InferenceServerClient(grpc_url)
    for call in (client.get_model_config, client.get_inference_statistics):
        hidden = fails(call, "globex-secret", headers=auth(keys["acme"]))
        assert hidden.status() == "StatusCode.NOT_FOUND" and "globex-secret" in hidden.message()
    assert client.get_model_config("globex-secret", headers=auth(keys["globex"])).config.name == "globex-secret"
    assert fails(client.load_model, "globex-secret", headers=auth(keys["acme"])).status() == "StatusCode.NOT_FOUND"


def test_load_and_unload_are_refused_as_rest_refuses(grpc_url: str, keys: dict[str, str], client: TestClient) -> None:
    """As a Triton without explicit model control refuses them: UNAVAILABLE, and 503 over REST."""
    grpc = grpcclient.InferenceServerClient(grpc_url)
    for call, verb in ((grpc.load_model, "load"), (grpc.unload_model, "unload")):
        refused = fails(call, "iris", headers=auth(keys["acme"]))
        assert refused.status() == "StatusCode.UNAVAILABLE"
        assert "explicit model load / unload is not allowed" in refused.message()
        rest = client.post(f"/v2/repository/models/iris/{verb}", headers=auth(keys["acme"]))
        assert rest.status_code == 503 and rest.json()["code"] == "unavailable", rest.text
        assert rest.json()["error"].startswith("explicit model load / unload is not allowed")
    assert fails(grpc.load_model, "iris").status() == "StatusCode.UNAUTHENTICATED"
    # Served as before: the model still answers after a refused unload.
    assert grpc.is_model_ready("iris", headers=auth(keys["acme"]))


def test_a_request_refused_for_its_classification_is_counted_once_as_failed(grpc_url: str, keys: dict[str, str], client: TestClient) -> None:
    """Asking classes of an output that cannot be ranked (iris's labels, BYTES) is refused on
    every door before the model runs: a failed request, never answered and failed both."""
    grpc = grpcclient.InferenceServerClient(grpc_url)
    headers = auth(keys["acme"])
    (before,) = grpc.get_inference_statistics("iris", headers=headers).model_stats
    body = {
        "inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [5.1, 3.5, 1.4, 0.2]}],
        "outputs": [{"name": "output_label", "parameters": {"classification": 2}}],
    }
    rest = client.post("/v2/models/iris/infer", json=body, headers=headers)
    assert rest.status_code == 400 and rest.json()["field"] == "outputs.output_label.parameters.classification", rest.text
    tensor = grpcclient.InferInput("input", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.array([[5.1, 3.5, 1.4, 0.2]], np.float32))
    asked = [grpcclient.InferRequestedOutput("output_label", class_count=2)]
    assert fails(grpc.infer, "iris", [tensor], outputs=asked, headers=headers).status() == "StatusCode.INVALID_ARGUMENT"
    (after,) = grpc.get_inference_statistics("iris", headers=headers).model_stats
    assert after.execution_count == before.execution_count
    assert after.inference_stats.success.count == before.inference_stats.success.count
    assert after.inference_stats.fail.count == before.inference_stats.fail.count + 2


_ASKS = st.fixed_dictionaries({}, optional={"classification": st.integers(1, 3), "binary_data": st.booleans()})


@given(first=_ASKS, second=_ASKS, name=st.sampled_from(["output_probability", "output_label"]))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_an_output_asked_for_twice_is_refused_on_every_door_whatever_the_asks(
    grpc_url: str, keys: dict[str, str], client: TestClient, first: dict[str, Any], second: dict[str, Any], name: str
) -> None:
    """Two asks of one output (classes and the raw tensor, binary and JSON, or the same twice)
    cannot both hold: refused naming it, as an input given twice is, never one ask dropped."""
    headers = auth(keys["acme"])
    body = {
        "inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [5.1, 3.5, 1.4, 0.2]}],
        "outputs": [{"name": name, **({"parameters": p} if p else {})} for p in (first, second)],
    }
    rest = client.post("/v2/models/iris/infer", json=body, headers=headers)
    assert rest.status_code == 400 and rest.json()["field"] in (f"outputs.{name}", f"outputs.{name}.parameters.classification"), rest.text
    if rest.json()["field"] == f"outputs.{name}":
        assert f"output '{name}' is asked for twice" in rest.json()["error"]
    tensor = grpcclient.InferInput("input", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.array([[5.1, 3.5, 1.4, 0.2]], np.float32))
    asked = [grpcclient.InferRequestedOutput(name, class_count=p.get("classification", 0)) for p in (first, second)]
    failed = fails(grpcclient.InferenceServerClient(grpc_url).infer, "iris", [tensor], outputs=asked, headers=headers)
    assert failed.status() == "StatusCode.INVALID_ARGUMENT" and name in failed.message()
