from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient

from sluice.api.app import create_app

if TYPE_CHECKING:
    from sluice.wiring import Container


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
