"""Outbound URLs a tenant gives: parsed and checked as scheme + host + port, never a string
prefix; no redirect followed; whatever a remote Triton answers becomes a 4xx or 502."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.responses import JSONResponse, RedirectResponse
from starlette.routing import Route

from sluice.api.app import create_app
from sluice.domain.errors import BadRequest, Forbidden
from sluice.domain.origins import check_origin, parse_allowlist
from sluice.settings import Settings
from tests.integration.conftest import auth
from tests.support import free_port, serving

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from sluice.wiring import Container

ALLOWED = parse_allowlist(["http://127.0.0.1:*", "http://localhost:*", "https://triton.internal:8001"])
ANY_LOOPBACK_PORT = ["http://127.0.0.1:*", "http://localhost:*"]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """The servers below take free ports: here the operator admits any loopback port (the
    default admits `sluice triton up`'s three, see the last tests)."""
    return Settings(mode="local", home=tmp_path / "home", deployment_cache_ttl_s=0, triton_url_prefixes=ANY_LOOPBACK_PORT)


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("http://127.0.0.1:1@127.0.0.2:18199", BadRequest),  # user info: the host is really 127.0.0.2
        ("http://127.0.0.2:8000", Forbidden),
        ("http://0x7f.1:8000", BadRequest),  # alternative spellings of 127.0.0.1 are not resolved
        ("http://2130706433:8000", BadRequest),
        ("http://0177.0.0.1:8000", BadRequest),
        ("http://127.0.0.1:99999", BadRequest),
        ("http://127.0.0.1:8000/?next=http://evil", BadRequest),
        ("http://localhost:8000/../admin", BadRequest),
        ("https://triton.internal", Forbidden),  # port 443 is not the allowed 8001
        ("ftp://127.0.0.1:21", BadRequest),
        ("http://[::1]:8000", Forbidden),
        ("http://localhost:0", BadRequest),  # port 0 is no port, not the scheme's default (80, admitted)
        ("http://localhost:00000", BadRequest),
        ("http:/localhost:9000", BadRequest),  # a scheme misspelled: not a host named http
    ],
)
def test_outbound_urls_that_try_to_bend_the_allowlist_are_refused(url: str, refused: type[Exception]) -> None:
    with pytest.raises(refused):
        check_origin(url, ALLOWED, field="triton_url")


def test_allowed_urls_come_out_in_one_spelling() -> None:
    assert check_origin("http://LOCALHOST:9000/", ALLOWED, field="u").url() == "http://localhost:9000"
    assert check_origin("127.0.0.1:8000/prefix", ALLOWED, field="u").url() == "http://127.0.0.1:8000/prefix"
    assert check_origin("https://triton.internal:8001", ALLOWED, field="u").url() == "https://triton.internal:8001"


# A real HTTP server that answers as a broken or hostile Triton would ------------------------
@dataclass
class _Served:
    port: int
    hits: list[str]  # the paths it was asked for


@contextmanager
def _server(routes: list[Route]) -> Iterator[_Served]:
    """A real HTTP server on loopback answering `routes`."""
    served = _Served(free_port(), [])
    app = Starlette(routes=routes)

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            served.hits.append(scope["path"])
        await app(scope, receive, send)

    with serving(recording, port=served.port):
        yield served


def _answers(metadata: Any, config: Any) -> list[Route]:
    async def meta(request: Any) -> JSONResponse:
        return JSONResponse(metadata)

    async def conf(request: Any) -> JSONResponse:
        return JSONResponse(config)

    return [Route("/v2/models/m", meta), Route("/v2/models/m/config", conf)]


GOOD_META = {"name": "m", "platform": "python", "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
             "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 1]}]}
GOOD_CONFIG = {"max_batch_size": 8, "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [4]}],
               "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [1]}]}


@pytest.fixture
def client(demo: Container) -> Iterator[TestClient]:
    with TestClient(create_app(demo)) as c:
        yield c


def _register(client: TestClient, key: str, url: str, model_name: str = "m") -> Any:
    return client.post("/api/v1/models/remote/versions", json={"triton_url": url, "model_name": model_name}, headers=auth(key))


@pytest.mark.parametrize(
    ("metadata", "config", "message"),
    [
        ({**GOOD_META, "inputs": [{"name": "z", "datatype": "FP32", "shape": [-1, 4]}]}, GOOD_CONFIG, "has no input 'z'"),
        ({**GOOD_META, "inputs": [{"name": "x"}]}, GOOD_CONFIG, "inputs.0.datatype"),
        ({**GOOD_META, "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1] * 64}]}, GOOD_CONFIG, "inputs.0.shape"),
        (GOOD_META, {**GOOD_CONFIG, "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [2**40]}]}, "input.0.dims.0"),
        (GOOD_META, {**GOOD_CONFIG, "max_batch_size": "lots"}, "max_batch_size"),
        (["not", "an", "object"], GOOD_CONFIG, "malformed"),
    ],
)
def test_whatever_a_remote_triton_answers_becomes_a_502_that_says_what(
    client: TestClient, keys: dict[str, str], metadata: Any, config: Any, message: str
) -> None:
    with _server(_answers(metadata, config)) as server:
        r = _register(client, keys["acme"], f"http://127.0.0.1:{server.port}")
    assert r.status_code == 502, r.text
    assert message in r.json()["error"]


def test_a_well_formed_remote_model_registers_with_its_url_in_one_spelling(client: TestClient, keys: dict[str, str]) -> None:
    with _server(_answers(GOOD_META, GOOD_CONFIG)) as server:
        r = _register(client, keys["acme"], f"http://LOCALHOST:{server.port}/")
    assert r.status_code == 201, r.text
    assert r.json()["signature"]["inputs"][0]["name"] == "x"


def test_a_redirect_is_not_followed(client: TestClient, keys: dict[str, str]) -> None:
    with _server(_answers(GOOD_META, GOOD_CONFIG)) as elsewhere:
        async def away(request: Any) -> RedirectResponse:
            return RedirectResponse(f"http://127.0.0.1:{elsewhere.port}{request.url.path}", status_code=307)

        with _server([Route("/{path:path}", away)]) as redirector:
            r = _register(client, keys["acme"], f"http://127.0.0.1:{redirector.port}")
        assert r.status_code in (502, 503), r.text
        assert elsewhere.hits == []  # the redirect target was never called


@pytest.mark.parametrize(
    ("url", "model_name", "status", "field"),
    [
        ("http://127.0.0.1:1@127.0.0.2:18199", "m", 400, "triton_url"),
        ("http://127.0.0.2:18199", "m", 403, "triton_url"),
        ("http://127.0.0.1:18199", "../../admin?x=", 400, "model_name"),
    ],
)
def test_bad_triton_urls_and_names_are_refused_before_any_call(
    client: TestClient, keys: dict[str, str], url: str, model_name: str, status: int, field: str
) -> None:
    r = _register(client, keys["acme"], url, model_name)
    assert r.status_code == status and r.json()["field"] == field


# The default allowlist: the local Triton's own ports, no other loopback service -------------
def test_the_default_allowlist_admits_the_local_tritons_ports_only(tmp_path: Path) -> None:
    allowed = Settings(mode="local", home=tmp_path / "home").sources.triton_allowlist
    for url in ("http://127.0.0.1:8100", "http://127.0.0.1:8101", "http://localhost:8102/prefix"):
        assert check_origin(url, allowed, field="triton_url").url() == url
    for url in ("http://127.0.0.1:8000", "http://127.0.0.1:8099", "http://127.0.0.1:8103", "http://127.0.0.1:6379", "http://127.0.0.1"):
        with pytest.raises(Forbidden):
            check_origin(url, allowed, field="triton_url")


def test_a_tenant_cannot_make_the_service_call_another_loopback_port_by_default(tmp_path: Path) -> None:
    from sluice.demo import install_demo
    from sluice.domain import Principal
    from sluice.wiring import Container

    container = Container.from_settings(Settings(mode="local", home=tmp_path / "home", deployment_cache_ttl_s=0))
    install_demo(container, Principal("acme", frozenset({"admin", "predict"}), "test-acme"))
    _, key = container.keys.create("acme", ["admin", "predict"])
    with _server(_answers(GOOD_META, GOOD_CONFIG)) as server, TestClient(create_app(container)) as client:
        r = _register(client, key, f"http://127.0.0.1:{server.port}")
    assert r.status_code == 403, r.text
    assert r.json()["field"] == "triton_url" and r.json()["code"] == "forbidden"
    assert server.hits == []  # refused before any call


@pytest.mark.parametrize("entry", ["http://127.0.0.1:8102-8100", "http://127.0.0.1:0-5", "http://127.0.0.1:1-70000"])
def test_a_port_range_is_low_to_high_within_tcp_ports(entry: str) -> None:
    with pytest.raises(BadRequest):
        parse_allowlist([entry], field="triton_url_prefixes")
    assert [r.ports for r in parse_allowlist(["http://127.0.0.1:8100-8102"])] == [range(8100, 8103)]


def test_a_triton_url_is_checked_against_the_allowlist_in_force_at_each_call() -> None:
    """A server admitted at one call and no longer on the allowlist at the next is refused
    there, before anything is sent (the check's answer is kept only while the URL and the
    allowlist are the ones it was given)."""
    import asyncio

    from sluice.domain import ModelVersion
    from sluice.domain.signature import Signature
    from sluice.runtimes.triton import TritonRuntime

    with _server(_answers(GOOD_META, GOOD_CONFIG)) as server:
        version = ModelVersion("acme", "remote", 1, "triton", "", "", 0, Signature((), ()), config={"url": f"http://127.0.0.1:{server.port}", "model_name": "m"})
        runtime = TritonRuntime(timeout_s=5, allowed=parse_allowlist(["http://127.0.0.1:*"]))

        async def go() -> None:
            await runtime.model_config(version)
            await runtime.model_config(version)  # the same allowlist: admitted again
            runtime.allowed = parse_allowlist([f"http://127.0.0.1:{server.port + 1}"])  # the server no longer admitted
            hits = len(server.hits)
            with pytest.raises(Forbidden) as refused:
                await runtime.model_config(version)
            assert refused.value.field == "config.url" and len(server.hits) == hits
            runtime.allowed = parse_allowlist([f"http://127.0.0.1:{server.port}"])  # and admitted once more
            await runtime.model_config(version)
            await runtime.close()

        asyncio.run(go())
