"""What counting every request costs: p50 of the same request with its metrics on and off,
in process through the HTTP edge (the ASGI app without a socket: authentication, the hot
route, the prediction, the response), turn about in one process.

- prometheus: what counts a request under `sluice serve` (`sluice.inference.outcomes`): the
  Prometheus series (in memory, as one worker keeps them) and the deployment's statistics;
- emf: what counts it in Lambda: the EMF line's metrics (stdout is /dev/null, as CloudWatch
  takes it) and the deployment's statistics;
- off: no Prometheus series, no EMF metrics, no statistics recorded. The request's log line
  stays in all three: it is the request's log, not a metric.

Three requests: an answered simple-JSON prediction, an answered v2 inference (iris, one row),
and a simple-JSON request refused for its inputs (a 400: before this rule, such a request
was counted nowhere). Goal (issue 31): an answered request's p50 with metrics at most 1.02x
without.

    python -m benchmarks.bench_counting [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import PYTHON, REPO, Goal, bench_env, figure, percentile, rotate, section

SUBJECTS = ("prometheus", "emf", "off")
SETOSA = {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}
CASES: dict[str, tuple[str, dict[str, Any], int]] = {
    "answered simple JSON": ("/api/v1/predictions", {"deployment": "iris", "features": SETOSA}, 200),
    "answered v2": ("/v2/models/iris/infer", {"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [5.1, 3.5, 1.4, 0.2]}]}, 200),
    "refused (400)": ("/api/v1/predictions", {"deployment": "iris", "features": {"sepal_length": 5.1}}, 400),
}
GOAL = Goal("<=", 1.02)
BLOCK = 20  # requests in a row for one subject, before the next takes its turn


# the child ----------------------------------------------------------------------------------
def child(out: Path, home: Path, repeats: int, n: int) -> None:
    import httpx

    from sluice.api.app import create_app
    from sluice.domain import Principal
    from sluice.metrics import PrometheusMetrics
    from sluice.settings import Settings
    from sluice.wiring import Container

    container = Container.from_settings(Settings(mode="local", home=home))
    operator = Principal("default", frozenset({"admin", "predict"}), "bench")
    version = container.models.push(operator, "iris", (REPO / "models" / "iris.onnx").read_bytes())
    container.deployments.create(operator, "iris", {"kind": "single", "model": "iris", "version": version.version})
    _, key = container.keys.create("default", ["predict"])
    telemetry, stats = container.telemetry, container.predictions.stats
    recorded = stats.request
    sink = PrometheusMetrics()

    def counting(subject: str) -> None:
        telemetry.sink = sink if subject == "prometheus" else None
        telemetry.emit_metrics = subject == "emf"
        stats.request = recorded if subject != "off" else (lambda *a, **kw: None)  # type: ignore[method-assign]

    async def block(client: httpx.AsyncClient, case: str, count: int, times: list[float]) -> float:
        """`count` requests, their latencies (µs) added to `times`; the CPU they took, s (every
        thread: less swayed by a busy machine)."""
        path, body, status = CASES[case]
        raw = json.dumps(body).encode()
        cpu = time.process_time()
        for _ in range(count):
            started = time.perf_counter()
            r = await client.post(path, content=raw, headers={"content-type": "application/json"})
            times.append((time.perf_counter() - started) * 1e6)
            if r.status_code != status:
                raise RuntimeError(f"{case}: {r.status_code} {r.text[:300]}")
        return time.process_time() - cpu

    results: dict[str, dict[str, list[float]]] = {case: {k: [] for s in SUBJECTS for k in (s, f"{s}_cpu")} for case in CASES}

    async def go() -> None:
        transport = httpx.ASGITransport(app=create_app(container))
        async with httpx.AsyncClient(transport=transport, base_url="http://bench", headers={"Authorization": f"Bearer {key}"}) as client:
            for subject in SUBJECTS:  # load the session, warm every path every way
                counting(subject)
                for case in CASES:
                    await block(client, case, 50, [])
            # A run: the subjects take turns every BLOCK requests, so what the machine does
            # meanwhile (a few ms of another process, a frequency step) falls on all of them alike.
            for r in range(repeats):
                for case in CASES:
                    times: dict[str, list[float]] = {s: [] for s in SUBJECTS}
                    cpu = dict.fromkeys(SUBJECTS, 0.0)
                    for b in range(max(1, n // BLOCK)):
                        for subject in rotate(SUBJECTS, r + b):
                            counting(subject)
                            cpu[subject] += await block(client, case, BLOCK, times[subject])
                    for subject in SUBJECTS:
                        results[case][subject].append(percentile(times[subject], 50))
                        results[case][f"{subject}_cpu"].append(cpu[subject] / len(times[subject]) * 1e6)

    asyncio.run(go())
    results["own cost"] = own_cost(container, sink, counting, repeats)
    counting("prometheus")
    out.write_text(json.dumps(results))


def own_cost(container: Any, sink: Any, counting: Any, repeats: int, n: int = 5000) -> dict[str, list[float]]:
    """What counting itself takes per request, µs, in a tight loop (far less swayed by a busy
    machine than a request's p50): an answered request's report (`Telemetry.prediction` and
    its statistics) and a refused one's (`Outcomes.failed_as`), each way."""
    from sluice.domain import Deployment

    telemetry, stats, outcomes = container.telemetry, container.predictions.stats, container.predictions.outcomes
    dep = Deployment("default", "iris", {}, revision=1)
    fields = {"request_id": "0" * 32, "tenant": "default", "deployment": "iris", "model": "iris", "version": 1}
    key = ("default", "iris", 1, "deployment")

    def answered() -> None:
        stats.request(key, 0.4, ok=True, rows=1)
        telemetry.prediction(fields=dict(fields), latency_ms=0.4, rows=1)

    def refused() -> None:
        outcomes.failed_as("default", dep, 400, "invalid_input", {"request_id": "0" * 32})

    out: dict[str, list[float]] = {}
    for r in range(repeats):
        for subject in rotate(SUBJECTS, r):
            counting(subject)
            for name, call in (("answered", answered), ("refused", refused)):
                started = time.perf_counter()
                for _ in range(n):
                    call()
                out.setdefault(f"{name}_{subject}", []).append((time.perf_counter() - started) / n * 1e6)
    return out


# the parent ---------------------------------------------------------------------------------
def measure(repeats: int, n: int) -> dict[str, dict[str, list[float]]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "counting.json"
        env = bench_env(SLUICE_HOME=str(Path(tmp) / "home"))
        proc = subprocess.run(
            [PYTHON, "-m", "benchmarks.bench_counting", "--child", str(out), "--home", str(Path(tmp) / "home"),
             "--repeats", str(repeats), "--n", str(n)],
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"counting benchmark failed: {proc.stderr[-2000:]}")
        return json.loads(out.read_text())


def run(quick: bool) -> dict[str, Any]:
    repeats, n = (3, 200) if quick else (7, 600)
    results = measure(repeats, n)
    own = results.pop("own cost")
    figures = []
    where = {"prometheus": "Prometheus (sluice serve)", "emf": "EMF (Lambda)"}
    for i, (case, runs) in enumerate(results.items()):
        goal = GOAL if case.startswith("answered") else None
        for subject, named in where.items():
            label = f"{case}, in process through the HTTP edge, {named}: p50"
            figures.append(figure(f"counting.{i}.{subject}", label, "µs", f"{subject} and statistics", runs[subject], reference="counting off", ref_values=runs["off"], goal=goal))
            label = f"{case}, {named}: CPU per request"
            figures.append(figure(f"counting.{i}.{subject}.cpu", label, "µs", f"{subject} and statistics", runs[f"{subject}_cpu"], reference="counting off", ref_values=runs["off_cpu"]))
    for name in ("answered", "refused"):
        for subject, named in where.items():
            label = f"{name} request, {named}: what reporting it takes, µs (a tight loop; the log line in both)"
            figures.append(figure(f"counting.own.{name}.{subject}", label, "µs", f"{subject} and statistics", own[f"{name}_{subject}"], reference="counting off", ref_values=own[f"{name}_off"]))
    notes = [
        f"Concurrency 1, iris, one row; in each run the three take turns every {BLOCK} requests (who goes first rotating); p50 of each run, median over runs.",
        "Prometheus: its series (in memory) and the deployment statistics; EMF: the line's metrics and the statistics; off: none of them (the log line stays).",
    ]
    return section("counting", "Counting every request: metrics on against off", figures, notes=notes)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", type=Path)
    parser.add_argument("--home", type=Path)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--n", type=int, default=600)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.home, args.repeats, args.n)
        return
    print(json.dumps(run(args.quick), indent=2))


if __name__ == "__main__":
    main()
