"""`sluice serve`'s guards against slow and oversized clients, over raw sockets to a real
process: a header timeout (slowloris), a header size bound, a keep-alive timeout, the per-key
rate limit, and the local admin key kept owner-only whatever the umask."""

from __future__ import annotations

import os
import socket
import time
from typing import TYPE_CHECKING

import pytest

from tests.e2e.conftest import running_sluice
from tests.support import http, http_client

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

HEADER_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str, Path]]:
    home: Path = tmp_path_factory.mktemp("home")
    env = {
        **os.environ,
        "SLUICE_HOME": str(home),
        "SLUICE_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
        "SLUICE_MAX_HEADER_BYTES": "4096",
        "SLUICE_KEEPALIVE_TIMEOUT_S": "1",
        "SLUICE_RATE_LIMIT": "5/second",
    }
    with running_sluice(home, env, "--workers", "1", umask=0) as (port, key):  # the admin key: owner-only regardless
        yield port, key, home


def _closed_after(sock: socket.socket, started: float, limit_s: float) -> tuple[float, bytes]:
    """Read until the server closes; (seconds since `started`, what it sent)."""
    sock.settimeout(limit_s)
    got = b""
    try:
        while chunk := sock.recv(4096):
            got += chunk
    except ConnectionResetError:
        pass
    return time.monotonic() - started, got


def _response(sock: socket.socket) -> bytes:
    """One whole response (head and its Content-Length of body) off a kept-alive connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += sock.recv(4096)
    return head


def test_a_client_dribbling_its_headers_is_cut_off_while_others_are_served(guarded: tuple[int, str, Path]) -> None:
    port, _, _ = guarded
    with socket.create_connection(("127.0.0.1", port)) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        cut = None
        for i in range(20):  # a header line every 0.25 s: 5 s if the server waited for them all
            time.sleep(0.25)
            if i == 1:  # a well-behaved client meanwhile
                assert http("GET", f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
            try:
                sock.sendall(b"X-Slow-%d: y\r\n" % i)
            except OSError:
                cut = time.monotonic() - started
                break
        elapsed, got = _closed_after(sock, started, 5)
    assert got.startswith(b"HTTP/1.1 408 ")
    assert HEADER_TIMEOUT_S - 0.1 <= min(cut or elapsed, elapsed) < HEADER_TIMEOUT_S + 1.5


def test_a_connection_that_sends_nothing_is_closed(guarded: tuple[int, str, Path]) -> None:
    port, _, _ = guarded
    with socket.create_connection(("127.0.0.1", port)) as sock:
        elapsed, _ = _closed_after(sock, time.monotonic(), 5)
    assert elapsed < HEADER_TIMEOUT_S + 1.5


def test_headers_over_the_bound_get_431_and_a_closed_connection(guarded: tuple[int, str, Path]) -> None:
    port, _, _ = guarded
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Big: " + b"a" * 8000 + b"\r\n\r\n")
        elapsed, got = _closed_after(sock, time.monotonic(), 5)
    assert got.startswith(b"HTTP/1.1 431 ") and elapsed < 1
    assert http("GET", f"http://127.0.0.1:{port}/healthz", headers={"X-Fine": "a" * 1000}).status_code == 200


def test_an_idle_keep_alive_connection_is_closed_after_its_timeout(guarded: tuple[int, str, Path]) -> None:
    port, _, _ = guarded
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(5)
        sock.sendall(request)
        assert _response(sock).startswith(b"HTTP/1.1 200 ")
        time.sleep(0.5)  # within the keep-alive: the connection serves a second request
        sock.sendall(request)
        assert _response(sock).startswith(b"HTTP/1.1 200 ")
        elapsed, got = _closed_after(sock, time.monotonic(), 5)
    assert got == b"" and elapsed < 2.5  # closed idle after the 1 s keep-alive


def test_a_key_past_its_rate_gets_429_until_its_window_passes(guarded: tuple[int, str, Path]) -> None:
    port, key, _ = guarded
    base, h = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {key}"}
    with http_client(base_url=base, headers=h) as client:
        other = client.post("/api/v1/keys", json={"scopes": ["admin"], "name": "other"})
        assert other.status_code == 201, other.text
        statuses = [client.get("/api/v1/models").status_code for _ in range(8)]
        assert statuses.count(429) >= 3 and statuses[:4] == [200] * 4
        refused = client.get("/api/v1/models")
        assert refused.status_code == 429 and refused.json()["code"] == "rate_limited"
        retry = int(refused.headers["Retry-After"])
        assert http("GET", f"{base}/api/v1/models", headers={"x-api-key": other.json()["key"]}).status_code == 200
        time.sleep(retry + 0.1)
        assert client.get("/api/v1/models").status_code == 200


def test_the_admin_key_is_owner_only_whatever_the_umask(guarded: tuple[int, str, Path]) -> None:
    _, _, home = guarded
    assert (home / "admin-key").stat().st_mode & 0o777 == 0o600  # served with umask 0
