"""API Gateway's events are translated exactly as Mangum translates them (`sluice.handlers.
gateway`): for events and responses drawn by hypothesis (REST and HTTP API events with headers
in any case, repeated and multi-valued, query strings, cookies, paths with escapes and a base
path, hosts with ports, and values of the wrong type), the scope, the body and the Lambda result
are Mangum's own, or both raise the same error. The events of `events/` are among them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from mangum import Mangum
from mangum.handlers import APIGateway, HTTPGateway

from sluice.handlers.asgi import LambdaASGI
from sluice.handlers.gateway import HttpEvent, RestEvent, gateway_handler

EVENTS = Path(__file__).resolve().parents[2] / "events"


async def _app(scope: Any, receive: Any, send: Any) -> None:  # never called: the translation alone
    raise AssertionError("not run")


def _outcome(call: Any) -> tuple[str, Any]:
    try:
        return "ok", call()
    except Exception as exc:
        return "raised", type(exc)


def _same(event: Any, responses: list[Any], base: str = "/") -> None:
    found = _outcome(lambda: Mangum(_app, lifespan="off", api_gateway_base_path=base).infer(event, None))
    if found[0] == "raised":  # no handler for it: none for ours either
        assert _outcome(lambda: LambdaASGI(_app, api_gateway_base_path=base).infer(event, None)) == found
        return
    theirs, ours = found[1], LambdaASGI(_app, api_gateway_base_path=base).infer(event, None)
    assert type(ours) is {APIGateway: RestEvent, HTTPGateway: HttpEvent}.get(type(theirs), type(theirs))
    assert _outcome(lambda: ours.scope) == _outcome(lambda: theirs.scope)
    assert _outcome(lambda: ours.body) == _outcome(lambda: theirs.body)
    for response in responses:
        assert _outcome(lambda r=response: ours(dict(r))) == _outcome(lambda r=response: theirs(dict(r)))


# Drawn events ---------------------------------------------------------------------------------
NAMES = st.sampled_from(["Host", "host", "HOST", "Content-Type", "content-type", "X-Forwarded-Port", "x-forwarded-proto",
                         "X-Forwarded-Proto", "Cookie", "Authorization", "x-api-key", "Accept-Encoding"]) | st.text(min_size=0, max_size=8)  # fmt: skip
TEXT = st.text(max_size=12)
ODD = st.none() | st.integers() | st.lists(TEXT, max_size=2)  # what a header value never should be
VALUES = TEXT | st.sampled_from(["example.com", "example.com:8443", "a:b:c", "x:notaport", "443", "https", "http"])
HEADERS = st.dictionaries(NAMES, VALUES | ODD, max_size=6) | st.none()
MULTI = st.dictionaries(NAMES, st.lists(VALUES, max_size=3) | ODD, max_size=6) | st.none()
PATHS = st.sampled_from(["/api/v1/predictions", "/prod/api/v1/x", "/a%20b/%2F", "%41/b", "", "/", "/%zz"]) | TEXT | st.none()
QUERY = st.none() | st.dictionaries(TEXT, TEXT, max_size=3)
MULTI_QUERY = st.none() | st.dictionaries(TEXT, st.lists(TEXT, max_size=2), max_size=3)


@st.composite
def rest_events(draw: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "resource": "/{proxy+}",
        "path": draw(PATHS),
        "httpMethod": draw(st.sampled_from(["POST", "GET", "OPTIONS"])),
        "headers": draw(HEADERS),
        "multiValueHeaders": draw(MULTI),
        "queryStringParameters": draw(QUERY),
        "multiValueQueryStringParameters": draw(MULTI_QUERY),
        "requestContext": draw(st.sampled_from([{"identity": {"sourceIp": "203.0.113.7"}}, {}, {"identity": None}])),
        "body": draw(st.none() | TEXT),
        "isBase64Encoded": draw(st.booleans()),
    }
    shape = draw(st.sampled_from(["drawn", "same names", "same names, another order"]))
    if shape != "drawn" and event["headers"]:  # as API Gateway sends them: each name in both
        names = list(event["headers"])
        if shape != "same names":
            names = draw(st.permutations(names))
        event["multiValueHeaders"] = {n: draw(st.lists(VALUES, min_size=1, max_size=2) | ODD) for n in names}
    for key in draw(st.sets(st.sampled_from(sorted(event)), max_size=2)):
        del event[key]
    return event


@st.composite
def http_events(draw: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "version": draw(st.sampled_from(["2.0", "2.0", "1.0"])),
        "rawQueryString": draw(TEXT),
        "cookies": draw(st.none() | st.lists(TEXT, max_size=3)),
        "headers": draw(st.dictionaries(NAMES, VALUES | ODD, max_size=6)),
        "requestContext": {"http": {"method": draw(st.sampled_from(["POST", "GET"])), "path": draw(PATHS), "sourceIp": "203.0.113.7"}},
        "body": draw(st.none() | TEXT),
        "isBase64Encoded": False,
    }  # fmt: skip
    if event["version"] == "1.0":  # payload 1.0 through an HTTP API: a REST event's fields
        event.update(path=draw(PATHS), httpMethod="POST", multiValueHeaders=draw(MULTI))
    for key in draw(st.sets(st.sampled_from(["rawQueryString", "cookies", "headers", "body"]), max_size=2)):
        del event[key]
    return event


RESPONSE_NAMES = st.sampled_from([b"content-type", b"Content-Type", b"set-cookie", b"Set-Cookie", b"location", b"x-request-id", b"vary"])
RESPONSE_VALUES = st.sampled_from([b"application/json", b"text/plain; charset=utf-8", b"image/png", b"a=1", b"/x", b"\xff"]) | st.binary(max_size=6)
RESPONSES = st.fixed_dictionaries({
    "status": st.sampled_from([200, 202, 413, None]),
    "headers": st.lists(st.tuples(RESPONSE_NAMES, RESPONSE_VALUES), max_size=5) | st.lists(st.tuples(st.just("str"), st.just("name")), max_size=1),
    "body": st.sampled_from([b"", b'{"a":1}', b"\xff\xfe", None, "text"]) | st.binary(max_size=8),
})  # fmt: skip
BASES = st.sampled_from(["/", "prod", "/prod", ""])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event=rest_events(), responses=st.lists(RESPONSES, min_size=1, max_size=3), base=BASES)
@example(event=json.loads((EVENTS / "api_rest_predict.json").read_text()), responses=[{"status": 200, "headers": [(b"content-type", b"application/json")], "body": b"{}"}], base="/")
@example(  # headers that are not an object, holding the multi-valued ones' names: Mangum refuses it, as must this
    event={"resource": "/", "path": "/", "httpMethod": "GET", "headers": ["Host"], "multiValueHeaders": {"Host": ["a"]}, "requestContext": {}},
    responses=[{"status": 200, "headers": [], "body": b""}], base="/",
)
def test_a_rest_event_is_translated_as_mangum_translates_it(event: dict[str, Any], responses: list[Any], base: str) -> None:
    _same(event, responses, base)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event=http_events(), responses=st.lists(RESPONSES, min_size=1, max_size=3), base=BASES)
def test_an_http_api_event_is_translated_as_mangum_translates_it(event: dict[str, Any], responses: list[Any], base: str) -> None:
    _same(event, responses, base)


@pytest.mark.parametrize("name", sorted(p.name for p in EVENTS.glob("api_*.json")))
def test_every_api_event_of_the_project_is_translated_as_mangum_translates_it(name: str) -> None:
    event = json.loads((EVENTS / name).read_text())
    response = {"status": 200, "headers": [(b"content-type", b"application/json"), (b"set-cookie", b"a=1"), (b"set-cookie", b"b=2")], "body": b'{"ok":true}'}
    _same(event, [response])


@pytest.mark.parametrize(
    "event",
    [
        {"requestContext": {"elb": {}}, "httpMethod": "GET", "path": "/", "headers": {}},  # an ALB's, tried first
        {"Records": [{"cf": {}}]},  # Lambda@Edge
        {"requestContext": "elb", "resource": "/"},  # not a dict: Mangum's rule for it
    ],
)
def test_other_events_are_left_to_mangum(event: dict[str, Any]) -> None:
    assert gateway_handler(event, None, LambdaASGI(_app).config) is None


def test_a_configured_exclusion_leaves_the_event_to_mangum() -> None:
    config = Mangum(_app, lifespan="off", exclude_headers=["x-secret"]).config
    assert gateway_handler(json.loads((EVENTS / "api_rest_predict.json").read_text()), None, config) is None
