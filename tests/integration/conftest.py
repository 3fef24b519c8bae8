from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient

from sluice.api.app import create_app

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from sluice.wiring import Container


@pytest.fixture
def cli_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh home for `sluice` commands run in this process (`run_cli`), with the settings
    and container caches cleared before and after."""
    from sluice.settings import get_settings
    from sluice.wiring import get_container

    monkeypatch.setenv("SLUICE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SLUICE_DEPLOYMENT_CACHE_TTL_S", "0")
    get_settings.cache_clear()
    get_container.cache_clear()
    yield tmp_path / "home"
    get_settings.cache_clear()
    get_container.cache_clear()


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """One `sluice` command in this process: its exit code, stdout and stderr."""
    from sluice import cli

    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def client(demo: Container) -> TestClient:
    return TestClient(create_app(demo))


@pytest.fixture
def keys(demo: Container) -> dict[str, str]:
    """Plain API keys: acme admin, acme predict-only, globex admin."""
    _, acme_admin = demo.keys.create("acme", ["admin", "predict"])
    _, acme_predict = demo.keys.create("acme", ["predict"])
    _, globex_admin = demo.keys.create("globex", ["admin", "predict"])
    return {"acme": acme_admin, "acme_predict": acme_predict, "globex": globex_admin}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
