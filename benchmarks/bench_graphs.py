"""Inference graphs through the Lambda handler (an API Gateway REST event in, the response out),
in a child process whose stdout is /dev/null, as `benchmarks.bench_cache`:

- transform -> model -> transform (`examples/policies/transform.json`: a length scaled, a
  colour encoded, a small ONNX model, its score calibrated and labelled) against a hand-written
  FastAPI + Mangum handler doing the same NumPy work and one ONNX Runtime call: p50 at batch 1
  and 64, goal <= 1.1x;
- a two-model sequence (embed -> score) against the sum of the two models called alone through
  the same handler: goal <= 1.1x.

The subjects take turns in a rotated order, a block of calls each per repeat; a figure is the
median of the repeats' p50s with their min-max (on a shared 2-core machine, read the range).
`--cpu` times each call in the thread's CPU time rather than the wall clock: what the call
costs, without the time other processes of a loaded machine take from it (A/B comparisons).
A batch job through the same graph is `benchmarks.bench_graph_batch`.

    python -m benchmarks.bench_graphs [--quick] [--cpu]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import (
    PYTHON,
    REPO,
    Goal,
    figure,
    lambda_env,
    percentile,
    rotate,
    section,
)

if TYPE_CHECKING:
    from collections.abc import Callable

TENANT = "bench"
BATCHES = (1, 64)
VOCABULARY = ["red", "green", "blue"]


def _setup() -> Any:
    from tests.models import embed_model, score_model

    from sluice.domain import Principal
    from sluice.wiring import get_container

    container = get_container()  # the one the Lambda handler uses too
    operator = Principal(TENANT, frozenset({"admin", "predict"}), "bench")
    container.models.push(operator, "score", score_model())
    container.models.push(operator, "embed", embed_model())
    container.deployments.create(operator, "labelled", json.loads((REPO / "examples" / "policies" / "transform.json").read_text()))
    container.deployments.create(operator, "chain", json.loads((REPO / "examples" / "policies" / "sequence.json").read_text()))
    container.deployments.create(operator, "embed", {"kind": "single", "model": "embed", "version": 1})
    container.deployments.create(operator, "score", {"kind": "single", "model": "score", "version": 1})
    return score_model()


def child(out: Path, repeats: int, n: int, cpu: bool = False) -> None:
    import numpy as np
    from tests.support import LambdaContext

    from benchmarks.inprocess import rest_event
    from sluice.handlers import api

    model = _setup()
    from benchmarks.peers.handwritten_graph import make_handler

    hand = make_handler(model, VOCABULARY)
    context = LambdaContext()
    rng = np.random.default_rng(0)
    clock = time.thread_time if cpu else time.perf_counter

    def event(body: dict[str, Any]) -> dict[str, Any]:
        return rest_event("/api/v1/predictions", json.dumps(body).encode(), tenant=TENANT)

    def timed(handler: Callable[..., Any], e: dict[str, Any], count: int) -> list[float]:
        samples = []
        for _ in range(count):
            started = clock()
            response = handler(e, context)
            samples.append((clock() - started) * 1e6)
            if response["statusCode"] != 200:
                raise RuntimeError(f"unexpected answer: {response['statusCode']} {response['body'][:300]}")
        return samples

    results: dict[str, Any] = {}
    for batch in BATCHES:
        raw = [{"length": float(x), "colour": VOCABULARY[int(c) % 3] if c < 2.5 else "teal"} for x, c in zip(rng.normal(5.8, 0.8, batch), rng.uniform(0, 3, batch), strict=True)]
        rows = rng.normal(size=(batch, 4)).round(3).tolist()
        embedded = (np.asarray(rows, np.float32) @ np.ones((4, 2), np.float32)).round(3).tolist()
        calls = {
            "graph": lambda c, e=event({"deployment": "labelled", "batch": raw}): timed(api.handler, e, c),
            "hand": lambda c, e=event({"batch": raw}): timed(hand, e, c),
            "chain": lambda c, e=event({"deployment": "chain", "inputs": rows}): timed(api.handler, e, c),
            "embed": lambda c, e=event({"deployment": "embed", "inputs": rows}): timed(api.handler, e, c),
            "score": lambda c, e=event({"deployment": "score", "inputs": embedded}): timed(api.handler, e, c),
        }
        for call in calls.values():
            call(20)  # load the sessions, warm every path
        runs: dict[str, list[float]] = {name: [] for name in calls}
        for r in range(repeats):
            for name in rotate(list(calls), r):
                runs[name].append(percentile(calls[name](n), 50))
        runs["sum"] = [a + b for a, b in zip(runs["embed"], runs["score"], strict=True)]
        results[str(batch)] = runs
    out.write_text(json.dumps(results))


def measure(repeats: int, n: int, cpu: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "graphs.json"
        env = lambda_env(SLUICE_HOME=str(Path(tmp) / "home"))
        proc = subprocess.run(
            [PYTHON, "-m", "benchmarks.bench_graphs", "--child", str(out), "--repeats", str(repeats), "--n", str(n), *(["--cpu"] if cpu else [])],
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"graphs benchmark failed: {proc.stderr[-2000:]}")
        return json.loads(out.read_text())


def run(quick: bool, cpu: bool = False) -> dict[str, Any]:
    repeats, n = (2, 150) if quick else (5, 400)
    results = measure(repeats, n, cpu)
    what, tag = ("p50 of CPU time", ".cpu") if cpu else ("p50", "")
    figures = []
    for batch, runs in results.items():
        figures.append(figure(
            f"graphs.transform.b{batch}{tag}", f"transform -> model -> transform, batch {batch}, Lambda handler: {what}",
            "µs", "sluice graph", runs["graph"], reference="hand-written handler (same NumPy, one ORT call)", ref_values=runs["hand"],
            goal=Goal("<=", 1.1),
        ))  # fmt: skip
        figures.append(figure(
            f"graphs.sequence.b{batch}{tag}", f"two-model sequence (embed -> score), batch {batch}, Lambda handler: {what}",
            "µs", "sequence", runs["chain"], reference="the two models called alone, summed", ref_values=runs["sum"],
            goal=Goal("<=", 1.1),
        ))  # fmt: skip
    notes = [f"In process, concurrency 1, REST events through the Lambda handler (Mangum, FastAPI); {what} of each of {repeats} repeats "
             f"of {n} calls, subjects in a rotated order; median over repeats, min-max in brackets."]
    return section("graphs", "Inference graphs: transforms and sequences", figures, notes=notes)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--cpu", action="store_true", help="time calls in the thread's CPU time, not the wall clock")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.repeats, args.n, args.cpu)
        return
    print(json.dumps(run(args.quick, args.cpu), indent=2))


if __name__ == "__main__":
    main()
