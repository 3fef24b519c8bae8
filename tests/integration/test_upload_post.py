"""The posted form of an upload (`POST /api/v1/uploads/{id}/body`, no API key) read as it
streams, over raw ASGI so that what the route reads of the body is counted: malformed forms
are 400s naming the problem with nothing logged at WARNING or above; nothing after the closing boundary
is read; bounds are applied as soon as the bytes pass them; a slow body is a 408; a client that
leaves is one INFO line; and no partial body is ever kept."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from sluice.api.app import create_app
from sluice.api.upload_post import FORM_OVERHEAD
from tests.integration.conftest import auth
from tests.support import FORM_BOUNDARY as BOUNDARY
from tests.support import form_part as part
from tests.support import upload_form as form

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from pathlib import Path

    from sluice.wiring import Container

DATA = json.dumps({"inputs": [[5.1, 3.5, 1.4, 0.2]] * 8}).encode()


@dataclass
class Posted:
    status: int
    headers: dict[str, str]
    body: dict[str, Any]
    consumed: int  # bytes of the request body the app took through `receive`


def post(app: Any, url: str, chunks: Iterable[bytes], *, content_type: str | None = None, length: int | None = None, end: str = "done", pause: float = 0.0) -> Posted:
    """The form posted as `chunks`, `pause` seconds before each after the first; then, by `end`:
    "done" (the last chunk ends the body), "gone" (the client leaves) or "stall" (it sends
    nothing more and waits)."""
    path = "/" + url.split("://", 1)[-1].split("/", 1)[1]
    headers = [(b"content-type", (content_type or f"multipart/form-data; boundary={BOUNDARY}").encode())]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": headers, "server": ("testserver", 80), "client": ("127.0.0.1", 1234),
    }  # fmt: skip
    pending = iter(chunks)
    after: bytes | None = next(pending, b"")
    consumed, sent, first = 0, [], True

    async def receive() -> dict[str, Any]:
        nonlocal after, consumed, first
        if after is None:  # all sent
            if end == "stall":
                await asyncio.sleep(3600)
            return {"type": "http.disconnect"}
        if pause and not first:
            await asyncio.sleep(pause)
        chunk, after, first = after, next(pending, None), False
        consumed += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": after is not None or end != "done"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(asyncio.wait_for(app(scope, receive, send), 20))
    start, *body = sent
    raw = b"".join(m.get("body", b"") for m in body)
    return Posted(start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, json.loads(raw) if raw else {}, consumed)


@dataclass
class Served:
    app: Any
    container: Container
    key: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Served:
    """One demo container for the module (the tests change nothing of it but their own uploads)."""
    from sluice.demo import install_demo
    from sluice.domain import Principal
    from sluice.settings import Settings
    from sluice.wiring import Container
    from tests.conftest import MODELS

    home = tmp_path_factory.mktemp("uploads") / "home"
    container = Container.from_settings(Settings(mode="local", home=home, registry="", store="", deployment_cache_ttl_s=0))
    install_demo(container, Principal("acme", frozenset({"admin", "predict"}), "test-acme"), MODELS)
    return Served(create_app(container), container, container.keys.create("acme", ["predict"])[1])


@pytest.fixture
def app(served: Served) -> Any:
    return served.app


@pytest.fixture
def demo(served: Served, monkeypatch: pytest.MonkeyPatch) -> Container:
    """The module's container; settings a test changes are put back after it."""
    for name in ("upload_body_timeout_s", "upload_body_min_rate"):
        monkeypatch.setattr(served.container.settings.uploads, name, getattr(served.container.settings.uploads, name))
    return served.container


@pytest.fixture
def upload(served: Served) -> dict[str, Any]:
    made = TestClient(served.app).post("/api/v1/uploads", json={"deployment": "iris", "size": 4096}, headers=auth(served.key))
    assert made.status_code == 201, made.text
    return made.json()


def folder(demo: Container, upload: dict[str, Any]) -> Path:
    return demo.uploads.store.root / "uploads/tenants/acme" / upload["upload_id"]  # type: ignore[union-attr]


def kept(demo: Container, upload: dict[str, Any]) -> list[str]:
    """What lies in the upload's folder besides its record: a body, or a partial one."""
    return sorted(p.name for p in folder(demo, upload).iterdir() if p.name != "record.json")


def loud(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]


def test_a_well_formed_form_in_any_chunks_puts_the_body_in_place(app: Any, demo: Container, upload: dict[str, Any]) -> None:
    body = form(upload["fields"], DATA)
    posted = post(app, upload["url"], [body[i : i + 7] for i in range(0, len(body), 7)], length=len(body))
    assert posted.status == 204 and posted.consumed == len(body)
    assert "connection" not in posted.headers  # read to its end: the connection may be kept
    assert kept(demo, upload) == ["body"] and (folder(demo, upload) / "body").read_bytes() == DATA


# Malformed forms ---------------------------------------------------------------------------------
def _malformed(fields: dict[str, str]) -> dict[str, tuple[bytes, str | None, str, str]]:
    """kind: (body, content type, field named, words of the error)."""
    body = form(fields, DATA)
    without_policy = {k: v for k, v in fields.items() if k != "policy"}
    return {
        "no boundary": (body, "multipart/form-data", "content-type", "boundary"),
        "not a form": (body, "application/json", "content-type", "multipart/form-data"),
        "a boundary over 70 characters": (body, "multipart/form-data; boundary=" + "x" * 71, "content-type", "boundary"),
        "another boundary": (body, "multipart/form-data; boundary=other", "body", "does not open with the boundary"),
        "cut in the body": (body[: len(body) - 40], None, "body", "cut short"),
        "cut before the closing dashes": (body[: len(body) - 4], None, "body", "cut short"),
        "no closing boundary": (body.replace(f"--{BOUNDARY}--\r\n".encode(), b""), None, "body", "cut short"),
        "no file": (form(fields, None), None, "file", "no `file` part"),
        "no policy": (form(without_policy, DATA), None, "policy", "no `policy` field"),
        "no content type field": (form({k: v for k, v in fields.items() if k != "Content-Type"}, DATA), None, "Content-Type", "no `Content-Type` field"),
        "a field after the file": (form(fields, DATA, after={"note": "late"}), None, "note", "follows the file"),
        "a field twice": (form({**fields}, DATA).replace(b'name="key"', b'name="policy"', 1), None, "policy", "twice"),
        "a part without a name": (body.replace(b'Content-Disposition: form-data; name="key"', b"X-Other: 1", 1), None, "body", "no name"),
        "a huge header line": (body.replace(b'name="key"', b'name="key"; pad="' + b"p" * 20000 + b'"', 1), None, "body", "headers"),
        "a header line without a colon": (body.replace(b'Content-Disposition: form-data; name="key"', b"garbage", 1), None, "body", "headers"),
        "a field over 16 KiB": (form({"pad": "x" * (17 * 1024), **fields}, DATA), None, "pad", "over"),
        "fields over the allowance": (form({**{f"f{i}": "x" * 1000 for i in range(70)}, **fields}, DATA), None, "body", f"over {FORM_OVERHEAD}"),
    }


KINDS = list(_malformed({"key": "", "policy": "", "Content-Type": "", "x-sluice-signature": ""}))


@pytest.mark.parametrize("kind", KINDS)
def test_a_malformed_form_is_a_400_naming_the_problem_and_nothing_is_logged_loudly(
    kind: str, app: Any, demo: Container, upload: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    body, content_type, field, words = _malformed(upload["fields"])[kind]
    caplog.set_level(logging.INFO)
    posted = post(app, upload["url"], [body], content_type=content_type)
    assert posted.status == 400, (kind, posted.body)
    assert posted.body["field"] == field and words in posted.body["error"], (kind, posted.body)
    assert not loud(caplog), [r.getMessage() for r in loud(caplog)]
    assert kept(demo, upload) == []


# Mangled forms, generated -------------------------------------------------------------------------
TOKENS = [b"\r\n", b"--", f"--{BOUNDARY}".encode(), f"\r\n--{BOUNDARY}--".encode(), b'Content-Disposition: form-data; name="file"', b"\r\n\r\n", b":", b"\x00", b" \t"]
edits = st.one_of(
    st.tuples(st.just("cut"), st.integers(0, 10_000)),
    st.tuples(st.just("drop"), st.integers(0, 10_000), st.integers(1, 64)),
    st.tuples(st.just("insert"), st.integers(0, 10_000), st.one_of(st.sampled_from(TOKENS), st.binary(min_size=1, max_size=32))),
    st.tuples(st.just("repeat"), st.integers(0, 10_000), st.integers(1, 400)),
)


def _edited(body: bytes, edit: tuple[Any, ...]) -> bytes:
    kind, at = edit[0], edit[1] % (len(body) + 1)
    if kind == "cut":
        return body[:at]
    if kind == "drop":
        return body[:at] + body[at + edit[2] :]
    if kind == "insert":
        return body[:at] + edit[2] + body[at:]
    return body[:at] + body[at : at + edit[2]] * 2 + body[at + edit[2] :]


@settings(max_examples=75, derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(changes=st.lists(edits, min_size=1, max_size=4), cuts=st.lists(st.integers(1, 4000), max_size=6), end=st.sampled_from(["done", "gone"]))
def test_a_mangled_form_never_gets_a_5xx_or_leaves_a_body(
    changes: list[tuple[Any, ...]], cuts: list[int], end: str, app: Any, demo: Container, upload: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    body = form(upload["fields"], DATA)
    for change in changes:
        body = _edited(body, change)
    points = sorted({c % (len(body) + 1) for c in cuts} | {0, len(body)})
    chunks = [body[a:b] for a, b in itertools.pairwise(points) if b > a]
    caplog.clear()
    with caplog.at_level(logging.INFO):
        posted = post(app, upload["url"], chunks, end=end)
    assert posted.status < 500 and not loud(caplog), (posted.status, posted.body, [r.getMessage() for r in loud(caplog)])
    if posted.status == 204:  # the edits left a well-formed form: its body, whole
        assert kept(demo, upload) == ["body"]
        (folder(demo, upload) / "body").unlink()
    else:
        assert posted.body["code"] and posted.body["field"], posted.body
        assert kept(demo, upload) == []


# What is read --------------------------------------------------------------------------------------
def _junk(total: int, size: int = 1 << 20) -> Iterator[bytes]:
    for _ in range(total // size):
        yield b"j" * size


def test_nothing_after_the_closing_boundary_is_read(app: Any, demo: Container, upload: dict[str, Any]) -> None:
    body = form(upload["fields"], DATA)
    posted = post(app, upload["url"], [body, *_junk(64 << 20)])
    assert posted.status == 204 and posted.consumed == len(body)
    assert (folder(demo, upload) / "body").read_bytes() == DATA
    # the closing boundary inside a chunk: the rest of that chunk is not taken into the body
    (folder(demo, upload) / "body").unlink()
    posted = post(app, upload["url"], [body + b"j" * 1000, *_junk(64 << 20)])
    assert posted.status == 204 and posted.consumed == len(body) + 1000
    assert (folder(demo, upload) / "body").read_bytes() == DATA


def test_bytes_past_the_bounds_are_not_read(app: Any, demo: Container, upload: dict[str, Any]) -> None:
    fields = b"".join(part(k, v.encode()) for k, v in upload["fields"].items())
    # padding after a boundary, before the policy could be checked: the fields' allowance
    posted = post(app, upload["url"], [fields + f"--{BOUNDARY}".encode(), *(b" " * 4096 for _ in range(16_384))])
    assert posted.status == 400 and posted.body["field"] == "body" and posted.consumed <= FORM_OVERHEAD + 4096
    # a declared length past the upload's size: refused at the file's headers, its data unread
    head = fields + f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"\r\n\r\n'.encode()
    posted = post(app, upload["url"], [head, *_junk(64 << 20)], length=4096 + FORM_OVERHEAD + 1)
    assert posted.status == 413 and posted.body["field"] == "file" and posted.consumed == len(head)
    # undeclared (chunked): refused once the file's data passes the upload's size
    posted = post(app, upload["url"], [head, *_junk(64 << 20, 1024)])
    assert posted.status == 413 and posted.body["field"] == "file" and posted.consumed <= len(head) + 4096 + 1024
    # a field after the file, whatever its length
    tail = form(upload["fields"], DATA).rsplit(f"--{BOUNDARY}--".encode(), 1)[0] + f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="x"\r\n\r\n'.encode()
    posted = post(app, upload["url"], [tail, *_junk(64 << 20)])
    assert posted.status == 400 and posted.body["field"] == "x" and posted.consumed == len(tail)
    assert kept(demo, upload) == []


# Time ------------------------------------------------------------------------------------------------
def test_a_body_too_slow_is_a_408_and_nothing_is_kept(app: Any, demo: Container, upload: dict[str, Any]) -> None:
    demo.settings.uploads.upload_body_timeout_s = 0.3
    body = form(upload["fields"], DATA)
    stalled = post(app, upload["url"], [body[:300]], length=len(body), end="stall")
    assert stalled.status == 408 and stalled.body["code"] == "request_timeout" and stalled.body["field"] == "body"
    assert kept(demo, upload) == []
    # trickled, a few bytes at a time: far below the rate, cut off at the deadline too
    trickled = post(app, upload["url"], [body[i : i + 16] for i in range(0, len(body), 16)], pause=0.05, end="stall")
    assert trickled.status == 408 and kept(demo, upload) == []


def test_each_byte_at_the_minimum_rate_earns_more_time(app: Any, demo: Container, upload: dict[str, Any]) -> None:
    demo.settings.uploads.upload_body_timeout_s, demo.settings.uploads.upload_body_min_rate = 0.3, 200
    body = form(upload["fields"], DATA)  # about 1.3 KB: 0.3 s plus 6.5 more at 200 bytes a second
    steady = post(app, upload["url"], [body[i : i + 100] for i in range(0, len(body), 100)], pause=0.1)  # 1000 bytes a second
    assert steady.status == 204 and kept(demo, upload) == ["body"]


# A client that leaves ---------------------------------------------------------------------------------
def test_a_client_gone_mid_body_is_one_info_line_and_nothing_is_kept(app: Any, demo: Container, upload: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    body = form(upload["fields"], DATA)
    caplog.set_level(logging.INFO)
    post(app, upload["url"], [body[: len(body) // 2]], end="gone")
    assert not loud(caplog), [r.getMessage() for r in loud(caplog)]
    (line,) = [r for r in caplog.records if "client went away" in r.getMessage()]
    assert line.levelno == logging.INFO and line.upload_id == upload["upload_id"] and line.received == len(body) // 2  # type: ignore[attr-defined]
    assert kept(demo, upload) == []


def test_a_policy_or_signature_that_is_not_ascii_is_forbidden_not_a_500(app: Any, demo: Container, upload: dict[str, Any]) -> None:
    for name in ("policy", "x-sluice-signature"):
        changed = {**upload["fields"], name: "é" + upload["fields"][name]}
        posted = post(app, upload["url"], [form(changed, DATA)])
        assert posted.status == 403 and posted.body["field"] == "policy", posted.body
    assert kept(demo, upload) == []
