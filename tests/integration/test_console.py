"""The web console's server side: its files under /console with strict headers, never the
edge's business, and the session route it signs in with. The pages themselves are driven in
a real browser by tests/e2e/test_console.py."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sluice.console as console
from tests.integration.conftest import auth

if TYPE_CHECKING:
    from pathlib import Path

    from fastapi.testclient import TestClient


@pytest.fixture
def built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for the built console (the real one needs `make console`)."""
    static = tmp_path / "static"
    (static / "assets").mkdir(parents=True)
    (static / "index.html").write_text('<!doctype html><script type="module" src="./assets/app-1.js"></script>')
    (static / "assets" / "app-1.js").write_text("console.log(1)")
    (static / "assets" / "app-1.css").write_text("body{}")
    (tmp_path / "secret.txt").write_text("outside")
    monkeypatch.setattr(console, "STATIC", static)
    return static


def test_the_page_and_its_assets_are_served_with_strict_headers(client: TestClient, built: Path) -> None:
    r = client.get("/console/")
    assert r.status_code == 200 and r.headers["content-type"] == "text/html; charset=utf-8"
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "style-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "default-src 'none'" in csp
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["referrer-policy"] == "no-referrer"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["cache-control"] == "no-cache"
    js = client.get("/console/assets/app-1.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert "immutable" in js.headers["cache-control"] and js.headers["x-frame-options"] == "DENY"
    assert client.get("/console/assets/app-1.css").headers["content-type"].startswith("text/css")
    assert client.head("/console/").content == b""


def test_the_bare_path_redirects_relative_to_keep_any_prefix(client: TestClient, built: Path) -> None:
    r = client.get("/console", follow_redirects=False)
    assert r.status_code == 308 and r.headers["location"] == "console/"


@pytest.mark.parametrize(
    "path",
    ["/console/../secret.txt", "/console/%2e%2e/secret.txt", "/console/assets/../../secret.txt", "/console/.hidden", "/console/nope.js", "/console//etc/passwd"],
)
def test_nothing_outside_the_built_folder_is_served(client: TestClient, built: Path, path: str) -> None:
    (built / ".hidden").write_text("x")
    r = client.get(path)
    assert r.status_code in (401, 404), (path, r.status_code)
    assert b"outside" not in r.content


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.text(st.characters(codec="utf-8"), min_size=0, max_size=6), min_size=1, max_size=3))
def test_any_path_under_the_console_is_a_file_of_it_or_a_404_with_its_headers(client: TestClient, built: Path, parts: list[str]) -> None:
    """Whatever a path holds once decoded (a NUL, a backslash, dots, characters no file name
    has): the console's own file, or a 404; never a server error, never without its headers."""
    from urllib.parse import quote

    r = client.get("/console/" + "/".join(quote(p, safe="") for p in parts))
    assert r.status_code in (200, 404), (parts, r.status_code, r.text[:200])
    assert r.headers["x-frame-options"] == "DENY" and "default-src 'none'" in r.headers["content-security-policy"]
    if r.status_code == 200:
        assert r.content in {f.read_bytes() for f in built.rglob("*") if f.is_file()}


def test_only_get_and_head_and_no_body_is_read(client: TestClient, built: Path) -> None:
    r = client.post("/console/", content=b"x" * 10_000_000)
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"


def test_not_built_says_how_to_build(client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console, "STATIC", tmp_path / "none")
    r = client.get("/console/")
    assert r.status_code == 404 and "make console" in r.json()["error"]


def test_other_paths_still_meet_the_edge(client: TestClient, built: Path) -> None:
    assert client.get("/consoles").status_code == 401
    assert client.get("/api/v1/deployments").status_code == 401


def test_the_session_route_names_the_keys_tenant_and_scopes(client: TestClient, keys: dict[str, str]) -> None:
    assert client.get("/api/v1/session").status_code == 401
    me = client.get("/api/v1/session", headers=auth(keys["acme_predict"])).json()
    assert me["tenant"] == "acme" and me["scopes"] == ["predict"] and keys["acme_predict"].split("_")[1] == me["key_id"]
    assert client.get("/api/v1/session", headers=auth(keys["globex"])).json()["tenant"] == "globex"
    assert "/api/v1/session" in client.get("/openapi.json").json()["paths"]


def test_the_console_stays_off_the_apis_import_path() -> None:
    """Building the app and answering the API imports nothing of the console."""
    code = "import sys; from sluice.api.app import create_app; create_app().prepare(); print('sluice.console' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_api_function_serves_the_console_behind_api_gateway(demo: object, built: Path) -> None:
    """API Gateway's public `GET /console/{proxy+}` (no authorizer context) reaches the files."""
    import base64
    import json

    from sluice.handlers import api
    from tests.conftest import EVENTS
    from tests.support import LambdaContext

    event = json.loads((EVENTS / "api_rest_list_deployments.json").read_text())
    del event["requestContext"]["authorizer"]
    for header in ("Authorization", "authorization", "x-api-key"):
        event["headers"].pop(header, None)
        event["multiValueHeaders"].pop(header, None)
    previous = api.app.state.container
    api.app.state.container = demo
    try:
        responses = {}
        for path in ("/console/", "/console/assets/app-1.js", "/console/nope", "/console/\ud800", "/console/a\x00.js"):
            e = {**event, "resource": "/console/{proxy+}", "path": path, "httpMethod": "GET"}
            e["requestContext"] = {**event["requestContext"], "path": f"/prod{path}", "resourcePath": "/console/{proxy+}"}
            responses[path] = api.handler(e, LambdaContext())
    finally:
        api.app.state.container = previous
    page = responses["/console/"]
    assert page["statusCode"] == 200, page
    headers = {k.lower(): v for k, v in (page.get("headers") or {}).items()}
    headers |= {k.lower(): v[0] for k, v in (page.get("multiValueHeaders") or {}).items()}
    assert "script-src 'self'" in headers["content-security-policy"] and headers["x-frame-options"] == "DENY"
    body = base64.b64decode(page["body"]).decode() if page.get("isBase64Encoded") else page["body"]
    assert "./assets/app-1.js" in body
    assert responses["/console/assets/app-1.js"]["statusCode"] == 200
    for path in ("/console/nope", "/console/\ud800", "/console/a\x00.js"):  # a path an event may carry, no file holds
        assert responses[path]["statusCode"] == 404, (path, responses[path])


def test_the_apps_lifespan_passes_by_the_console(demo: object) -> None:
    """A lifespan scope has no path: it goes on to the framework as before."""
    from fastapi.testclient import TestClient

    from sluice.api.app import create_app

    with TestClient(create_app(demo)) as client:  # type: ignore[arg-type]
        assert client.get("/healthz").status_code == 200
