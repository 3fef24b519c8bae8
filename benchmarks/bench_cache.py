"""The prediction cache: a hit's p50 against a miss, in process, for the demo models and the
~10 MB MLP, through the prediction service and through the Lambda handler (an API Gateway REST
event in, the response out: FastAPI behind Mangum, authentication from the authorizer context).

Per model, two deployments of the same version: `<name>-cached` (cache on) and `<name>` (off).
- hit: the same request again and again on the cached deployment;
- miss: a new input every call on the cached deployment (it computes, then keeps the answer);
- off: the same request on the deployment without a cache (what a miss costs without one).

Goals (issue 13): a hit at most 0.5x a miss for the 10 MB MLP, never slower than a miss for the
small models. The work runs in a child process whose stdout (logs, EMF) is /dev/null, as in
`benchmarks.inprocess`.

    python -m benchmarks.bench_cache [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import Goal, figure, lambda_env, rotated_p50s, run_child, section
from benchmarks.prepare import MODELS, make_models

if TYPE_CHECKING:
    from collections.abc import Callable

TENANT = "bench"
SUBJECTS = ("hit", "miss", "off")
CASES = (("iris", 1), ("diabetes", 1), ("mlp_large", 1), ("mlp_large", 64))
GOALS = {"mlp_large": Goal("<=", 0.5)}
SMALL_GOAL = Goal("<=", 1.0)


# the child ----------------------------------------------------------------------------------
def _setup() -> Any:
    from sluice.domain import Principal
    from sluice.wiring import get_container

    container = get_container()  # the one the Lambda handler uses too
    operator = Principal(TENANT, frozenset({"admin", "predict"}), "bench")
    for name in {name for name, _ in CASES}:
        version = container.models.push(operator, name, MODELS[name].path.read_bytes())
        policy = {"kind": "single", "model": name, "version": version.version}
        container.deployments.create(operator, name, policy)
        container.deployments.create(operator, f"{name}-cached", policy, cache={"ttl_s": 3600, "max_entries": 100_000})
    return container, operator


def _fresh_rows(model: Any, batch: int, count: int, start: int) -> list[list[list[float]]]:
    """`count` inputs never sent before: the model's row with a distinct first value (above
    10, where no model's own row has one)."""
    base = model.rows(batch)
    return [[[10.0 + float(start + i) * 1e-3, *row[1:]] for row in base] for i in range(count)]


def _service_calls(container: Any, operator: Any, name: str, batch: int) -> dict[str, Callable[[int], list[float]]]:
    import numpy as np

    from sluice.domain.requests import ArrayInputs, PredictionRequest

    model = MODELS[name]
    service = container.predictions
    same = np.asarray(model.rows(batch), dtype=np.float32)
    counter = [0]

    def timed(deployment: str, inputs: list[Any], expect: bool | None) -> list[float]:
        async def go() -> list[float]:
            out = []
            for arrays in inputs:
                request = PredictionRequest(deployment, ArrayInputs({model.input_name: arrays}))
                started = time.perf_counter()
                prediction = await service.predict(operator, request)
                out.append((time.perf_counter() - started) * 1e6)
                if expect is not None and prediction.cached != expect:
                    raise RuntimeError(f"{deployment}: cached={prediction.cached}, expected {expect}")
            return out

        return asyncio.run(go())

    def miss(count: int) -> list[float]:
        rows = _fresh_rows(model, batch, count, counter[0])
        counter[0] += count
        return timed(f"{name}-cached", [np.asarray(r, dtype=np.float32) for r in rows], False)

    return {
        "prime": lambda count: timed(f"{name}-cached", [same] * count, None),
        "hit": lambda count: timed(f"{name}-cached", [same] * count, True),
        "miss": miss,
        "off": lambda count: timed(name, [same] * count, False),
    }


def _handler_calls(name: str, batch: int) -> dict[str, Callable[[int], list[float]]]:
    from tests.support import LambdaContext

    from benchmarks.inprocess import rest_event
    from sluice.handlers import api

    model = MODELS[name]
    context = LambdaContext()
    counter = [0]

    def event(deployment: str, rows: list[list[float]]) -> dict[str, Any]:
        body = json.dumps({"deployment": deployment, "inputs": rows}).encode()
        return rest_event("/api/v1/predictions", body, tenant=TENANT)

    def timed(events: list[dict[str, Any]], cached: bool | None) -> list[float]:
        out = []
        for e in events:
            started = time.perf_counter()
            response = api.handler(e, context)
            out.append((time.perf_counter() - started) * 1e6)
            seen = '"cached":true' in response["body"]
            if response["statusCode"] != 200 or (cached is not None and seen != cached):
                raise RuntimeError(f"unexpected answer: {response['statusCode']} {response['body'][:300]}")
        return out

    def miss(count: int) -> list[float]:
        rows = _fresh_rows(model, batch, count, 10**6 + counter[0])
        counter[0] += count
        return timed([event(f"{name}-cached", r) for r in rows], cached=False)

    hit_event, off_event = event(f"{name}-cached", model.rows(batch)), event(name, model.rows(batch))
    return {
        "prime": lambda count: timed([hit_event] * count, cached=None),
        "hit": lambda count: timed([hit_event] * count, cached=True),
        "miss": miss,
        "off": lambda count: timed([off_event] * count, cached=False),
    }


def child(out: Path, repeats: int, n: int) -> None:
    container, operator = _setup()
    results: dict[str, Any] = {}
    for name, batch in CASES:
        for path, calls in (
            ("service", _service_calls(container, operator, name, batch)),
            ("lambda", _handler_calls(name, batch)),
        ):
            calls["prime"](1)  # the answer the hits will find
            for call in calls.values():
                call(20)  # load the session, warm every path
            results[f"{name}/{batch}/{path}"] = rotated_p50s(calls, SUBJECTS, repeats=repeats, n=n)
    out.write_text(json.dumps(results))


# the parent ---------------------------------------------------------------------------------
def measure(repeats: int, n: int) -> dict[str, Any]:
    make_models()
    with tempfile.TemporaryDirectory() as tmp:
        env = lambda_env(SLUICE_HOME=str(Path(tmp) / "home"), SLUICE_DEPLOYMENT_CACHE_TTL_S="1")
        return run_child("benchmarks.bench_cache", tmp, env, "--repeats", str(repeats), "--n", str(n))


def run(quick: bool) -> dict[str, Any]:
    repeats, n = (2, 150) if quick else (3, 400)
    results = measure(repeats, n)
    figures = []
    where = {"service": "PredictionService.predict", "lambda": "Lambda handler (REST event, Mangum, FastAPI)"}
    for key, runs in results.items():
        name, batch, path = key.split("/")
        goal = GOALS.get(name, SMALL_GOAL)
        figures.append(
            figure(
                f"cache.{name}.b{batch}.{path}.hit_vs_miss",
                f"{name}, batch {batch}, {where[path]}: cache hit p50",
                "µs", "hit", runs["hit"], reference="a miss (computed, then kept)", ref_values=runs["miss"], goal=goal,
            )
        )
        figures.append(
            figure(
                f"cache.{name}.b{batch}.{path}.miss_vs_off",
                f"{name}, batch {batch}, {where[path]}: cache miss p50",
                "µs", "miss", runs["miss"], reference="the same deployment without a cache", ref_values=runs["off"],
                note="what keeping answers costs a computed request (hashing the inputs, the key, the store)",
            )
        )
    notes = [
        "In process, concurrency 1, per-container tier only (no shared tier); p50 of each run, median over runs.",
        "A miss is a new input every call on the caching deployment; 'off' the same input on a deployment without a cache.",
    ]
    return section("cache", "Prediction cache: a hit against a miss", figures, notes=notes)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.repeats, args.n)
        return
    print(json.dumps(run(args.quick), indent=2))


if __name__ == "__main__":
    main()
