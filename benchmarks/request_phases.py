"""Where the lookup graph's request spends its time, phase by phase, inside the request (the
lookups' Performance, docs/features.md): `bench_lookups`' graph through the Lambda handler, each
phase timed where it runs (a wrapper around the function that does it: ~0.2 µs each), beside the
whole request and the hand-written handler's, in blocks of 100 requests of each taken in turns
(tight loops, as `make bench` times them). A phase's p50 here is what it costs among the rest of
its request, which is about three times what the same call costs in a loop of its own (its code
and data stay in the processor's caches there). The phases overlap where one calls another
(`predict` holds `decode`, `run`, the statistics and the line). No goal, not in `make bench`:
`python -m benchmarks.request_phases [--n 3000]`."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from benchmarks.common import percentile

BLOCK = 100
PHASES = (  # in the order they start
    "API Gateway event in",
    "body parsed and validated",
    "predict (from here: its parts)",
    "deployment resolved",
    "inputs decoded and checked",
    "the graph run (lookup, transform, model)",
    "lookup step",
    "the store's read (SqliteStore.get_many)",
    "the hand-written's query (execute, fetchall)",
    "transform step",
    "model step (its inputs checked, the runtime)",
    "ONNX Runtime's run [graph]",
    "ONNX Runtime's run [hand-written]",
    "statistics",
    "drift profile held",
    "the prediction's line (EMF)",
    "API Gateway result out",
)


def child(out: Path, folder: Path, n: int) -> None:
    import onnxruntime
    from tests.support import LambdaContext

    import benchmarks.peers.handwritten_lookup as handwritten
    import sluice.inference.predictions as predictions
    import sluice.inference.sequences as sequences
    from benchmarks.bench_lookups import one_row
    from sluice.handlers import api, gateway
    from sluice.types.api import PredictionRequest
    from sluice.wiring import get_container

    context = LambdaContext()
    connect = handwritten.sqlite3.connect

    class Timed:  # the hand-written handler's connection, its query timed with its rows fetched
        def __init__(self, db: Any) -> None:
            self.db = db

        def execute(self, sql: str, params: Any = ()) -> list[Any]:
            return timed(lambda: self.db.execute(sql, params).fetchall(), "the hand-written's query (execute, fetchall)")()  # type: ignore[no-any-return]

    handwritten.sqlite3 = type("sqlite3", (), {"connect": staticmethod(lambda *a, **kw: Timed(connect(*a, **kw)))})  # type: ignore[assignment]
    hand, graph, plain = one_row(folder)  # the hand-written handler's connection timed (`Timed`)
    api.handler(graph, context)  # the container built
    container = get_container()
    service = container.predictions
    taken: dict[str, list[float]] = {}
    clock = time.perf_counter

    def timed(call: Any, name: str) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return call(*args, **kwargs)
            finally:
                taken.setdefault(name, []).append((clock() - started) * 1e6)

        return wrapper

    def timed_async(call: Any, name: str) -> Any:
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return await call(*args, **kwargs)
            finally:
                taken.setdefault(name, []).append((clock() - started) * 1e6)

        return wrapper

    scope = gateway.RestEvent.scope.fget
    gateway.RestEvent.scope = property(timed(scope, "API Gateway event in"))  # type: ignore[assignment, method-assign]
    gateway.RestEvent.__call__ = timed(gateway.RestEvent.__call__, "API Gateway result out")  # type: ignore[method-assign]
    validate = PredictionRequest.model_validate_json.__func__  # type: ignore[attr-defined]
    PredictionRequest.model_validate_json = classmethod(timed(validate, "body parsed and validated"))  # type: ignore[method-assign, assignment]
    service.predict = timed_async(service.predict, "predict (from here: its parts)")  # type: ignore[method-assign]
    service.resolve = timed_async(service.resolve, "deployment resolved")  # type: ignore[method-assign]
    service.decode = timed(service.decode, "inputs decoded and checked")  # type: ignore[method-assign]
    predictions.within = timed_async(predictions.within, "the graph run (lookup, transform, model)")  # type: ignore[attr-defined]
    service.stats.request = timed(service.stats.request, "statistics")  # type: ignore[method-assign]
    if service.profiles is not None:
        service.profiles.observe = timed(service.profiles.observe, "drift profile held")  # type: ignore[method-assign]
    sequences._lookup = timed_async(sequences._lookup, "lookup step")  # type: ignore[attr-defined]
    from sluice.runtimes.feature_stores import SqliteStore

    SqliteStore.get_many = timed(SqliteStore.get_many, "the store's read (SqliteStore.get_many)")  # type: ignore[method-assign]
    sequences._transform = timed(sequences._transform, "transform step")  # type: ignore[attr-defined]
    runner = type(service.runner)
    run = runner.run

    def runner_run(self: Any, node: Any, call: Any, arrays: Any, depth: int = 0) -> Any:
        return run(self, node, call, arrays, depth) if not depth else timed_async(run, "model step (its inputs checked, the runtime)")(self, node, call, arrays, depth)

    runner.run = runner_run  # type: ignore[method-assign]
    session_run = onnxruntime.InferenceSession.run
    subject = ["graph"]

    def onnx_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        return timed(session_run, f"ONNX Runtime's run [{subject[0]}]")(self, *args, **kwargs)

    onnxruntime.InferenceSession.run = onnx_run  # type: ignore[method-assign]
    container.telemetry.prediction = timed(container.telemetry.prediction, "the prediction's line (EMF)")  # type: ignore[method-assign]

    subjects = {"graph": (api.handler, graph), "hand-written": (hand, plain)}
    for call, event in subjects.values():
        for _ in range(200):
            if call(event, context)["statusCode"] != 200:
                raise RuntimeError("unexpected answer")
    taken.clear()
    whole: dict[str, list[float]] = {name: [] for name in subjects}
    for _ in range(max(1, n // BLOCK)):
        for name, (call, event) in subjects.items():
            subject[0] = name
            for _ in range(BLOCK):
                started = clock()
                call(event, context)
                whole[name].append((clock() - started) * 1e6)
    out.write_text(json.dumps({"whole": {k: percentile(v, 50) for k, v in whole.items()}, "phases": {k: percentile(v, 50) for k, v in taken.items()}}))


def run(n: int) -> dict[str, Any]:
    from benchmarks.bench_lookups import in_child

    return in_child("benchmarks.request_phases", "--n", str(n))  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", type=Path)
    parser.add_argument("--folder", type=Path)
    parser.add_argument("--n", type=int, default=3000, help="requests of each subject")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.folder, args.n)
        return
    result = run(args.n)
    for name, p50 in result["whole"].items():
        print(f"{name:45s} {p50:7.1f} µs (the whole request, p50)")
    for name in PHASES:
        if name in result["phases"]:
            print(f"  {name:43s} {result['phases'][name]:7.1f} µs")


if __name__ == "__main__":
    main()
