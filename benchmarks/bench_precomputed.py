"""Precomputed answers through the Lambda handler (an API Gateway REST event in, the response
out), in a child process whose stdout is /dev/null, as `benchmarks.bench_cache`:

- hit: a `precomputed` deployment answering a user its table holds (the answer a batch job
  published: the table's publication kept per container, one read of the user's row; each
  request a user not asked before, so none is answered from the answers the container keeps)
  against the live model's own deployment answering the same request: goal <= 0.5x for the
  ~10 MB MLP;
- kept: the same, a user asked before (its answer kept by the container: no read of the table);
- fallback: a user the table does not hold (one read that finds nothing, then the model)
  against the live model's deployment: what the table costs a request it cannot answer.

The table is the embedded one (SQLite beside the registry), filled as a job's chunks fill it
(the model's answer, written under a generation, then published).

    python -m benchmarks.bench_precomputed [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import Goal, figure, lambda_env, rotated_p50s, run_child, section
from benchmarks.prepare import MODELS, make_models

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

TENANT = "bench"
SUBJECTS = ("hit", "kept", "fallback", "live")
USERS = 5_000  # users published beside u1, each asked once by `hit` (more than a full run asks)
CASES = ("mlp_large", "diabetes")
GOALS = {"mlp_large": Goal("<=", 0.5)}
# Each subject's figure against the live model: (subject, what it is, a note); `hit` bears the goal.
FIGURES = (
    ("hit", "a precomputed answer read from the table", None),
    ("kept", "a precomputed answer the container kept", "a user asked before: its stored answer kept by the container (SLUICE_PRECOMPUTED_ANSWERS_KEPT), no read of the table"),
    ("fallback", "a user the table does not hold", "what the table costs a request it cannot answer (one read that finds nothing, then the model)"),
)
BLOCKS = 10  # a run's requests of each subject, in this many turns (as `benchmarks.bench_lookups`)


# the child ----------------------------------------------------------------------------------
def _setup(name: str) -> None:
    """`<name>` (the model alone) and `<name>-recs` (precomputed by routing key, the model
    live), and the model's answer for user `u1` published into the table."""
    import asyncio

    import numpy as np

    from sluice.codecs.stored_rows import encode_rows
    from sluice.domain import Principal
    from sluice.domain.requests import ArrayInputs, PredictionRequest
    from sluice.registry.precomputed import Publication
    from sluice.wiring import get_container

    container = get_container()  # the one the Lambda handler uses too
    operator = Principal(TENANT, frozenset({"admin", "predict"}), "bench")
    model = MODELS[name]
    version = container.models.push(operator, name, model.path.read_bytes())
    live = {"kind": "single", "model": name, "version": version.version}
    container.deployments.create(operator, name, live)
    table = f"{name.replace('_', '-')}-recs"
    container.deployments.create(operator, f"{name}-recs", {"kind": "precomputed", "table": table, "key": "routing_key", "live": live})
    request = PredictionRequest(name, ArrayInputs({model.input_name: np.asarray(model.rows(1), dtype=np.float32)}))
    answer = asyncio.run(container.predictions.predict(operator, request)).answer
    store, now = container.precomputed, time.time()
    assert store is not None
    outputs = [s.to_dict() for s in answer.signature.outputs]
    body = encode_rows(answer.result.outputs, 1)[0]
    answers = [("u1", body), *((f"r{i}", body) for i in range(USERS))]
    store.put_answers(TENANT, table, "job-bench", answers, computed_at=now, expires_at=now + 86400)
    store.publish(TENANT, table, Publication("job-bench", "job-bench", name, outputs, published_at=now, rows=len(answers)), expires_at=now + 86400)


def _calls(name: str) -> dict[str, Callable[[int], list[float]]]:
    from tests.support import LambdaContext

    from benchmarks.inprocess import rest_event
    from sluice.handlers import api

    rows = MODELS[name].rows(1)
    context = LambdaContext()

    def event(deployment: str, user: str | None) -> dict[str, Any]:
        body = {"deployment": deployment, "inputs": rows, **({"routing_key": user} if user else {})}
        return rest_event("/api/v1/predictions", json.dumps(body).encode(), tenant=TENANT)

    def timed(events: Iterator[dict[str, Any]], source: str | None, count: int) -> list[float]:
        out = []
        for _ in range(count):
            e = next(events)
            started = time.perf_counter()
            response = api.handler(e, context)
            out.append((time.perf_counter() - started) * 1e6)
            if response["statusCode"] != 200 or (source is not None and f'"source":"{source}"' not in response["body"]):
                raise RuntimeError(f"unexpected answer: {response['statusCode']} {response['body'][:300]}")
        return out

    kept, fallback, live = (itertools.repeat(event(f"{name}-recs", "u1")), itertools.repeat(event(f"{name}-recs", "new-user")), itertools.repeat(event(name, None)))
    # Each `hit` a user not asked before, in one event reused as the others are (its body alone
    # swapped, made beforehand): a request that differs from `kept`'s in its user alone, not in
    # an event object no request has touched yet (its memory cold in the processor's caches).
    bodies = iter([event(f"{name}-recs", f"r{i}")["body"] for i in range(USERS)])
    one = event(f"{name}-recs", "r0")

    def fresh_users() -> Iterator[dict[str, Any]]:
        for body in bodies:
            one["body"] = body
            yield one

    fresh = fresh_users()
    return {
        "hit": lambda count: timed(fresh, "precomputed", count),
        "kept": lambda count: timed(kept, "precomputed", count),
        "fallback": lambda count: timed(fallback, "live", count),
        "live": lambda count: timed(live, None, count),
    }


def child(out: Path, repeats: int, n: int) -> None:
    results: dict[str, Any] = {}
    for name in CASES:
        _setup(name)
        calls = _calls(name)
        for call in calls.values():
            call(20)  # load the session, warm every path
        results[name] = rotated_p50s(calls, SUBJECTS, repeats=repeats, n=n, blocks=BLOCKS)
    out.write_text(json.dumps(results))


# the parent ---------------------------------------------------------------------------------
def measure(repeats: int, n: int) -> dict[str, Any]:
    make_models()
    with tempfile.TemporaryDirectory() as tmp:
        env = lambda_env(SLUICE_HOME=str(Path(tmp) / "home"), SLUICE_DEPLOYMENT_CACHE_TTL_S="1")
        return run_child("benchmarks.bench_precomputed", tmp, env, "--repeats", str(repeats), "--n", str(n))


def run(quick: bool) -> dict[str, Any]:
    repeats, n = (2, 150) if quick else (3, 400)
    results = measure(repeats, n)
    figures = []
    for name, runs in results.items():
        for subject, what, note in FIGURES:
            figures.append(figure(
                f"precomputed.{name}.b1.lambda.{subject}_vs_live", f"{name}, batch 1, Lambda handler: {what} p50", "µs", subject, runs[subject],
                reference="the model's own deployment (live)", ref_values=runs["live"], note=note, goal=GOALS.get(name) if subject == "hit" else None,
            ))  # fmt: skip
    notes = [
        f"In process, concurrency 1, the embedded table (SQLite beside the registry); p50 of each run (its requests of each subject in "
        f"{BLOCKS} turns of the four, so a burst of the machine's other work lands on all of them), median over runs.",
        "The publication is kept 5 s per container (SLUICE_PRECOMPUTED_PUBLICATION_TTL_S): a hit read from the table reads one row "
        f"(each request a user not asked before, of {USERS:,} published); a kept one reads none.",
    ]
    return section("precomputed", "Precomputed answers: a stored answer against the live model", figures, notes=notes)


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
