"""Latency and capacity from a GPU benchmark's JSON (`benchmarks/gpu/results/`), for
`sluice cost --benchmark FILE`: the endpoint's p50/p99 at concurrency 1 and what one server
answered per second at concurrency 16."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice.domain.errors import BadRequest


@dataclass(frozen=True, slots=True)
class Benchmarked:
    p50_ms: float
    p99_ms: float
    instance_rps: float
    source: str


def read_benchmark(path: str | Path) -> Benchmarked:
    path = Path(path)
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadRequest(f"{path} cannot be read as JSON ({type(exc).__name__})", field="benchmark") from None
    latency = data.get("latency") or {}
    one, sixteen = latency.get("concurrency_1") or {}, latency.get("concurrency_16") or {}
    machine = (data.get("machine") or {}).get("nvidia_smi") or "an unnamed machine"
    # bench_gpu_e2e.py: through `sluice serve`, binary tensors (what tritonclient sends) before JSON.
    e2e = next((name for name in ("sluice_binary", "sluice_json") if name in one and name in sixteen), None)
    if e2e is not None:
        first, busy = one[e2e], sixteen[e2e]
        p50, p99, rps = first["p50_ms"], first["p99_ms"], busy["rps"]
        what = f"end to end through sluice serve, {e2e.removeprefix('sluice_')}"
    elif "sluice_triton_runtime" in one and "sluice_triton_runtime" in sixteen:  # bench_gpu_triton.py
        first, busy = one["sluice_triton_runtime"], sixteen["sluice_triton_runtime"]
        p50, p99, rps = first["p50_ms"], first["p99_ms"], busy["throughput_rps"]
        what = "the triton runtime to the server"
    else:
        raise BadRequest(
            f"{path} is not a GPU benchmark's result (bench_gpu_e2e.py or bench_gpu_triton.py)", field="benchmark"
        )
    return Benchmarked(float(p50), float(p99), float(rps), f"benchmark {path.name}: {what}, {machine.split(',')[0]}")
