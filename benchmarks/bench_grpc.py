"""The Open Inference Protocol over gRPC: sluice (`sluice serve --grpc-port`, the gRPC process
beside one HTTP worker) against the local Triton's own gRPC port, serving the same ONNX files.
Both are called by Triton's client (`tritonclient.grpc`), raw tensors, the way Triton users do.

Two requests: one row of the diabetes MLP (the protocol's overhead) and a 1 MiB FP32 tensor (262,144 values
summed by a one-node model: the bytes' cost). p50 is one client calling in turn; req/s is
`CONCURRENCY` asyncio clients calling for a fixed time. The subjects take turns going first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.common import (
    PYTHON,
    REPO,
    WORK,
    Goal,
    bench_env,
    figure,
    free_port,
    percentile,
    server,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

HOME = WORK / "grpc-home"
TENANT = "default"
CONCURRENCY = 8
MIB_VALUES = 262_144  # 1 MiB of FP32


def _sum_model() -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["input"], ["total"], keepdims=1, axes=[1])],
        "sum",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, MIB_VALUES])],
        [helper.make_tensor_value_info("total", TensorProto.FLOAT, [None, 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 7
    return model.SerializeToString()


def _prepare() -> Any:
    from sluice.domain import Principal
    from sluice.settings import Settings
    from sluice.wiring import Container

    shutil.rmtree(HOME, ignore_errors=True)
    container = Container.from_settings(Settings(mode="local", home=HOME, registry="", store=""))
    principal = Principal(TENANT, frozenset({"admin", "predict"}), "bench")
    for name, data in (("diabetes", (REPO / "models" / "diabetes_mlp.onnx").read_bytes()), ("mib", _sum_model())):
        version = container.models.push(principal, name, data)
        container.deployments.create(principal, name, {"kind": "single", "model": name, "version": version.version})
    return container


@contextlib.contextmanager
def _triton(container: Any) -> Iterator[str]:
    from sluice.endpoints import local_triton
    from sluice.endpoints.repository import TritonOptions, build_repository

    env = local_triton.find_env()
    root = WORK / "grpc-triton-repository"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for name in ("diabetes", "mib"):
        build_repository(root, container.registry.latest_version(TENANT, name), container.store, flavour="local", options=TritonOptions(), name=name)
    home = WORK / "grpc-triton-home"
    local_triton.stop(home)
    started = local_triton.start(root, home=home, port=local_triton.free_base_port(), env=env)
    try:
        yield started.grpc_address
    finally:
        local_triton.stop(home)


@contextlib.contextmanager
def _sluice() -> Iterator[tuple[str, dict[str, str]]]:
    import tritonclient.grpc as grpcclient

    port, grpc_port = free_port(), free_port()
    command = [PYTHON, "-m", "sluice.cli", "serve", "--port", str(port), "--workers", "1", "--grpc-port", str(grpc_port)]
    env = bench_env(SLUICE_HOME=str(HOME))
    with server(command, ready_url=f"http://127.0.0.1:{port}/healthz", log=HOME / "serve.log", env=env, cwd=REPO, quiet_stdout=True):
        url = f"127.0.0.1:{grpc_port}"
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(Exception):
                if grpcclient.InferenceServerClient(url).is_server_live():
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("sluice's gRPC port did not open in 30 s")
            time.sleep(0.2)
        yield url, {"authorization": f"Bearer {(HOME / 'admin-key').read_text().strip()}"}


def _inputs(module: Any, model: str) -> list[Any]:
    rng = np.random.default_rng(0)
    array = rng.normal(0, 0.05, (1, 10)).astype(np.float32) if model == "diabetes" else rng.random((1, MIB_VALUES), dtype=np.float32)
    tensor = module.InferInput("input", list(array.shape), "FP32")
    tensor.set_data_from_numpy(array)
    return [tensor]


def _p50(url: str, headers: dict[str, str], model: str, n: int) -> float:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    inputs = _inputs(grpcclient, model)
    for _ in range(20):
        client.infer(model, inputs, headers=headers)
    times = []
    for _ in range(n):
        started = time.perf_counter()
        client.infer(model, inputs, headers=headers)
        times.append((time.perf_counter() - started) * 1e6)
    client.close()
    return percentile(times, 50)


def _rate(url: str, headers: dict[str, str], model: str, duration_s: float) -> float:
    import tritonclient.grpc.aio as aioclient

    async def go() -> float:
        async with aioclient.InferenceServerClient(url) as client:
            inputs = _inputs(aioclient, model)
            done = 0
            end = time.monotonic() + duration_s

            async def worker() -> None:
                nonlocal done
                while time.monotonic() < end:
                    await client.infer(model, inputs, headers=headers)
                    done += 1

            started = time.monotonic()
            await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
            return done / (time.monotonic() - started)

    return asyncio.run(go())


def run(quick: bool) -> dict[str, Any]:
    repeats, n, duration_s = (2, 200, 2.0) if quick else (3, 1000, 5.0)
    container = _prepare()
    results: dict[tuple[str, str, str], list[float]] = {}
    with _triton(container) as triton_url, _sluice() as (sluice_url, key):
        subjects = {"sluice": (sluice_url, key), "triton": (triton_url, {})}
        for i in range(repeats):
            for who in (("sluice", "triton") if i % 2 == 0 else ("triton", "sluice")):
                url, headers = subjects[who]
                for model in ("diabetes", "mib"):
                    count = n if model == "diabetes" else max(50, n // 5)
                    results.setdefault((who, model, "p50"), []).append(_p50(url, headers, model, count))
                    results.setdefault((who, model, "rps"), []).append(_rate(url, headers, model, duration_s))
    names = {"diabetes": "1 row (diabetes MLP)", "mib": "1 MiB FP32 tensor"}
    figures = []
    for model, label in names.items():
        figures.append(figure(
            f"grpc.{model}.p50", f"gRPC, {label}: p50 (1 client)", "µs", "sluice", results[("sluice", model, "p50")],
            reference="Triton", ref_values=results[("triton", model, "p50")],
        ))
        figures.append(figure(
            f"grpc.{model}.rps", f"gRPC, {label}: req/s ({CONCURRENCY} asyncio clients)", "req/s", "sluice",
            results[("sluice", model, "rps")], reference="Triton", ref_values=results[("triton", model, "rps")],
            better="higher", goal=Goal(">=", 0.5) if model == "mib" else None,
        ))  # fmt: skip
    notes = [
        "sluice: one gRPC process beside one HTTP worker, with an API key checked per call; Triton: "
        "its default instance count for the ONNX backend on CPU, no key.",
    ]
    return {"title": "Open Inference Protocol over gRPC: sluice vs Triton", "figures": figures, "notes": notes}


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
