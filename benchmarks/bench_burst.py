"""A burst at five times the sustainable rate: what admission control does under overload.

On `sluice serve --demo --workers 2` (the prepared benchmark home), with a 500-row simple-JSON
request to the demo classifier (`iris`):

1. the sustainable rate: the closed-loop throughput at `CONNECTIONS` kept-alive connections
   (`benchmarks.loadgen`: wrk when installed, else its Python generator), after a warm-up;
2. the workers' memory (RSS of the worker processes, summed) at rest;
3. a burst at `FACTOR` times that rate for `BURST_S` seconds, open loop (`benchmarks.openloop`:
   requests sent on schedule whatever the server does, on a pool of `POOL` kept-alive
   connections opened before it, as a proxy or a client's pool holds them; a request waits for
   a free connection when all are busy, and that wait counts in its latency; each client
   patient for `TIMEOUT_S`), while a probe asks `GET /healthz` on a new connection every half
   second (a worker accepts new connections as its event loop turns: the probe shows how long
   a new client waits under load);
4. the workers' memory again once the burst's last request has its answer and `SETTLE_S`
   have passed.

Figures: the share answered 2xx, the share refused (429/503, each with Retry-After and the JSON
error body), p99 of the refusals and of the answered, both from the moment the request was
sent on its connection (the server's own time) and from its scheduled time (what an open-loop
client sees, its wait for a free connection of its pool included), the health probe's p99, the workers' memory after / before (goal <= 1.2x), connection resets (goal
0), requests sent and not answered within `TIMEOUT_S`, and requests never sent because every
connection of the pool stayed busy that long (the pool carries `POOL` / latency requests a
second: an open loop past that queues in the client). Every figure depends on the cores the server had: 2 here, shared with
the load generators and, on a shared machine, with whatever else ran.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks import loadgen
from benchmarks.common import PYTHON, REPO, Goal, bench_env, figure, percentile
from benchmarks.httpbench import check_once, sluice_process
from benchmarks.prepare import MODELS, api_key, sluice_body

ROWS = 500
WORKERS = 2
CONNECTIONS = 8  # the closed loop that finds the sustainable rate
FACTOR = 5
BURST_S = 10
TIMEOUT_S = 30.0
POOL = 256  # the open loop's kept-alive connections, opened before the burst (a proxy's or a client's pool)
SETTLE_S = 5.0
GOAL_MEMORY = Goal("<=", 1.2)


def worker_pids(server_pid: int) -> list[int]:
    """The server's worker processes: its children that run the app (not multiprocessing's
    resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == server_pid and b"resource_tracker" not in command:
            found.append(int(entry.name))
    return sorted(found)


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


class HealthProbe:
    """`GET /healthz` on a new connection every `every_s` until stopped: latencies in µs, and
    the probes that got no answer within `timeout_s`."""

    def __init__(self, url: str, every_s: float = 0.5, timeout_s: float = TIMEOUT_S) -> None:
        self.url, self.every_s, self.timeout_s = url, every_s, timeout_s
        self.latency_us: list[float] = []
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=self.timeout_s) as response:
                    response.read()
            except OSError:
                self.failed += 1
                continue
            self.latency_us.append((time.perf_counter() - started) * 1e6)


def burst(url: str, body: bytes, headers: dict[str, str], rate: float, duration_s: float) -> dict[str, Any]:
    """`benchmarks.openloop` in a process of its own."""
    with tempfile.TemporaryDirectory() as tmp:
        body_file = Path(tmp) / "body"
        body_file.write_bytes(body)
        args = [PYTHON, "-m", "benchmarks.openloop", url, "--rate", f"{rate:.1f}", "-d", str(duration_s),
                "--timeout", str(TIMEOUT_S), "--max-connections", str(POOL), "--preopen", "--body-file", str(body_file)]  # fmt: skip
        for name, value in headers.items():
            args += ["--header", f"{name}: {value}"]
        done = subprocess.run(args, cwd=REPO, env=bench_env(), capture_output=True, text=True, timeout=duration_s + 4 * TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the open-loop generator failed: {done.stderr[-800:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(quick: bool) -> dict[str, Any]:
    duration = 5 if quick else BURST_S
    body = sluice_body(MODELS["iris"], ROWS)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {api_key()}"}
    with sluice_process(WORKERS) as (base, pid):
        url = f"{base}/api/v1/predictions"
        check_once(url, body, headers)
        loadgen.load(url, body=body, headers=headers, connections=CONNECTIONS, duration_s=2)  # warm-up
        sustained = loadgen.load(url, body=body, headers=headers, connections=CONNECTIONS, duration_s=3 if quick else 5)
        if sustained["errors"]:
            raise RuntimeError(f"{sustained['errors']} errors at the sustainable rate: the figures would measure errors")
        workers = worker_pids(pid)
        before = rss_mb(workers)
        rate = FACTOR * sustained["rps"]
        with HealthProbe(f"{base}/healthz") as probe:
            result = burst(url, body, headers, rate, duration)
        time.sleep(SETTLE_S)
        after = rss_mb(workers)
    sent = result["sent"]
    refused_share = result["refused"] / sent
    health = probe.latency_us or [float("nan")]
    figures = [
        figure("burst.answered", f"burst at {FACTOR}x: share answered 2xx", "%", "sluice serve", [100 * result["answered_2xx"] / sent], better="higher"),
        figure("burst.refused", f"burst at {FACTOR}x: share refused (429/503)", "%", "sluice serve", [100 * refused_share]),
        figure("burst.refused_p99_server", f"burst at {FACTOR}x: p99 of the refusals, from the request sent", "µs", "sluice serve",
               [result["p99_refused_wire_us"] or 0.0]),
        figure("burst.answered_p99_server", f"burst at {FACTOR}x: p99 of the answered, from the request sent", "µs", "sluice serve",
               [result["p99_2xx_wire_us"] or 0.0]),
        figure("burst.refused_p99", f"burst at {FACTOR}x: p99 of the refusals, from the scheduled time", "µs", "sluice serve",
               [result["p99_refused_us"] or 0.0]),
        figure("burst.answered_p99", f"burst at {FACTOR}x: p99 of the answered, from the scheduled time", "µs", "sluice serve",
               [result["p99_2xx_us"] or 0.0]),
        figure("burst.health_p99", f"burst at {FACTOR}x: GET /healthz p99 (new connections)", "µs", "sluice serve", [percentile(health, 99)]),
        figure("burst.memory", "workers' memory after the burst / before", "MB", "after", [after],
               reference="before", ref_values=[before], goal=GOAL_MEMORY),
        figure("burst.resets", f"burst at {FACTOR}x: connections reset (goal 0)", "count", "sluice serve", [result["resets"]]),
        figure("burst.timeouts", f"burst at {FACTOR}x: sent, no answer within {TIMEOUT_S:g} s", "count", "sluice serve", [result["timeouts"]]),
        figure("burst.unsent", f"burst at {FACTOR}x: never sent, the pool busy for {TIMEOUT_S:g} s", "count", "sluice serve", [result["unsent"]]),
    ]
    notes = [
        f"{ROWS}-row iris request, `sluice serve --demo --workers {WORKERS}` with its default admission settings; "
        f"sustainable rate {sustained['rps']:.0f} req/s (closed loop, {CONNECTIONS} connections, p99 {sustained['p99_us'] / 1000:.0f} ms), "
        f"burst {rate:.0f} req/s for {duration} s open loop ({sent} requests on a pool of {POOL} kept-alive connections "
        f"opened before it, {result['connections_opened']} more opened to replace closed ones; load generator "
        f"{result['loadgen_cpu']:.2f} of a core).",
        f"statuses {result['statuses']}; refusal codes {result['refusal_codes']}, "
        f"{result['refusals_with_retry_after']} of {result['refused']} with Retry-After; p50 answered "
        f"{(result['p50_2xx_us'] or 0) / 1000:.0f} ms, p50 refused {(result['p50_refused_us'] or 0) / 1000:.0f} ms; "
        f"health probes {len(probe.latency_us)} answered, {probe.failed} not.",
        f"worker memory {before:.0f} MB before, {after:.0f} MB {SETTLE_S:g} s after the burst ({len(workers)} workers).",
        "Figures depend on the cores: 2 here, shared by the server, the load generators and, on a shared "
        "machine, other work (see loadavg_start).",
    ]
    return {"title": f"Burst at {FACTOR}x the sustainable rate (admission control)", "figures": figures, "notes": notes, "burst": result}


if __name__ == "__main__":  # one section, for working on it
    json.dump(run("--quick" in sys.argv), sys.stdout, indent=1)
