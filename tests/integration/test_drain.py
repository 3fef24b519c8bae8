"""`sluice serve --workers 2` told to stop (SIGTERM) under a steady flow of predictions, on
loopback: it stops listening at once, so a new connection is refused (ECONNREFUSED, for a
client to retry elsewhere) rather than taken into the backlog and reset when the process exits;
the requests it accepted are answered; its gRPC port closes too; the statistics of every answer,
whichever worker gave it, are in the registry after it exits (its flush timer set far off: the
shutdown wrote them); and a request that never ends is cut off at the drain's
timeout (503), so the process exits within its bound.

A request is held in flight by its body: the server has asked for it (100 Continue), so the
request is past authentication and in a worker, and stays there until the test sends it. While
it is held the process cannot have finished its drain, whatever the machine's speed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from typing import TYPE_CHECKING

import pytest

from sluice.cli.drain import stop_bound_s
from sluice.registry.sqlite import SqliteRegistry
from sluice.settings import ServeSettings
from tests.conftest import REPO
from tests.e2e.conftest import start_sluice
from tests.support import connection_refused, free_port

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

pytestmark = pytest.mark.skipif(os.name != "posix", reason="stops a process with SIGTERM")

SETOSA = json.dumps({"deployment": "iris", "features": {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}}).encode()
LOOPERS = 2
REFUSALS = 3  # a looper stops after this many refusals in a row


class Serve:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, grpc_port: int, key: str, home: Path) -> None:
        self.proc, self.port, self.grpc_port, self.key, self.home = proc, port, grpc_port, key, home

    def request(self, body: bytes = SETOSA, *, expect_continue: bool = False) -> bytes:
        return (
            b"POST /api/v1/predictions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {self.key}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n".encode()
            + (b"Expect: 100-continue\r\n\r\n" if expect_continue else b"\r\n" + body)
        )


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Serve]]:
    """Starts `sluice serve --demo --workers 2 --grpc-port P` with these settings in its
    environment, and waits until it is healthy; killed at the end if still running."""
    started: list[subprocess.Popen[bytes]] = []

    def start(**settings: str) -> Serve:
        home = tmp_path / "home"
        grpc_port = free_port()
        env = {**os.environ, **settings, "PYTHONPATH": os.pathsep.join([str(REPO / "functions"), os.environ.get("PYTHONPATH", "")])}
        argv = ["--tenant", "acme", "serve", "--demo", "--workers", "2", "--grpc-port", str(grpc_port)]
        proc, port = start_sluice(home, env, argv, log=tmp_path / "serve.log")
        started.append(proc)
        return Serve(proc, port, grpc_port, (home / "admin-key").read_text().strip(), home)

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def attempt(serve: Serve) -> str:
    """One prediction on a connection of its own: its status ("200"), "refused" (the connection
    was refused), or "reset" (the connection was taken, then dropped with no answer)."""
    try:
        sock = socket.create_connection(("127.0.0.1", serve.port), timeout=60)
    except ConnectionRefusedError:
        return "refused"
    except ConnectionResetError:  # taken into the listening socket's queue as it closed, then dropped
        return "reset"
    except OSError as exc:
        return type(exc).__name__
    with sock:
        try:
            sock.sendall(serve.request())
            answer = read_all(sock)
        except (ConnectionResetError, BrokenPipeError):
            return "reset"
        except OSError as exc:  # anything else is a failure of the test, named
            return type(exc).__name__
    return answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/1.1 ") else "reset"


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (`Connection: close`)."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def held(serve: Serve) -> socket.socket:
    """A prediction whose body is not sent yet, in flight in a worker (see the module)."""
    sock = socket.create_connection(("127.0.0.1", serve.port), timeout=60)
    sock.sendall(serve.request(expect_continue=True))
    assert sock.recv(64).startswith(b"HTTP/1.1 100 Continue"), "the server did not ask for the body"
    return sock


def test_sigterm_refuses_new_connections_at_once_and_answers_and_counts_what_it_accepted(
    serve: Callable[..., Serve],
) -> None:
    server = serve(SLUICE_STATS_FLUSH_S="3600")  # the counts are written at shutdown or never
    in_flight = held(server)
    outcomes: list[list[str]] = [[] for _ in range(LOOPERS)]
    refusal = threading.Event()

    def loop(mine: list[str]) -> None:
        for _ in range(20_000):  # bounded; ends after REFUSALS refusals in a row
            mine.append(attempt(server))
            if mine[-1] == "refused":
                refusal.set()
                if mine[-REFUSALS:] == ["refused"] * REFUSALS:
                    return

    loopers = [threading.Thread(target=loop, args=(mine,), daemon=True) for mine in outcomes]
    for thread in loopers:
        thread.start()
    deadline = time.monotonic() + 60
    while sum(mine.count("200") for mine in outcomes) < 20:  # a steady flow, answered
        assert time.monotonic() < deadline and all(t.is_alive() for t in loopers), outcomes
        time.sleep(0.05)

    server.proc.send_signal(signal.SIGTERM)
    # While a request it accepted is still being answered, the server already refuses
    # connections, on its HTTP port and its gRPC port.
    assert refusal.wait(60), "no connection was refused while a request was still in flight"
    deadline = time.monotonic() + 30
    while not connection_refused(server.grpc_port):
        assert time.monotonic() < deadline, "the gRPC port still takes connections"
        time.sleep(0.05)
    assert server.proc.poll() is None  # still draining: the held request holds it

    in_flight.sendall(SETOSA)
    answer = read_all(in_flight)
    in_flight.close()
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["prediction"] == "setosa"
    for thread in loopers:
        thread.join(120)
    assert server.proc.wait(timeout=stop_bound_s(ServeSettings())) == 0

    for mine in outcomes:
        assert set(mine) <= {"200", "refused", "reset"}, mine
        first = mine.index("refused")
        # Once refused, never taken again: nothing is accepted to be reset later.
        assert set(mine[first:]) == {"refused"}, mine[first:]
        # A connection whose handshake raced the signal may be reset with the backlog: at most
        # that one, just before the first refusal; every other was answered.
        assert "reset" not in mine[: max(0, first - 1)], mine[:first]
    answered = 1 + sum(mine.count("200") for mine in outcomes)
    registry = SqliteRegistry(server.home / "registry.db")
    revision = registry.get_deployment("acme", "iris").revision
    counts = registry.read_stats("acme", "iris", revision).get("deployment", {})
    assert (counts.get("requests"), counts.get("errors", 0)) == (answered, 0)


def test_a_request_that_never_ends_is_answered_503_at_the_drain_timeout_and_the_process_exits_within_its_bound(
    serve: Callable[..., Serve],
) -> None:
    server = serve(SLUICE_DRAIN_TIMEOUT_S="2", SLUICE_BATCH_STOP_GRACE_S="0")
    in_flight = held(server)
    assert attempt(server) == "200"
    server.proc.send_signal(signal.SIGTERM)
    bound = stop_bound_s(ServeSettings(drain_timeout_s=2, batch_stop_grace_s=0))
    assert server.proc.wait(timeout=bound) == 0
    in_flight.settimeout(5)
    answer = read_all(in_flight)
    in_flight.close()
    assert answer.startswith(b"HTTP/1.1 503 "), answer[:300]
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body["code"] == "unavailable" and "the server stopped before this request was answered" in body["error"]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_burst_of_stop_signals_stops_the_service_within_its_bound(workers: int, tmp_path: Path) -> None:
    """Signals that come at once (a terminal's SIGINT and a supervisor's SIGTERM; `timeout`
    forwarding the signal pkill sent it too) each run the handler, the later ones inside the
    earlier: `sluice serve` must still drain and exit within its bound, without a traceback. A
    handler that took a lock there could wait for itself for ever, the HTTP thread spinning on its
    closed socket; one worker hurried left its app's lifespan to be cancelled, with a traceback."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "functions"), os.environ.get("PYTHONPATH", "")])}
    argv = ["serve", "--workers", str(workers), "--grpc-port", str(free_port())]
    proc, _ = start_sluice(tmp_path / "home", env, argv, log=tmp_path / "serve.log")
    try:
        for signum in [signal.SIGTERM, signal.SIGINT] * 25:
            proc.send_signal(signum)
        # A signal that lands as the interpreter finalizes finds the default action restored: -signum.
        code = proc.wait(timeout=stop_bound_s(ServeSettings()) + 30)
        log = (tmp_path / "serve.log").read_text()
        assert code in (0, -signal.SIGTERM, -signal.SIGINT), log[-3000:]
        assert "Traceback" not in log, log[-3000:]  # one worker hurried: its app's lifespan ended, not cancelled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_body_that_never_arrives_is_a_408_and_holds_no_slot(serve: Callable[..., Serve]) -> None:
    """Headers sent, the body never (or part of it): answered 408 once the body timeout passes,
    the connection closed, and the slots free for the next caller (as many stalled requests as
    there are slots would otherwise hold them all for ever): a prediction's, and a route the
    framework answers, whose body it reads (a deployment's change, holding the key's slots)."""
    server = serve(SLUICE_BODY_TIMEOUT_S="1", SLUICE_MAX_IN_FLIGHT_PER_KEY="4")  # each worker admits all four
    change = b'{"policy": {"kind": "single", "model": "iris", "version": 1}}'
    framework = (
        b"PUT /api/v1/deployments/iris HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {server.key}\r\nContent-Length: {len(change)}\r\n\r\n".encode()
        + change[:9]  # part of the body, then nothing
    )
    stalled = []
    for request in (server.request()[: -len(SETOSA)], server.request()[: -len(SETOSA)], framework, framework):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        sock.sendall(request)  # the headers, with the body's length: no body
        stalled.append(sock)
    started = time.monotonic()
    for sock in stalled:
        answer = read_all(sock)
        sock.close()
        assert answer.startswith(b"HTTP/1.1 408 ") and b"connection: close" in answer.lower(), answer[:300]
        assert b'"code":"request_timeout"' in answer.replace(b" ", b"") and b'"field":"body"' in answer.replace(b" ", b""), answer[-300:]
    assert time.monotonic() - started < 20
    assert attempt(server) == "200"  # the key's slots free again
