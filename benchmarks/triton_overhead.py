"""What sluice's Triton path costs on top of Triton itself, measured against a local Triton.

1. Latency (p50/p99) and throughput at concurrency 1 and 16: sluice's `triton` runtime ->
   local Triton, against two peers calling the same server: raw `tritonclient` (asyncio, its
   defaults) and a hand-built aiohttp client speaking the v2 binary tensor extension (as
   `RawHTTP` in `benchmarks/gpu/bench_gpu_triton.py`, but asking for uncompressed answers:
   aiohttp's default `Accept-Encoding` has Triton gzip every answer). The three take turns in
   short rounds, each round starting with a different one, so drift on a shared machine hits
   all alike; each figure is the median (min-max) over the rounds.
2. A 1 MiB float32 tensor through the `sagemaker` runtime to the server's SageMaker port, as
   v2 JSON and as binary+json: encode time and whole-request time.

Needs `make triton-env`. Loads go to 127.0.0.1 only and each phase is bounded in time.
`make bench` calls `run(quick)`; run alone, it prints one JSON document.

    python -m benchmarks.triton_overhead [--duration 6] [--rows 1] [--rounds 6]
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
ROUNDS = 6  # alternating rounds per side and concurrency
SIDES = ("raw_tritonclient", "raw_http_v2_binary", "sluice_triton_runtime")
PEERS = {"raw_tritonclient": "raw tritonclient (asyncio)", "raw_http_v2_binary": "raw HTTP v2 binary (aiohttp, hand-built)"}


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


class RawHttp:
    """The floor: v2 inference over one aiohttp session, binary tensors both ways, the JSON
    header built per request and the answer read with `np.frombuffer`; nothing checked that
    the benchmark does not need."""

    def __init__(self, url: str, model: str) -> None:
        import aiohttp

        self._aiohttp = aiohttp
        self.url = f"{url}/v2/models/{model}/infer"
        self.session: Any = None

    async def infer(self, x: np.ndarray, input_name: str, output_name: str) -> np.ndarray:
        if self.session is None:
            self.session = self._aiohttp.ClientSession(connector=self._aiohttp.TCPConnector(limit=64))
        header = json.dumps(
            {
                "inputs": [{"name": input_name, "shape": list(x.shape), "datatype": "FP32", "parameters": {"binary_data_size": x.nbytes}}],
                "outputs": [{"name": output_name, "parameters": {"binary_data": True}}],
            }
        ).encode()
        headers = {"Inference-Header-Content-Length": str(len(header)), "Accept-Encoding": "identity"}
        async with self.session.post(self.url, data=header + x.tobytes(), headers=headers) as response:
            body = await response.read()
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}: {body[:300]!r}")
            size = int(response.headers["Inference-Header-Content-Length"])
        out = json.loads(body[:size])["outputs"][0]
        return np.frombuffer(body, dtype=np.float32, offset=size).reshape(out["shape"])

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


async def _latency(version: ModelVersion, url: str, *, rows: int, duration_s: float, rounds: int = ROUNDS) -> dict[str, Any]:
    """Each side's p50, p99 and req/s per round, at concurrency 1 and 16; the rounds alternate
    the sides (each starting with another) and every side's answer is checked first."""
    import tritonclient.http as triton_http
    import tritonclient.http.aio as triton_aio

    from benchmarks.common import rotate
    from sluice.runtimes.triton import TritonRuntime

    x = np.random.default_rng(0).normal(size=(rows, 10)).astype(np.float32)
    runtime = TritonRuntime()
    raw = triton_aio.InferenceServerClient(url.removeprefix("http://"), conn_limit=64)
    raw_http = RawHttp(url, "diabetes")

    async def sluice_call() -> Any:
        return (await runtime.infer(version, {"input": x})).outputs["variable"]

    async def raw_call() -> Any:
        tensor = triton_http.InferInput("input", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        result = await raw.infer("diabetes", [tensor], outputs=[triton_http.InferRequestedOutput("variable")])
        return result.as_numpy("variable")

    async def raw_http_call() -> Any:
        return await raw_http.infer(x, "input", "variable")

    calls = {"raw_tritonclient": raw_call, "raw_http_v2_binary": raw_http_call, "sluice_triton_runtime": sluice_call}
    results: dict[str, Any] = {}
    try:
        answers = {side: await call() for side, call in calls.items()}
        for side, got in answers.items():
            if not np.array_equal(got, answers["raw_tritonclient"]):
                raise RuntimeError(f"{side} answered {got!r}, raw tritonclient {answers['raw_tritonclient']!r}")
        for concurrency in (1, 16):
            per_round: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
            samples: dict[str, list[float]] = {side: [] for side in SIDES}
            elapsed = dict.fromkeys(SIDES, 0.0)
            for index in range(rounds):
                for side in rotate(SIDES, index):
                    got, took = await _load(calls[side], concurrency=concurrency, duration_s=duration_s / rounds)
                    per_round[side].append(_summary(got, took))
                    samples[side] += got
                    elapsed[side] += took
            entry: dict[str, Any] = {side: _summary(samples[side], elapsed[side]) for side in SIDES}
            ours = entry["sluice_triton_runtime"]
            for peer in PEERS:
                floor = entry[peer]
                entry[f"sluice_vs_{peer}"] = {
                    "p50_ratio": round(ours["p50_ms"] / floor["p50_ms"], 3),
                    "p99_ratio": round(ours["p99_ms"] / floor["p99_ms"], 3),
                    "throughput_ratio": round(ours["throughput_rps"] / floor["throughput_rps"], 3),
                }
            entry["rounds"] = per_round
            results[f"concurrency_{concurrency}"] = entry
    finally:
        await runtime.close()
        await raw.close()
        await raw_http.close()
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


def measure(*, duration_s: float, rows: int, repeats: int, rounds: int = ROUNDS) -> dict[str, Any]:
    """Start a local Triton serving the diabetes MLP, run both parts against it, stop it."""
    from sluice.domain import ModelVersion
    from sluice.endpoints import local_triton
    from sluice.endpoints.repository import TritonOptions, build_model
    from sluice.services.models import read_signature

    data = MODEL.read_bytes()
    signature = read_signature(data)
    with tempfile.TemporaryDirectory(prefix="sluice-bench-") as tmp:
        root, home = Path(tmp) / "models", Path(tmp) / "home"
        options = TritonOptions(max_batch_size=MAX_BATCH, max_queue_delay_us=100)
        build_model(root, "diabetes", 1, signature, data, flavour="local", options=options)
        server = local_triton.start(root, home=home, port=local_triton.free_base_port())
        try:
            common = {"tenant": "bench", "model": "diabetes", "version": 1, "artifact_uri": "file:///diabetes.onnx",
                      "sha256": "0" * 64, "size_bytes": len(data), "signature": signature}
            triton_version = ModelVersion(runtime="triton", config={"url": server.http_url, "model_name": "diabetes"}, **common)
            sagemaker_version = ModelVersion(runtime="sagemaker", config={"endpoint_name": "diabetes"}, **common)
            latency = asyncio.run(_latency(triton_version, server.http_url, rows=rows, duration_s=duration_s, rounds=rounds))
            wire = asyncio.run(_wire_formats(sagemaker_version, server.sagemaker_url, repeats=repeats))
        finally:
            local_triton.stop(home)
    return {
        "benchmark": "triton_overhead",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "server": "local tritonserver 2.51 (nvidia-pytriton wheel), python backend running ONNX Runtime, 1 CPU instance",
        "model": "diabetes_mlp.onnx, float32 [batch, 10] -> [batch, 1]",
        "latency": {"rows_per_request": rows, "duration_s_per_phase": duration_s, "rounds": rounds, **latency},
        "sagemaker_wire_1MiB": wire,
    }


def figures(report: dict[str, Any]) -> list[dict[str, Any]]:
    """sluice against each peer at concurrency 1 and 16: p50, p99 and req/s over the rounds."""
    from benchmarks.common import figure

    rows = []
    for concurrency in (1, 16):
        rounds = report["latency"][f"concurrency_{concurrency}"]["rounds"]
        ours = rounds["sluice_triton_runtime"]
        for key, label, unit, better in (
            ("p50_ms", f"p50, concurrency {concurrency}", "ms", "lower"),
            ("p99_ms", f"p99, concurrency {concurrency}", "ms", "lower"),
            ("throughput_rps", f"throughput, concurrency {concurrency}", "req/s", "higher"),
        ):
            for peer, name in PEERS.items():
                rows.append(figure(
                    f"triton_overhead.c{concurrency}.{key}.vs_{peer}", label, unit, "sluice triton runtime",
                    [r[key] for r in ours], reference=name, ref_values=[r[key] for r in rounds[peer]], better=better,
                ))
    return rows


def run(quick: bool) -> dict[str, Any]:
    """`make bench`'s entry: the figures, with the whole report beside them."""
    report = measure(duration_s=2.0 if quick else 4.0, rows=1, repeats=3 if quick else 10, rounds=4 if quick else ROUNDS)
    wire = report["sagemaker_wire_1MiB"]
    return {
        "title": "sluice -> Triton vs raw tritonclient and raw HTTP v2 binary -> Triton (benchmarks/triton_overhead.py)",
        "figures": figures(report),
        "notes": [
            "One row of the diabetes MLP per request to a local Triton (python backend, ONNX Runtime) on the same cores;"
            f" {report['latency']['rounds']} alternating rounds per concurrency, each figure the median (min-max) over them.",
            f"A 1 MiB float32 tensor through the sagemaker runtime: v2 JSON {wire['json']['request_ms_median']} ms,"
            f" binary+json {wire['binary+json']['request_ms_median']} ms per request (median).",
        ],
        "report": report,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per side and concurrency (default 6)")
    parser.add_argument("--rows", type=int, default=1, help="rows per latency request (default 1)")
    parser.add_argument("--repeats", type=int, default=10, help="1 MiB requests per wire format (default 10)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"alternating rounds per concurrency (default {ROUNDS})")
    args = parser.parse_args(argv)

    from sluice.domain.errors import SluiceError

    try:
        report = measure(duration_s=args.duration, rows=args.rows, repeats=args.repeats, rounds=args.rounds)
    except SluiceError as exc:
        print(json.dumps({"error": exc.message}), file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
