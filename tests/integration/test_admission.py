"""Admission control on a real server (the app under uvicorn on a loopback port): a worker
takes `SLUICE_MAX_PREDICTIONS_IN_FLIGHT` predictions at once and answers the rest at once with
503, Retry-After and the error body (`overloaded`), through the simple JSON route, the v2 route
and a WebSocket message alike, while health, readiness and metrics still answer; a tenant past
its share gets 429 (`tenant_overloaded`) while another tenant is still served; the slots come
back when the answers go out. And what a burst leaves behind: `sluice serve`'s workers build
their routes before their first request, and give large freed blocks back to the system.

The backend is made slow by a gate: the admitted predictions wait on it until the test opens it,
so which requests are admitted does not depend on the machine's speed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import pytest
from websockets.sync.client import connect

from sluice.api.app import create_app
from sluice.domain.results import InferenceResult
from sluice.metrics import PrometheusMetrics
from tests.conftest import REPO
from tests.integration.conftest import api_keys, auth
from tests.integration.test_metrics import value
from tests.integration.traffic_fakes import add_fake
from tests.support import http, http_client, serving

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sluice.domain import ModelVersion, Principal
    from sluice.wiring import Container

LIMIT = 4
GUARDED = "sluice.cli.protocol:GuardedHttpToolsProtocol"  # `sluice serve`'s protocol
FUNCTIONS = REPO / "functions"
ROW = [0.1, 0.2, 0.3, 0.4]


class GatedRuntime:
    """A backend that answers versions configured `gated` only once `gate` is set (and the
    others at once): 1.0 for every row."""

    kind = "sagemaker"  # a kind the registry stores that the demo never uses

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.waiting = 0  # gated calls under way

    async def load(self, version: ModelVersion) -> None:
        return None

    async def infer(self, version: ModelVersion, inputs: dict[str, np.ndarray], outputs: Any = None) -> InferenceResult:
        if version.config.get("gated"):
            self.waiting += 1
            try:
                while not self.gate.is_set():  # bounded: the request's own deadline ends it
                    await asyncio.sleep(0.01)
            finally:
                self.waiting -= 1
        rows = next(iter(inputs.values())).shape[0]
        return InferenceResult({"y": np.ones((rows, 1), dtype=np.float32)})

    async def unload(self, version: ModelVersion) -> None:
        return None

    async def metadata(self, version: ModelVersion) -> Any:
        return version.signature


@pytest.fixture
def service(demo: Container, acme: Principal, globex: Principal) -> Iterator[tuple[str, dict[str, str], GatedRuntime]]:
    """The app on a loopback port, a worker of `LIMIT` predictions, a tenant's share half of
    them; acme's `slow` (gated) and globex's `slow` (gated) and `quick` deployments."""
    runtime = GatedRuntime()
    demo.runtimes["sagemaker"] = runtime
    add_fake(demo.registry, "acme", "slow", gated=True)
    add_fake(demo.registry, "globex", "slow", gated=True)
    add_fake(demo.registry, "globex", "quick")
    demo.deployments.create(acme, "slow", {"kind": "single", "model": "slow", "version": 1})
    demo.deployments.create(globex, "slow", {"kind": "single", "model": "slow", "version": 1})
    demo.deployments.create(globex, "quick", {"kind": "single", "model": "quick", "version": 1})
    demo.telemetry.sink = PrometheusMetrics()  # type: ignore[union-attr]  # as `sluice serve` turns it on
    admission = demo.settings.admission
    admission.max_predictions_in_flight, admission.tenant_share, admission.max_in_flight_per_key = LIMIT, 0.5, 0
    keys = api_keys(demo)
    with serving(create_app(demo), http=GUARDED) as url:
        try:
            yield url, keys, runtime
        finally:
            runtime.gate.set()


def _simple(base: str, key: str, deployment: str = "slow", timeout: float = 30) -> httpx.Response:
    return http("POST", f"{base}/api/v1/predictions", json={"deployment": deployment, "inputs": [ROW]}, headers=auth(key), timeout=timeout)


def _v2(base: str, key: str, deployment: str = "slow", timeout: float = 30) -> httpx.Response:
    body = {"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": ROW}]}
    return http("POST", f"{base}/v2/models/{deployment}/infer", json=body, headers=auth(key), timeout=timeout)


def _until(condition: Any) -> None:
    deadline = time.monotonic() + 20
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert condition()


def _refused(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["retry-after"] == "1"
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["code"] == code and body["error"]


def test_a_full_worker_answers_503_at_once_and_still_answers_health_and_metrics(service: tuple[str, dict[str, str], GatedRuntime]) -> None:
    base, keys, runtime = service
    key = keys["acme"]
    with ThreadPoolExecutor(24) as pool:
        # Three times the limit at once, both routes: LIMIT admitted (held by the gate), the rest refused.
        futures = [pool.submit(_simple if i % 2 else _v2, base, key) for i in range(3 * LIMIT)]
        _until(lambda: runtime.waiting == LIMIT and sum(f.done() for f in futures) == 2 * LIMIT)
        refused = [f.result() for f in futures if f.done()]
        for response in refused:
            _refused(response, 503, "overloaded")
        # Nothing but predictions is refused: health, readiness, metrics, management reads.
        assert http("GET", f"{base}/healthz").status_code == 200
        assert http("GET", f"{base}/readyz").status_code == 200
        assert http("GET", f"{base}/v2/health/ready").status_code == 200
        assert http("GET", f"{base}/api/v1/deployments", headers=auth(key)).status_code == 200
        metrics = http("GET", f"{base}/metrics", headers=auth(key))
        assert metrics.status_code == 200
        assert value(metrics.text, "ml_inference_refused_total", tenant="acme", code="overloaded") == 2 * LIMIT  # what to alarm on
        # and each refused prediction is a request that failed, as any other failure is counted
        assert value(metrics.text, "ml_inference_errors_total", tenant="acme", status="503", code="overloaded") == 2 * LIMIT
        assert value(metrics.text, "ml_inference_requests_total", tenant="acme", **{"class": "5xx"}) == 2 * LIMIT
        runtime.gate.set()
        answered = [f.result() for f in futures if f.result() not in refused]
    assert len(answered) == LIMIT and all(r.status_code == 200 for r in answered), [r.text for r in answered]
    # Every slot came back: the limit again, one after another.
    for _ in range(LIMIT + 1):
        assert _simple(base, key).status_code == 200


@pytest.mark.parametrize("route", [_simple, _v2], ids=["simple", "v2"])
def test_a_client_that_leaves_gives_back_its_slot_its_call_cancelled_and_counted(demo: Container, acme: Principal, route: Any) -> None:
    """Under `sluice serve`'s protocol, a client that leaves while its prediction waits on the
    backend cancels it: the slot is free at once for the next request (not when the abandoned
    call ends), and each abandoned request is counted once, as `cancelled` (499), not answered."""
    runtime = GatedRuntime()
    demo.runtimes["sagemaker"] = runtime
    add_fake(demo.registry, "acme", "slow", gated=True)
    add_fake(demo.registry, "acme", "quick")
    demo.deployments.create(acme, "slow", {"kind": "single", "model": "slow", "version": 1})
    demo.deployments.create(acme, "quick", {"kind": "single", "model": "quick", "version": 1})
    demo.telemetry.sink = PrometheusMetrics()  # type: ignore[union-attr]
    admission = demo.settings.admission
    admission.max_predictions_in_flight, admission.max_in_flight_per_key = LIMIT, 0
    key = api_keys(demo)["acme"]
    with serving(create_app(demo), http=GUARDED) as base:
        try:
            with ThreadPoolExecutor(LIMIT) as pool:
                left = [pool.submit(route, base, key, "slow", 0.5) for _ in range(LIMIT)]
                for future in left:
                    with pytest.raises(httpx.TimeoutException):  # the client gives up and closes its connection
                        future.result()
            _until(lambda: runtime.waiting == 0)  # every backend call cancelled, the gate still shut
            assert route(base, key, "quick").status_code == 200  # a slot, at once
            metrics = http("GET", f"{base}/metrics", headers=auth(key)).text
            assert value(metrics, "ml_inference_errors_total", tenant="acme", deployment="slow", status="499", code="cancelled") == LIMIT
            assert value(metrics, "ml_inference_requests_total", tenant="acme", deployment="slow") == LIMIT
        finally:
            runtime.gate.set()


def _stalled(base: str, key: str, path: str = "/v2/models/slow/infer") -> Any:
    """A request whose headers and first bytes are sent and whose body then stalls (or
    trickles): an open socket."""
    import socket

    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\n"
        "Content-Length: 100000\r\n\r\n{\"inputs\": [".encode()
    )
    return sock


def test_bodies_trickled_in_by_one_tenant_cannot_keep_another_tenant_out(service: tuple[str, dict[str, str], GatedRuntime]) -> None:
    """acme fills the worker with requests whose bodies stall; globex, finding it full, takes
    back one slot acme holds above its share while its body still arrives: globex is answered at
    once (not when acme's bodies time out), acme's newest reader gets 503 `overloaded` and its
    connection closes, and acme's other requests keep theirs."""
    base, keys, _ = service
    sockets = [_stalled(base, keys["acme"]) for _ in range(LIMIT)]
    try:
        time.sleep(0.3)  # every one admitted, reading its body
        assert _simple(base, keys["acme"], timeout=5).status_code == 503  # full
        answered = _v2(base, keys["globex"], "quick", timeout=5)
        assert answered.status_code == 200, answered.text
        evicted = []
        for sock in sockets:
            sock.settimeout(0.5)
            with contextlib.suppress(TimeoutError):
                evicted.append(sock.recv(65536).decode())
        assert len(evicted) == 1  # one slot for one request; the others still wait for their bodies
        for answer in evicted:
            head, _, body = answer.partition("\r\n\r\n")
            assert head.startswith("HTTP/1.1 503") and "connection: close" in head.lower() and "retry-after: 1" in head.lower()
            assert json.loads(body)["code"] == "overloaded"
        assert _v2(base, keys["globex"], "quick", timeout=5).status_code == 200
    finally:
        for sock in sockets:
            sock.close()


def test_a_websocket_message_past_the_limit_is_answered_503_and_the_connection_stays_open(service: tuple[str, dict[str, str], GatedRuntime]) -> None:
    base, keys, runtime = service
    key = keys["acme"]
    with ThreadPoolExecutor(LIMIT) as pool:
        held = [pool.submit(_simple, base, key) for _ in range(LIMIT)]
        _until(lambda: runtime.waiting == LIMIT)
        with connect(f"ws://{base.removeprefix('http://')}/api/v1/stream", additional_headers=auth(key)) as ws:
            ws.send(json.dumps({"deployment": "iris", "inputs": [[5.1, 3.5, 1.4, 0.2]], "request_id": "over"}))
            answer = json.loads(ws.recv(timeout=30))
            assert (answer["request_id"], answer["status"], answer["code"]) == ("over", 503, "overloaded")
            runtime.gate.set()
            assert all(f.result().status_code == 200 for f in held)
            ws.send(json.dumps({"deployment": "iris", "inputs": [[5.1, 3.5, 1.4, 0.2]], "request_id": "now"}))
            answer = json.loads(ws.recv(timeout=30))
            assert (answer["request_id"], answer.get("prediction")) == ("now", "setosa")


def test_a_tenant_past_its_share_gets_429_while_another_tenant_is_served(service: tuple[str, dict[str, str], GatedRuntime]) -> None:
    base, keys, runtime = service
    with ThreadPoolExecutor(8) as pool:
        other = pool.submit(_simple, base, keys["globex"])  # globex has a prediction in flight
        _until(lambda: runtime.waiting == 1)
        flood = [pool.submit(_simple, base, keys["acme"]) for _ in range(5)]
        _until(lambda: runtime.waiting == 1 + LIMIT // 2 and sum(f.done() for f in flood) == 5 - LIMIT // 2)
        for response in (f.result() for f in flood if f.done()):
            _refused(response, 429, "tenant_overloaded")
        # acme holds its share, globex one slot: globex is still served.
        assert _v2(base, keys["globex"], "quick").status_code == 200
        assert _simple(base, keys["globex"], "quick").status_code == 200
        runtime.gate.set()
        assert other.result().status_code == 200
        assert sorted(f.result().status_code for f in flood) == [200] * (LIMIT // 2) + [429] * (5 - LIMIT // 2)


def test_a_tenant_alone_may_fill_the_worker(service: tuple[str, dict[str, str], GatedRuntime]) -> None:
    base, keys, runtime = service
    with ThreadPoolExecutor(LIMIT + 2) as pool:
        futures = [pool.submit(_simple, base, keys["acme"]) for _ in range(LIMIT + 2)]
        _until(lambda: runtime.waiting == LIMIT and sum(f.done() for f in futures) == 2)
        for response in (f.result() for f in futures if f.done()):
            _refused(response, 503, "overloaded")  # not its share: the worker is full
        runtime.gate.set()
    assert sorted(f.result().status_code for f in futures) == [200] * LIMIT + [503] * 2


def test_no_connection_is_reset_by_a_burst(service: tuple[str, dict[str, str], GatedRuntime]) -> None:
    """Many clients at once, on their own connections: each gets an answer, a 200 or a 503."""
    base, keys, runtime = service
    key = keys["acme"]

    def one(i: int) -> int:
        with contextlib.closing(http_client(timeout=30)) as client:  # a connection of its own
            body = {"deployment": "slow", "inputs": [ROW]}
            return client.post(f"{base}/api/v1/predictions", json=body, headers=auth(key)).status_code

    with ThreadPoolExecutor(32) as pool:
        futures = [pool.submit(one, i) for i in range(64)]
        _until(lambda: sum(f.done() for f in futures) == 64 - LIMIT)
        runtime.gate.set()
        statuses = [f.result() for f in futures]  # a reset would raise here
    assert statuses.count(200) == LIMIT and statuses.count(503) == 64 - LIMIT


def test_a_slot_is_free_once_the_answer_is_sent_before_the_statistics_are_written(service: tuple[str, dict[str, str], GatedRuntime], demo: Container) -> None:
    """A client that sends its next request as soon as it has an answer is never refused by the
    slot its last request held while that request's statistics were still being written."""
    base, keys, runtime = service
    demo.settings.admission.max_predictions_in_flight = 1  # read on the first request: none yet
    runtime.gate.set()
    writing, release = threading.Event(), threading.Event()
    service_ = demo.predictions
    service_.stats.due = lambda: True  # type: ignore[method-assign]

    def slow_flush() -> None:  # the response's background task, after the answer went out
        writing.set()
        release.wait(30)

    service_.flush_stats_if_due = slow_flush  # type: ignore[method-assign]
    try:
        with http_client(timeout=30) as client:
            first = client.post(f"{base}/api/v1/predictions", json={"deployment": "slow", "inputs": [ROW]}, headers=auth(keys["acme"]))
            assert first.status_code == 200
            assert writing.wait(30)
            second = _simple(base, keys["acme"])  # on a connection of its own: the first one's task is still running
            assert second.status_code == 200, second.text
    finally:
        release.set()


def test_a_worker_of_sluice_serve_builds_its_routes_before_its_first_request() -> None:
    """Else the first request that is not a prediction (a load balancer's health check)
    builds them on the worker's event loop, holding up every request in flight there."""
    from sluice.cli.serve import served_app

    assert served_app()._routed


BURST = """
import sys, time
from sluice.cli.malloc import give_back_after_bursts
if sys.argv[1] == "on":
    assert give_back_after_bursts(every_s=0.05) and give_back_after_bursts(every_s=0.05)
def rss():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS:"))
before = rss()
large, small = [], []
for i in range(400):  # a burst's large blocks (bodies, answers), small ones still held between them
    large.append(bytes(100 * 1024) + bytes([i % 256]))
    small.append(bytes(600) + bytes([i % 256]))
del large
time.sleep(0.5)  # the burst is over: a quiet moment, as after a burst
print(rss() - before)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the process's resident memory from /proc")
def test_large_blocks_freed_after_a_burst_go_back_to_the_system() -> None:
    import subprocess
    import sys

    def kept_kib(mode: str) -> int:
        done = subprocess.run([sys.executable, "-c", BURST, mode], capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(FUNCTIONS)})
        return int(done.stdout)

    if not kept_kib("off") > 10 * 1024:
        pytest.skip("this allocator gives freed blocks back by itself")
    assert kept_kib("on") < 2 * 1024  # of the 40 MB the burst took


def test_one_thread_a_process_gives_the_heap_back() -> None:
    import threading

    from sluice.cli.malloc import give_back_after_bursts, trim

    if not trim():
        pytest.skip("not glibc: nothing to give back this way")
    assert give_back_after_bursts(every_s=60) and give_back_after_bursts(every_s=60)
    assert [t.name for t in threading.enumerate()].count("sluice-malloc-trim") == 1


def test_a_request_answered_whole_is_counted_in_flight_as_any(demo: Container, acme: Principal) -> None:
    """`answer_whole` (a request whose body is at hand: a Lambda event's) goes through the same
    admission as the ASGI exchange where the process counts requests in flight: past the key's
    cap, 429 at once; the slot comes back once the answer is made."""
    runtime = GatedRuntime()
    demo.runtimes["sagemaker"] = runtime
    add_fake(demo.registry, "acme", "slow", gated=True)
    demo.deployments.create(acme, "slow", {"kind": "single", "model": "slow", "version": 1})
    demo.settings.admission.max_in_flight_per_key = 1
    key = api_keys(demo)["acme"]
    app = create_app(demo)
    body = json.dumps({"deployment": "slow", "inputs": [ROW]}).encode()

    def scope() -> dict[str, Any]:
        headers = [(b"authorization", f"Bearer {key}".encode()), (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        return {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": "/api/v1/predictions", "raw_path": b"/api/v1/predictions", "root_path": "", "query_string": b"",
            "headers": headers, "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80),
        }  # fmt: skip

    async def scenario() -> tuple[Any, Any, Any]:
        held = asyncio.create_task(app.answer_whole(scope(), body))
        deadline = time.monotonic() + 20
        while runtime.waiting == 0 and time.monotonic() < deadline:  # admitted, and waiting on the gate
            await asyncio.sleep(0.01)
        refused = await app.answer_whole(scope(), body)
        runtime.gate.set()
        return refused, await held, await app.answer_whole(scope(), body)

    try:
        refused, first, after = asyncio.run(scenario())
    finally:
        runtime.gate.set()
    assert refused.status_code == 429, refused.body
    assert json.loads(refused.body)["code"] == "too_many_in_flight"
    assert refused.headers["retry-after"] == "1"
    assert (first.status_code, after.status_code) == (200, 200), (first.body, after.body)
