"""`answer_whole` (the edge's hot routes answered with the whole body at hand, as every Lambda
prediction is) against the app's own ASGI exchange, in a process that counts requests in
flight: for any body, right or wrong, any credentials, any coding of the body or of the answer,
any declared length, and a key with any number of requests already in flight, the same status, the same answer (but
its latency and request id) in the same coding, and the counts left as they were found."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sluice.api.app import create_app
from tests.integration.conftest import api_keys
from tests.integration.test_lambda_api import _PLAIN, _V2
from tests.support import steady

if TYPE_CHECKING:
    from sluice.wiring import Container

CAP = 2  # each key's requests in flight

SETOSA = [5.1, 3.5, 1.4, 0.2]
_RIGHT = st.sampled_from([
    ("/api/v1/predictions", {"deployment": "iris", "inputs": [SETOSA]}),
    ("/api/v1/predictions", {"deployment": "iris", "inputs": [SETOSA] * 3}),
    ("/api/v1/predictions", {"deployment": "iris", "inputs": [SETOSA] * 40}),  # an answer past 1 KiB: gzipped where asked
    ("/v2/models/iris/infer", {"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": SETOSA}]}),
])
_SENT = st.fixed_dictionaries({
    "request": st.one_of(
        _RIGHT, st.tuples(st.just("/api/v1/predictions"), st.one_of(_PLAIN, st.text(max_size=8))), st.tuples(st.just("/v2/models/iris/infer"), _V2),
    ),
    "key": st.sampled_from(["acme", "acme", "acme_predict", "globex", "wrong", None]),
    "coding": st.sampled_from([None, None, "gzip", "deflate", "br", "gzip, but plain"]),
    "accept": st.sampled_from([None, "gzip"]),
    "held": st.integers(0, CAP),
    "length": st.sampled_from(["declared", "declared", "absent", "past the limit", "not a number"]),
})  # fmt: skip

_APPS: dict[int, tuple[Any, dict[str, str]]] = {}


def _scope(path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http", "path": path,
        "raw_path": path.encode(), "root_path": "", "query_string": b"", "headers": headers, "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 80),
    }  # fmt: skip


async def _exchange(app: Any, scope: dict[str, Any], body: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
    messages: list[dict[str, Any]] = []
    requests = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return requests.pop() if requests else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    await app(scope, receive, send)
    start = next(m for m in messages if m["type"] == "http.response.start")
    return start["status"], dict(start["headers"]), b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")


async def _whole(app: Any, scope: dict[str, Any], body: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
    response = await app.answer_whole(scope, body)
    assert response is not None, "a POST to a hot route is the edge's to answer"
    if response.background is not None:  # as the exchange runs it, after the answer
        await response.background()
    return response.status_code, dict(response.raw_headers), response.body


def _answer(headers: dict[bytes, bytes], body: bytes) -> Any:
    if headers.get(b"content-encoding") == b"gzip":
        body = gzip.decompress(body)
    try:
        answer = json.loads(body)
    except ValueError:
        return body
    return steady(answer)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sent=_SENT)
def test_answered_whole_as_through_the_exchange(demo: Container, sent: dict[str, Any]) -> None:
    made = _APPS.get(id(demo))
    if made is None:  # one app per container: hypothesis calls this with the same fixtures
        _APPS.clear()
        demo.settings.admission.max_in_flight_per_key = CAP
        made = _APPS[id(demo)] = (create_app(demo), api_keys(demo))
    app, keys = made
    path, payload = sent["request"]
    raw = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
    coding = sent["coding"]
    body = gzip.compress(raw) if coding == "gzip" else zlib.compress(raw) if coding == "deflate" else raw
    declared = {"declared": str(len(body)), "past the limit": str(demo.settings.limits.max_request_bytes + 1), "not a number": "12a"}.get(sent["length"])
    headers = [(b"content-type", b"application/json")] + ([(b"content-length", declared.encode())] if declared is not None else [])
    key = {"wrong": "sk_nokey_nosecret", None: None}.get(sent["key"], keys.get(sent["key"] or ""))
    if key is not None:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    if coding is not None:
        headers.append((b"content-encoding", coding.split(",")[0].encode()))
    if sent["accept"]:
        headers.append((b"accept-encoding", sent["accept"].encode()))
    admission = demo.admission
    assert admission is not None and admission.per_key is not None
    holder = demo.keys.authenticate(keys[sent["key"]]) if sent["key"] in keys else None
    held = sent["held"] if holder is not None else 0
    for _ in range(held):  # the key's requests already in flight
        admission.enter(holder, prediction=False)

    async def both() -> tuple[Any, Any]:
        return await _whole(app, _scope(path, list(headers)), body), await _exchange(app, _scope(path, list(headers)), body)

    try:
        (status, answered, content), (expected_status, expected, expected_content) = asyncio.run(both())
        if holder is not None:
            assert admission.per_key.count(holder.subject) == held  # each path gave its slot back
    finally:
        for _ in range(held):
            admission.leave(holder, prediction=False)  # type: ignore[arg-type]
    assert status == expected_status, (content, expected_content)
    assert answered.get(b"content-encoding") == expected.get(b"content-encoding")
    assert answered.get(b"retry-after") == expected.get(b"retry-after")
    assert _answer(answered, content) == _answer(expected, expected_content)
    event(f"{status}")  # how often each status is drawn (`pytest --hypothesis-show-statistics`)
