"""The HTTP server under sluice's app: server CPU per request with uvicorn (what `sluice serve`
runs) against Granian, whose Rust front end is the usual suggestion for a faster Python
server, on its ASGI interface (the same app) and on its RSGI interface (the hot routes through
`answer_whole`, `benchmarks/peers/granian_rsgi.py`). One worker each, uvloop, the same home
and model, simple JSON with one diabetes row, HTTP/1.1 keep-alive from the load generator
(wrk, else the Python one), the servers taking turns; CPU per request is the server's process
tree's CPU over the requests answered (as `benchmarks.bench_cpu_request`).

Granian is installed on first use into `benchmarks/work/granian` (`uv pip install --target`),
not into sluice's environment: it is measured, not used.

    python -m benchmarks.servers_ab [--rounds 4] [--seconds 3] [--connections 8]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
from typing import TYPE_CHECKING

from benchmarks import bench_cpu_request
from benchmarks.common import PYTHON, REPO, WORK, bench_env, free_port, rotate, server, tree_cpu_s
from benchmarks.httpbench import check_once, loaded
from benchmarks.prepare import HOME, MODELS, api_key, prepare, sluice_body

if TYPE_CHECKING:
    from collections.abc import Iterator

GRANIAN = "granian==2.8.9"
GRANIAN_DIR = WORK / "granian"
Target = tuple[int, str, bytes, dict[str, str]]


def ensure_granian() -> None:
    if (GRANIAN_DIR / "granian").is_dir():
        return
    uv = REPO / ".venv" / "bin" / "uv"
    step = [str(uv), "pip", "install", "--quiet", "--python", PYTHON, "--target", str(GRANIAN_DIR), GRANIAN]
    done = subprocess.run(step, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"could not install {GRANIAN}: {done.stderr[-800:]}")


def _request() -> tuple[bytes, dict[str, str]]:
    return sluice_body(MODELS["diabetes"]), {"Content-Type": "application/json", "Authorization": f"Bearer {api_key()}"}


@contextlib.contextmanager
def _uvicorn() -> Iterator[Target]:
    with bench_cpu_request._sluice(REPO, "servers") as (pid, routes):
        url, body, headers = routes["json"]
        yield pid, url, body, headers


@contextlib.contextmanager
def _granian(interface: str) -> Iterator[Target]:
    ensure_granian()
    port = free_port()
    env = bench_env(SLUICE_HOME=str(HOME))
    env["PYTHONPATH"] = f"{GRANIAN_DIR}:{env['PYTHONPATH']}"
    command = [
        PYTHON, "-m", "granian", "--interface", interface, "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
        "--loop", "uvloop", "--log-level", "warning", "--no-ws",
        *(["--factory", "sluice.cli.serve:served_alone"] if interface == "asgi" else ["benchmarks.peers.granian_rsgi:app"]),
    ]  # fmt: skip
    body, headers = _request()
    url = f"http://127.0.0.1:{port}/api/v1/predictions"
    with server(command, ready_url=f"http://127.0.0.1:{port}/healthz", log=WORK / "logs" / f"servers-granian-{interface}.log", env=env, cwd=REPO, quiet_stdout=True) as proc:
        check_once(url, body, headers)
        yield proc.pid, url, body, headers


SUBJECTS = {"uvicorn": _uvicorn, "granian asgi": lambda: _granian("asgi"), "granian rsgi": lambda: _granian("rsgi")}


def measure(rounds: int, seconds: int, connections: int) -> dict[str, list[dict[str, float]]]:
    prepare()
    results: dict[str, list[dict[str, float]]] = {name: [] for name in SUBJECTS}
    with contextlib.ExitStack() as stack:
        live = {name: stack.enter_context(start()) for name, start in SUBJECTS.items()}
        for _, url, body, headers in live.values():
            loaded(url, body, headers, connections, 1)  # warm-up
        for r in range(rounds):
            for name in rotate(list(live), r):
                pid, url, body, headers = live[name]
                before = tree_cpu_s(pid)
                result = loaded(url, body, headers, connections, seconds)
                results[name].append({"cpu_us": (tree_cpu_s(pid) - before) / max(result["requests"], 1) * 1e6, "rps": result["rps"], "p50_us": result["p50_us"]})
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    results = measure(args.rounds, args.seconds, args.connections)
    base = statistics.median(r["cpu_us"] for r in results["uvicorn"])
    for name, runs in results.items():
        cpu = statistics.median(r["cpu_us"] for r in runs)
        print(
            f"{name:13} CPU/request µs median {cpu:5.0f} ({cpu / base:.2f}x uvicorn) [{min(r['cpu_us'] for r in runs):.0f}-{max(r['cpu_us'] for r in runs):.0f}]"
            f"   req/s {statistics.median(r['rps'] for r in runs):6.0f}   p50 µs {statistics.median(r['p50_us'] for r in runs):6.0f}"
        )


if __name__ == "__main__":
    main()
