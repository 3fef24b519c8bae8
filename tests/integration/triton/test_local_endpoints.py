"""A deployment's endpoint on the local twin of SageMaker: `SLUICE_ENDPOINTS=local` (the
default in local mode) deploys a split onto a real local Triton per variant, the deployment
answers through the `sagemaker` runtime, weights and capacity are recorded and reported,
a dead server shows as Failed, and undeploying stops every server and routes back; a
rollout's candidate gets a server of its own and the recorded weights follow the rollout."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from sluice.api.app import create_app
from sluice.domain import Principal
from sluice.endpoints import local_triton
from sluice.endpoints.local_endpoints import LocalEndpoints
from sluice.settings import Settings
from sluice.wiring import Container, build_endpoint_control
from tests.integration.conftest import auth
from tests.integration.triton.conftest import in_process, mlp_onnx

if TYPE_CHECKING:
    from pathlib import Path

ACME = Principal("acme", frozenset({"admin", "predict"}), "test-acme")
MLP = {1: mlp_onnx(1), 2: mlp_onnx(2)}
SPLIT = {
    "kind": "split",
    "variants": [
        {"name": "blue", "weight": 1.0, "target": {"model": "mlp", "version": 1}},
        {"name": "green", "weight": 0.0, "target": {"model": "mlp", "version": 2}},
    ],
}
ROWS = np.random.default_rng(3).normal(size=(5, 8)).astype(np.float32)


def _container(tmp_path: Path) -> Container:
    settings = Settings(mode="local", home=tmp_path / "home", deployment_cache_ttl_s=0)
    container = Container.from_settings(settings)
    assert isinstance(build_endpoint_control(settings, container.store), LocalEndpoints)  # local mode's default
    container.models.push(ACME, "mlp", MLP[1])
    container.models.push(ACME, "mlp", MLP[2])
    container.deployments.create(ACME, "ranker", SPLIT)
    return container


def _infer(client: TestClient, key: str) -> tuple[np.ndarray, dict[str, Any]]:
    body = {"inputs": [{"name": "x", "shape": list(ROWS.shape), "datatype": "FP32", "data": ROWS.ravel().tolist()}]}
    r = client.post("/v2/models/ranker/infer", json=body, headers=auth(key))
    assert r.status_code == 200, r.text
    [out] = r.json()["outputs"]
    return np.array(out["data"], dtype=np.float32).reshape(out["shape"]), r.json()


@pytest.mark.triton
def test_a_split_deployed_on_the_local_twin_answers_scales_and_undeploys(
    triton_env: Any, tmp_path: Path
) -> None:
    container = _container(tmp_path)
    container.endpoint_control = LocalEndpoints(container.store, container.settings.home_path, env=triton_env)
    _, admin = container.keys.create("acme", ["admin", "predict"])
    _, predict = container.keys.create("acme", ["predict"])
    client = TestClient(create_app(container))

    r = client.post(
        "/api/v1/deployments/ranker/endpoint",
        json={"instance_type": "ml.c5.xlarge", "instance_count": 2, "min_instances": 1, "max_instances": 3},
        headers=auth(admin),
    )
    assert r.status_code == 202, r.text
    report = r.json()
    assert (report["runs_on"], report["status"], report["bound"]) == ("local", "InService", True)
    assert report["pending_autoscaling"] is None and any("recorded" in n for n in report["notes"])
    variants = {v["name"]: v for v in report["variants"]}
    assert set(variants) == {"blue", "green"}
    assert variants["blue"]["autoscaling"] == {"min_instances": 1, "max_instances": 3, "target_invocations_per_instance": 100.0}
    assert (variants["blue"]["desired_instances"], variants["blue"]["current_instances"]) == (2, 1)
    folder = container.endpoint_control.folder(report["endpoint_name"])
    servers = {name: local_triton.read_state(folder / name) for name in variants}
    for name, server in servers.items():
        assert server is not None and local_triton.is_running(server.pid) and local_triton.is_ready(server)
        assert variants[name]["url"] == server.sagemaker_url

    # The deployment answers from the blue variant's server through the sagemaker runtime.
    got, body = _infer(client, predict)
    np.testing.assert_allclose(got, in_process(MLP[1], {"x": ROWS})["y"], rtol=1e-5, atol=1e-5)
    bound = container.registry.get_version("acme", "mlp", int(body["model_version"]))
    assert bound.runtime == "sagemaker"
    assert bound.config["endpoint_url"] == servers["blue"].sagemaker_url and bound.config["source_version"] == 1

    # Weights move traffic (sluice's split routes); capacity is recorded and reported.
    r = client.put("/api/v1/deployments/ranker/scale", json={"weights": {"blue": 0, "green": 1}}, headers=auth(admin))
    assert r.status_code == 200, r.text
    assert {v["name"]: v["weight"] for v in r.json()["variants"]} == {"blue": 0.0, "green": 1.0}
    got, body = _infer(client, predict)
    np.testing.assert_allclose(got, in_process(MLP[2], {"x": ROWS})["y"], rtol=1e-5, atol=1e-5)
    assert container.registry.get_version("acme", "mlp", int(body["model_version"])).config["variant"] == "green"
    r = client.put(
        "/api/v1/deployments/ranker/scale",
        json={"min_instances": 1, "max_instances": 5, "desired_instances": 4, "variant": "green"},
        headers=auth(admin),
    )
    assert r.status_code == 200, r.text
    green = next(v for v in r.json()["variants"] if v["name"] == "green")
    assert green["autoscaling"]["max_instances"] == 5 and (green["desired_instances"], green["current_instances"]) == (4, 1)
    r = client.put("/api/v1/deployments/ranker/scale", json={"desired_instances": 9, "variant": "green"}, headers=auth(admin))
    assert (r.status_code, r.json()["field"]) == (400, "desired_instances")  # the same checks as on AWS

    # A server that dies shows: the endpoint is Failed, naming the variant.
    local_triton.stop(folder / "green")
    report = client.get("/api/v1/deployments/ranker/endpoint", headers=auth(admin)).json()
    assert report["status"] == "Failed" and "'green'" in report["failure_reason"]

    # Undeploy: back on the source versions, every server gone, the folder too.
    r = client.delete("/api/v1/deployments/ranker/endpoint", headers=auth(admin))
    assert r.status_code == 200, r.text
    assert r.json()["deleted"]["servers"] == ["blue"] and len(r.json()["deleted"]["versions"]) == 2
    assert not any(local_triton.is_running(s.pid) for s in servers.values() if s is not None)
    assert not folder.exists()
    policy = container.deployments.get(ACME, "ranker").policy
    assert [v["target"]["version"] for v in policy["variants"]] == [1, 2]
    got, _ = _infer(client, predict)  # in process again
    np.testing.assert_allclose(got, in_process(MLP[2], {"x": ROWS})["y"], rtol=1e-5, atol=1e-5)
    r = client.delete("/api/v1/deployments/ranker/endpoint", headers=auth(admin))
    assert (r.status_code, r.json()["field"]) == (404, "endpoint")


def test_without_a_triton_environment_a_local_deploy_says_so_and_leaves_nothing(tmp_path: Path) -> None:
    container = _container(tmp_path)
    control = LocalEndpoints(container.store, container.settings.home_path, env_path=tmp_path / "no-such-env")
    container.endpoint_control = control
    _, admin = container.keys.create("acme", ["admin"])
    client = TestClient(create_app(container))
    r = client.post("/api/v1/deployments/ranker/endpoint", json={"instance_type": "ml.c5.xlarge"}, headers=auth(admin))
    assert (r.status_code, r.json()["field"]) == (503, "triton_env"), r.text
    assert "make triton-env" in r.json()["error"]
    assert not control.root.exists() or not any(control.root.iterdir())
    assert client.get("/api/v1/deployments/ranker/endpoint", headers=auth(admin)).status_code == 404
    assert [v["target"]["version"] for v in container.deployments.get(ACME, "ranker").policy["variants"]] == [1, 2]


@pytest.mark.triton
def test_a_request_above_six_megabytes_goes_through_the_twins_asynchronous_queue(
    triton_env: Any, tmp_path: Path
) -> None:
    """`sluice serve` with its body limit raised: 8 MiB of tensors to a deployment on a local
    endpoint is written to the home's folder, run on a thread against the real local Triton,
    and answered 202; the result is then the same as the model's own answer, for acme only."""
    settings = Settings(mode="local", home=tmp_path / "home", deployment_cache_ttl_s=0, max_request_bytes=16 * 2**20)
    container = Container.from_settings(settings)
    container.models.push(ACME, "mlp", MLP[1])
    container.deployments.create(ACME, "big", {"kind": "single", "model": "mlp", "version": 1})
    container.endpoint_control = LocalEndpoints(container.store, settings.home_path, env=triton_env)
    _, admin = container.keys.create("acme", ["admin", "predict"])
    _, other = container.keys.create("globex", ["admin", "predict"])
    client = TestClient(create_app(container))
    rows = 2**18  # 8 MiB of FP32 in 8 features
    r = client.post(
        "/api/v1/deployments/big/endpoint",
        json={"instance_type": "ml.c5.xlarge", "max_batch_size": rows},
        headers=auth(admin),
    )
    assert r.status_code == 202 and r.json()["bound"], r.text
    try:
        x = np.random.default_rng(5).normal(size=(rows, 8)).astype(np.float32)
        header = json.dumps(
            {"inputs": [{"name": "x", "shape": [rows, 8], "datatype": "FP32", "parameters": {"binary_data_size": x.nbytes}}]}
        ).encode()
        r = client.post(
            "/v2/models/big/infer",
            content=header + x.tobytes(),
            headers={**auth(admin), "Inference-Header-Content-Length": str(len(header)), "content-type": "application/octet-stream"},
        )
        assert r.status_code == 202, r.text
        accepted = r.json()
        assert r.headers["location"] == accepted["result"]
        container.runtimes["sagemaker"]._queue.shutdown(wait=True)  # the twin's queue has run it
        assert list(settings.home_path.rglob(f"results/tenants/acme/{accepted['id']}/input"))
        got = client.get(accepted["result"], headers=auth(admin))
        assert got.status_code == 200, got.text
        # an answer this large (over SLUICE_MAX_RESPONSE_BYTES) is sent as itself: locally its
        # bytes, the model's v2 answer (on AWS a 303 to a presigned S3 GET of the same)
        result = got.json()
        assert "status" not in result and got.headers["content-type"].startswith("application/json")
        (y,) = result["outputs"]
        got = np.array(y["data"], dtype=np.float32).reshape(y["shape"])
        np.testing.assert_allclose(got, in_process(MLP[1], {"x": x})["y"], rtol=1e-4, atol=1e-4)
        assert client.get(accepted["result"], headers=auth(other)).status_code == 404
        # A small request to the same deployment stays synchronous.
        small = {"inputs": [{"name": "x", "shape": [2, 8], "datatype": "FP32", "data": x[:2].ravel().tolist()}]}
        assert client.post("/v2/models/big/infer", json=small, headers=auth(admin)).status_code == 200
    finally:
        client.delete("/api/v1/deployments/big/endpoint", headers=auth(admin))


@pytest.mark.triton
def test_a_rollout_on_the_local_twin_adds_the_candidates_variant_and_moves_its_weights(
    triton_env: Any, tmp_path: Path
) -> None:
    """The candidate has no variant: `rollout start` builds its repository and starts its
    server (in service at once here), so the first step begins at start; the candidate
    answers from its own server, and an abort puts the recorded weights back."""
    settings = Settings(mode="local", home=tmp_path / "home", deployment_cache_ttl_s=0)
    container = Container.from_settings(settings)
    container.models.push(ACME, "mlp", MLP[1])
    container.models.push(ACME, "mlp", MLP[2])
    container.deployments.create(ACME, "ranker", {"kind": "single", "model": "mlp", "version": 1})
    container.endpoint_control = LocalEndpoints(container.store, settings.home_path, env=triton_env)
    _, admin = container.keys.create("acme", ["admin", "predict"])
    client = TestClient(create_app(container))
    assert client.post("/api/v1/deployments/ranker/endpoint", json={"instance_type": "ml.c5.xlarge"}, headers=auth(admin)).status_code == 202
    try:
        body = {"to": "mlp:2", "steps": [50, 100], "every": "1m", "gate": "error_rate<=0.01"}
        r = client.post("/api/v1/deployments/ranker/rollout", json=body, headers=auth(admin))
        assert r.status_code == 201, r.text
        endpoint = client.get("/api/v1/deployments/ranker/rollout", headers=auth(admin)).json()["rollout"]["endpoint"]
        assert (endpoint["candidate_variant"], endpoint["added"], endpoint["ready"], endpoint["pending"]) == ("mlp-v2", True, True, False)
        report = client.get("/api/v1/deployments/ranker/endpoint", headers=auth(admin)).json()
        assert report["status"] == "InService"
        assert {v["name"]: (v["version"], v["weight"]) for v in report["variants"]} == {"primary": (1, 50.0), "mlp-v2": (2, 50.0)}
        row = ROWS[:1].tolist()
        r = client.post("/api/v1/predictions", json={"deployment": "ranker", "inputs": row, "variant": "candidate"}, headers=auth(admin))
        assert r.status_code == 200, r.text
        answered = container.registry.get_version("acme", "mlp", r.json()["version"])
        assert answered.config["variant"] == "mlp-v2" and answered.config["endpoint_url"] == report["variants"][1]["url"]
        np.testing.assert_allclose(
            r.json()["prediction"], in_process(MLP[2], {"x": ROWS[:1]})["y"][0], rtol=1e-5, atol=1e-5
        )
        assert client.post("/api/v1/deployments/ranker/rollout/abort", headers=auth(admin)).status_code == 200
        report = client.get("/api/v1/deployments/ranker/endpoint", headers=auth(admin)).json()
        assert {v["name"]: v["weight"] for v in report["variants"]} == {"primary": 1.0, "mlp-v2": 0.0}
    finally:
        r = client.delete("/api/v1/deployments/ranker/endpoint", headers=auth(admin))
    assert sorted(r.json()["deleted"]["servers"]) == ["mlp-v2", "primary"]
