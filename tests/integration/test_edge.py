"""The HTTP edge: bodies bounded on every route before anything reads them, principals known
before a body is read, and the hot routes served by the edge and documented in OpenAPI."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from sluice.api.app import create_app
from tests.integration.conftest import auth

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

    from sluice.wiring import Container

IRIS_ROW = {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}


def _call(app: Any, method: str, path: str, headers: dict[str, str], chunks: list[bytes]) -> tuple[int, dict[str, Any], int]:
    """Send a chunked body through the ASGI app; returns (status, JSON body, chunks it read)."""
    import orjson

    sent = {"read": 0}
    pending = list(chunks)
    replies: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if pending:
            sent["read"] += 1
            body = pending.pop(0)
            return {"type": "http.request", "body": body, "more_body": bool(pending)}
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        replies.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "scheme": "http",
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 1234),
        "headers": [(k.lower().encode(), v.encode()) for k, v in {"transfer-encoding": "chunked", **headers}.items()],
    }
    asyncio.run(app(scope, receive, send))
    start = next(m for m in replies if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in replies if m["type"] == "http.response.body")
    return start["status"], orjson.loads(body) if body else {}, sent["read"]


MB = b"x" * (1024 * 1024)


@pytest.mark.parametrize("path", ["/api/v1/models", "/api/v1/deployments", "/api/v1/keys", "/api/v1/predictions", "/v2/models/iris/infer"])
def test_no_key_is_refused_before_any_of_the_body_is_read(demo: Container, path: str) -> None:
    status, body, read = _call(create_app(demo), "POST", path, {}, [MB] * 100)
    assert status == 401 and body["code"] == "unauthenticated"
    assert read == 0


@pytest.mark.parametrize("path", ["/api/v1/models", "/api/v1/deployments", "/api/v1/keys", "/api/v1/predictions", "/v2/models/iris/infer"])
def test_a_chunked_body_over_the_limit_is_refused_once_it_passes_the_limit(demo: Container, keys: dict[str, str], path: str) -> None:
    app = create_app(demo, max_request_bytes=3 * 1024 * 1024)
    status, body, read = _call(app, "POST", path, auth(keys["acme"]), [MB] * 100)
    assert status == 413 and body["code"] == "payload_too_large" and body["field"] == "body"
    assert read <= 4  # stopped at the limit, not at the end of 100 MB


def test_a_declared_length_over_the_limit_is_refused_unread(demo: Container, keys: dict[str, str]) -> None:
    app = create_app(demo, max_request_bytes=1024)
    status, body, read = _call(app, "PUT", "/api/v1/anything", {**auth(keys["acme"]), "content-length": "5000"}, [b"{}"])
    assert status == 413 and body["code"] == "payload_too_large" and read == 0


def test_hot_routes_answer_through_the_edge(client: TestClient, keys: dict[str, str]) -> None:
    r = client.post("/api/v1/predictions", json={"deployment": "iris", "features": IRIS_ROW}, headers=auth(keys["acme"]))
    assert r.status_code == 200 and r.json()["prediction"] == "setosa"
    bad = client.post("/api/v1/predictions", json={"deployment": "iris", "features": IRIS_ROW, "nope": 1}, headers=auth(keys["acme"]))
    assert bad.status_code == 422 and bad.json()["field"] == "nope"
    v2 = client.post(
        "/v2/models/iris/infer",
        json={"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [5.1, 3.5, 1.4, 0.2]}]},
        headers=auth(keys["acme"]),
    )
    assert v2.status_code == 200 and v2.json()["model_name"] == "iris"


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "$ref"] + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_the_openapi_document_lists_the_hot_routes_and_every_policy_shape(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    predict = doc["paths"]["/api/v1/predictions"]["post"]
    assert predict["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/PredictionRequest")
    assert "200" in predict["responses"] and "413" in predict["responses"]
    for path in ("/v2/models/{name}/infer", "/v2/models/{name}/versions/{version}/infer"):
        body = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body["$ref"].endswith("/InferenceRequest")
    schemas = doc["components"]["schemas"]
    for kind in ("Single", "Split", "Shadow", "Ensemble", "Ref", "Variant", "Mirror", "Member", "Bandit"):
        assert kind in schemas, kind
    create = schemas["DeploymentCreate"]["properties"]["policy"]
    assert "discriminator" in str(create) or "oneOf" in str(create)
    # Every reference resolves: no dangling $ref.
    missing = {r for r in _refs(doc) if r.split("/")[-1] not in schemas}
    assert missing == set()


def test_a_bad_policy_names_its_field_through_the_api(client: TestClient, keys: dict[str, str]) -> None:
    policy = {"kind": "split", "variants": [{"name": "a", "weight": -1, "target": {"kind": "single", "model": "iris", "version": 1}}]}
    r = client.post("/api/v1/deployments", json={"name": "bad", "policy": policy}, headers=auth(keys["acme"]))
    assert r.status_code == 422 and r.json()["field"] == "policy.variants.0.weight"


# Numbers from the client: ASCII digits, within 63 bits, or a 422 naming the field.
BAD_NUMBERS = ["99999999999999999999", "9223372036854775808", "0", "٣", "³", "+3", "3.0"]


@pytest.mark.parametrize("bad", BAD_NUMBERS)
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v2/models/iris/versions/{v}"),
        ("GET", "/v2/models/iris/versions/{v}/ready"),
        ("POST", "/v2/models/iris/versions/{v}/infer"),
        ("GET", "/api/v1/models/iris/versions/{v}"),
        ("DELETE", "/api/v1/models/iris/versions/{v}"),
    ],
)
def test_a_version_in_a_path_is_ascii_digits_in_range(client: TestClient, keys: dict[str, str], method: str, path: str, bad: str) -> None:
    body = {"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [5.1, 3.5, 1.4, 0.2]}]}
    r = client.request(method, path.format(v=bad), headers=auth(keys["acme"]), json=body if method == "POST" else None)
    assert r.status_code == 422, r.text
    assert r.json()["code"] == "invalid_request" and r.json()["field"] == "version"


def test_a_unicode_digit_is_not_read_as_a_version(client: TestClient, keys: dict[str, str]) -> None:
    assert client.get("/api/v1/models/iris/versions/1", headers=auth(keys["acme"])).status_code == 200
    assert client.get("/api/v1/models/iris/versions/\u0661", headers=auth(keys["acme"])).status_code == 422  # Arabic-Indic one
    assert client.get("/api/v1/models/iris/versions/latest", headers=auth(keys["acme"])).status_code == 200


HUGE = 2**66


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "/api/v1/predictions", {"deployment": "iris", "features": IRIS_ROW, "version": HUGE}, "version"),
        ("POST", "/api/v1/deployments", {"name": "big", "model": "iris", "version": HUGE}, "version"),
        ("POST", "/api/v1/deployments", {"name": "big", "policy": {"kind": "single", "model": "iris", "version": HUGE}}, "policy.version"),
        ("PUT", "/api/v1/deployments/iris", {"model": "iris", "version": HUGE}, "version"),
        ("PUT", "/api/v1/deployments/iris", {"model": "iris", "version": 1, "revision": HUGE}, "revision"),
    ],
)
def test_a_number_past_63_bits_in_a_body_is_a_422(client: TestClient, keys: dict[str, str], method: str, path: str, body: dict[str, Any], field: str) -> None:
    r = client.request(method, path, headers=auth(keys["acme"]), json=body)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field


@pytest.mark.parametrize("revision", [str(2**64), "٣", "-1"])
def test_a_stats_revision_is_validated(client: TestClient, keys: dict[str, str], revision: str) -> None:
    r = client.get("/api/v1/deployments/iris/stats", params={"revision": revision}, headers=auth(keys["acme"]))
    assert r.status_code == 422 and r.json()["field"] == "revision", r.text
    assert client.get("/api/v1/deployments/iris/stats", params={"revision": "1"}, headers=auth(keys["acme"])).status_code == 200


@pytest.mark.parametrize("path", ["/v2/", "/api/v1/models/", "/healthz/"])
def test_no_redirect_is_built_from_the_host_header(client: TestClient, keys: dict[str, str], path: str) -> None:
    r = client.get(path, headers={**auth(keys["acme"]), "host": "evil.example"}, follow_redirects=False)
    assert not 300 <= r.status_code < 400 and "location" not in r.headers
    assert "evil.example" not in r.text


def test_every_error_a_route_answers_is_documented_with_the_error_shape(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    for path, item in doc["paths"].items():
        for method, op in item.items():
            for status, answer in op["responses"].items():
                if status.startswith(("4", "5")):
                    schema = answer["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ErrorOut"}, (method, path, status)
            # public: no key (an upload's body is authorized by its signed form, as S3's POST is)
            if path not in ("/healthz", "/readyz", "/v2", "/v2/health/live", "/v2/health/ready", "/api/v1/uploads/{upload_id}/body"):
                assert {"401", "422"} <= set(op["responses"]), (method, path)
    assert doc["components"]["schemas"]["ErrorOut"]["required"] == ["error", "code"]  # the shape they refer to


def test_the_routes_behind_the_edge_get_its_principal(demo: Container, keys: dict[str, str]) -> None:
    """The edge hands the principal it authenticated to the framework's routes (in the scope):
    they do not authenticate the request a second time."""
    from starlette.datastructures import Headers

    from sluice.api.deps import authenticate, known_principal
    from sluice.api.edge import PRINCIPAL, Edge

    seen: list[Any] = []

    async def behind(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope.get(PRINCIPAL))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    edge = Edge(behind, lambda: [], lambda: demo, authenticate, known_principal, wrong_method=lambda scope: None)
    scope = {"type": "http", "method": "GET", "path": "/api/v1/deployments", "headers": Headers(headers=auth(keys["acme"])).raw}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        return None

    asyncio.run(edge(scope, receive, send))
    assert seen and seen[0] is not None and seen[0].tenant == "acme"


def test_the_routes_build_no_serializer_for_the_errors_they_document() -> None:
    """FastAPI builds a serializer for each documented answer that names a model as it builds a
    route: some 540 error answers, half of what building the routers costs every server. The
    document still gives each its shape (above)."""
    import importlib

    from fastapi.routing import APIRoute

    from sluice.api.app import ROUTERS

    for name in ROUTERS:
        for route in importlib.import_module(f"sluice.api.routers.{name}").router.routes:
            if isinstance(route, APIRoute):
                assert [str(code) for code in route.response_fields if str(code)[0] in "45"] == [], route.path


# A path's methods, as the API's reference gives them: any other is a 405 whose Allow names them all.
TAKES = {
    "/api/v1/deployments": {"GET", "POST"},
    "/api/v1/deployments/iris": {"GET", "PUT", "DELETE"},
    "/api/v1/keys": {"GET", "POST"},
    "/api/v1/models/iris": {"GET", "DELETE"},
    "/api/v1/models/iris/versions": {"GET", "POST"},
    "/api/v1/predictions": {"POST"},
    "/v2/models/iris/infer": {"POST"},
    "/v2/models/iris/versions/1/infer": {"POST"},
}
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _takes(path: str) -> set[str]:
    """A path's methods: HEAD wherever GET is (RFC 9110: the GET's answer without its body)."""
    return TAKES[path] | ({"HEAD"} if "GET" in TAKES[path] else set())


@pytest.mark.parametrize("path", TAKES)
def test_a_method_a_path_does_not_take_is_a_405_naming_every_method_it_does(client: TestClient, keys: dict[str, str], path: str) -> None:
    for method in [m for m in METHODS if m not in _takes(path)]:
        answer = client.request(method, path, headers=auth(keys["acme"]))
        assert answer.status_code == 405, (method, answer.text)
        assert set(answer.headers["allow"].split(", ")) == _takes(path), (method, answer.headers["allow"])
        if method != "HEAD":
            assert answer.json()["code"] == "method_not_allowed"
    options = client.options(path)  # no route takes OPTIONS: a 405 with no key too, on the hot routes as on the rest
    assert options.status_code == 405 and set(options.headers["allow"].split(", ")) == _takes(path), options.text


def test_head_is_every_get_answered_without_its_body(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    """For each path the API declares a GET for (and the public ones, the console's, a path no
    route has), HEAD answers the GET's status and headers with no body, with a key and without."""
    import re

    declared = client.get("/openapi.json").json()["paths"]
    paths = [re.sub(r"\{[^}]+\}", "1", re.sub(r"\{(name|deployment)\}", "iris", t)) for t, ops in declared.items() if "get" in ops]
    assert "/api/v1/deployments/iris" in paths and "/v2/models/iris" in paths
    for path in [*paths, "/healthz", "/v2/health/ready", "/console/", "/docs", "/nowhere"]:
        for headers in (auth(keys["acme"]), {}, {**auth(keys["acme"]), "Accept-Encoding": "gzip"}):
            get, head = client.get(path, headers=headers), client.head(path, headers=headers)
            assert head.status_code == get.status_code, (path, headers, head.status_code, get.status_code, get.text[:200])
            assert head.content == b"", (path, head.content[:100])
            same = {k: v for k, v in head.headers.items() if k not in ("date", "x-request-id")}
            assert same == {k: v for k, v in get.headers.items() if k not in ("date", "x-request-id")}, path


def test_every_route_answers_options_with_a_405_naming_every_method_of_its_path(client: TestClient, demo: Container) -> None:
    """For each path the API declares (the OpenAPI document: the framework's routes and the hot
    routes), OPTIONS is a 405 whose Allow holds every method declared for that path."""
    import re

    declared = client.get("/openapi.json").json()["paths"]
    assert "/api/v1/predictions" in declared and "/v2/models/{name}/infer" in declared
    for template, operations in declared.items():
        path = re.sub(r"\{[^}]+\}", "1", template)
        answer = client.options(path)
        assert answer.status_code == 405, (path, answer.text)
        assert {m.upper() for m in operations} <= set(answer.headers["allow"].split(", ")), (template, answer.headers["allow"])


@pytest.mark.parametrize("path", ["/api/v1/deployments", "/api/v1/keys", "/api/v1/models", "/api/v1/batch-jobs", "/api/v1/uploads", "/api/v1/predictions", "/v2/models/iris/infer"])
@pytest.mark.parametrize(("body", "where"), [(b"{", "line 1 column"), (b'{"name": "x",}', "line 1 column"), (b'{\n  "name": "x"\n  "scopes": []\n}', "line 3 column"), (b"", "")])
def test_a_body_that_is_no_json_names_the_body_on_every_route(client: TestClient, keys: dict[str, str], path: str, body: bytes, where: str) -> None:
    answer = client.post(path, content=body, headers={**auth(keys["acme"]), "Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
    error = answer.json()
    assert error["field"] == "body" and error["code"] == "invalid_request", error
    if body:
        assert error["error"].startswith("body: Invalid JSON: ") and where in error["error"], error


def test_a_key_header_given_twice_is_a_400_whichever_copy_works(client: TestClient, keys: dict[str, str]) -> None:
    """Two Authorization (or x-api-key) headers: a proxy in front honouring the other copy would
    disagree about whose request it is, so neither is taken, in either order, on every route."""
    for name, value in (("authorization", "Bearer {}"), ("x-api-key", "{}")):
        for path in ("/api/v1/predictions", "/v2/models/iris/infer", "/api/v1/deployments"):
            for first, second in ((keys["acme"], "nope"), ("nope", keys["acme"]), (keys["acme"], keys["globex"])):
                headers = [(name, value.format(first)), (name, value.format(second)), ("content-type", "application/json")]
                r = client.request("GET" if path.endswith("deployments") else "POST", path, headers=headers, content=b"{}")
                assert r.status_code == 400 and r.json()["field"] == name and "given twice" in r.json()["error"], (path, r.text)
