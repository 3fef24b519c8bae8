"""Versions registered with runtime `sagemaker` and `triton`, served end to end through the API
by the session's real local Triton (its SageMaker port and its HTTP port)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from sluice.api.app import create_app
from sluice.domain import Principal
from sluice.domain.errors import BadRequest
from sluice.endpoints.repository import build_repository
from sluice.services.models import read_signature
from sluice.settings import Settings
from sluice.wiring import Container
from tests.integration.conftest import auth
from tests.integration.triton.conftest import SERVED_OPTIONS, in_process

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.endpoints.local_triton import LocalTriton

pytestmark = pytest.mark.triton
ACME = Principal("acme", frozenset({"admin", "predict"}), "test-acme")
RNG = np.random.default_rng(7)


def _container(tmp_path: Path, server: LocalTriton) -> Container:
    settings = Settings(mode="local", home=tmp_path / "home", sagemaker_endpoint_url=server.sagemaker_url, deployment_cache_ttl_s=0)
    return Container.from_settings(settings)


def _v2(rows: np.ndarray, name: str) -> dict[str, Any]:
    return {"inputs": [{"name": name, "shape": list(rows.shape), "datatype": "FP32", "data": rows.ravel().tolist()}]}


def _outputs(body: dict[str, Any]) -> dict[str, np.ndarray]:
    return {o["name"]: np.array(o["data"]).reshape(o["shape"]) for o in body["outputs"]}


def test_a_sagemaker_version_is_served_by_the_local_triton_through_the_api(
    triton_server: LocalTriton, served_repository: Path, onnx_models: dict[str, bytes], tmp_path: Path
) -> None:
    container = _container(tmp_path, triton_server)
    version = container.models.push(
        ACME, "clf", onnx_models["clf"], runtime="sagemaker", config={"endpoint_name": "clf-endpoint", "max_batch_size": 65536}
    )
    assert (version.runtime, version.config["endpoint_name"]) == ("sagemaker", "clf-endpoint")
    assert version.signature == read_signature(onnx_models["clf"])
    # The `local` flavour repository built from the registered version is, byte for byte, what
    # the session's server serves as its SageMaker port's default model.
    built = build_repository(tmp_path / "repository", version, container.store, flavour="local", options=SERVED_OPTIONS["clf"])
    for part in ("config.pbtxt", "1/model.onnx", "1/model.py"):
        assert (built.path / part).read_bytes() == (served_repository / "clf" / part).read_bytes(), part
    assert triton_server.default_model == "clf"
    # The container's sagemaker runtime talks to that port, as SLUICE_SAGEMAKER_ENDPOINT_URL says.
    assert container.runtimes["sagemaker"].endpoint_url == triton_server.sagemaker_url  # type: ignore[attr-defined]

    container.deployments.create(ACME, "species", {"model": "clf", "version": version.version})
    _, key = container.keys.create("acme", ["predict"])
    client = TestClient(create_app(container))
    rows = RNG.normal(size=(6, 4)).astype(np.float32)
    r = client.post("/v2/models/species/infer", json=_v2(rows, "features"), headers=auth(key))
    assert r.status_code == 200, r.text
    got, want = _outputs(r.json()), in_process(onnx_models["clf"], {"features": rows})
    np.testing.assert_allclose(got["probabilities"], want["probabilities"], rtol=1e-6, atol=1e-6)
    assert got["label"].tolist() == want["label"].tolist()
    r = client.post("/api/v1/predictions", json={"deployment": "species", "inputs": rows[:2].tolist()}, headers=auth(key))
    assert r.status_code == 200, r.text
    assert [p["prediction"] for p in r.json()["predictions"]] == want["label"][:2].tolist()


def test_a_triton_version_is_registered_from_its_server(
    triton_server: LocalTriton, onnx_models: dict[str, bytes], tmp_path: Path
) -> None:
    container = _container(tmp_path, triton_server)
    with pytest.raises(BadRequest) as caught:
        container.models.push(ACME, "mlp", onnx_models["mlp"], runtime="triton")
    assert caught.value.field == "runtime"
    version = asyncio.run(container.models.register_triton(ACME, "mlp", triton_server.http_url, model_name="mlp"))
    assert version.runtime == "triton"
    assert version.config == {"url": triton_server.http_url, "model_name": "mlp", "model_version": ""}
    assert version.artifact_uri == f"{triton_server.http_url}/v2/models/mlp"
    expected = read_signature(onnx_models["mlp"])
    for got, want in ((version.signature.inputs, expected.inputs), (version.signature.outputs, expected.outputs)):
        assert [(s.name, s.datatype, s.shape) for s in got] == [(s.name, s.datatype, s.shape) for s in want]

    container.deployments.create(ACME, "scores", {"model": "mlp", "version": version.version})
    _, key = container.keys.create("acme", ["predict"])
    rows = RNG.normal(size=(20, 8)).astype(np.float32)  # above the server's max_batch_size of 16: split
    with TestClient(create_app(container)) as client:
        r = client.post("/v2/models/scores/infer", json=_v2(rows, "x"), headers=auth(key))
        client.portal.call(container.runtimes["triton"].close)  # type: ignore[union-attr,attr-defined]  # the loop's connections
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(_outputs(r.json())["y"], in_process(onnx_models["mlp"], {"x": rows})["y"], rtol=1e-5, atol=1e-5)


def test_versions_from_a_triton_server_or_for_an_endpoint_are_pushed_over_the_api(
    triton_server: LocalTriton, onnx_models: dict[str, bytes], tmp_path: Path
) -> None:
    container = _container(tmp_path, triton_server)
    imports = container.settings.home_path / "imports" / "acme"
    imports.mkdir(parents=True)
    (imports / "clf.onnx").write_bytes(onnx_models["clf"])
    _, key = container.keys.create("acme", ["admin", "predict"])
    client = TestClient(create_app(container))
    r = client.post("/api/v1/models/served/versions", json={"triton_url": triton_server.http_url, "model_name": "mlp"}, headers=auth(key))
    assert r.status_code == 201, r.text
    assert r.json()["runtime"] == "triton" and r.json()["signature"]["inputs"]
    outside = client.post("/api/v1/models/x/versions", json={"triton_url": "http://169.254.169.254/latest", "model_name": "m"}, headers=auth(key))
    assert outside.status_code == 403 and outside.json()["field"] == "triton_url"
    r = client.post(
        "/api/v1/models/clf/versions",
        json={"artifact_uri": (imports / "clf.onnx").as_uri(), "runtime": "sagemaker", "config": {"endpoint_name": "clf-endpoint"}},
        headers=auth(key),
    )
    assert r.status_code == 201, r.text
    assert r.json()["runtime"] == "sagemaker"
    bad = client.post(
        "/api/v1/models/clf/versions",
        json={"artifact_uri": (imports / "clf.onnx").as_uri(), "runtime": "sagemaker", "config": {"endpoint_name": "not a name!"}},
        headers=auth(key),
    )
    assert bad.status_code == 400 and bad.json()["field"] == "config.endpoint_name"
