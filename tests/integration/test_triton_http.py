"""The `triton` runtime's HTTP transport against a stand-in Triton on the loopback (aiohttp's
own server): what goes on the wire, and answers a real Triton gives only sometimes (outputs as
JSON, BF16, compressed bodies, errors that are not Triton's JSON)."""

from __future__ import annotations

import asyncio
import gzip
import json
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from aiohttp import web

from sluice.domain import ModelVersion
from sluice.domain.errors import BackendError, InvalidInput, Unavailable
from sluice.domain.signature import Signature
from sluice.runtimes.triton import TritonRuntime

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

CONFIG = {
    "name": "m",
    "max_batch_size": 8,
    "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [2]}],
    "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [2]}],
}


def _version(port: int) -> ModelVersion:
    return ModelVersion(
        "acme", "m", 1, "triton", "", "0" * 64, 0, Signature((), ()), config={"url": f"http://127.0.0.1:{port}", "model_name": "m"}
    )


def _binary(outputs: list[tuple[str, str, list[int], bytes]], *, odd: bool = False) -> tuple[bytes, int]:
    """A binary answer: the JSON header and the outputs' bytes; `odd`: the header padded so the
    first output starts at an odd offset (1 past a multiple of 8)."""
    header = json.dumps(
        {"model_name": "m", "outputs": [{"name": n, "datatype": d, "shape": s, "parameters": {"binary_data_size": len(b)}} for n, d, s, b in outputs]}
    ).encode()
    if odd:
        header += b" " * ((1 - len(header)) % 8)
    return header + b"".join(b for *_, b in outputs), len(header)


def _serve(infer: Any, *, config: dict[str, Any] = CONFIG, metadata: dict[str, Any] | None = None, **extra: Any) -> Callable[[Callable[[int], Awaitable[Any]]], Any]:
    """Run `test(port)` in a fresh loop against a server answering `config`, readiness,
    `metadata` where given and `infer(request, header, tail)`; what it saw is in `seen`."""

    def run(test: Callable[[int], Awaitable[Any]]) -> Any:
        async def main() -> Any:
            async def config_route(request: web.Request) -> web.Response:
                return web.json_response(config)

            async def metadata_route(request: web.Request) -> web.Response:
                return web.json_response(metadata)

            async def ready(request: web.Request) -> web.Response:
                return web.Response()

            async def infer_route(request: web.Request) -> web.StreamResponse:
                body = await request.read()
                size = request.headers.get("Inference-Header-Content-Length")
                end = int(size) if size else len(body)
                extra.setdefault("seen", []).append({"headers": dict(request.headers), "header": json.loads(body[:end]), "tail": body[end:]})
                return await infer(request, json.loads(body[:end]), body[end:])

            app = web.Application()
            app.router.add_get("/v2/models/m/config", config_route)
            app.router.add_get("/v2/models/m/ready", ready)
            if metadata is not None:
                app.router.add_get("/v2/models/m", metadata_route)
            app.router.add_post("/v2/models/m/infer", infer_route)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            try:
                return await test(port)
            finally:
                await runner.cleanup()

        return asyncio.run(main())

    return run


async def _infer(port: int, inputs: dict[str, np.ndarray], outputs: list[str] | None = None, **options: Any) -> dict[str, np.ndarray]:
    runtime = TritonRuntime(timeout_s=5, **options)
    try:
        return (await runtime.infer(_version(port), inputs, outputs)).outputs
    finally:
        await runtime.close()


def test_the_request_is_the_binary_extension_and_asks_for_no_compression() -> None:
    x = np.array([[1.5, -2.0], [0.25, 8.0]], np.float32)
    calls: list[dict[str, Any]] = []

    async def infer(request: web.Request, header: dict[str, Any], tail: bytes) -> web.Response:
        body, size = _binary([("y", "FP32", [2, 2], np.frombuffer(tail, "<f4").tobytes())])
        return web.Response(body=body, headers={"Inference-Header-Content-Length": str(size)})

    got = _serve(infer, seen=calls)(lambda port: _infer(port, {"x": x}))
    np.testing.assert_array_equal(got["y"], x)
    (call,) = calls
    assert call["header"] == {
        "inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "parameters": {"binary_data_size": 16}}],
        "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
    }
    assert call["tail"] == x.astype("<f4").tobytes()
    assert call["headers"]["Accept-Encoding"] == "identity"  # aiohttp's default asks for gzip, which Triton obliges


def test_outputs_answered_as_json_are_read() -> None:
    async def infer(request: web.Request, header: dict[str, Any], tail: bytes) -> web.Response:
        outputs = [
            {"name": "y", "datatype": "FP32", "shape": [1, 2], "data": [0.5, -1.0]},
            {"name": "label", "datatype": "BYTES", "shape": [1], "data": ["cat"]},
            {"name": "flag", "datatype": "BOOL", "shape": [1], "data": [True]},
        ]
        return web.json_response({"model_name": "m", "outputs": outputs})

    got = _serve(infer)(lambda port: _infer(port, {"x": np.zeros((1, 2), np.float32)}, ["y", "label", "flag"]))
    assert got["y"].dtype == np.float32 and got["y"].tolist() == [[0.5, -1.0]]
    assert got["label"].tolist() == ["cat"]
    assert got["flag"].dtype == np.bool_ and got["flag"].tolist() == [True]


def test_bf16_outputs_come_back_as_ml_dtypes_bfloat16() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = np.array([[1.0, -2.5, 3.140625]], dtype=ml_dtypes.bfloat16)

    async def infer(request: web.Request, header: dict[str, Any], tail: bytes) -> web.Response:
        body, size = _binary([("y", "BF16", [1, 3], values.tobytes())], odd=True)  # copied
        return web.Response(body=body, headers={"Inference-Header-Content-Length": str(size)})

    got = _serve(infer)(lambda port: _infer(port, {"x": np.zeros((1, 2), np.float32)}))
    assert got["y"].dtype == np.dtype(ml_dtypes.bfloat16)
    assert got["y"].tobytes() == values.tobytes()


def test_unaligned_outputs_are_copied_and_every_numeric_output_is_read_only() -> None:
    y = np.array([[1.0, 2.0]], np.float64)
    n = np.array([[7]], np.int8)

    async def infer(request: web.Request, header: dict[str, Any], tail: bytes) -> web.Response:
        body, size = _binary([("n", "INT8", [1, 1], n.tobytes()), ("y", "FP64", [1, 2], y.tobytes())], odd=True)
        return web.Response(body=body, headers={"Inference-Header-Content-Length": str(size)})

    got = _serve(infer)(lambda port: _infer(port, {"x": np.zeros((1, 2), np.float32)}, ["n", "y"]))
    assert got["y"].flags.aligned and got["y"].tolist() == y.tolist()
    assert not got["y"].flags.writeable and not got["n"].flags.writeable


def test_a_compressed_answer_is_still_read() -> None:
    async def infer(request: web.Request, header: dict[str, Any], tail: bytes) -> web.Response:
        body, size = _binary([("y", "FP32", [1, 2], np.array([3.0, 4.0], "<f4").tobytes())])
        return web.Response(
            body=gzip.compress(body), headers={"Inference-Header-Content-Length": str(size), "Content-Encoding": "gzip"}
        )

    got = _serve(infer)(lambda port: _infer(port, {"x": np.zeros((1, 2), np.float32)}))
    assert got["y"].tolist() == [[3.0, 4.0]]


@pytest.mark.parametrize(
    ("status", "body", "error", "message"),
    [
        (400, {"error": "unexpected shape for input 'x' for model 'm'"}, InvalidInput, "the model server rejected input 'x'"),
        (400, {"error": "inference request batch-size must be <= 8"}, InvalidInput, "more rows than the model takes"),
        (400, b"<html>bad</html>", InvalidInput, "the model server rejected the request's inputs"),
        (404, {"error": "Request for unknown model"}, BackendError, "the Triton server has no model 'm'"),
        (429, {"error": "busy"}, Unavailable, "busy or not ready"),
        (503, b"", Unavailable, "busy or not ready"),
        (500, b"<html>oops</html>", BackendError, "the Triton server failed (500)"),
        (307, b"", BackendError, "the Triton server failed (307)"),  # a redirect is not followed
    ],
)
def test_failed_answers_map_as_before(status: int, body: Any, error: type[Exception], message: str) -> None:
    async def infer(request: web.Request, header: dict[str, Any], tail: bytes) -> web.Response:
        raw = json.dumps(body).encode() if isinstance(body, dict) else body
        headers = {"Location": "http://127.0.0.1:9/elsewhere"} if status == 307 else {}
        return web.Response(status=status, body=raw, headers=headers)

    with pytest.raises(error) as err:
        _serve(infer)(lambda port: _infer(port, {"x": np.zeros((1, 2), np.float32)}))
    assert message in err.value.message  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ({"Inference-Header-Content-Length": "twelve"}, b"{}"),
        ({"Inference-Header-Content-Length": "999"}, b'{"outputs": []}'),
        ({}, b"not json"),
        ({}, b'{"outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 2], "parameters": {"binary_data_size": 8}}]}'),
    ],
    ids=["header-not-a-number", "header-past-the-body", "not-json", "binary-bytes-missing"],
)
def test_malformed_answers_are_backend_errors(headers: dict[str, str], body: bytes) -> None:
    async def infer(request: web.Request, header: dict[str, Any], tail: bytes) -> web.Response:
        return web.Response(body=body, headers=headers)

    with pytest.raises(BackendError):
        _serve(infer)(lambda port: _infer(port, {"x": np.zeros((1, 2), np.float32)}))


def test_a_missing_output_is_named() -> None:
    async def infer(request: web.Request, header: dict[str, Any], tail: bytes) -> web.Response:
        return web.json_response({"model_name": "m", "outputs": []})

    with pytest.raises(BackendError, match="without output 'y'"):
        _serve(infer)(lambda port: _infer(port, {"x": np.zeros((1, 2), np.float32)}))


def test_without_aiohttp_a_call_is_a_backend_error_saying_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    async def infer(request: web.Request, header: dict[str, Any], tail: bytes) -> web.Response:
        raise AssertionError("no request can be sent without aiohttp")

    async def call(port: int) -> Any:
        monkeypatch.setitem(sys.modules, "aiohttp", None)  # as in a layer without the triton extra
        return await _infer(port, {"x": np.zeros((1, 2), np.float32)})

    with pytest.raises(BackendError, match=r"aiohttp, which is not installed here: install sluice\[triton\]"):
        _serve(infer)(call)


def test_one_session_per_loop_and_server() -> None:
    async def infer(request: web.Request, header: dict[str, Any], tail: bytes) -> web.Response:
        body, size = _binary([("y", "FP32", [1, 2], tail)])
        return web.Response(body=body, headers={"Inference-Header-Content-Length": str(size)})

    async def test(port: int) -> tuple[int, bool]:
        runtime = TritonRuntime(timeout_s=5)
        transport = runtime._transports["http"]
        try:
            x = np.zeros((1, 2), np.float32)
            await asyncio.gather(*(runtime.infer(_version(port), {"x": x}) for _ in range(5)))
            sessions = transport._sessions[asyncio.get_running_loop()]
            (session,) = sessions.values()
            return len(sessions), session.closed
        finally:
            await runtime.close()

    assert _serve(infer)(test) == (1, False)


def test_neither_aiohttp_nor_tritonclient_is_imported_until_a_call() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from sluice.runtimes.triton import TritonRuntime; TritonRuntime(); "
        "print(sorted(m for m in ('aiohttp', 'tritonclient', 'ml_dtypes') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "[]"


# a config's `reshape`: Triton's inference API takes and gives `dims`; the model sees
# `reshape.shape`. sluice declares the model's shape and sends and reads back the wire's.
def _reshaping_server(max_batch_size: int, test: Callable[[TritonRuntime, ModelVersion], Awaitable[Any]]) -> tuple[Any, list[dict[str, Any]]]:
    """A stand-in Triton whose model `m` declares x and y as `dims: [4]` reshaped to [2, 2],
    answering y = x and refusing, as Triton does, an input whose shape is not its dims."""
    batch = [-1] if max_batch_size else []
    config = {
        "name": "m",
        "max_batch_size": max_batch_size,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [4], "reshape": {"shape": [2, 2]}}],
        "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [4], "reshape": {"shape": [2, 2]}}],
    }
    metadata = {
        "name": "m", "versions": ["1"], "platform": "onnxruntime_onnx",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [*batch, 4]}],
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [*batch, 4]}],
    }  # fmt: skip

    seen: list[dict[str, Any]] = []

    async def infer(request: web.Request, header: dict[str, Any], tail: bytes) -> web.Response:
        seen.append(header)
        (x,) = header["inputs"]
        if x["shape"][len(batch) :] != [4] or len(x["shape"]) != len(batch) + 1:
            return web.json_response({"error": f"unexpected shape for input 'x' for model 'm'. Expected {[*batch, 4]}, got {x['shape']}"}, status=400)
        out = json.dumps({"model_name": "m", "outputs": [{"name": "y", "datatype": "FP32", "shape": x["shape"], "parameters": {"binary_data_size": len(tail)}}]}).encode()
        return web.Response(body=out + tail, headers={"Inference-Header-Content-Length": str(len(out))})

    async def run(port: int) -> Any:
        runtime = TritonRuntime(timeout_s=5)
        try:
            return await test(runtime, _version(port))
        finally:
            await runtime.close()

    return _serve(infer, config=config, metadata=metadata)(run), seen


def test_an_unbatched_reshape_is_sent_in_the_configs_dims_and_read_back_in_the_models() -> None:
    async def test(runtime: TritonRuntime, version: ModelVersion) -> Any:
        signature = await runtime.metadata(version)
        x = np.arange(4, dtype=np.float32).reshape(signature.input("x").shape)  # the shape sluice declares
        return signature, (await runtime.infer(version, {"x": x})).outputs

    (signature, outputs), seen = _reshaping_server(0, test)
    assert signature.input("x").shape == (2, 2) and signature.output("y").shape == (2, 2)
    assert seen[0]["inputs"][0]["shape"] == [4]  # Triton's dims, not the caller's [2, 2]
    np.testing.assert_array_equal(outputs["y"], np.arange(4, dtype=np.float32).reshape(2, 2))


def test_a_batched_reshape_is_sent_as_rows_of_the_configs_dims() -> None:
    async def test(runtime: TritonRuntime, version: ModelVersion) -> Any:
        signature = await runtime.metadata(version)
        x = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
        return signature, (await runtime.infer(version, {"x": x})).outputs

    (signature, outputs), seen = _reshaping_server(4, test)
    assert signature.input("x").shape == (-1, 2, 2)
    assert seen[0]["inputs"][0]["shape"] == [3, 4]
    np.testing.assert_array_equal(outputs["y"], np.arange(12, dtype=np.float32).reshape(3, 2, 2))
