"""Batch fixtures: a container with small chunks (so a few thousand rows make many) and acme's
demo deployments, the API over it, its handlers wired to it, and a home for the CLI. Iris
inputs in every format are written by `inputs`; a job run here is read back by `jobs`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sluice.settings import Settings
from sluice.wiring import Container
from tests.conftest import MODELS
from tests.support import cli_environment

if TYPE_CHECKING:
    from collections.abc import Iterator

    from fastapi.testclient import TestClient

    from sluice.domain import Principal


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        mode="local", home=tmp_path / "home", deployment_cache_ttl_s=0, batch_chunk_rows=700,
        batch_chunk_bytes=64 * 1024, batch_infer_rows=512, batch_concurrency=2,
    )  # fmt: skip


@pytest.fixture
def batch(settings: Settings, acme: Principal) -> Container:
    from sluice.demo import install_demo

    container = Container.from_settings(settings)
    install_demo(container, acme, MODELS)
    return container


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A home for the `sluice` commands this process runs, with small chunks."""
    with cli_environment(monkeypatch, tmp_path / "home", SLUICE_BATCH_CHUNK_BYTES=str(64 * 1024)) as home:
        yield home


@pytest.fixture
def wired(batch: Container) -> Iterator[Container]:
    """`batch` as the container the batch Lambda handlers use."""
    from sluice.handlers import batch as handlers

    saved = handlers._container
    handlers._container = batch
    yield batch
    handlers._container = saved


@pytest.fixture
def client(batch: Container) -> TestClient:
    """The API over `batch` (not the demo container the integration tests' `client` serves)."""
    from fastapi.testclient import TestClient

    from sluice.api.app import create_app

    return TestClient(create_app(batch))


@pytest.fixture
def keys(batch: Container) -> dict[str, str]:
    """acme's predict key and globex's admin key on `batch`."""
    _, acme = batch.keys.create("acme", ["predict"])
    _, globex = batch.keys.create("globex", ["admin", "predict"])
    return {"acme": acme, "globex": globex}
