from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from fastapi.testclient import TestClient

from sluice.api.app import create_app
from sluice.domain import ModelVersion
from tests.support import cli_environment, single, split_policy

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from sluice.api.app import SluiceApp
    from sluice.domain import Principal
    from sluice.wiring import Container


@pytest.fixture
def cli_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh home for `sluice` commands run in this process (`run_cli`), with the settings
    and container caches cleared before and after."""
    with cli_environment(monkeypatch, tmp_path / "home", SLUICE_DEPLOYMENT_CACHE_TTL_S="0") as home:
        yield home


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """One `sluice` command in this process: its exit code, stdout and stderr."""
    import logging
    import sys

    from sluice import cli
    from sluice.observability.logger import get_logger

    # The process's logger is built once and keeps the stream it was built with (an earlier
    # test's captured and since closed one): a command's lines go to its stderr.
    for handler in get_logger()._logger.handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.stream = sys.stderr  # not setStream: it flushes the closed one
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# Apps shared from test to test, by what an app reads of its first container's settings and
# keeps (the request limit, the WebSocket connections' rate); see `app_for`.
_APPS: dict[tuple[int, str], SluiceApp] = {}


def app_for(container: Container) -> SluiceApp:
    """An app serving `container`, one per process for each request limit and WebSocket rate,
    its container swapped from test to test (as the Lambda handler's module-level app is): an
    app's edge, its hot routes and its OpenAPI document (~1.7 CPU-s) are built once. The
    WebSocket rate counts each connection apart (a random id); a container with a rate limit on
    keys gets an app of its own."""
    settings = container.settings
    if settings.admission.rate_limit:
        return create_app(container)
    key = (settings.limits.max_request_bytes, settings.websocket.websocket_rate_limit)
    app = _APPS.get(key)
    if app is None:
        app = _APPS[key] = create_app(container)
    app.state.container = container
    return app


@pytest.fixture
def client(demo: Container) -> Iterator[TestClient]:
    """The app on the demo container (`app_for`), its event loop started once for all the
    test's requests (a TestClient used outside `with` starts a thread and a loop per request),
    and its lifespan's shutdown run at the end as uvicorn would."""
    app = app_for(demo)
    try:
        with TestClient(app) as client:
            yield client
    finally:
        app.state.container = None


@pytest.fixture
def keys(demo: Container) -> dict[str, str]:
    return api_keys(demo)


def api_keys(container: Container) -> dict[str, str]:
    """Plain API keys: acme admin, acme predict-only, globex admin."""
    _, acme_admin = container.keys.create("acme", ["admin", "predict"])
    _, acme_predict = container.keys.create("acme", ["predict"])
    _, globex_admin = container.keys.create("globex", ["admin", "predict"])
    return {"acme": acme_admin, "acme_predict": acme_predict, "globex": globex_admin}


@pytest.fixture
def half_down(demo: Container, acme: Principal) -> Iterator[Container]:
    """`mixed`: a sticky split between iris on ONNX and a Triton-served copy whose server is
    down (a real Triton client, a closed port)."""
    from sluice.domain.origins import parse_allowlist

    closed = "http://127.0.0.1:9"
    triton = demo.runtimes["triton"]  # admits the closed port, as an operator's allowlist would
    triton.allowed = (*(triton.allowed or ()), *parse_allowlist([closed], field="triton_url_prefixes"))
    local = demo.registry.get_version("acme", "iris", 1)
    demo.registry.add_version(
        ModelVersion("acme", "iris", 0, "triton", "", "0" * 64, 0, local.signature, config={"url": closed, "model_name": "iris"})
    )
    demo.deployments.create(
        acme, "mixed", split_policy({"local": (50, single("iris", 1)), "remote": (50, single("iris", 2))}, routing_key="user")
    )
    yield demo
    from sluice.inference.loop import run

    run(demo.runtimes["triton"].close())  # the Triton client's sessions, on the loop that opened them


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


class Tenants:
    """The API of a container, called as acme or globex (admin keys from `api_keys`)."""

    def __init__(self, container: Container) -> None:
        self.container = container
        self.client = TestClient(create_app(container))
        keys = api_keys(container)
        self.acme, self.globex = auth(keys["acme"]), auth(keys["globex"])

    def save(self, name: str, policy: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
        """Create, or update when it exists: 200 or 201 when saved."""
        headers = headers or self.acme
        r = self.client.post("/api/v1/deployments", json={"name": name, "policy": policy}, headers=headers)
        return self.client.put(f"/api/v1/deployments/{name}", json={"policy": policy}, headers=headers) if r.status_code == 409 else r
