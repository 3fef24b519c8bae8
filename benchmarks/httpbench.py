"""Local HTTP throughput: `sluice serve` against the hand-written FastAPI + uvicorn + ORT app.

Both run as uvicorn with the same number of worker processes (1, then 2) on this machine's
cores, started side by side and loaded one at a time from a separate process (`wrk`, else the
Python generator in benchmarks/loadgen.py) at 1, 8 and 32 connections. Each cell alternates
the two apps over the repeats, so slow drift in the machine hits both alike.

sluice runs as `sluice serve` leaves it: API-key auth, validation against the signature,
routing through the deployment, one INFO log line per prediction (to /dev/null here). The
hand-written app does none of that. Both take the same rows (`{"inputs": [[...]]}`).

Before the apps, the load generator is pointed at a trivial server (benchmarks/peers/trivial.py)
to show its own ceiling on this machine; its CPU use is recorded in every run.
"""

from __future__ import annotations

import contextlib
import json
import sys
import urllib.request
from typing import TYPE_CHECKING, Any

from benchmarks import loadgen
from benchmarks.common import (
    PYTHON,
    REPO,
    WORK,
    Goal,
    bench_env,
    figure,
    free_port,
    rotate,
    section,
    server,
)
from benchmarks.prepare import HOME, MODELS, MODELS_DIR, api_key, handwritten_body, sluice_body

if TYPE_CHECKING:
    from collections.abc import Iterator

GOAL_VS_HANDWRITTEN = Goal(">=", 1.2)
LOGS = WORK / "logs"


@contextlib.contextmanager
def sluice_server(workers: int) -> Iterator[str]:
    with sluice_process(workers) as (url, _):
        yield url


@contextlib.contextmanager
def sluice_process(workers: int) -> Iterator[tuple[str, int]]:
    """`sluice serve` with `workers` workers: its URL and the pid its workers descend from."""
    port = free_port()
    env = bench_env(SLUICE_HOME=str(HOME))
    command = [PYTHON, "-m", "sluice.cli", "serve", "--demo", "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]
    with server(command, ready_url=f"http://127.0.0.1:{port}/healthz", log=LOGS / f"sluice-w{workers}.log", env=env, cwd=REPO, quiet_stdout=True) as proc:
        yield f"http://127.0.0.1:{port}", proc.pid


@contextlib.contextmanager
def handwritten_server(workers: int) -> Iterator[str]:
    port = free_port()
    env = bench_env(BENCH_MODELS_DIR=str(MODELS_DIR))
    # uvicorn's defaults, as users run it: one access-log line per request, like sluice's one
    # structured line per prediction; both go to the same sink.
    command = [
        PYTHON, "-m", "uvicorn", "benchmarks.peers.handwritten:app", "--host", "127.0.0.1", "--port", str(port),
        "--workers", str(workers),
    ]
    with server(command, ready_url=f"http://127.0.0.1:{port}/health", log=LOGS / f"handwritten-w{workers}.log", env=env, cwd=REPO, quiet_stdout=True):
        yield f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def trivial_server() -> Iterator[str]:
    port = free_port()
    command = [PYTHON, "-m", "benchmarks.peers.trivial", str(port)]
    with server(command, ready_url=f"http://127.0.0.1:{port}/", log=LOGS / "trivial.log", env=bench_env(), cwd=REPO):
        yield f"http://127.0.0.1:{port}"


def check_once(url: str, body: bytes | None, headers: dict[str, str]) -> dict[str, Any]:
    """One request before a load: it must answer 200, or the figures would measure errors."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"{url} answered {exc.code}: {exc.read()[:300]!r}") from None


def loaded(url: str, body: bytes | None, headers: dict[str, str], connections: int, duration_s: int) -> dict[str, Any]:
    """A load (`loadgen.load`: it lets the last load's queued requests be answered first); any
    answer but a 2xx is an error."""
    result = loadgen.load(url, body=body, headers=headers, connections=connections, duration_s=duration_s)
    if result["errors"]:
        raise RuntimeError(f"{url}: {result['errors']} errors under load ({result['non_2xx']} not 2xx)")
    return result


def loadgen_ceiling(duration_s: int) -> dict[str, Any]:
    with trivial_server() as base:
        return {c: loaded(base + "/", b'{"x":1}', {"Content-Type": "application/json"}, c, duration_s) for c in (1, 32)}


def throughput_figures(
    prefix: str,
    where: str,
    ours: list[dict[str, Any]],
    subject: str,
    theirs: list[dict[str, Any]],
    reference: str,
    goal: Goal | None,
) -> list[dict[str, Any]]:
    return [
        figure(f"{prefix}.rps", f"{where}: req/s", "req/s", subject, [r["rps"] for r in ours],
               reference=reference, ref_values=[r["rps"] for r in theirs], goal=goal, better="higher"),
        figure(f"{prefix}.p50", f"{where}: p50", "µs", subject, [r["p50_us"] for r in ours],
               reference=reference, ref_values=[r["p50_us"] for r in theirs]),
        figure(f"{prefix}.p99", f"{where}: p99", "µs", subject, [r["p99_us"] for r in ours],
               reference=reference, ref_values=[r["p99_us"] for r in theirs]),
    ]


def run(quick: bool) -> list[dict[str, Any]]:
    repeats = 3
    duration = 1  # seconds per run (wrk counts whole seconds); 3 runs per cell, the apps taking turns
    worker_counts = (2,) if quick else (1, 2)
    concurrencies = (8,) if quick else (1, 8, 32)
    models = ["iris"] if quick else list(MODELS)
    key = api_key()
    ceiling = loadgen_ceiling(duration)
    figures: list[dict[str, Any]] = []
    loadgen_cpu: list[float] = []
    for workers in worker_counts:
        with sluice_server(workers) as ours_url, handwritten_server(workers) as hand_url:
            targets = {}
            for name in models:
                model = MODELS[name]
                targets[name] = {
                    "sluice": (f"{ours_url}/api/v1/predictions", sluice_body(model),
                               {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}),
                    "hand-written": (f"{hand_url}/models/{name}/predict", handwritten_body(model),
                                     {"Content-Type": "application/json"}),
                }
                for url, body, headers in targets[name].values():
                    check_once(url, body, headers)
                    loaded(url, body, headers, 8, 1)  # warm-up: sessions, allocator, connection pools
            for name in models:
                for conc in concurrencies:
                    if conc == 1 and workers > min(worker_counts):
                        continue  # one connection is served by one worker: the 1-worker run measured it
                    runs: dict[str, list[dict[str, Any]]] = {"sluice": [], "hand-written": []}
                    for r in range(repeats):
                        for app in rotate(list(runs), r):
                            url, body, headers = targets[name][app]
                            result = loaded(url, body, headers, conc, duration)
                            runs[app].append(result)
                            loadgen_cpu.append(result["loadgen_cpu"])
                    figures += throughput_figures(
                        f"http.w{workers}.{name}.c{conc}",
                        f"{workers} worker{'s' if workers > 1 else ''}, {name}, {conc} conn",
                        runs["sluice"],
                        "sluice serve",
                        runs["hand-written"],
                        "hand-written FastAPI+uvicorn",
                        GOAL_VS_HANDWRITTEN if conc >= 8 else None,
                    )
    tool = ceiling[1]["tool"]
    notes = [
        f"load generator: {tool}, 1 thread, keep-alive, {duration} s per run, {repeats} runs per cell; "
        f"its ceiling against a trivial server on this machine: {ceiling[1]['rps']:.0f} req/s at 1 connection, "
        f"{ceiling[32]['rps']:.0f} req/s at 32; during the app runs it used at most "
        f"{max(loadgen_cpu):.2f} of a core (median {sorted(loadgen_cpu)[len(loadgen_cpu) // 2]:.2f}).",
        "Both apps use ONNX Runtime with 1 intra-op and 1 inter-op thread per worker process.",
    ]
    return [
        section(
            "http",
            "Local HTTP: sluice serve vs hand-written FastAPI + uvicorn + ORT (same workers, same cores)",
            figures,
            notes=notes,
            loadgen={"tool": tool, "ceiling": ceiling, "cpu_max": max(loadgen_cpu)},
        )
    ]


if __name__ == "__main__":  # a single section, for working on it
    json.dump(run("--quick" in sys.argv), sys.stdout, indent=1)
