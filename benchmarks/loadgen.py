"""Closed-loop HTTP load from a separate process: `wrk` when installed, else a Python fallback.

Both keep `connections` keep-alive connections to 127.0.0.1, each sending the same request
as soon as the previous answer arrives, for `duration_s` seconds (the Python one also stops at
`max_requests`). The result: requests, req/s, p50/p99 latency, errors, and the CPU the load
generator itself used (so a report can show it was not the bottleneck).

    python -m benchmarks.loadgen URL --body-file F --header 'Authorization: Bearer …' -c 8 -d 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks.common import PYTHON, REPO, bench_env, percentile

WRK_SCRIPT = """
wrk.method = "{method}"
wrk.body = {body}
{headers}
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '\\nBENCH_JSON {{"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%f,' ..
    '"errors":{{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}}}}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max, latency.mean,
    e.connect, e.read, e.write, e.status, e.timeout))
end
"""


LITTLE_SLACK = 1.15  # rps x mean latency / connections past which wrk's percentiles carry its correction


def latency_occupancy(requests: int, wall_s: float, mean_us: float, connections: int) -> float:
    """Little's law on a load's own figures: `connections` closed loops, each always waiting on
    one request, answer rps = connections / mean latency, so rps x mean / connections is at
    most 1 for the latencies the requests really had. wrk (4.0 and later) adds to its latency
    histogram, after the run, the requests a closed loop did not send while an answer was late
    (its correction for coordinated omission: for a latency L, samples at L - i, L - 2i, ...
    where i is the mean interval between a connection's requests), so that its percentiles are
    what a stream of requests arriving at that rate would have met. Past `LITTLE_SLACK` those
    added samples weigh in its percentiles: its p99 says that some answers took far longer
    than the rest (a few stalls of tens of ms suffice), not that 1% of the requests sent did."""
    return requests / wall_s * mean_us / 1e6 / connections if wall_s > 0 and connections > 0 else 0.0


def latency_notes(where: str, runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """A note for each subject whose wrk latencies carry wrk's correction for coordinated
    omission (`latency_occupancy` past `LITTLE_SLACK`): its p99 there is set by a few
    answers far later than the rest, counted as the requests an open stream would have sent
    meanwhile, not by 1% of the requests sent."""
    notes = []
    for who, results in runs.items():
        bad = [r["latency_occupancy"] for r in results if r.get("latency_ok") is False]
        if bad:
            notes.append(
                f"{where}, {who}: req/s x mean latency / connections = {max(bad):.2f} (at most 1 for the requests sent) "
                f"in {len(bad)} of {len(results)} runs: wrk's p50/p99 there carry its correction for coordinated omission, "
                "a few answers far later than the rest counted as the requests an open stream would have sent meanwhile."
            )
    return notes


def wrk_path() -> str | None:
    return shutil.which("wrk")


def _lua_string(data: bytes) -> str:
    text = data.decode()
    level = "=" * 4
    while f"]{level}]" in text:
        level += "="
    return f"[{level}[{text}]{level}]"


def _wait_rusage(proc: subprocess.Popen[str]) -> float:
    """Reap the child and return the CPU seconds it used (user + system)."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def run_wrk(
    url: str, *, body: bytes | None, headers: dict[str, str], connections: int, duration_s: int, threads: int = 1
) -> dict[str, Any]:
    method = "POST" if body is not None else "GET"
    lines = [f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()]
    script = WRK_SCRIPT.format(method=method, body=_lua_string(body) if body is not None else "nil", headers="\n".join(lines))
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
        lua = f.name
    try:
        proc = subprocess.Popen(
            [wrk_path() or "wrk", f"-t{threads}", f"-c{connections}", f"-d{duration_s}s", "--timeout", "10s", "-s", lua, url],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        output = proc.stdout.read()
        cpu_s = _wait_rusage(proc)
    finally:
        os.unlink(lua)
    line = next((ln for ln in output.splitlines() if ln.startswith("BENCH_JSON ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {output[-1000:]}")
    data = json.loads(line.removeprefix("BENCH_JSON "))
    wall = data["duration_us"] / 1e6
    occupancy = latency_occupancy(data["requests"], wall, data["mean_us"], connections)
    return {
        "tool": "wrk",
        "requests": data["requests"],
        "rps": data["requests"] / wall,
        "p50_us": float(data["p50_us"]),
        "p99_us": float(data["p99_us"]),
        "errors": sum(data["errors"].values()),
        "non_2xx": data["errors"]["status"],
        "wall_s": wall,
        "loadgen_cpu": cpu_s / wall,  # cores the generator kept busy
        "latency_occupancy": occupancy,
        "latency_ok": occupancy <= LITTLE_SLACK,
    }


def run_python(
    url: str,
    *,
    body: bytes | None,
    headers: dict[str, str],
    connections: int,
    duration_s: float,
    max_requests: int = 2_000_000,
) -> dict[str, Any]:
    """The fallback: this module's own generator, in a child process."""
    with tempfile.TemporaryDirectory() as tmp:
        body_file = Path(tmp) / "body"
        args = [PYTHON, "-m", "benchmarks.loadgen", url, "-c", str(connections), "-d", str(duration_s), "-n", str(max_requests)]
        if body is not None:
            body_file.write_bytes(body)
            args += ["--body-file", str(body_file)]
        for k, v in headers.items():
            args += ["--header", f"{k}: {v}"]
        proc = subprocess.Popen(args, cwd=REPO, env=bench_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate()
        # communicate() reaped it: CPU comes from the child's own report
    if proc.returncode != 0:
        raise RuntimeError(f"python load generator failed: {err[-1000:]}")
    return json.loads(out.strip().splitlines()[-1])


SETTLE_S = 0.1  # before a load: the last load's requests still queued when it stopped are answered


def load(
    url: str,
    *,
    body: bytes | None,
    headers: dict[str, str],
    connections: int,
    duration_s: int,
    tool: str = "auto",
) -> dict[str, Any]:
    """A closed-loop load (wrk where installed, else the Python generator). A load that ends
    leaves each connection's last request queued at the server, which answers it after the
    client has gone; a load started at once on as many new connections would find a `sluice
    serve` worker's predictions in flight (`SLUICE_MAX_PREDICTIONS_IN_FLIGHT`, 32) still taken
    and be refused 503, a burst in its first milliseconds. So a short pause first."""
    time.sleep(SETTLE_S)
    if tool == "wrk" or (tool == "auto" and wrk_path()):
        return run_wrk(url, body=body, headers=headers, connections=connections, duration_s=duration_s)
    return run_python(url, body=body, headers=headers, connections=connections, duration_s=duration_s)


# the Python generator -----------------------------------------------------------------------
async def _connection(
    host: str, port: int, request: bytes, deadline: float, samples: list[int], state: dict[str, int], limit: int
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    clock = time.perf_counter_ns
    try:
        while time.monotonic() < deadline and state["sent"] < limit:
            state["sent"] += 1
            t0 = clock()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            status = int(head[9:12])
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if length:
                await reader.readexactly(length)
            samples.append(clock() - t0)
            if not 200 <= status < 300:
                state["non_2xx"] += 1
    except (ConnectionError, asyncio.IncompleteReadError):
        state["errors"] += 1
    finally:
        writer.close()


async def _generate(url: str, body: bytes | None, headers: dict[str, str], connections: int, duration_s: float, limit: int) -> dict[str, Any]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    path = parts.path or "/"
    method = "POST" if body is not None else "GET"
    head = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: keep-alive"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    if body is not None:
        head.append(f"Content-Length: {len(body)}")
    request = ("\r\n".join(head) + "\r\n\r\n").encode() + (body or b"")
    samples: list[int] = []
    state = {"sent": 0, "errors": 0, "non_2xx": 0}
    started = time.monotonic()
    cpu0 = time.process_time()
    deadline = started + duration_s
    await asyncio.gather(*(_connection(host, port, request, deadline, samples, state, limit) for _ in range(connections)))
    wall = time.monotonic() - started
    micros = [s / 1000 for s in samples] or [0.0]
    return {
        "tool": "python",
        "requests": len(samples),
        "rps": len(samples) / wall,
        "p50_us": percentile(micros, 50),
        "p99_us": percentile(micros, 99),
        "errors": state["errors"] + state["non_2xx"],
        "non_2xx": state["non_2xx"],
        "wall_s": wall,
        "loadgen_cpu": (time.process_time() - cpu0) / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("-c", "--connections", type=int, default=8)
    parser.add_argument("-d", "--duration", type=float, default=2.0)
    parser.add_argument("-n", "--max-requests", type=int, default=2_000_000)
    parser.add_argument("--body-file", type=Path)
    parser.add_argument("--header", action="append", default=[])
    args = parser.parse_args()
    if not args.url.startswith("http://127.0.0.1:"):
        parser.error("loads go to http://127.0.0.1 only")
    headers = dict(h.split(": ", 1) for h in args.header)
    body = args.body_file.read_bytes() if args.body_file else None
    work = _generate(args.url, body, headers, args.connections, args.duration, args.max_requests)
    try:
        import uvloop
    except ImportError:
        result = asyncio.run(work)
    else:
        result = uvloop.run(work)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
