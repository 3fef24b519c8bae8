"""Answers JSON has no plain form for, on every door, as Triton answers them: a BF16 output (a
Triton version's, `ml_dtypes.bfloat16`) as raw bytes in binary and over gRPC, refused in JSON
naming it; NaN and ±Inf written as JSON's `NaN`, `Infinity`, `-Infinity`, never null."""

from __future__ import annotations

import asyncio
import json
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from sluice.domain import Model, ModelVersion
from sluice.domain.signature import Signature, TensorSpec
from tests.integration.grpc.conftest import auth, run_server

if TYPE_CHECKING:
    from collections.abc import Iterator

    from fastapi.testclient import TestClient

    from sluice.domain import Principal
    from sluice.wiring import Container

ml_dtypes = pytest.importorskip("ml_dtypes")
grpcclient = pytest.importorskip("tritonclient.grpc")
web = pytest.importorskip("aiohttp.web")

X = np.array([[1.5, -2.0]], np.float32)
CONFIG = {"name": "m", "max_batch_size": 8, "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [2]}],
          "output": [{"name": "y", "data_type": "TYPE_BF16", "dims": [2]}]}  # fmt: skip


@contextmanager
def bf16_triton() -> Iterator[str]:
    """A stand-in Triton on the loopback, on a loop of its own thread: `m` answers x as BF16 y."""

    async def infer(request: Any) -> Any:
        body = await request.read()
        size = int(request.headers["Inference-Header-Content-Length"])
        y = np.frombuffer(body[size:], "<f4").reshape(-1, 2).astype(ml_dtypes.bfloat16).tobytes()
        output = {"name": "y", "datatype": "BF16", "shape": [len(y) // 4, 2], "parameters": {"binary_data_size": len(y)}}
        header = json.dumps({"model_name": "m", "outputs": [output]}).encode()
        return web.Response(body=header + y, headers={"Inference-Header-Content-Length": str(len(header))})

    async def config(request: Any) -> Any:
        return web.json_response(CONFIG)

    async def ready(request: Any) -> Any:
        return web.Response()

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def start() -> tuple[Any, int]:
        app = web.Application()
        app.router.add_get("/v2/models/m/config", config)
        app.router.add_get("/v2/models/m/ready", ready)
        app.router.add_post("/v2/models/m/infer", infer)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, site._server.sockets[0].getsockname()[1]

    runner, port = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)


@pytest.fixture
def bf16(served: Container, acme: Principal) -> Iterator[Container]:
    """`bf`: a deployment of a Triton version whose server answers BF16."""
    from sluice.domain.origins import parse_allowlist

    with bf16_triton() as url:
        triton = served.runtimes["triton"]  # admits the stand-in, as an operator's allowlist would
        triton.allowed = (*(triton.allowed or ()), *parse_allowlist([url], field="triton_url_prefixes"))
        signature = Signature((TensorSpec("x", "FP32", (-1, 2)),), (TensorSpec("y", "BF16", (-1, 2)),))
        served.registry.create_model(Model("acme", "bf"))
        served.registry.add_version(ModelVersion("acme", "bf", 0, "triton", "", "0" * 64, 0, signature, config={"url": url, "model_name": "m"}))
        served.deployments.create(acme, "bf", {"kind": "single", "model": "bf", "version": 1})
        yield served


def test_a_bf16_output_is_raw_bytes_in_binary_and_over_grpc_and_a_400_in_json(bf16: Container, keys: dict[str, str], client: TestClient) -> None:
    headers = auth(keys["acme"])
    expected = X.astype(ml_dtypes.bfloat16).tobytes()
    body = {"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": X.ravel().tolist()}]}
    as_json = client.post("/v2/models/bf/infer", json=body, headers=headers)
    assert as_json.status_code == 400, as_json.text
    assert as_json.json()["field"] == "outputs.y" and "binary" in as_json.json()["error"]
    binary = client.post("/v2/models/bf/infer", json={**body, "parameters": {"binary_data_output": True}}, headers=headers)
    assert binary.status_code == 200, binary.text
    size = int(binary.headers["inference-header-content-length"])
    (out,) = json.loads(binary.content[:size])["outputs"]
    assert (out["datatype"], out["shape"]) == ("BF16", [1, 2])
    assert binary.content[size:] == expected
    with run_server(bf16) as url:
        tensor = grpcclient.InferInput("x", [1, 2], "FP32")
        tensor.set_data_from_numpy(X)
        answer = grpcclient.InferenceServerClient(url).infer("bf", [tensor], headers=headers).get_response()
    assert answer.outputs[0].datatype == "BF16" and answer.raw_output_contents[0] == expected
    # The JSON refusal came after the answer was counted: counted once, as answered.
    (stats,) = client.get("/v2/models/bf/stats", headers=headers).json()["model_stats"]
    assert (stats["inference_stats"]["success"]["count"], stats["inference_stats"]["fail"]["count"]) == (3, 0)


def test_nan_and_infinity_in_a_json_answer_read_back_as_binary_gives_them(served: Container, acme: Principal, keys: dict[str, str], client: TestClient) -> None:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Div", ["x", "x"], ["r"]), helper.make_node("Log", ["x"], ["l"])], "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, [None, 3]), helper.make_tensor_value_info("l", TensorProto.FLOAT, [None, 3])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    version = served.models.push(acme, "nanny", model.SerializeToString())
    served.deployments.create(acme, "nanny", {"kind": "single", "model": "nanny", "version": version.version})
    body = {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [0.0, 1.0, -1.0]}]}  # r: [nan, 1, 1]; l: [-inf, 0, nan]
    r = client.post("/v2/models/nanny/infer", json=body, headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    assert b"null" not in r.content
    got = {out["name"]: out["data"] for out in json.loads(r.content)["outputs"]}
    np.testing.assert_array_equal(got["r"], [np.nan, 1.0, 1.0])
    np.testing.assert_array_equal(got["l"], [-np.inf, 0.0, np.nan])


def test_a_bf16_answer_another_container_kept_in_the_shared_tier_is_answered_as_the_first_answered_it(settings: Any, acme: Principal) -> None:
    """With the shared prediction cache, a container that did not compute a BF16 answer reads
    it back as BF16 (its v2 datatype, not NumPy's raw bytes): the same bytes in binary, the same
    400 naming the output in JSON, never a 500."""
    from fastapi.testclient import TestClient

    from sluice.api.app import create_app
    from sluice.domain.origins import parse_allowlist
    from sluice.wiring import Container

    shared = settings.replace(prediction_cache_shared=True)
    with bf16_triton() as url:
        first, second = Container.from_settings(shared), Container.from_settings(shared)
        for container in (first, second):
            triton = container.runtimes["triton"]
            triton.allowed = (*(triton.allowed or ()), *parse_allowlist([url], field="triton_url_prefixes"))
        signature = Signature((TensorSpec("x", "FP32", (-1, 2)),), (TensorSpec("y", "BF16", (-1, 2)),))
        first.registry.create_model(Model("acme", "bf"))
        first.registry.add_version(ModelVersion("acme", "bf", 0, "triton", "", "0" * 64, 0, signature, config={"url": url, "model_name": "m"}))
        first.deployments.create(acme, "bf", {"kind": "single", "model": "bf", "version": 1}, cache={"ttl_s": 600, "max_entries": 10})
        _, key = first.keys.create("acme", ["predict"])
        body = {"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": X.ravel().tolist()}], "parameters": {"binary_data_output": True}}
        answers = []
        for container in (first, second):
            r = TestClient(create_app(container)).post("/v2/models/bf/infer", json=body, headers=auth(key))
            assert r.status_code == 200, r.text
            size = int(r.headers["inference-header-content-length"])
            answers.append((json.loads(r.content[:size]), r.content[size:]))
        (computed, computed_bytes), (kept, kept_bytes) = answers
        assert "cached" not in computed["parameters"] and kept["parameters"]["cached"] is True
        assert kept["outputs"] == computed["outputs"] and kept_bytes == computed_bytes == X.astype(ml_dtypes.bfloat16).tobytes()
        as_json = TestClient(create_app(second)).post("/v2/models/bf/infer", json={"inputs": body["inputs"]}, headers=auth(key))
        assert as_json.status_code == 400 and as_json.json()["field"] == "outputs.y" and "binary" in as_json.json()["error"], as_json.text
