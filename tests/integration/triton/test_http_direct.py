"""The `triton` runtime's HTTP transport (binary tensors over aiohttp, no tritonclient) against a
real local Triton: every answer the same, bit for bit, dtype for dtype, as `tritonclient.http`
gets from the same server for the same request; failures mapped as before.

A second server of its own serves three models built here (the session's server keeps its two):
`multi` (FP32 and INT64 in; FP32, INT64, BOOL, FP64 and INT8 out, so outputs sit at offsets of
the body their type cannot be read at), `half` (FP16 in and out) and `text` (BYTES and FP32 in,
BYTES and FP32 out).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from sluice.domain.errors import BackendError, InvalidInput, Unavailable
from sluice.endpoints import local_triton
from sluice.endpoints.repository import TritonOptions, build_model
from sluice.runtimes.triton import TritonRuntime
from sluice.services.models import read_signature
from tests.integration.triton.conftest import _graph_model, make_version

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sluice.domain import ModelVersion

pytestmark = pytest.mark.triton
httpclient = pytest.importorskip("tritonclient.http")
RNG = np.random.default_rng(31)
MULTI_OUTPUTS = ["total", "twice", "positive", "wide", "small"]


def _batched(width: int, **types: int) -> list[Any]:
    """The value infos of tensors of shape [batch, width], by name: each its ONNX type."""
    from onnx import helper

    return [helper.make_tensor_value_info(name, kind, ["batch", width]) for name, kind in types.items()]


def multi_onnx() -> bytes:
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["a", "nf"], ["total"]),
        helper.make_node("Add", ["n", "n"], ["twice"]),
        helper.make_node("Greater", ["a", "zero"], ["positive"]),
        helper.make_node("Cast", ["a"], ["wide"], to=TensorProto.DOUBLE),
        helper.make_node("Cast", ["n"], ["small"], to=TensorProto.INT8),
    ]
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    inputs = _batched(3, a=TensorProto.FLOAT, n=TensorProto.INT64)
    outputs = _batched(3, total=TensorProto.FLOAT, twice=TensorProto.INT64, positive=TensorProto.BOOL, wide=TensorProto.DOUBLE, small=TensorProto.INT8)
    return _graph_model(nodes, inputs, outputs, [zero], "multi")


def half_onnx() -> bytes:
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Add", ["h", "h"], ["doubled"]),
        helper.make_node("Cast", ["h"], ["single"], to=TensorProto.FLOAT),
    ]
    return _graph_model(nodes, _batched(5, h=TensorProto.FLOAT16), _batched(5, doubled=TensorProto.FLOAT16, single=TensorProto.FLOAT), [], "half")


def text_onnx() -> bytes:
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Identity", ["s"], ["echo"]), helper.make_node("Add", ["x", "x"], ["sum"])]
    inputs = _batched(2, s=TensorProto.STRING) + _batched(1, x=TensorProto.FLOAT)
    outputs = _batched(2, echo=TensorProto.STRING) + _batched(1, sum=TensorProto.FLOAT)
    return _graph_model(nodes, inputs, outputs, [], "text")


MODELS = {"multi": multi_onnx, "half": half_onnx, "text": text_onnx}


@pytest.fixture(scope="module")
def models() -> dict[str, bytes]:
    return {name: build() for name, build in MODELS.items()}


@pytest.fixture(scope="module")
def server(triton_env: local_triton.TritonEnv, models: dict[str, bytes], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("direct-repository")
    home = tmp_path_factory.mktemp("direct-home")
    for name, data in models.items():
        build_model(root, name, 1, read_signature(data), data, flavour="local", options=TritonOptions(max_batch_size=8))
    started = local_triton.start(root, home=home, port=local_triton.free_base_port(), env=triton_env)
    try:
        yield started.http_url
    finally:
        local_triton.stop(home)


def _version(server: str, models: dict[str, bytes], name: str) -> ModelVersion:
    return make_version(name, models[name], "triton", {"url": server, "model_name": name})


def _sluice(version: ModelVersion, inputs: dict[str, np.ndarray], outputs: list[str] | None = None, **options: Any) -> dict[str, np.ndarray]:
    async def run() -> dict[str, np.ndarray]:
        runtime = TritonRuntime(timeout_s=10, **options)
        try:
            return (await runtime.infer(version, inputs, outputs)).outputs
        finally:
            await runtime.close()

    return asyncio.run(run())


def _tritonclient(server: str, model: str, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
    """What `tritonclient.http` gets for the same request: binary tensors both ways."""
    from tritonclient.utils import np_to_triton_dtype

    client = httpclient.InferenceServerClient(server.removeprefix("http://"))
    try:
        tensors = []
        for name, array in inputs.items():
            tensor = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            tensors.append(tensor.set_data_from_numpy(array, binary_data=True))
        requested = [httpclient.InferRequestedOutput(name, binary_data=True) for name in outputs]
        result = client.infer(model, tensors, outputs=requested)
        return {name: result.as_numpy(name) for name in outputs}
    finally:
        client.close()


def _assert_identical(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert list(got) == list(want)
    for name, expected in want.items():
        array = got[name]
        assert (array.dtype, array.shape) == (expected.dtype, expected.shape), name
        if expected.dtype == object:
            # tritonclient gives bytes; the runtime gives text, as it always has (`_text`)
            assert array.tolist() == np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(expected).tolist(), name
        else:
            assert np.array_equal(array, expected, equal_nan=array.dtype.kind == "f"), name
            assert array.tobytes() == expected.tobytes(), name  # bit for bit, -0.0 and NaNs too
            assert not array.flags.writeable and not expected.flags.writeable, name  # read-only, as before


def _multi_inputs(rows: int) -> dict[str, np.ndarray]:
    a = RNG.normal(size=(rows, 3)).astype(np.float32)
    a[0, 0] = -0.0
    a[-1, -1] = np.float32(3.4e38)
    return {"a": a, "n": RNG.integers(-100, 100, size=(rows, 3), dtype=np.int64)}


def test_multi_input_multi_output_answers_equal_tritonclients(server: str, models: dict[str, bytes]) -> None:
    inputs = _multi_inputs(5)
    got = _sluice(_version(server, models, "multi"), inputs)
    _assert_identical(got, _tritonclient(server, "multi", inputs, MULTI_OUTPUTS))
    assert got["total"].flags.aligned and got["wide"].flags.aligned  # copied where the body had them unaligned


def test_requested_outputs_only_and_in_their_order(server: str, models: dict[str, bytes]) -> None:
    inputs = _multi_inputs(3)
    wanted = ["small", "wide"]
    got = _sluice(_version(server, models, "multi"), inputs, wanted)
    _assert_identical(got, _tritonclient(server, "multi", inputs, wanted))


def test_json_inputs_below_the_threshold_give_the_same_answer(server: str, models: dict[str, bytes]) -> None:
    inputs = _multi_inputs(4)
    got = _sluice(_version(server, models, "multi"), inputs, binary_threshold_bytes=1 << 20)
    _assert_identical(got, _tritonclient(server, "multi", inputs, MULTI_OUTPUTS))


def test_more_rows_than_the_model_batches_are_split_and_joined(server: str, models: dict[str, bytes]) -> None:
    inputs = _multi_inputs(19)  # max_batch_size 8: three requests
    got = _sluice(_version(server, models, "multi"), inputs)
    want = _tritonclient(server, "multi", {k: v[:8] for k, v in inputs.items()}, MULTI_OUTPUTS)
    for name in MULTI_OUTPUTS:
        assert got[name].shape == (19, 3) and got[name].dtype == want[name].dtype
        assert np.array_equal(got[name][:8], want[name])


def test_fp16_travels_and_comes_back_as_fp16(server: str, models: dict[str, bytes]) -> None:
    h = RNG.normal(size=(4, 5)).astype(np.float16)
    h[0, :3] = [np.inf, -0.0, np.float16(6.1e-5)]  # inf, a signed zero, a subnormal
    got = _sluice(_version(server, models, "half"), {"h": h})
    _assert_identical(got, _tritonclient(server, "half", {"h": h}, ["doubled", "single"]))
    assert got["doubled"].dtype == np.float16
    # FP16 goes binary whatever the threshold (JSON has no half-precision numbers)
    _assert_identical(_sluice(_version(server, models, "half"), {"h": h}, binary_threshold_bytes=1 << 20), got)


def test_bytes_tensors_round_trip(server: str, models: dict[str, bytes]) -> None:
    s = np.array([["a", "bé"], ["", "日本語"], [b"raw bytes", "x" * 300]], dtype=object)
    x = np.arange(3, dtype=np.float32).reshape(3, 1)
    got = _sluice(_version(server, models, "text"), {"s": s, "x": x})
    _assert_identical(got, _tritonclient(server, "text", {"s": s, "x": x}, ["echo", "sum"]))
    assert got["echo"].tolist() == [["a", "bé"], ["", "日本語"], ["raw bytes", "x" * 300]]
    # below the threshold BYTES go as JSON strings: the same answer
    as_json = _sluice(_version(server, models, "text"), {"s": s, "x": x}, binary_threshold_bytes=1 << 20)
    assert as_json["echo"].tolist() == got["echo"].tolist()
    # numpy's fixed-width strings are BYTES too (tritonclient's serializer refused `<U` arrays)
    fixed = _sluice(_version(server, models, "text"), {"s": s.astype(str), "x": x})
    assert fixed["echo"].tolist() == got["echo"].tolist()


def test_a_wrong_shape_is_the_same_invalid_input(server: str, models: dict[str, bytes]) -> None:
    version = _version(server, models, "multi")
    inputs = _multi_inputs(2)
    with pytest.raises(InvalidInput) as err:
        _sluice(version, {"a": inputs["a"][:, :2], "n": inputs["n"]})
    assert (err.value.status, err.value.field) == (400, "inputs.a")
    assert err.value.message == "the model server rejected input 'a' (its name, shape or datatype does not match the model)"
    with pytest.raises(InvalidInput) as err:  # a datatype the model does not take
        _sluice(version, {"a": inputs["a"], "n": inputs["n"].astype(np.int32)})
    assert err.value.field == "inputs.n"
    with pytest.raises(InvalidInput) as err:  # a dtype Triton has no name for: refused before any call
        _sluice(version, {"a": inputs["a"].astype(np.complex64), "n": inputs["n"]})
    assert err.value.message == "input 'a' has dtype complex64, which Triton cannot take"


def test_a_model_the_server_lacks_is_a_backend_error(server: str, models: dict[str, bytes]) -> None:
    version = make_version("multi", models["multi"], "triton", {"url": server, "model_name": "absent"})
    with pytest.raises(BackendError) as err:
        _sluice(version, _multi_inputs(1))
    assert (err.value.status, err.value.message) == (502, "the Triton server has no model 'absent'")


def test_an_output_the_model_lacks_is_refused(server: str, models: dict[str, bytes]) -> None:
    with pytest.raises(InvalidInput):  # Triton: 400 "unexpected inference output 'nope'"
        _sluice(_version(server, models, "multi"), _multi_inputs(1), ["nope"])


class _Vanishing:
    """A server that answers the model's config and readiness as Triton would, then drops the
    connection of every inference request without a word: a server gone away mid-request."""

    def __init__(self, config: bytes) -> None:
        self.config = config
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            while True:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    head += chunk
                line = head.split(b"\r\n", 1)[0]
                if line.startswith(b"POST"):
                    return  # gone: the connection closes with no answer
                body = self.config if b"/config" in line else b""
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    def __enter__(self) -> _Vanishing:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def test_a_server_gone_away_is_unavailable(server: str, models: dict[str, bytes]) -> None:
    import urllib.request

    with urllib.request.urlopen(f"{server}/v2/models/multi/config", timeout=5) as response:
        config = response.read()
    with _Vanishing(config) as vanishing:
        version = make_version("multi", models["multi"], "triton", {"url": f"http://127.0.0.1:{vanishing.port}", "model_name": "multi"})

        async def run() -> None:
            runtime = TritonRuntime(timeout_s=5)
            try:
                await runtime.load(version)  # config and readiness answered
                await runtime.infer(version, _multi_inputs(1))
            finally:
                await runtime.close()

        with pytest.raises(Unavailable) as err:
            asyncio.run(run())
    assert (err.value.status, err.value.message) == (503, "the Triton server is not reachable")
