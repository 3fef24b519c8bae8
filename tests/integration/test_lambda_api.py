"""The API Lambda fed with the sample API Gateway events in `events/` (REST and HTTP API)."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.wiring import Container
from tests.conftest import EVENTS
from tests.integration.conftest import auth
from tests.support import LambdaContext

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def handler(demo: Container) -> Iterator[Any]:
    from sluice.handlers import api

    previous = api.app.state.container
    api.app.state.container = demo
    yield api.handler
    api.app.state.container = previous


def load(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text())


def body_of(response: dict[str, Any]) -> Any:
    body = response["body"]
    if response.get("isBase64Encoded"):
        body = base64.b64decode(body).decode()
    return json.loads(body)


@pytest.mark.parametrize("name", ["api_rest_predict.json", "api_http_predict.json"])
def test_predict_events(handler: Any, name: str) -> None:
    response = handler(load(name), LambdaContext())
    assert response["statusCode"] == 200, response
    body = body_of(response)
    assert body["prediction"] == "setosa" and body["deployment"] == "iris" and body["version"] == 1
    # Behind API Gateway the request id is API Gateway's own.
    assert body["request_id"] == load(name)["requestContext"]["requestId"]


@pytest.mark.parametrize("name", ["api_rest_v2_infer.json", "api_http_v2_infer.json"])
def test_v2_infer_events(handler: Any, name: str) -> None:
    response = handler(load(name), LambdaContext())
    assert response["statusCode"] == 200, response
    out = {o["name"]: o for o in body_of(response)["outputs"]}
    assert out["output_label"]["data"] == ["virginica"]


def test_binary_v2_event_through_api_gateway(handler: Any) -> None:
    """A tritonclient request with binary tensors (no Content-Type: the sync client sends none),
    which API Gateway passes base64-encoded; the binary answer goes back base64-encoded."""
    import numpy as np
    import tritonclient.http as httpclient

    event = load("api_rest_v2_infer_binary.json")
    assert event["isBase64Encoded"] and "Content-Type" not in event["headers"]
    response = handler(event, LambdaContext())
    assert response["statusCode"] == 200, response
    assert response["isBase64Encoded"] is True
    headers = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    headers |= {k.lower(): v[0] for k, v in (response.get("multiValueHeaders") or {}).items()}
    assert headers["content-type"] == "application/octet-stream"
    result = httpclient.InferResult.from_response_body(
        base64.b64decode(response["body"]), header_length=int(headers["inference-header-content-length"])
    )
    assert result.get_response()["id"] == "evt-bin-1"
    assert result.as_numpy("output_label").tolist() == [b"virginica"]
    probabilities = result.as_numpy("output_probability")
    assert probabilities.shape == (1, 3) and int(np.argmax(probabilities)) == 2
    assert result.get_output("output_probability")["parameters"]["classes"] == ["setosa", "versicolor", "virginica"]


def test_management_events(handler: Any) -> None:
    listed = handler(load("api_rest_list_deployments.json"), LambdaContext())
    assert listed["statusCode"] == 200
    assert [d["name"] for d in body_of(listed)] == ["diabetes", "iris"]
    created = handler(load("api_http_create_deployment.json"), LambdaContext())
    assert created["statusCode"] == 201, created
    assert body_of(created)["updated_by"] == "key-demo"


def test_the_authorizer_context_decides_the_tenant(handler: Any) -> None:
    event = load("api_rest_predict.json")
    event["requestContext"]["authorizer"]["tenant"] = "globex"
    response = handler(event, LambdaContext())
    assert response["statusCode"] == 404  # globex has no deployment "iris"


@pytest.mark.parametrize("scopes", [None, 7, {"predict": True}])
def test_authorizer_scopes_that_are_no_list_grant_nothing(handler: Any, scopes: Any) -> None:
    """An authorizer that emits no scopes, or scopes of no kind sluice reads, leaves a
    principal with none: a 403 for a prediction, never a 500."""
    event = load("api_rest_predict.json")
    event["requestContext"]["authorizer"]["scopes"] = scopes
    response = handler(event, LambdaContext())
    assert response["statusCode"] == 403, response


def test_without_an_authorizer_the_api_key_is_checked(handler: Any, demo: Container) -> None:
    event = load("api_rest_predict_api_key.json")
    assert handler(event, LambdaContext())["statusCode"] == 401
    _, key = demo.keys.create("acme", ["predict"])
    event["headers"]["x-api-key"] = key
    event["multiValueHeaders"]["x-api-key"] = [key]
    assert handler(event, LambdaContext())["statusCode"] == 200


def test_a_forged_authorizer_header_is_ignored(handler: Any) -> None:
    event = load("api_rest_predict_api_key.json")
    event["headers"]["x-tenant"] = "acme"
    event["headers"]["authorizer"] = json.dumps({"tenant": "acme"})
    assert handler(event, LambdaContext())["statusCode"] == 401


def test_logs_carry_request_and_tenant_but_never_the_key(handler: Any, demo: Container, caplog: pytest.LogCaptureFixture) -> None:
    from sluice.observability import get_logger

    _, key = demo.keys.create("acme", ["predict"])
    event = load("api_rest_predict_api_key.json")
    event["headers"]["x-api-key"] = key
    event["multiValueHeaders"]["x-api-key"] = [key]
    caplog.set_level("INFO")
    assert handler(event, LambdaContext())["statusCode"] == 200
    formatter = get_logger().registered_formatter
    lines = [json.loads(formatter.format(record)) for record in caplog.records]
    out = "\n".join(json.dumps(line) for line in lines)
    prediction = next(line for line in lines if line.get("message") == "prediction")
    assert prediction["tenant"] == "acme" and prediction["deployment"] == "iris" and prediction["request_id"]
    assert prediction["function_request_id"] == LambdaContext.aws_request_id
    assert key not in out


def test_a_hot_route_answers_like_the_app_does(handler: Any, demo: Container, monkeypatch: pytest.MonkeyPatch) -> None:
    """The edge answers a prediction event without an ASGI exchange: the same body limit (413
    before authentication), the same errors, the same headers as through the app."""
    from sluice.api.app import create_app
    from sluice.handlers.asgi import LambdaASGI

    through_app = LambdaASGI(create_app(demo))
    through_app.whole = None  # the plain exchange, for comparison
    event = load("api_rest_predict.json")
    direct, exchanged = handler(event, LambdaContext()), through_app(event, LambdaContext())
    assert direct["statusCode"] == exchanged["statusCode"] == 200
    assert body_of(direct) | {"latency_ms": 0} == body_of(exchanged) | {"latency_ms": 0}
    length = lambda r: {k: v for k, v in r["headers"].items() if k != "content-length"}  # noqa: E731 - latency digits differ
    assert length(direct) == length(exchanged) and direct["isBase64Encoded"] == exchanged["isBase64Encoded"]
    bad = json.loads(json.dumps(event))
    bad["body"] = json.dumps({"deployment": "iris", "inputs": [[1.0, 2.0]]})
    assert handler(bad, LambdaContext())["statusCode"] == through_app(bad, LambdaContext())["statusCode"] == 400
    large = json.loads(json.dumps(event))
    rows = demo.settings.limits.max_request_bytes // 20 + 1  # each row is more than 20 bytes
    large["body"] = json.dumps({"deployment": "iris", "inputs": [[5.1, 3.5, 1.4, 0.2]] * rows})
    refused = handler(large, LambdaContext())
    assert refused["statusCode"] == 413 and body_of(refused)["field"] == "body"


# Bodies a caller might send, right and wrong: what the in-line answer must say as the app says it.
_ROWS = st.lists(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 3), st.text(max_size=2), st.none()), max_size=5), max_size=3)
_PLAIN = st.fixed_dictionaries(
    {"deployment": st.sampled_from(["iris", "diabetes", "nope", "", "IRIS"])},
    optional={"inputs": _ROWS, "features": st.dictionaries(st.sampled_from(["sepal_length", "x"]), st.floats(allow_nan=False)), "version": st.integers(0, 3), "variant": st.text(max_size=3)},
)
_V2 = st.fixed_dictionaries(
    {"inputs": st.lists(st.fixed_dictionaries({
        "name": st.sampled_from(["input", "other"]), "shape": st.lists(st.integers(-1, 4), max_size=3),
        "datatype": st.sampled_from(["FP32", "FP64", "INT64", "BYTES", "BOOL", "FP8"]), "data": _ROWS,
    }), max_size=2)},
    optional={"id": st.text(max_size=4), "outputs": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["output_label", "nope"])}), max_size=2)},
)  # fmt: skip


_EXCHANGES: dict[int, Any] = {}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.one_of(st.tuples(st.just("api_rest_predict.json"), st.one_of(_PLAIN, st.text(max_size=8))), st.tuples(st.just("api_rest_v2_infer.json"), _V2)))
def test_in_line_answers_as_the_exchange_for_any_body(handler: Any, demo: Container, sent: tuple[str, Any]) -> None:
    """A hot route's request driven in line (`sluice.inline`) answers every body, right or
    wrong, with the status and the body the app's own ASGI exchange gives."""
    through_app = _EXCHANGES.get(id(demo))
    if through_app is None:  # one app per container: hypothesis calls this with the same fixtures
        from sluice.api.app import create_app
        from sluice.handlers.asgi import LambdaASGI

        _EXCHANGES.clear()
        through_app = _EXCHANGES[id(demo)] = LambdaASGI(create_app(demo))
        through_app.whole = None
    name, body = sent
    event = load(name)
    event["body"] = body if isinstance(body, str) else json.dumps(body)
    direct, exchanged = handler(event, LambdaContext()), through_app(event, LambdaContext())
    assert direct["statusCode"] == exchanged["statusCode"]
    answered, expected = body_of(direct), body_of(exchanged)
    if isinstance(answered, dict) and isinstance(expected, dict):
        answered, expected = answered | {"latency_ms": 0}, expected | {"latency_ms": 0}
    assert answered == expected


def _with_header(name: str, event_name: str, values: list[str]) -> dict[str, Any]:
    """An event whose client sent `name` with `values`, as API Gateway passes them: a REST
    event's `headers` has the last, `multiValueHeaders` all; an HTTP API's joins them."""
    event = load(event_name)
    if "multiValueHeaders" in event:
        event["headers"][name] = values[-1]
        event["multiValueHeaders"][name] = values
    else:
        event["headers"][name.lower()] = ",".join(values)
    return event


def _a_port(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


_PORTISH = st.text(alphabet="0123456789:[]ab.,- ", max_size=10)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    name=st.sampled_from(["Host", "X-Forwarded-Port"]),
    values=st.lists(st.one_of(_PORTISH, st.integers(1, 65535).map(str), st.just("example.com:8443")), min_size=1, max_size=2),
    event_name=st.sampled_from(["api_rest_predict.json", "api_http_predict.json"]),
)
def test_a_host_or_forwarded_port_that_is_no_port_is_a_400_naming_it(handler: Any, name: str, values: list[str], event_name: str) -> None:
    """Whatever a client sends as Host or X-Forwarded-Port, the function answers (never raises,
    which API Gateway turns into a bare 502): the prediction where the port reads as a number,
    else a 400 naming the header, in the result shape of the event's kind."""
    event = _with_header(name, event_name, values)
    response = handler(event, LambdaContext())
    sent = event["headers"].get(name, event["headers"].get(name.lower()))
    if "multiValueHeaders" in event:
        sent = ", ".join(values)  # what Mangum reads: every value, joined
    if name == "Host":  # name[:port]; without a port, the event's own X-Forwarded-Port (443)
        readable = ":" not in sent or (sent.count(":") == 1 and _a_port(sent.split(":")[1]))
    else:
        readable = _a_port(sent)
    assert response["statusCode"] == (200 if readable else 400), (sent, response)
    if not readable:
        assert body_of(response) | {"error": ""} == {"error": "", "code": "bad_request", "field": name.lower()}
        assert not response["isBase64Encoded"] and "application/json" in json.dumps(response.get("headers"))


@pytest.mark.parametrize("name", ["api_rest_predict.json", "api_http_predict.json"])
def test_a_body_that_is_not_the_base64_its_event_says_is_a_400(handler: Any, name: str) -> None:
    event = load(name)
    event["isBase64Encoded"], event["body"] = True, "eyJkZ"  # five characters: no base64
    response = handler(event, LambdaContext())
    assert response["statusCode"] == 400, response
    assert body_of(response)["field"] == "body" and "base64" in body_of(response)["error"]


def _with_rows(name: str, n: int, **extra: Any) -> dict[str, Any]:
    row = [6.7, 3.0, 5.2, 2.3]
    event = load(name)
    if "v2" in name:
        event["body"] = json.dumps({"inputs": [{"name": "input", "shape": [n, 4], "datatype": "FP32", "data": row * n}]})
    else:
        event["body"] = json.dumps({"deployment": "iris", extra.get("field", "inputs"): [row] * n})
    for key, value in extra.get("headers", {}).items():
        event["headers"][key], event["multiValueHeaders"][key] = value, [value]
    return event


@pytest.mark.parametrize(("name", "field"), [("api_rest_predict.json", "inputs"), ("api_rest_predict.json", "batch"), ("api_rest_v2_infer.json", "inputs")])
def test_an_answer_larger_than_a_lambda_result_carries_is_a_413_naming_the_rows(
    handler: Any, demo: Container, client: Any, keys: dict[str, str], monkeypatch: pytest.MonkeyPatch, name: str, field: str
) -> None:
    """Lambda returns no result over 6 MB (API Gateway then answers a bare 502): an answer
    over `SLUICE_MAX_RESPONSE_BYTES` as the result carries it (its quotes escaped) is a 413
    naming the field the rows came in. Gzipped, the same answer fits; `sluice serve` sends it
    whole."""
    event = _with_rows(name, 400, field=field)
    answered = handler(event, LambdaContext())
    assert answered["statusCode"] == 200 and not answered["isBase64Encoded"]
    size, quotes = len(answered["body"]), answered["body"].count('"')
    monkeypatch.setattr(demo.settings.limits, "max_response_bytes", size + quotes // 2)  # under it by its length alone
    refused = handler(event, LambdaContext())
    assert refused["statusCode"] == 413, refused
    body = body_of(refused)
    assert body["code"] == "payload_too_large" and body["field"] == field and "upload" in body["error"]
    gzipped = handler(_with_rows(name, 400, field=field, headers={"Accept-Encoding": "gzip"}), LambdaContext())
    assert gzipped["statusCode"] == 200 and gzipped["isBase64Encoded"]
    served = client.post(event["path"], content=event["body"], headers={**auth(keys["acme"]), "Content-Type": "application/json", "Accept-Encoding": "identity"})
    assert served.status_code == 200 and len(served.content) >= size - 32  # the latency's digits may differ


def _request(method: str, path: str, body: bytes | None) -> dict[str, Any]:
    """A REST API event for `method path` (acme's admin, through the authorizer)."""
    event = load("api_rest_list_deployments.json")
    event["httpMethod"] = event["requestContext"]["httpMethod"] = method
    event["path"], event["pathParameters"] = path, {"proxy": path.lstrip("/")}
    event["body"] = None if body is None else base64.b64encode(body).decode()
    event["isBase64Encoded"] = body is not None
    return event


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("OPTIONS", "/api/v1/predictions", None),
        ("OPTIONS", "/v2/models/iris/versions/1/infer", None),
        ("GET", "/v2/models/iris/infer", None),
        ("PATCH", "/api/v1/deployments/iris", b"{}"),
        ("PUT", "/api/v1/keys", b"{}"),
        ("OPTIONS", "/api/v1/models/iris/versions", None),
        ("POST", "/api/v1/deployments", b'{"name": "x",}'),
        ("POST", "/api/v1/keys", b"{\n"),
        ("POST", "/api/v1/predictions", b"{"),
    ],
)
def test_a_wrong_method_or_a_body_that_is_no_json_is_answered_in_lambda_as_locally(handler: Any, client: Any, demo: Container, method: str, path: str, body: bytes | None) -> None:
    _, key = demo.keys.create("acme", ["admin"])
    local = client.request(method, path, content=body, headers={**auth(key), "Content-Type": "application/json"})
    answered = handler(_request(method, path, body), LambdaContext())
    assert answered["statusCode"] == local.status_code and local.status_code in (405, 422), (answered, local.text)
    assert answered["headers"].get("allow") == local.headers.get("allow")
    assert body_of(answered) == local.json()
