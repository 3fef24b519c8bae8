"""Lookup steps: features fetched by entity key before the model (docs/features.md), in a child
process whose stdout is /dev/null, as `benchmarks.bench_graphs`:

- lookup -> transform -> model through the Lambda handler (an API Gateway REST event in, the
  response out) against a hand-written FastAPI + Mangum handler doing the same store read (the
  same SQLite file, the same keys, one query) and one ONNX Runtime call: p50 at batch 1 and 64,
  goal <= 1.1x;
- a batch job whose rows carry only the customer (the lookup fetches its features, one store
  call per inference call) against the same job on pre-joined rows (the features already in
  the file): rows/s, goal >= 0.5x, with the number of store calls reported.

Each is measured twice for sluice: without the feature cache (the goal figures: the
hand-written handler has none either) and with it (`cache_ttl_s` on the lookup; each cached
batch job starts with an empty cache), with its store calls and the rows it answered.

The store is the local one (a SQLite file): a DynamoDB table answers over the network, in
calls of 100 keys made several at once, which neither side here would measure.

`--cpu` times each latency call in the thread's CPU time rather than the wall clock, as
`benchmarks.bench_graphs --cpu` does (A/B comparisons on a loaded machine).

    python -m benchmarks.bench_lookups [--quick] [--cpu]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import (
    Goal,
    figure,
    lambda_env,
    rotate,
    rotated_p50s,
    run_child,
    section,
)

if TYPE_CHECKING:
    from collections.abc import Callable

TENANT = "bench"
BATCHES = (1, 64)
CUSTOMERS = 10_000
LOOKUP = {
    "kind": "lookup", "store": "sqlite", "table": "customer_features", "keys": {"customer_id": "customer"},
    "inputs": [{"name": "customer", "datatype": "BYTES", "shape": [-1]}, {"name": "amount", "datatype": "FP32", "shape": [-1]}],
    "features": [{"name": "avg_amount", "datatype": "FP32", "default": 0.0}, {"name": "chargebacks", "datatype": "INT64", "default": 0}],
}  # fmt: skip
CONCAT = {"kind": "transform", "ops": [{"op": "concat", "inputs": ["amount", "avg_amount", "chargebacks"], "output": "features"}, {"op": "keep", "names": ["features"]}]}
FRAUD = {"kind": "sequence", "steps": [{"name": "customer", "target": LOOKUP}, {"name": "prepare", "target": CONCAT}, {"name": "score", "target": {"kind": "single", "model": "fraud", "version": 1}}]}
BLOCKS = 10  # a run's requests of each subject, in this many turns (tight loops of n / BLOCKS)
CACHE_TTL_S = 600.0  # longer than a run: every customer is read from the store once
CACHED = {**FRAUD, "steps": [{"name": "customer", "target": {**LOOKUP, "cache_ttl_s": CACHE_TTL_S}}, *FRAUD["steps"][1:]]}
JOINED_INPUTS = [{"name": n, "datatype": d, "shape": [-1]} for n, d in (("amount", "FP32"), ("avg_amount", "FP32"), ("chargebacks", "INT64"))]
JOINED = {"kind": "sequence", "steps": [{"name": "prepare", "target": {**CONCAT, "inputs": JOINED_INPUTS}}, FRAUD["steps"][2]]}


def _features(path: Path) -> dict[str, tuple[float, int]]:
    import numpy as np

    rng = np.random.default_rng(3)
    table = {f"c{i}": (round(float(rng.gamma(2.0, 40.0)), 2), int(rng.poisson(0.3))) for i in range(CUSTOMERS)}
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE customer_features (customer_id TEXT PRIMARY KEY, avg_amount REAL, chargebacks INTEGER, event_time REAL)")
        db.executemany("INSERT INTO customer_features VALUES (?, ?, ?, ?)", [(c, a, n, time.time()) for c, (a, n) in table.items()])
    db.close()
    return table


def _setup(folder: Path) -> tuple[Any, Any, bytes, dict[str, tuple[float, int]]]:
    from tests.models import score_model

    from sluice.domain import Principal
    from sluice.wiring import get_container

    table = _features(folder / f"{TENANT}.db")
    container = get_container()  # the one the Lambda handler uses too
    operator = Principal(TENANT, frozenset({"admin", "predict"}), "bench")
    model = score_model("features", 3)
    container.models.push(operator, "fraud", model)
    container.deployments.create(operator, "fraud", FRAUD)
    container.deployments.create(operator, "cached", CACHED)
    container.deployments.create(operator, "joined", JOINED)
    return container, operator, model, table


ROW = [{"customer": "c17", "amount": 12.5}]  # one request's row, of a customer the store holds


def one_row(folder: Path) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The store and the graph set up in `folder` (`_setup`), and one row's request through the
    Lambda handler as the graph takes it and as the hand-written handler does: (the hand-written
    handler, the graph's event, its event). Its handler is made after the setup, from
    `peers.handwritten_lookup` as it stands then."""
    from benchmarks.inprocess import rest_event
    from benchmarks.peers.handwritten_lookup import make_handler

    _, _, model, _ = _setup(folder)
    graph = rest_event("/api/v1/predictions", json.dumps({"deployment": "fraud", "batch": ROW}).encode(), tenant=TENANT)
    plain = rest_event("/api/v1/predictions", json.dumps({"batch": ROW}).encode())
    return make_handler(model, str(folder / f"{TENANT}.db")), graph, plain


def in_child(module: str, *args: str) -> Any:
    """`module`'s child (`python -m module --child OUT --folder TMP ARGS...`) on a store and a
    home of its own in a temporary folder, under the Lambda handler's settings; what it wrote."""
    with tempfile.TemporaryDirectory() as tmp:
        env = lambda_env(SLUICE_HOME=str(Path(tmp) / "home"), SLUICE_LOOKUP_SQLITE=str(Path(tmp) / "{tenant}.db"))
        return run_child(module, tmp, env, "--folder", tmp, *args, timeout_s=900)


def _latency(container: Any, model: bytes, folder: Path, repeats: int, n: int, cpu: bool = False) -> dict[str, Any]:
    import numpy as np
    from tests.support import LambdaContext

    from benchmarks.inprocess import rest_event
    from benchmarks.peers.handwritten_lookup import make_handler
    from sluice.handlers import api

    hand = make_handler(model, str(folder / f"{TENANT}.db"))
    context = LambdaContext()
    rng = np.random.default_rng(0)
    clock = time.thread_time if cpu else time.perf_counter

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
        rows = [{"customer": f"c{int(i)}", "amount": round(float(a), 2)} for i, a in zip(rng.integers(0, CUSTOMERS * 1.1, batch), rng.gamma(2.0, 50.0, batch), strict=True)]
        graph = rest_event("/api/v1/predictions", json.dumps({"deployment": "fraud", "batch": rows}).encode(), tenant=TENANT)
        cached = rest_event("/api/v1/predictions", json.dumps({"deployment": "cached", "batch": rows}).encode(), tenant=TENANT)
        plain = rest_event("/api/v1/predictions", json.dumps({"batch": rows}).encode())
        want = [p["prediction"] for p in json.loads(hand(plain, context)["body"])["predictions"]]
        for event in (graph, cached):
            got = [p["prediction"] for p in json.loads(api.handler(event, context)["body"])["predictions"]]
            if not np.allclose(got, want, rtol=1e-5):
                raise RuntimeError(f"the graph and the hand-written handler disagree: {got[:3]} / {want[:3]}")
        calls = {
            "graph": lambda c, e=graph: timed(api.handler, e, c),
            "cached": lambda c, e=cached: timed(api.handler, e, c),
            "hand": lambda c, e=plain: timed(hand, e, c),
        }
        for call in calls.values():
            call(20)
        results[str(batch)] = rotated_p50s(calls, list(calls), repeats=repeats, n=n, blocks=BLOCKS)
    return results


def _batch(container: Any, operator: Any, table: dict[str, tuple[float, int]], folder: Path, rows: int, repeats: int) -> dict[str, Any]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sluice.batch.orchestrators import LocalOrchestrator
    from sluice.domain.policy import parse_policy

    rng = np.random.default_rng(5)
    customers = [f"c{i}" for i in rng.integers(0, CUSTOMERS, rows)]
    amounts = rng.gamma(2.0, 50.0, rows).astype(np.float32)
    pq.write_table(pa.table({"customer": customers, "amount": amounts}), folder / "keys.parquet")
    joined = {"amount": amounts, "avg_amount": np.asarray([table[c][0] for c in customers], np.float32), "chargebacks": np.asarray([table[c][1] for c in customers], np.int64)}
    pq.write_table(pa.table(joined), folder / "joined.parquet")
    store = container.lookup_steps.store(parse_policy(FRAUD).steps[0].target, TENANT)
    cache = container.lookup_steps.cache
    seen: dict[str, int] = {}  # the cache's hits (rows answered from it), by deployment

    def job(deployment: str, path: Path, run: int) -> tuple[float, int]:
        if cache is not None and deployment == "cached":  # each job starts cold: its own chunks share the cache
            cache.clear()
        before, hits = store.calls, cache.hits if cache is not None else 0
        spec = container.batch.submit(operator, deployment=deployment, input_uri=str(path), output_uri=str(folder / f"out-{deployment}-{run}"), operator=True, source="cli", start=False)
        started = time.perf_counter()
        LocalOrchestrator(container.batch_runner, concurrency=1, backoff_s=0.01).run(spec.tenant, spec.id)
        took = time.perf_counter() - started
        done = container.registry.get_job(spec.tenant, spec.id)
        if done.status != "SUCCEEDED" or done.rows_out != rows:
            raise RuntimeError(f"batch job {deployment} ended {done.status}: {done.error}")
        seen[deployment] = cache.hits - hits if cache is not None else 0
        return rows / took, store.calls - before

    job("fraud", folder / "keys.parquet", -1)  # warm the sessions and the file's pages
    runs: dict[str, list[float]] = {"lookup": [], "cached": [], "joined": []}
    inputs = {"lookup": ("fraud", "keys.parquet"), "cached": ("cached", "keys.parquet"), "joined": ("joined", "joined.parquet")}
    calls: dict[str, int] = {}
    for r in range(repeats):
        for name in rotate(list(runs), r):
            deployment, file = inputs[name]
            rate, calls[name] = job(deployment, folder / file, r)
            runs[name].append(rate)
    distinct = len(set(customers))
    return {"runs": runs, "store_calls": calls["lookup"], "cached_store_calls": calls["cached"], "cache_hits": seen["cached"], "distinct": distinct, "rows": rows}


def child(out: Path, folder: Path, repeats: int, n: int, rows: int, cpu: bool = False) -> None:
    container, operator, model, table = _setup(folder)
    results = {"latency": _latency(container, model, folder, repeats, n, cpu), "batch": _batch(container, operator, table, folder, rows, repeats)}
    out.write_text(json.dumps(results))


def measure(repeats: int, n: int, rows: int, cpu: bool = False) -> dict[str, Any]:
    return in_child("benchmarks.bench_lookups", "--repeats", str(repeats), "--n", str(n), "--rows", str(rows), *(["--cpu"] if cpu else []))  # type: ignore[no-any-return]


def run(quick: bool, cpu: bool = False) -> dict[str, Any]:
    repeats, n, rows = (2, 150, 50_000) if quick else (3, 400, 200_000)
    results = measure(repeats, n, rows, cpu)
    what, tag = ("p50 of CPU time", ".cpu") if cpu else ("p50", "")
    figures = []
    hand = "hand-written handler (same SQLite read, one ORT call, no cache)"
    for batch, runs in results["latency"].items():
        figures.append(figure(
            f"lookups.latency.b{batch}{tag}", f"lookup -> transform -> model, batch {batch}, Lambda handler, no feature cache: {what}",
            "µs", "sluice lookup graph", runs["graph"], reference=hand, ref_values=runs["hand"], goal=Goal("<=", 1.1),
        ))  # fmt: skip
        figures.append(figure(
            f"lookups.latency.cached.b{batch}{tag}", f"the same with the feature cache (cache_ttl_s {CACHE_TTL_S:g}): {what}",
            "µs", "sluice lookup graph, cached", runs["cached"], reference=hand, ref_values=runs["hand"],
        ))  # fmt: skip
    batch = results["batch"]
    figures.append(figure(
        "lookups.batch", f"batch job of {batch['rows']:,} rows with a lookup, no feature cache ({batch['store_calls']} store calls): rows/s",
        "rows/s", "keys only, features looked up", batch["runs"]["lookup"], reference="the same job on pre-joined rows", ref_values=batch["runs"]["joined"],
        goal=Goal(">=", 0.5),
    ))  # fmt: skip
    figures.append(figure(
        "lookups.batch.cached", f"the same with the feature cache ({batch['cached_store_calls']} store calls, {batch['cache_hits']:,} rows from the cache): rows/s",
        "rows/s", "keys only, features looked up, cached", batch["runs"]["cached"], reference="the same job on pre-joined rows", ref_values=batch["runs"]["joined"],
        goal=Goal(">=", 0.5),
    ))  # fmt: skip
    notes = [
        f"In process, concurrency 1, REST events through the Lambda handler (Mangum, FastAPI); {what} of each run, median over runs.",
        f"Batch jobs on the local orchestrator with one worker, Parquet in and out, {CUSTOMERS:,} customers in the SQLite file; "
        f"the lookup made {batch['store_calls']} store calls for {batch['rows']:,} rows without the cache (an inference call of 4,096 rows "
        f"reads its distinct customers, 500 a call, until the table is held in memory: once asked for as many keys as it has rows, "
        f"SLUICE_LOOKUP_SQLITE_HOLD_ROWS, here by the latency requests and the warm-up job before the jobs measured; then none); with it, "
        f"{batch['cached_store_calls']} calls and {batch['cache_hits']:,} rows answered from the feature cache (rows answered from the held "
        f"table are neither) ({batch['distinct']:,} distinct customers in the file; each job starts with an empty cache).",
        "Cache hits count rows answered from the cache. The hand-written handler has no cache: the cached figures are "
        "sluice with its cache against it; the goal figures are both without. Latency: the uncached graph makes one store call "
        "a request, as the hand-written handler, until the table is held in memory (at batch 64 within the first few hundred requests, then "
        "none; at batch 1 never within a run: 10,000 rows); the cached one none once its customers are held.",
        "Two cores shared with other work: a second ONNX Runtime thread adds only 1.08x here.",
    ]
    return section("lookups", "Lookup steps: features by entity key", figures, notes=notes)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", type=Path)
    parser.add_argument("--folder", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--cpu", action="store_true", help="time latency calls in the thread's CPU time, not the wall clock")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.folder, args.repeats, args.n, args.rows, args.cpu)
        return
    print(json.dumps(run(args.quick, args.cpu), indent=2))


if __name__ == "__main__":
    main()
