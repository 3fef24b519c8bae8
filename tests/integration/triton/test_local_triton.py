"""sluice's Triton and SageMaker runtimes against a real local Triton server."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pytest

from sluice.domain.errors import (
    Conflict,
    DeadlineExceeded,
    Forbidden,
    InvalidInput,
    PayloadTooLarge,
    Unavailable,
)
from sluice.endpoints import local_triton
from sluice.runtimes.sagemaker import SageMakerRuntime
from sluice.runtimes.triton import TritonRuntime
from tests.integration.triton.conftest import in_process, make_version

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import ModelVersion
    from sluice.endpoints.local_triton import LocalTriton

pytestmark = pytest.mark.triton
RNG = np.random.default_rng(2024)


def _rows(n: int, width: int) -> np.ndarray:
    return RNG.normal(size=(n, width)).astype(np.float32)


async def _triton_infer(version: ModelVersion, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    runtime = TritonRuntime(timeout_s=10)
    try:
        await runtime.load(version)
        return (await runtime.infer(version, inputs)).outputs
    finally:
        await runtime.close()


def _assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(want)
    for name, expected in want.items():
        assert got[name].shape == expected.shape, name
        if expected.dtype == object:
            assert got[name].tolist() == expected.tolist(), name
        else:
            np.testing.assert_allclose(got[name], expected, rtol=1e-6, atol=1e-6)


# the triton runtime ------------------------------------------------------------------------
def test_triton_runtime_gives_onnxruntime_numbers(
    triton_versions: dict[str, ModelVersion], onnx_models: dict[str, bytes]
) -> None:
    mlp = {"x": _rows(7, 8)}
    _assert_same(asyncio.run(_triton_infer(triton_versions["mlp"], mlp)), in_process(onnx_models["mlp"], mlp))
    clf = {"features": _rows(5, 4)}
    got = asyncio.run(_triton_infer(triton_versions["clf"], clf))
    # the [batch] string label travels as [batch, 1] and comes back as the model shaped it
    _assert_same(got, in_process(onnx_models["clf"], clf))


def test_triton_runtime_sends_large_tensors_as_binary(
    triton_versions: dict[str, ModelVersion], onnx_models: dict[str, bytes]
) -> None:
    inputs = {"x": _rows(16, 8)}  # 512 bytes: above a zero threshold

    async def run() -> dict[str, np.ndarray]:
        runtime = TritonRuntime(binary_threshold_bytes=0)
        try:
            return (await runtime.infer(triton_versions["mlp"], inputs)).outputs
        finally:
            await runtime.close()

    _assert_same(asyncio.run(run()), in_process(onnx_models["mlp"], inputs))


def test_triton_runtime_metadata_reads_the_server(triton_versions: dict[str, ModelVersion]) -> None:
    async def run() -> object:
        runtime = TritonRuntime()
        try:
            return await runtime.metadata(triton_versions["clf"])
        finally:
            await runtime.close()

    signature = asyncio.run(run())
    assert [(s.name, s.datatype, s.shape) for s in signature.inputs] == [("features", "FP32", (-1, 4))]
    outputs = {s.name: (s.datatype, s.shape, s.role) for s in signature.outputs}
    assert outputs == {"label": ("BYTES", (-1,), "label"), "probabilities": ("FP32", (-1, 3), "probabilities")}


def test_served_config_has_dynamic_batching(triton_server: LocalTriton) -> None:
    with urllib.request.urlopen(f"{triton_server.http_url}/v2/models/mlp/config", timeout=5) as response:
        config = json.loads(response.read())
    assert config["max_batch_size"] == 16
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 500
    assert config["dynamic_batching"]["preferred_batch_size"] == [4, 8]
    assert config["instance_group"][0]["kind"] == "KIND_CPU"


def test_concurrent_requests_all_answer(
    triton_versions: dict[str, ModelVersion], onnx_models: dict[str, bytes]
) -> None:
    batches = [{"x": _rows(1 + i % 3, 8)} for i in range(24)]

    async def run() -> list[dict[str, np.ndarray]]:
        runtime = TritonRuntime()
        try:
            results = await asyncio.gather(*(runtime.infer(triton_versions["mlp"], b) for b in batches))
            return [r.outputs for r in results]
        finally:
            await runtime.close()

    for got, inputs in zip(asyncio.run(run()), batches, strict=True):
        _assert_same(got, in_process(onnx_models["mlp"], inputs))


def test_triton_runtime_splits_requests_above_max_batch_size(
    triton_versions: dict[str, ModelVersion], onnx_models: dict[str, bytes]
) -> None:
    inputs = {"x": _rows(50, 8)}  # mlp batches at most 16 rows
    _assert_same(asyncio.run(_triton_infer(triton_versions["mlp"], inputs)), in_process(onnx_models["mlp"], inputs))


def test_triton_runtime_refuses_a_bad_input(triton_versions: dict[str, ModelVersion]) -> None:
    with pytest.raises(InvalidInput) as err:
        asyncio.run(_triton_infer(triton_versions["mlp"], {"x": _rows(2, 5)}))
    assert err.value.status == 400
    assert err.value.field == "inputs.x"


def test_triton_runtime_without_a_server_is_unavailable(onnx_models: dict[str, bytes]) -> None:
    version = make_version("mlp", onnx_models["mlp"], "triton", {"url": f"http://127.0.0.1:{_closed_port()}"})
    with pytest.raises(Unavailable) as err:
        asyncio.run(_triton_infer(version, {"x": _rows(1, 8)}))
    assert err.value.status == 503


def test_a_server_that_never_answers_exceeds_the_deadline(onnx_models: dict[str, bytes]) -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # connections complete in the kernel's backlog; nothing ever answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        version = make_version("mlp", onnx_models["mlp"], "triton", {"url": url})

        async def ask() -> None:
            runtime = TritonRuntime(timeout_s=0.5)
            try:
                await runtime.infer(version, {"x": _rows(1, 8)})
            finally:
                await runtime.close()

        with pytest.raises(DeadlineExceeded):
            asyncio.run(ask())
        runtime = SageMakerRuntime(endpoint_url=url, timeout_s=0.5)
        clf = make_version("clf", onnx_models["clf"], "sagemaker", {"endpoint_name": "clf-endpoint"})
        with pytest.raises(DeadlineExceeded):
            asyncio.run(runtime.infer(clf, {"features": _rows(1, 4)}))
        runtime.close()


# the sagemaker runtime against the server's SageMaker port ---------------------------------
def _assert_answers_as_onnxruntime(
    runtime: SageMakerRuntime, version: ModelVersion, inputs: dict[str, np.ndarray], model: bytes
) -> None:
    """`runtime` answers `inputs` with ONNX Runtime's numbers for `model`; closed after."""
    try:
        _assert_same(asyncio.run(runtime.infer(version, inputs)).outputs, in_process(model, inputs))
    finally:
        runtime.close()


@pytest.mark.parametrize(
    ("threshold", "content_type"),
    [(1 << 30, "application/json"), (0, "application/vnd.sagemaker-triton.binary+json;json-header-size=")],
    ids=["json", "binary+json"],
)
def test_sagemaker_wire_formats_give_onnxruntime_numbers(
    triton_server: LocalTriton,
    sagemaker_version: ModelVersion,
    onnx_models: dict[str, bytes],
    threshold: int,
    content_type: str,
) -> None:
    runtime = SageMakerRuntime(endpoint_url=triton_server.sagemaker_url, binary_threshold_bytes=threshold)
    inputs = {"features": _rows(9, 4)}
    _, sent_type = runtime.encode(sagemaker_version, inputs)
    assert sent_type.startswith(content_type)
    _assert_answers_as_onnxruntime(runtime, sagemaker_version, inputs, onnx_models["clf"])


def test_sagemaker_one_megabyte_tensor_goes_binary(
    triton_server: LocalTriton, sagemaker_version: ModelVersion, onnx_models: dict[str, bytes]
) -> None:
    runtime = SageMakerRuntime(endpoint_url=triton_server.sagemaker_url)
    inputs = {"features": _rows(65536, 4)}  # 1 MiB of float32
    body, sent_type = runtime.encode(sagemaker_version, inputs)
    assert sent_type.startswith("application/vnd.sagemaker-triton.binary+json")
    assert len(body) < 1024 * 1024 + 1024
    _assert_answers_as_onnxruntime(runtime, sagemaker_version, inputs, onnx_models["clf"])


def test_sagemaker_splits_requests_above_a_known_max_batch_size(
    triton_server: LocalTriton, sagemaker_version: ModelVersion, onnx_models: dict[str, bytes]
) -> None:
    version = replace(sagemaker_version, config={**sagemaker_version.config, "max_batch_size": 4})
    calls: list[int] = []
    runtime = SageMakerRuntime(endpoint_url=triton_server.sagemaker_url)
    runtime.client.meta.events.register(
        "before-send.sagemaker-runtime.InvokeEndpoint", lambda request, **_: calls.append(len(request.body))
    )
    inputs = {"features": _rows(10, 4)}
    _assert_answers_as_onnxruntime(runtime, version, inputs, onnx_models["clf"])
    assert len(calls) == 3


def test_sagemaker_refuses_requests_over_the_synchronous_limit(sagemaker_version: ModelVersion) -> None:
    runtime = SageMakerRuntime(endpoint_url="http://127.0.0.1:9")  # never called
    with pytest.raises(PayloadTooLarge) as err:
        asyncio.run(runtime.infer(sagemaker_version, {"features": _rows(400_000, 4)}))  # 6.1 MiB
    assert err.value.status == 413
    assert "asynchronous inference" in err.value.message and "batch" in err.value.message


def test_sagemaker_bad_input_is_invalid_input(triton_server: LocalTriton, sagemaker_version: ModelVersion) -> None:
    runtime = SageMakerRuntime(endpoint_url=triton_server.sagemaker_url)
    with pytest.raises(InvalidInput) as err:
        asyncio.run(runtime.infer(sagemaker_version, {"features": _rows(3, 6)}))
    assert err.value.field == "inputs.features"
    runtime.close()


def test_sagemaker_without_a_server_is_unavailable(sagemaker_version: ModelVersion) -> None:
    runtime = SageMakerRuntime(endpoint_url=f"http://127.0.0.1:{_closed_port()}", timeout_s=5)
    with pytest.raises(Unavailable):
        asyncio.run(runtime.infer(sagemaker_version, {"features": _rows(2, 4)}))
    runtime.close()


# the server's lifecycle --------------------------------------------------------------------
def test_status_lists_ready_models(triton_server: LocalTriton, triton_home: Path) -> None:
    info = local_triton.status(triton_home)
    assert info["running"] and info["ready"]
    assert {m["name"]: m["state"] for m in info["models"]} == {"clf": "READY", "mlp": "READY"}
    assert info["default_model"] == "clf"


def test_a_second_server_in_the_same_home_is_refused(
    triton_server: LocalTriton, served_repository: Path, triton_home: Path
) -> None:
    with pytest.raises(Conflict, match="already running"):
        local_triton.start(served_repository, home=triton_home, port=local_triton.free_base_port())


def test_a_taken_port_is_named(triton_env: local_triton.TritonEnv, served_repository: Path, tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(Conflict, match=f"port {port} is already in use"):
            local_triton.start(served_repository, home=tmp_path, port=port, env=triton_env)


@pytest.mark.parametrize(
    ("config", "model_py", "said"),
    [
        # Triton refuses the config and exits
        ('name: "broken"\nbackend: "python"\nmax_batch_size: 4\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ ] } ]\n', True, "exited with code"),
        # the python backend cannot start the model and the server would wait forever
        ('name: "broken"\nbackend: "python"\nmax_batch_size: 0\n', False, "failed to start"),
    ],
    ids=["exits", "hangs"],
)
def test_a_failing_server_reports_its_log(
    triton_env: local_triton.TritonEnv, tmp_path: Path, config: str, model_py: bool, said: str
) -> None:
    broken = tmp_path / "repository" / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "config.pbtxt").write_text(config)
    if model_py:
        (broken / "1" / "model.py").write_text("class TritonPythonModel:\n    pass\n")
    with pytest.raises(Unavailable) as err:
        local_triton.start(
            tmp_path / "repository", home=tmp_path / "home", port=local_triton.free_base_port(), env=triton_env, ready_timeout_s=30
        )
    assert said in err.value.message
    assert "broken" in err.value.message  # the log's own words about the model that failed
    assert local_triton.read_state(tmp_path / "home") is None


def test_a_missing_environment_says_how_to_make_it(tmp_path: Path) -> None:
    with pytest.raises(Unavailable, match="make triton-env"):
        local_triton.find_env(tmp_path / "no-such-env")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_triton_up_on_another_port_says_which_servers_to_allow(
    triton_env: local_triton.TritonEnv, served_repository: Path, cli_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default allowlist holds `sluice triton up`'s own ports only: started elsewhere, it
    prints the setting that admits it, and with that setting its models register."""
    from sluice.domain import Principal
    from sluice.settings import Settings
    from sluice.wiring import Container
    from tests.integration.conftest import run_cli

    port = local_triton.free_base_port()
    code, out, _ = run_cli(capsys, "triton", "up", "--port", str(port), "--models", str(served_repository), "--default-model", "clf")
    try:
        assert code == 0, out
        setting = json.loads(out.split("SLUICE_TRITON_URL_PREFIXES='", 1)[1].split("'", 1)[0])
        assert setting == [f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"]
        acme = Principal("acme", frozenset({"admin", "predict"}), "test-acme")
        for allowed, registers in (([], False), (setting, True)):
            settings = Settings(mode="local", home=cli_home, **({"triton_url_prefixes": allowed} if allowed else {}))
            register = Container.from_settings(settings).models.register_triton(acme, "mlp", f"http://127.0.0.1:{port}", model_name="mlp")
            if registers:
                assert asyncio.run(register).config["url"] == f"http://127.0.0.1:{port}"
            else:
                with pytest.raises(Forbidden):
                    asyncio.run(register)
    finally:
        assert run_cli(capsys, "triton", "down")[0] == 0
