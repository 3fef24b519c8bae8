"""Replay rows per second against `sluice batch run` on the same rows: N single-row captured
requests of `iris` (version 1) replayed against version 2, and the same N rows as a JSON Lines
file scored by a batch job on a deployment of version 2. Both run as the CLI does, each in a
fresh process, timed from launch to exit (interpreter start, imports and model load count
the same for both). Reports, never asserts.

    python -m benchmarks.bench_replay [--quick]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import PYTHON, REPO, Goal, bench_env, figure

FEATURES = ("sepal_length", "sepal_width", "petal_length", "petal_width")


def _prepare(home: Path, rows: int) -> Path:
    """The home with iris:1 and iris:2, deployments `iris` (v1, capturing) and `candidate`
    (v2), `rows` captured single-row requests of `iris` written as the capture thread writes
    them, and the same rows as JSON Lines for the batch job."""
    import numpy as np

    from sluice.capture.records import to_record
    from sluice.capture.sinks import FolderSink
    from sluice.domain import Principal
    from sluice.domain.results import Answer, InferenceResult
    from sluice.inference.loop import run
    from sluice.settings import Settings
    from sluice.wiring import Container

    container = Container.from_settings(Settings(mode="local", home=home, log_level="WARNING"))
    who = Principal("default", frozenset({"admin", "predict"}), "bench")
    v1 = container.models.push(who, "iris", (REPO / "models" / "iris.onnx").read_bytes())
    container.models.push(who, "iris", (REPO / "models" / "iris_forest.onnx").read_bytes())
    dep = container.deployments.create(who, "iris", {"kind": "single", "model": "iris", "version": 1}, capture={"sample_percent": 100})
    container.deployments.create(who, "candidate", {"kind": "single", "model": "iris", "version": 2})
    values = np.random.default_rng(5).uniform([4.3, 2.0, 1.0, 0.1], [7.9, 4.4, 6.9, 2.5], size=(rows, 4)).astype(np.float32)
    name = v1.signature.inputs[0].name
    answer = run(container.predictions.run_node("default", _single(), {name: values}, budget_s=60))
    sink = FolderSink(home / "capture")
    now = time.time()
    records = []
    for i in range(rows):
        sliced = InferenceResult({k: v[i : i + 1] for k, v in answer.result.outputs.items()}, answer.result.classes)
        one = Answer(answer.signature, sliced, v1)
        records.append(to_record(dep, f"r{i}", one, {name: values[i : i + 1]}, 0.3, now - 60 + i * 1e-4))
    sink.write(records)
    source = home / "rows.jsonl"
    with source.open("w") as fh:
        for row in values.tolist():
            fh.write(json.dumps(dict(zip(FEATURES, row, strict=True))) + "\n")
    return source


def _single() -> Any:
    from sluice.domain.policy import parse_policy

    return parse_policy({"kind": "single", "model": "iris", "version": 1})


def _timed(command: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{command[3:5]} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - started, done.stdout


def run(quick: bool) -> dict[str, Any]:
    rows, repeats = (5_000, 2) if quick else (20_000, 3)
    replay_rates: list[float] = []
    batch_rates: list[float] = []
    inner: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        source = _prepare(home, rows)
        env = bench_env(SLUICE_HOME=str(home), SLUICE_LOG_LEVEL="WARNING")
        cli = [PYTHON, "-m", "sluice.cli"]
        for i in range(repeats):
            seconds, out = _timed([*cli, "replay", "iris", "--since", "1h", "--against", "iris:2", "--json"], env)
            verdict = json.loads(out)
            assert verdict["scored_rows"] == rows, verdict
            replay_rates.append(rows / seconds)
            inner.append(verdict["rows_per_s"])
            seconds, _ = _timed([*cli, "batch", "run", "--deployment", "candidate", str(source), "--out", str(home / f"scored-{i}")], env)
            batch_rates.append(rows / seconds)
    figures = [
        figure(
            "replay.rows_per_s", f"{rows:,} captured single-row iris requests: replay against iris:2 vs `sluice batch run` on the same rows (fresh process each, launch to exit)",
            "rows/s", "replay", replay_rates, reference="batch run", ref_values=batch_rates, goal=Goal(">=", 0.9), better="higher",
            note=f"replay's own rows/s inside the process (reading and comparing included): {sorted(inner)[len(inner) // 2]:,.0f}; agreement {verdict['verdict']['agreement']}",
        ),
    ]  # fmt: skip
    return {"title": "Replay vs batch run", "figures": figures, "notes": []}


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
