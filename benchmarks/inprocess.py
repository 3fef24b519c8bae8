"""The floor and the per-request overhead in process, at concurrency 1.

Four subjects per model and batch size, interleaved in one process so they share its state:

- floor: `InferenceSession.run` on a ready array, with the session sluice builds
  (`sluice.runtimes.onnx.build_session`: ORT_ENABLE_ALL, 1 intra-op and 1 inter-op thread);
- hand-written: the FastAPI + Mangum + ONNX Runtime handler of `benchmarks/peers/handwritten.py`;
- sluice (authorizer): `sluice.handlers.api.handler` with a REST API event whose Lambda
  authorizer context names the tenant (events/api_rest_predict.json);
- sluice (API key): the same with an `x-api-key` header instead (events/api_rest_predict_api_key.json).

sluice runs with everything on: authentication, validation against the signature, routing
through the deployment, a structured log line and EMF metrics per prediction. The work runs in
a child process whose stdout (where logs and metrics go, as in Lambda) is /dev/null.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.support import LambdaContext  # the same Lambda context double the tests use

from benchmarks.common import (
    PYTHON,
    REPO,
    Goal,
    figure,
    lambda_env,
    latency_summary,
    rotate,
    section,
)
from benchmarks.prepare import (
    HOME,
    MODELS,
    MODELS_DIR,
    api_key,
    handwritten_body,
    sluice_body,
)

if TYPE_CHECKING:
    from collections.abc import Callable

BATCHES = (1, 64)
SUBJECTS = ("floor", "hand-written", "sluice (authorizer)", "sluice (API key)")
GOAL_VS_HANDWRITTEN = Goal("<=", 1.0)  # issue #16 (it was 1.5)


def _event(name: str) -> dict[str, Any]:
    return json.loads((REPO / "events" / name).read_text())


def rest_event(path: str, body: bytes, *, tenant: str | None = None, key: str | None = None) -> dict[str, Any]:
    """An API Gateway REST event for POST `path`: with an authorizer context for `tenant`, or
    with no context and an `x-api-key` header (or neither, for the hand-written app)."""
    event = copy.deepcopy(_event("api_rest_predict.json" if tenant else "api_rest_predict_api_key.json"))
    event["path"] = path
    event["pathParameters"] = {"proxy": path.lstrip("/")}
    event["requestContext"]["path"] = "/prod" + path
    event["body"] = body.decode()
    if tenant:
        event["requestContext"]["authorizer"]["tenant"] = tenant
    for headers in (event["headers"], event["multiValueHeaders"]):
        headers.pop("x-api-key", None)
    if key:
        event["headers"]["x-api-key"] = key
        event["multiValueHeaders"]["x-api-key"] = [key]
    return event


# the child ----------------------------------------------------------------------------------
def _timed(call: Callable[[], Any], *, seconds: float, max_count: int) -> dict[str, float]:
    samples: list[int] = []
    clock = time.perf_counter_ns
    cpu0 = time.process_time()
    started = clock()
    deadline = started + int(seconds * 1e9)
    while len(samples) < max_count:
        t0 = clock()
        call()
        t1 = clock()
        samples.append(t1 - t0)
        if t1 >= deadline:
            break
    summary = latency_summary(samples, (clock() - started) / 1e9)
    # CPU of every thread in the process: what Lambda bills, and less hurt by a busy machine.
    summary["cpu_us"] = (time.process_time() - cpu0) / len(samples) * 1e6
    return summary


def _handler_call(handler: Callable[..., dict[str, Any]], event: dict[str, Any], what: str) -> Callable[[], Any]:
    context = LambdaContext()
    response = handler(event, context)
    if response.get("statusCode") != 200:
        raise RuntimeError(f"{what}: warm-up answered {response.get('statusCode')}: {str(response.get('body'))[:300]}")
    return lambda: handler(event, context)


def child(out: Path, repeats: int, seconds: float, max_count: int, models: list[str]) -> None:
    import numpy as np

    from benchmarks.peers import handwritten
    from sluice.handlers import api
    from sluice.runtimes.onnx import build_session

    key = api_key()
    results: dict[str, Any] = {}
    for name in models:
        model = MODELS[name]
        session = build_session(model.path.read_bytes())
        for batch in BATCHES:
            feed = {model.input_name: np.asarray(model.rows(batch), dtype=np.float32)}
            calls = {
                "floor": lambda session=session, feed=feed: session.run(None, feed),
                "hand-written": _handler_call(
                    handwritten.handler, rest_event(f"/models/{name}/predict", handwritten_body(model, batch)), "hand-written"
                ),
                "sluice (authorizer)": _handler_call(
                    api.handler, rest_event("/api/v1/predictions", sluice_body(model, batch), tenant="default"), "sluice"
                ),
                "sluice (API key)": _handler_call(
                    api.handler, rest_event("/api/v1/predictions", sluice_body(model, batch), key=key), "sluice (key)"
                ),
            }
            for call in calls.values():  # warm every path: caches, allocator, branch history
                for _ in range(20):
                    call()
            runs: dict[str, list[dict[str, float]]] = {s: [] for s in SUBJECTS}
            for r in range(repeats):
                for subject in rotate(SUBJECTS, r):
                    runs[subject].append(_timed(calls[subject], seconds=seconds, max_count=max_count))
            results[f"{name}/{batch}"] = runs
    out.write_text(json.dumps(results))


# the parent ---------------------------------------------------------------------------------
def measure(*, repeats: int, seconds: float, max_count: int, models: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "inprocess.json"
        env = lambda_env(SLUICE_HOME=str(HOME), BENCH_MODELS_DIR=str(MODELS_DIR))
        proc = subprocess.run(
            [PYTHON, "-m", "benchmarks.inprocess", "--child", str(out), "--repeats", str(repeats),
             "--seconds", str(seconds), "--max-count", str(max_count), "--models", ",".join(models)],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=600,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"in-process benchmark failed: {proc.stderr[-2000:]}")
        return json.loads(out.read_text())


def _values(runs: list[dict[str, float]], key: str) -> list[float]:
    return [run[key] for run in runs]


def run(quick: bool) -> list[dict[str, Any]]:
    models = ["iris", "diabetes"] if quick else list(MODELS)
    raw = measure(repeats=3 if quick else 5, seconds=0.1 if quick else 0.4, max_count=20_000, models=models)
    floor: list[dict[str, Any]] = []
    overhead: list[dict[str, Any]] = []
    for name in models:
        for batch in BATCHES:
            runs = raw[f"{name}/{batch}"]
            where = f"{name}, batch {batch}"
            fl = runs["floor"]
            floor.append(figure(f"floor.{name}.b{batch}.p50", f"{where}: run() p50", "µs", "onnxruntime.run", _values(fl, "p50_us")))
            floor.append(
                figure(
                    f"floor.{name}.b{batch}.rows",
                    f"{where}: rows/s",
                    "rows/s",
                    "onnxruntime.run",
                    [v * batch for v in _values(fl, "rps")],
                    better="higher",
                )
            )
            hand = runs["hand-written"]
            for subject in ("sluice (authorizer)", "sluice (API key)"):
                ours = runs[subject]
                tag = "auth" if "authorizer" in subject else "key"
                # (suffix, label, unit, key, reference runs and name, goal, better)
                rows = (
                    ("p50", "p50", "µs", "p50_us", hand, "hand-written Mangum", GOAL_VS_HANDWRITTEN, "lower"),
                    ("p99", "p99", "µs", "p99_us", hand, "hand-written Mangum", None, "lower"),
                    ("rps", "req/s", "req/s", "rps", hand, "hand-written Mangum", None, "higher"),
                    ("cpu", "CPU per request", "µs", "cpu_us", hand, "hand-written Mangum", None, "lower"),
                    ("vs_floor", "p50 vs floor", "µs", "p50_us", fl, "floor (onnxruntime.run)", None, "lower"),
                )
                for suffix, label, unit, key, ref_runs, ref_name, goal, better in rows:
                    overhead.append(
                        figure(
                            f"inprocess.{name}.b{batch}.{tag}.{suffix}",
                            f"{where}: {label}",
                            unit,
                            subject,
                            _values(ours, key),
                            reference=ref_name,
                            ref_values=_values(ref_runs, key),
                            goal=goal,
                            better=better,
                        )
                    )
            overhead.append(
                figure(
                    f"inprocess.{name}.b{batch}.hand.vs_floor",
                    f"{where}: p50 vs floor",
                    "µs",
                    "hand-written Mangum",
                    _values(hand, "p50_us"),
                    reference="floor (onnxruntime.run)",
                    ref_values=_values(fl, "p50_us"),
                )
            )
    return [
        section(
            "floor",
            "Floor: onnxruntime.InferenceSession.run (sluice's session options), in process",
            floor,
        ),
        section(
            "inprocess",
            "In process through the Lambda handler (API Gateway REST event in, response out), concurrency 1",
            overhead,
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.4)
    parser.add_argument("--max-count", type=int, default=20_000)
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    os.environ.setdefault("SLUICE_HOME", str(HOME))
    child(args.child, args.repeats, args.seconds, args.max_count, args.models.split(","))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
