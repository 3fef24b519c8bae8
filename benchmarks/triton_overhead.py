"""What sluice's Triton path costs on top of Triton itself, measured against a local Triton.

1. Latency (p50/p99) and throughput at concurrency 1 and 16: sluice's `triton` runtime ->
   local Triton, against raw `tritonclient` (asyncio, its defaults) -> the same server.
2. A 1 MiB float32 tensor through the `sagemaker` runtime to the server's SageMaker port, as
   v2 JSON and as binary+json: encode time and whole-request time.

Needs `make triton-env`. Loads go to 127.0.0.1 only and each phase is bounded in time.
Prints one JSON document.

    python -m benchmarks.triton_overhead [--duration 5] [--rows 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sluice.domain import ModelVersion

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "models" / "diabetes_mlp.onnx"  # float [batch, 10] -> float [batch, 1]
MAX_BATCH = 32768  # a 1 MiB request (26,214 rows) fits in one batch
ROUNDS = 4  # alternating rounds per side and concurrency


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


async def _load(call: Callable[[], Awaitable[Any]], *, concurrency: int, duration_s: float) -> tuple[list[float], float]:
    """Run `call` from `concurrency` workers for `duration_s`: latencies in ms, and elapsed s."""
    latencies: list[float] = []
    stop_at = time.perf_counter() + duration_s

    async def worker() -> None:
        while time.perf_counter() < stop_at:
            start = time.perf_counter()
            await call()
            latencies.append((time.perf_counter() - start) * 1000)

    for _ in range(20):  # warm connections and the model
        await call()
    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - began


def _summary(latencies: list[float], elapsed_s: float) -> dict[str, float]:
    return {
        "requests": len(latencies),
        "p50_ms": round(_percentile(latencies, 50), 3),
        "p99_ms": round(_percentile(latencies, 99), 3),
        "throughput_rps": round(len(latencies) / elapsed_s, 1),
    }


async def _latency(version: ModelVersion, url: str, *, rows: int, duration_s: float) -> dict[str, Any]:
    import tritonclient.http as triton_http
    import tritonclient.http.aio as triton_aio

    from sluice.runtimes.triton import TritonRuntime

    x = np.random.default_rng(0).normal(size=(rows, 10)).astype(np.float32)
    runtime = TritonRuntime()
    raw = triton_aio.InferenceServerClient(url.removeprefix("http://"), conn_limit=64)

    async def sluice_call() -> Any:
        return await runtime.infer(version, {"input": x})

    async def raw_call() -> Any:
        tensor = triton_http.InferInput("input", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        return await raw.infer("diabetes", [tensor], outputs=[triton_http.InferRequestedOutput("variable")])

    results: dict[str, Any] = {}
    try:
        for concurrency in (1, 16):
            # Alternate short rounds so drift on a shared machine hits both sides alike.
            samples: dict[str, list[float]] = {"raw": [], "sluice": []}
            elapsed = {"raw": 0.0, "sluice": 0.0}
            for _ in range(ROUNDS):
                for side, call in (("raw", raw_call), ("sluice", sluice_call)):
                    got, took = await _load(call, concurrency=concurrency, duration_s=duration_s / ROUNDS)
                    samples[side] += got
                    elapsed[side] += took
            floor = _summary(samples["raw"], elapsed["raw"])
            ours = _summary(samples["sluice"], elapsed["sluice"])
            results[f"concurrency_{concurrency}"] = {
                "raw_tritonclient": floor,
                "sluice_triton_runtime": ours,
                "overhead_p50_ratio": round(ours["p50_ms"] / floor["p50_ms"], 3),
                "overhead_p99_ratio": round(ours["p99_ms"] / floor["p99_ms"], 3),
                "throughput_ratio": round(ours["throughput_rps"] / floor["throughput_rps"], 3),
            }
    finally:
        await runtime.close()
        await raw.close()
    return results


async def _wire_formats(version: ModelVersion, sagemaker_url: str, *, repeats: int) -> dict[str, Any]:
    from sluice.runtimes.sagemaker import SageMakerRuntime

    rows = (1024 * 1024) // (10 * 4)
    x = np.random.default_rng(1).normal(size=(rows, 10)).astype(np.float32)
    inputs = {"input": x}
    results: dict[str, Any] = {"tensor_bytes": x.nbytes, "rows": rows}
    for label, threshold in (("json", 1 << 40), ("binary+json", 0)):
        runtime = SageMakerRuntime(endpoint_url=sagemaker_url, binary_threshold_bytes=threshold)
        body, content_type = runtime.encode(version, inputs)
        encode_ms, request_ms = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            runtime.encode(version, inputs)
            encode_ms.append((time.perf_counter() - start) * 1000)
        await runtime.infer(version, inputs)  # warm
        for _ in range(repeats):
            start = time.perf_counter()
            await runtime.infer(version, inputs)
            request_ms.append((time.perf_counter() - start) * 1000)
        runtime.close()
        results[label] = {
            "content_type": content_type.split(";")[0],
            "body_bytes": len(body),
            "encode_ms_median": round(statistics.median(encode_ms), 2),
            "request_ms_median": round(statistics.median(request_ms), 2),
            "request_ms_min": round(min(request_ms), 2),
        }
    results["binary_speedup_request"] = round(
        results["json"]["request_ms_median"] / results["binary+json"]["request_ms_median"], 2
    )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per side and concurrency (default 6)")
    parser.add_argument("--rows", type=int, default=1, help="rows per latency request (default 1)")
    parser.add_argument("--repeats", type=int, default=10, help="1 MiB requests per wire format (default 10)")
    args = parser.parse_args(argv)

    from sluice.domain import ModelVersion
    from sluice.domain.errors import SluiceError
    from sluice.endpoints import local_triton
    from sluice.endpoints.repository import TritonOptions, build_model
    from sluice.services.models import read_signature

    data = MODEL.read_bytes()
    signature = read_signature(data)
    with tempfile.TemporaryDirectory(prefix="sluice-bench-") as tmp:
        root, home = Path(tmp) / "models", Path(tmp) / "home"
        options = TritonOptions(max_batch_size=MAX_BATCH, max_queue_delay_us=100)
        build_model(root, "diabetes", 1, signature, data, flavour="local", options=options)
        try:
            server = local_triton.start(root, home=home, port=local_triton.free_base_port())
        except SluiceError as exc:
            print(json.dumps({"error": exc.message}), file=sys.stderr)
            return 2
        try:
            common = {"tenant": "bench", "model": "diabetes", "version": 1, "artifact_uri": "file:///diabetes.onnx",
                      "sha256": "0" * 64, "size_bytes": len(data), "signature": signature}
            triton_version = ModelVersion(runtime="triton", config={"url": server.http_url, "model_name": "diabetes"}, **common)
            sagemaker_version = ModelVersion(runtime="sagemaker", config={"endpoint_name": "diabetes"}, **common)
            latency = asyncio.run(_latency(triton_version, server.http_url, rows=args.rows, duration_s=args.duration))
            wire = asyncio.run(_wire_formats(sagemaker_version, server.sagemaker_url, repeats=args.repeats))
        finally:
            local_triton.stop(home)
    report = {
        "benchmark": "triton_overhead",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "server": "local tritonserver 2.51 (nvidia-pytriton wheel), python backend running ONNX Runtime, 1 CPU instance",
        "model": "diabetes_mlp.onnx, float32 [batch, 10] -> [batch, 1]",
        "latency": {"rows_per_request": args.rows, "duration_s_per_phase": args.duration, **latency},
        "sagemaker_wire_1MiB": wire,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
