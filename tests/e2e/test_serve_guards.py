"""`sluice serve`'s guards against slow and oversized clients, over raw sockets to one real
process: a header timeout (slowloris), a header size bound, a keep-alive timeout, the per-key
rate limit, a request refused before its body is read closed rather than drained (a trickled
body holds no connection), and the local admin key kept owner-only whatever the umask; and on the upload
form's route (`POST /api/v1/uploads/{id}/body`, no API key), a trickled body is answered 408 and
closed at `SLUICE_UPLOAD_BODY_TIMEOUT_S`, and many at once do not stay open past it; nothing
after the form's closing boundary is read; a client that leaves mid-body is one INFO line in
the log, and nothing in it is an ERROR or a traceback, whatever the other guards refused.

The guards' settings do not meet (each test works on a connection or key of its own), so one
server serves them all."""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import time
from typing import TYPE_CHECKING, Any

import pytest

from tests.e2e.conftest import running_sluice
from tests.support import FORM_BOUNDARY, http, http_client, upload_form

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.5
DATA = json.dumps({"inputs": [[5.1, 3.5, 1.4, 0.2]] * 8}).encode()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str, Path, Path]]:
    """(port, the admin key, the home, the server's log)."""
    home: Path = tmp_path_factory.mktemp("home")
    log = home.parent / "serve.log"
    env = {
        **os.environ,
        "SLUICE_HOME": str(home),
        "SLUICE_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
        "SLUICE_MAX_HEADER_BYTES": "4096",
        "SLUICE_KEEPALIVE_TIMEOUT_S": "1",
        "SLUICE_RATE_LIMIT": "5/second",
        "SLUICE_UPLOAD_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
        "SLUICE_LOG_LEVEL": "INFO",
    }
    # umask 0: the admin key must be owner-only regardless
    with log.open("w") as out, running_sluice(home, env, "--demo", "--workers", "1", umask=0, stdout=out) as (port, key):
        yield port, key, home, log


@pytest.fixture
def service(guarded: tuple[int, str, Path, Path]) -> tuple[int, str, Path]:
    """(port, the admin key, the server's log), for the upload form's route."""
    port, key, _, log = guarded
    return port, key, log


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


def test_a_client_dribbling_its_headers_is_cut_off_while_others_are_served(guarded: tuple[int, str, Path, Path]) -> None:
    port, _, _, _ = guarded
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


def test_a_connection_that_sends_nothing_is_closed(guarded: tuple[int, str, Path, Path]) -> None:
    port, _, _, _ = guarded
    with socket.create_connection(("127.0.0.1", port)) as sock:
        elapsed, _ = _closed_after(sock, time.monotonic(), 5)
    assert elapsed < HEADER_TIMEOUT_S + 1.5


def test_headers_over_the_bound_get_431_and_a_closed_connection(guarded: tuple[int, str, Path, Path]) -> None:
    port, _, _, _ = guarded
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Big: " + b"a" * 8000 + b"\r\n\r\n")
        elapsed, got = _closed_after(sock, time.monotonic(), 5)
    assert got.startswith(b"HTTP/1.1 431 ") and elapsed < 1
    head, _, body = got.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower() and json.loads(body)["code"] == "request_header_fields_too_large"
    assert http("GET", f"http://127.0.0.1:{port}/healthz", headers={"X-Fine": "a" * 1000}).status_code == 200


@pytest.mark.parametrize("sent", [b"NOT HTTP AT ALL\r\n\r\n", b"GET / HTTP/1.1\r\nHost x\r\n\r\n", b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"])
def test_bytes_that_are_not_http_get_a_400_with_a_json_error(guarded: tuple[int, str, Path, Path], sent: bytes) -> None:
    """What the HTTP parser cannot read is answered as every refusal is: a 4xx with a JSON body
    naming the problem (not the server's text), and the connection closed."""
    port, _, _, _ = guarded
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(sent)
        _, got = _closed_after(sock, time.monotonic(), 5)
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in head.lower(), got[:300]
    refused = json.loads(body)
    assert refused["code"] == "bad_request" and refused["error"].startswith("not an HTTP/1.1 request sluice can read"), refused


def test_an_idle_keep_alive_connection_is_closed_after_its_timeout(guarded: tuple[int, str, Path, Path]) -> None:
    port, _, _, _ = guarded
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


def test_a_key_past_its_rate_gets_429_until_its_window_passes(guarded: tuple[int, str, Path, Path]) -> None:
    port, key, _, _ = guarded
    base = f"http://127.0.0.1:{port}"
    # Keys of the test's own: the admin key's window holds the other tests' calls too.
    made = [http("POST", f"{base}/api/v1/keys", json={"scopes": ["admin"], "name": name}, headers={"Authorization": f"Bearer {key}"}) for name in ("burst", "other")]
    assert [m.status_code for m in made] == [201, 201], [m.text for m in made]
    burst, other = (m.json()["key"] for m in made)
    with http_client(base_url=base, headers={"Authorization": f"Bearer {burst}"}) as client:
        statuses = [client.get("/api/v1/models").status_code for _ in range(8)]
        assert statuses.count(429) >= 3 and statuses[:4] == [200] * 4
        refused = client.get("/api/v1/models")
        assert refused.status_code == 429 and refused.json()["code"] == "rate_limited"
        retry = int(refused.headers["Retry-After"])
        assert http("GET", f"{base}/api/v1/models", headers={"x-api-key": other}).status_code == 200
        time.sleep(retry + 0.1)
        assert client.get("/api/v1/models").status_code == 200


# A request refused before its body is read: (headers, the status), each on a body that trickles.
REFUSED_UNREAD = {
    "no key": ("Transfer-Encoding: chunked\r\n", 401),
    "no key, a declared length": ("Content-Length: 1000000\r\n", 401),
    "a declared length over the limit": ("Content-Length: 100000000\r\n", 413),
    "a coding not taken": ("Content-Encoding: br\r\nTransfer-Encoding: chunked\r\n", 415),
    "a key past its rate": ("Transfer-Encoding: chunked\r\n", 429),
}


@pytest.mark.parametrize("case", REFUSED_UNREAD)
def test_a_request_refused_before_its_body_is_read_is_closed_however_the_body_trickles(guarded: tuple[int, str, Path, Path], case: str) -> None:
    port, key, _, _ = guarded
    headers, status = REFUSED_UNREAD[case]
    if status in (413, 415):
        headers += f"Authorization: Bearer {key}\r\n"
    if status == 429:  # a key of its own, past its 5 a second
        made = http("POST", f"http://127.0.0.1:{port}/api/v1/keys", json={"scopes": ["admin"], "name": "trickler"}, headers={"Authorization": f"Bearer {key}"})
        trickler = made.json()["key"]
        with http_client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {trickler}"}) as client:
            # Until it is past its rate (six in a row may span more than a second on a busy machine).
            assert any(client.get("/api/v1/models").status_code == 429 for _ in range(60))
        headers += f"Authorization: Bearer {trickler}\r\n"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(f"POST /api/v1/predictions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{headers}\r\n".encode())
        started = time.monotonic()
        while not select.select([sock], [], [], 0.2)[0] and time.monotonic() - started < 5:
            sock.sendall(_chunk(b" ") if "chunked" in headers else b" ")  # a byte every 0.2 s, never the end
        got, closed = _rest(sock)
    assert got.startswith(b"HTTP/1.1 %d " % status), got[:200]
    assert b"\r\nconnection: close\r\n" in got.partition(b"\r\n\r\n")[0].lower() + b"\r\n", got[:300]
    assert closed, "the connection was kept open, for the rest of a body nobody reads"


def test_a_refused_request_whose_body_came_whole_keeps_its_connection_and_clients_reconnect_after_one_closed(guarded: tuple[int, str, Path, Path]) -> None:
    port, key, _, _ = guarded
    body = json.dumps({"deployment": "iris", "inputs": [[5.1, 3.5, 1.4, 0.2]]}).encode()
    refused = f"POST /api/v1/predictions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    with socket.create_connection(("127.0.0.1", port)) as sock:
        # pipelined: nothing of the first request is left to wait for, so the second is answered
        sock.sendall(refused + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        _, got = _closed_after(sock, time.monotonic(), 5)
    first, second = got.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"401 ") and b"connection: close" not in first.lower(), got
    assert second.startswith(b"200 "), got
    with http_client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        for _ in range(3):  # refused as its body is sent, on a connection then closed: the next opens another
            answer = client.post("/api/v1/predictions", content=b" " * (4 << 20), headers={"Content-Type": "application/json"})
            assert answer.status_code == 401 and answer.headers["connection"] == "close"
            assert client.post("/api/v1/predictions", content=body, headers={"Authorization": f"Bearer {key}"}).status_code == 200


def test_the_admin_key_is_owner_only_whatever_the_umask(guarded: tuple[int, str, Path, Path]) -> None:
    _, _, home, _ = guarded
    assert (home / "admin-key").stat().st_mode & 0o777 == 0o600  # served with umask 0


# The upload form's route -----------------------------------------------------------------
def _upload(port: int, key: str) -> dict[str, Any]:
    made = http("POST", f"http://127.0.0.1:{port}/api/v1/uploads", json={"deployment": "iris", "size": 4096}, headers={"Authorization": f"Bearer {key}"})
    assert made.status_code == 201, made.text
    return made.json()


def _head(upload: dict[str, Any], length: int | None) -> bytes:
    path = "/" + upload["url"].split("/", 3)[3]
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary={FORM_BOUNDARY}\r\n{framing}\r\n\r\n".encode()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _rest(sock: socket.socket) -> tuple[bytes, bool]:
    """What the server still sends, and whether it then closed the connection (within 2 s)."""
    sock.settimeout(2)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except TimeoutError:
        return got, False
    except ConnectionResetError:
        pass
    return got, True


def _log(log: Path) -> list[dict[str, Any]]:
    text = log.read_text()
    assert "Traceback" not in text
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert not [line for line in lines if line.get("level") in ("ERROR", "CRITICAL") or "exception" in line], text
    return lines


def test_a_trickled_form_is_answered_408_and_closed_at_the_body_timeout(service: tuple[int, str, Path]) -> None:
    port, key, log = service
    upload = _upload(port, key)
    body = upload_form(upload["fields"], DATA)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(_head(upload, len(body)))
        started = time.monotonic()
        for byte in body:  # a byte every 0.2 s: some 4 minutes for the whole form
            if select.select([sock], [], [], 0.2)[0] or time.monotonic() - started > BODY_TIMEOUT_S + 3:
                break
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
        answered = time.monotonic() - started
        got, closed = _rest(sock)
    assert got.startswith(b"HTTP/1.1 408 "), got[:200]
    assert json.loads(got.partition(b"\r\n\r\n")[2])["code"] == "request_timeout"
    assert closed and BODY_TIMEOUT_S - 0.1 <= answered < BODY_TIMEOUT_S + 1.5, answered
    _log(log)


def test_many_trickling_clients_do_not_stay_open_past_the_body_timeout(service: tuple[int, str, Path]) -> None:
    port, key, log = service
    upload = _upload(port, key)
    body = upload_form(upload["fields"], DATA)
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(40)]
    try:
        for sock in clients:
            sock.sendall(_head(upload, len(body)) + body[:10])
        sent = dict.fromkeys(clients, 10)
        answers = dict.fromkeys(clients, b"")
        waiting = set(clients)
        deadline = time.monotonic() + BODY_TIMEOUT_S + 2.5
        while waiting and time.monotonic() < deadline:
            for sock in select.select(list(waiting), [], [], 0.5)[0]:
                try:
                    got = sock.recv(65536)
                except ConnectionResetError:
                    got = b""
                answers[sock] += got
                if not got:
                    waiting.discard(sock)
            for sock in waiting:  # each trickles a byte every half second or so
                with contextlib.suppress(OSError):
                    sent[sock] += sock.send(body[sent[sock] : sent[sock] + 1])
        assert not waiting, f"{len(waiting)} of {len(clients)} trickling clients still open after {BODY_TIMEOUT_S + 2.5} s"
        assert all(answer.startswith(b"HTTP/1.1 408 ") for answer in answers.values())
    finally:
        for sock in clients:
            sock.close()
    _log(log)


def test_nothing_after_the_closing_boundary_is_read(service: tuple[int, str, Path]) -> None:
    port, key, log = service
    upload = _upload(port, key)
    junk = _chunk(b"j" * (1 << 20))
    sent = 0
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(5)
        sock.sendall(_head(upload, None) + _chunk(upload_form(upload["fields"], DATA)))
        try:
            while sent < 256 << 20 and not select.select([sock], [], [], 0)[0]:
                sock.sendall(junk)  # chunked, with no end: 256 MiB if the server read them all
                sent += 1 << 20
        except OSError:  # the server answered and closed: what was not sent cannot be read
            pass
        got, closed = _rest(sock)
    assert got.startswith(b"HTTP/1.1 204 "), got[:200]
    assert closed and sent < 32 << 20, sent  # what the sockets' buffers held, no more
    answer = http("POST", f"http://127.0.0.1:{port}/api/v1/predictions", json={"deployment": "iris", "upload_id": upload["upload_id"]}, headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200 and len(answer.json()["predictions"]) == 8  # the body, whole and alone
    _log(log)


def test_a_client_gone_mid_body_is_one_info_line(service: tuple[int, str, Path]) -> None:
    port, key, log = service
    upload = _upload(port, key)
    body = upload_form(upload["fields"], DATA)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(_head(upload, len(body)) + body[: len(body) // 2])
        time.sleep(0.3)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not [line for line in _log(log) if line.get("upload_id") == upload["upload_id"]]:
        time.sleep(0.1)
    (line,) = [line for line in _log(log) if line.get("upload_id") == upload["upload_id"]]
    assert line["level"] == "INFO" and "went away" in line["message"] and line["received"] == len(body) // 2
    # the upload was left as it was: its form still posts, whole
    posted = http("POST", upload["url"], data=upload["fields"], files={"file": ("body", DATA, "application/octet-stream")})
    assert posted.status_code == 204, posted.text
