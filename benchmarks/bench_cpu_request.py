"""Server CPU per request on the local service's hot routes, against the HTTP server's own cost.

`sluice serve --workers 1` on the benchmark home and, beside it, the least an ASGI app can do
on the same uvicorn (httptools, uvloop: `benchmarks/peers/asgi_floor.py`), each loaded over
HTTP/1.1 keep-alive (wrk, else the Python generator) in turns, the order rotated each round.
CPU per request is the CPU the server's processes used (`getrusage` of each, read from /proc
before and after a load) divided by the requests answered: on a machine shared with other
work it moves far less than req/s does.

    python -m benchmarks.bench_cpu_request [--rounds 3] [--seconds 3] [--connections 8]
        [--against CHECKOUT]

Routes: simple JSON (`POST /api/v1/predictions`) and v2 (`POST /v2/models/{name}/infer`), one
diabetes row each. `--against CHECKOUT` serves another checkout's `functions/` as a second
sluice (A), in turns with this one (B): a change measured A/B, interleaved.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import (
    PYTHON,
    REPO,
    WORK,
    bench_env,
    figure,
    free_port,
    rotate,
    server,
    tree_cpu_s,
)
from benchmarks.httpbench import check_once, loaded
from benchmarks.prepare import HOME, MODELS, api_key, prepare, sluice_body, v2_body

if TYPE_CHECKING:
    from collections.abc import Iterator

LOGS = WORK / "logs"
Target = tuple[str, bytes, dict[str, str]]


def _routes(base: str, key: str) -> dict[str, Target]:
    model = MODELS["diabetes"]
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    return {
        "json": (f"{base}/api/v1/predictions", sluice_body(model), headers),
        "v2": (f"{base}/v2/models/{model.name}/infer", v2_body(model), headers),
    }


@contextlib.contextmanager
def _sluice(tree: Path, name: str) -> Iterator[tuple[int, dict[str, Target]]]:
    port = free_port()
    env = bench_env(SLUICE_HOME=str(HOME))
    env["PYTHONPATH"] = f"{REPO}:{tree / 'functions'}"
    command = [PYTHON, "-m", "sluice.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    ready = f"http://127.0.0.1:{port}/healthz"
    with server(command, ready_url=ready, log=LOGS / f"cpu-request-{name}.log", env=env, cwd=REPO, quiet_stdout=True) as proc:
        yield proc.pid, _routes(f"http://127.0.0.1:{port}", api_key())


def measure(subjects: dict[str, Any], rounds: int, seconds: int, connections: int) -> dict[str, dict[str, list[dict[str, float]]]]:
    """Each subject's routes, `rounds` times in a rotated order: {subject: {route: [run]}}."""
    prepare()
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    with contextlib.ExitStack() as stack:
        live = {name: stack.enter_context(start()) for name, start in subjects.items()}
        for name, (_, routes) in live.items():
            results[name] = {route: [] for route in routes}
            for url, body, headers in routes.values():
                check_once(url, body, headers)
                loaded(url, body, headers, connections, 1)  # warm-up: sessions, allocator, caches
        for r in range(rounds):
            for name in rotate(list(live), r):
                pid, routes = live[name]
                for route, (url, body, headers) in routes.items():
                    before = tree_cpu_s(pid)
                    result = loaded(url, body, headers, connections, seconds)
                    cpu_us = (tree_cpu_s(pid) - before) / max(result["requests"], 1) * 1e6
                    results[name][route].append({"cpu_us": cpu_us, "rps": result["rps"], "p99_us": result["p99_us"]})
    return results


def run(quick: bool, *, against: Path | None = None, rounds: int | None = None, seconds: int | None = None, connections: int = 8) -> dict[str, Any]:
    rounds = rounds or (2 if quick else 4)
    seconds = seconds or (1 if quick else 2)
    subjects: dict[str, Any] = {"floor": _floor_server, "sluice": lambda: _sluice(REPO, "B")}
    if against is not None:
        subjects["before"] = lambda: _sluice(against, "A")
    results = measure(subjects, rounds, seconds, connections)
    floor = [r["cpu_us"] for r in results["floor"]["json"]]
    figures = []
    for route in ("json", "v2"):
        ours = [r["cpu_us"] for r in results["sluice"][route]]
        figures.append(figure(
            f"cpu_request.{route}", f"server CPU per request, {route}, 1 worker, {connections} conn", "µs", "sluice serve", ours,
            reference="uvicorn + an empty ASGI app (same server)", ref_values=floor,
            note="the ratio: sluice's whole request over the HTTP server's own share of it",
        ))  # fmt: skip
        if against is not None:
            figures.append(figure(
                f"cpu_request.{route}.ab", f"server CPU per request, {route}: this tree against {against}", "µs", "this tree", ours,
                reference="the other checkout", ref_values=[r["cpu_us"] for r in results["before"][route]],
            ))  # fmt: skip
    notes = [
        f"{rounds} rounds of {seconds} s per route and subject, {connections} connections, keep-alive, one worker, the "
        "order rotated each round; CPU of the server's processes over requests answered.",
        "Figures that depend on the two cores: a second ONNX Runtime thread adds only 1.08x on this machine.",
    ]
    return {"title": "Server CPU per request: sluice serve against the HTTP server's own cost", "figures": figures, "notes": notes, "runs": results}


@contextlib.contextmanager
def _floor_server() -> Iterator[tuple[int, dict[str, Target]]]:
    port = free_port()
    command = [
        PYTHON, "-m", "uvicorn", "benchmarks.peers.asgi_floor:app", "--host", "127.0.0.1", "--port", str(port),
        "--http", "httptools", "--loop", "uvloop", "--no-access-log", "--log-level", "warning",
    ]  # fmt: skip
    with server(command, ready_url=f"http://127.0.0.1:{port}/", log=LOGS / "cpu-request-floor.log", env=bench_env(), cwd=REPO) as proc:
        body = sluice_body(MODELS["diabetes"])  # the same bytes in, read and dropped
        yield proc.pid, {"json": (f"http://127.0.0.1:{port}/", body, {"Content-Type": "application/json"})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--against", type=Path, help="another checkout, served as the 'before' sluice")
    args = parser.parse_args()
    result = run(False, against=args.against, rounds=args.rounds, seconds=args.seconds, connections=args.connections)
    for name, routes in result["runs"].items():
        for route, runs in routes.items():
            cpu, rps = [r["cpu_us"] for r in runs], [r["rps"] for r in runs]
            print(f"{name:7s} {route:4s} CPU/request µs median {statistics.median(cpu):6.0f} ({min(cpu):.0f}-{max(cpu):.0f})"
                  f"   req/s median {statistics.median(rps):6.0f} ({min(rps):.0f}-{max(rps):.0f})")  # fmt: skip
    json.dump(result["runs"], sys.stderr)


if __name__ == "__main__":
    main()
