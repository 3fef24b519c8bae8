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
from tests.integration.triton.conftest import SERVED_OPTIONS, allowing, in_process

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.endpoints.local_triton import LocalTriton

pytestmark = pytest.mark.triton
ACME = Principal("acme", frozenset({"admin", "predict"}), "test-acme")
RNG = np.random.default_rng(7)


def _container(tmp_path: Path, server: LocalTriton) -> Container:
    settings = Settings(
        mode="local", home=tmp_path / "home", sagemaker_endpoint_url=server.sagemaker_url, deployment_cache_ttl_s=0,
        triton_url_prefixes=allowing(server),
    )
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
    config = client.get("/v2/models/species/config", headers=auth(key)).json()  # derived from the signature
    assert (config["platform"], config["max_batch_size"]) == ("onnxruntime_onnx", 65536)
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["output"]] == [("label", "TYPE_STRING", [1]), ("probabilities", "TYPE_FP32", [3])]


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


def test_a_triton_version_over_grpc_answers_as_over_http_and_in_process(
    triton_server: LocalTriton, onnx_models: dict[str, bytes], tmp_path: Path
) -> None:
    container = _container(tmp_path, triton_server)
    _, admin = container.keys.create("acme", ["admin", "predict"])
    grpc_url = f"http://{triton_server.grpc_address}"  # the local Triton's gRPC port: its HTTP port + 1
    rows = RNG.normal(size=(20, 8)).astype(np.float32)  # above max_batch_size 16: split over gRPC too
    feats = RNG.normal(size=(5, 4)).astype(np.float32)
    with TestClient(create_app(container)) as client:
        for name, url, protocol in (("mlp-http", triton_server.http_url, "http"), ("mlp-grpc", grpc_url, "grpc")):
            r = client.post(
                f"/api/v1/models/{name}/versions",
                json={"triton_url": url, "model_name": "mlp", "protocol": protocol},
                headers=auth(admin),
            )
            assert r.status_code == 201, r.text
            container.deployments.create(ACME, name, {"model": name, "version": 1})
        r = client.post("/api/v1/models/clf-grpc/versions", json={"triton_url": grpc_url, "model_name": "clf", "protocol": "grpc"}, headers=auth(admin))
        assert r.status_code == 201, r.text
        assert [i["shape"] for i in r.json()["signature"]["inputs"]] == [[-1, 4]]  # int64 dims read from gRPC's JSON
        container.deployments.create(ACME, "clf-grpc", {"model": "clf-grpc", "version": 1})
        assert container.registry.get_version("acme", "mlp-grpc", 1).config["protocol"] == "grpc"

        over_grpc = client.post("/v2/models/mlp-grpc/infer", json=_v2(rows, "x"), headers=auth(admin))
        over_http = client.post("/v2/models/mlp-http/infer", json=_v2(rows, "x"), headers=auth(admin))
        strings = client.post("/v2/models/clf-grpc/infer", json=_v2(feats, "features"), headers=auth(admin))
        short = client.post("/v2/models/mlp-grpc/infer", json=_v2(rows[:, :5], "x"), headers=auth(admin))
        # Triton's model configuration extension: a triton version's config is its server's, over either protocol.
        configs = [client.get(f"/v2/models/{name}/config", headers=auth(admin)) for name in ("mlp-grpc", "mlp-http")]
        client.portal.call(container.runtimes["triton"].close)  # type: ignore[union-attr,attr-defined]
    assert over_grpc.status_code == 200 and over_http.status_code == 200, (over_grpc.text, over_http.text)
    want = in_process(onnx_models["mlp"], {"x": rows})["y"]
    np.testing.assert_allclose(_outputs(over_grpc.json())["y"], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(_outputs(over_grpc.json())["y"], _outputs(over_http.json())["y"])
    assert strings.status_code == 200, strings.text
    got, expected = _outputs(strings.json()), in_process(onnx_models["clf"], {"features": feats})
    assert got["label"].tolist() == expected["label"].tolist()
    np.testing.assert_allclose(got["probabilities"], expected["probabilities"], rtol=1e-6, atol=1e-6)
    for r, name in zip(configs, ("mlp-grpc", "mlp-http"), strict=True):
        assert r.status_code == 200, r.text
        config = r.json()
        assert (config["name"], config["max_batch_size"], config["backend"]) == (name, 16, "python")
        assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [("x", "TYPE_FP32", [8])]
    # A wrong shape is the caller's fault, named, over either protocol.
    assert short.status_code in (400, 422) and short.json()["field"].startswith("inputs"), short.text


def test_grpc_failures_map_like_http_and_the_allowlist_applies(
    triton_server: LocalTriton, triton_versions: dict[str, Any], tmp_path: Path
) -> None:
    import dataclasses
    import socket

    from sluice.domain.errors import Forbidden, Unavailable
    from sluice.domain.origins import parse_allowlist
    from sluice.runtimes.triton import TritonRuntime

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    mlp = triton_versions["mlp"]
    rows = {"x": np.zeros((2, 8), dtype=np.float32)}

    def over_grpc(url: str) -> Any:
        return dataclasses.replace(mlp, config={"url": url, "model_name": "mlp", "protocol": "grpc"})

    async def call(runtime: TritonRuntime, version: Any) -> Any:
        try:
            return await runtime.infer(version, rows)
        finally:
            await runtime.close()

    with pytest.raises(Unavailable) as down:
        asyncio.run(call(TritonRuntime(timeout_s=5.0), over_grpc(f"http://127.0.0.1:{closed}")))
    assert down.value.status == 503
    only_http = parse_allowlist([triton_server.http_url])  # the HTTP port only, not the gRPC one
    with pytest.raises(Forbidden) as refused:
        asyncio.run(call(TritonRuntime(allowed=only_http), over_grpc(f"http://{triton_server.grpc_address}")))
    assert refused.value.field == "config.url"
    # https:// stands for TLS: an allowlist of http:// servers does not admit it.
    with pytest.raises(Forbidden):
        asyncio.run(call(TritonRuntime(allowed=parse_allowlist(["http://127.0.0.1:*"])), over_grpc(f"https://{triton_server.grpc_address}")))
    answer = asyncio.run(call(TritonRuntime(allowed=parse_allowlist(["http://127.0.0.1:*"])), over_grpc(f"http://{triton_server.grpc_address}")))
    assert answer.outputs["y"].shape == (2, 3)

    container = _container(tmp_path, triton_server)
    _, admin = container.keys.create("acme", ["admin"])
    client = TestClient(create_app(container))
    outside = client.post(
        "/api/v1/models/x/versions",
        json={"triton_url": "http://10.0.0.1:8001", "model_name": "m", "protocol": "grpc"},
        headers=auth(admin),
    )
    assert outside.status_code == 403 and outside.json()["field"] == "triton_url"
    bad = client.post("/api/v1/models/x/versions", json={"triton_url": triton_server.http_url, "protocol": "smtp"}, headers=auth(admin))
    assert bad.status_code == 422 and bad.json()["field"] == "protocol"


def test_through_the_lambda_handler_a_remote_runtime_gets_the_task_its_client_needs(
    triton_server: LocalTriton, onnx_models: dict[str, bytes], tmp_path: Path
) -> None:
    """A Lambda request runs in line until it waits (`sluice.inline`); a runtime that is not in
    process (Triton over aiohttp or gRPC, a SageMaker endpoint) is called from a task, which
    its client's timers need: each answers through the Lambda adapter as through the app."""
    import json

    from sluice.handlers.asgi import LambdaASGI
    from tests.conftest import EVENTS
    from tests.support import LambdaContext

    container = _container(tmp_path, triton_server)
    grpc_url = f"http://{triton_server.grpc_address}"
    lambda_app = LambdaASGI(create_app(container))
    rows = RNG.normal(size=(3, 8)).astype(np.float32)
    want = in_process(onnx_models["mlp"], {"x": rows})["y"]
    with TestClient(create_app(container)) as client:
        _, admin = container.keys.create("acme", ["admin", "predict"])
        for name, url, protocol in (("mlp-http", triton_server.http_url, "http"), ("mlp-grpc", grpc_url, "grpc")):
            r = client.post(f"/api/v1/models/{name}/versions", json={"triton_url": url, "model_name": "mlp", "protocol": protocol}, headers=auth(admin))
            assert r.status_code == 201, r.text
            container.deployments.create(ACME, name, {"model": name, "version": 1})
    clf = container.models.push(ACME, "clf", onnx_models["clf"], runtime="sagemaker", config={"endpoint_name": "clf-endpoint", "max_batch_size": 65536})
    container.deployments.create(ACME, "species", {"model": "clf", "version": clf.version})
    feats = RNG.normal(size=(2, 4)).astype(np.float32)
    event = json.loads((EVENTS / "api_rest_v2_infer.json").read_text())  # acme's authorizer context
    answers = {}
    for name, body in (("mlp-http", _v2(rows, "x")), ("mlp-grpc", _v2(rows, "x")), ("species", _v2(feats, "features"))):
        sent = {**event, "path": f"/v2/models/{name}/infer", "body": json.dumps(body)}
        sent["requestContext"] = {**event["requestContext"], "path": f"/prod/v2/models/{name}/infer"}
        answer = lambda_app(sent, LambdaContext())
        assert answer["statusCode"] == 200, answer["body"]
        answers[name] = _outputs(json.loads(answer["body"]))
    np.testing.assert_allclose(answers["mlp-http"]["y"], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(answers["mlp-grpc"]["y"], answers["mlp-http"]["y"])
    assert answers["species"]["label"].tolist() == in_process(onnx_models["clf"], {"features": feats})["label"].tolist()
