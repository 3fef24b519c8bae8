"""Predictions over a WebSocket (`ws://…/api/v1/stream`) against the same prediction over HTTP
(`POST /api/v1/predictions`) on one `sluice serve --demo` worker: the iris model, one row of
features, the same body (plus a request id) both ways.

- p50: one client calling in turn, a kept-alive HTTP connection against one open WebSocket.
- msg/s: `IN_FLIGHT` requests outstanding at once for a short time: one WebSocket connection
  with that many messages in flight (a Python asyncio client) against that many kept-alive
  HTTP connections driven by the project's load generator (`benchmarks.loadgen`: wrk when
  installed, else its Python fallback), each from a process of its own.
The subjects take turns going first.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import time
from typing import Any

from benchmarks.common import (
    PYTHON,
    REPO,
    WORK,
    Goal,
    bench_env,
    figure,
    free_port,
    percentile,
    server,
)

HOME = WORK / "websocket-home"
IN_FLIGHT = 16
BODY = {"deployment": "iris", "features": {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}}


def _http_p50(base: str, key: str, n: int) -> float:
    import httpx

    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as client:
        for _ in range(20):
            client.post("/api/v1/predictions", json=BODY).raise_for_status()
        times = []
        for i in range(n):
            started = time.perf_counter()
            response = client.post("/api/v1/predictions", json={**BODY, "request_id": f"h{i}"})
            times.append((time.perf_counter() - started) * 1e6)
            assert response.json()["prediction"] == "setosa"
    return percentile(times, 50)


def _ws_p50(url: str, key: str, n: int) -> float:
    from websockets.sync.client import connect

    with connect(url, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        for _ in range(20):
            ws.send(json.dumps(BODY))
            ws.recv()
        times = []
        for i in range(n):
            started = time.perf_counter()
            ws.send(json.dumps({**BODY, "request_id": f"w{i}"}))
            answer = json.loads(ws.recv())
            times.append((time.perf_counter() - started) * 1e6)
            assert answer["prediction"] == "setosa" and answer["request_id"] == f"w{i}"
    return percentile(times, 50)


def _http_rate(base: str, key: str, duration_s: float) -> float:
    """The project's load generator (wrk when installed), from a process of its own."""
    from benchmarks import loadgen

    result = loadgen.load(
        f"{base}/api/v1/predictions",
        body=json.dumps(BODY).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        connections=IN_FLIGHT,
        duration_s=max(1, round(duration_s)),
    )
    if result["errors"]:
        raise RuntimeError(f"HTTP load: {result['errors']} errors")
    return float(result["rps"])


def _ws_rate(url: str, key: str, duration_s: float) -> float:
    from websockets.asyncio.client import connect

    async def go() -> float:
        async with connect(url, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
            sent = done = 0
            end = time.monotonic() + duration_s
            started = time.monotonic()
            for _ in range(IN_FLIGHT):  # keep IN_FLIGHT outstanding: one out per answer in
                await ws.send(json.dumps({**BODY, "request_id": str(sent)}))
                sent += 1
            while done < sent:
                answer = json.loads(await ws.recv())
                assert answer.get("prediction") == "setosa", answer
                done += 1
                if time.monotonic() < end:
                    await ws.send(json.dumps({**BODY, "request_id": str(sent)}))
                    sent += 1
            return done / (time.monotonic() - started)

    return asyncio.run(go())


def run(quick: bool) -> dict[str, Any]:
    repeats, n, duration_s = (2, 300, 2.0) if quick else (3, 1000, 3.0)
    shutil.rmtree(HOME, ignore_errors=True)
    HOME.mkdir(parents=True)
    port = free_port()
    base, url = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/api/v1/stream"
    command = [PYTHON, "-m", "sluice.cli", "serve", "--demo", "--port", str(port), "--workers", "1"]
    # The per-connection message rate is a guard, not the subject here.
    env = bench_env(SLUICE_HOME=str(HOME), SLUICE_WEBSOCKET_RATE_LIMIT="")
    results: dict[str, list[float]] = {}
    with server(command, ready_url=f"{base}/healthz", log=HOME / "serve.log", env=env, cwd=REPO, quiet_stdout=True):
        key = (HOME / "admin-key").read_text().strip()
        for i in range(repeats):
            for who in (("ws", "http") if i % 2 == 0 else ("http", "ws")):
                if who == "ws":
                    results.setdefault("ws.p50", []).append(_ws_p50(url, key, n))
                    results.setdefault("ws.rate", []).append(_ws_rate(url, key, duration_s))
                else:
                    results.setdefault("http.p50", []).append(_http_p50(base, key, n))
                    results.setdefault("http.rate", []).append(_http_rate(base, key, duration_s))
    figures = [
        figure(
            "websocket.p50", "WebSocket round trip, 1 row (iris): p50 (1 client)", "µs", "WebSocket",
            results["ws.p50"], reference="HTTP POST", ref_values=results["http.p50"], goal=Goal("<=", 1.0),
        ),
        figure(
            "websocket.rate", f"WebSocket, 1 row (iris): msg/s ({IN_FLIGHT} in flight on one connection)", "msg/s",
            "WebSocket", results["ws.rate"], reference=f"HTTP POST ({IN_FLIGHT} connections)",
            ref_values=results["http.rate"], better="higher",
        ),
    ]  # fmt: skip
    notes = [
        "One `sluice serve --demo` worker; the API key checked once per WebSocket connection and "
        "once per HTTP request (a cached check); per-connection message rate off. Client and "
        "server share the machine's cores, so msg/s includes each client's own cost.",
    ]
    return {"title": "Predictions over a WebSocket vs HTTP (local service)", "figures": figures, "notes": notes}


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
