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
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadRequest(f"{path} cannot be read as JSON ({type(exc).__name__})", field="benchmark") from None
    data = _object(data, path, "the file")
    latency = _object(data.get("latency") or {}, path, "latency")
    one = _object(latency.get("concurrency_1") or {}, path, "latency.concurrency_1")
    sixteen = _object(latency.get("concurrency_16") or {}, path, "latency.concurrency_16")
    machine = _object(data.get("machine") or {}, path, "machine").get("nvidia_smi") or "an unnamed machine"
    # bench_gpu_e2e.py: through `sluice serve`, binary tensors (what tritonclient sends) before JSON.
    e2e: str | None = next((name for name in ("sluice_binary", "sluice_json") if name in one and name in sixteen), None)
    if e2e is not None:
        runtime, rps_key = e2e, "rps"
        what = f"end to end through sluice serve, {e2e.removeprefix('sluice_')}"
    elif "sluice_triton_runtime" in one and "sluice_triton_runtime" in sixteen:  # bench_gpu_triton.py
        runtime, rps_key = "sluice_triton_runtime", "throughput_rps"
        what = "the triton runtime to the server"
    else:
        raise BadRequest(
            f"{path} is not a GPU benchmark's result (bench_gpu_e2e.py or bench_gpu_triton.py)", field="benchmark"
        )
    first = _object(one[runtime], path, f"latency.concurrency_1.{runtime}")
    busy = _object(sixteen[runtime], path, f"latency.concurrency_16.{runtime}")
    p50 = _number(first, "p50_ms", path, f"latency.concurrency_1.{runtime}")
    p99 = _number(first, "p99_ms", path, f"latency.concurrency_1.{runtime}")
    rps = _number(busy, rps_key, path, f"latency.concurrency_16.{runtime}")
    return Benchmarked(p50, p99, rps, f"benchmark {path.name}: {what}, {str(machine).split(',')[0]}")


def _object(value: Any, path: Path, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        said = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(type(value), "null")
        raise BadRequest(f"{path}: {where} is {said}, not an object", field="benchmark")
    return value


def _number(entry: dict[str, Any], key: str, path: Path, where: str) -> float:
    """A figure the cost model reads (its range is the request's to check)."""
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"{path} lacks a number at {where}.{key}", field="benchmark")
    return float(value)
