"""A Triton server a tenant registers, answering metadata sluice cannot send to: refused when it
is registered, naming it. A model taking a BF16 input was taken, and then no request could reach
it (each a 400 blaming the caller's datatype, or, with numbers given, a 500)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sluice.api.app import create_app
from sluice.settings import Settings
from tests.integration.conftest import api_keys, auth
from tests.support import serving

if TYPE_CHECKING:
    from pathlib import Path

    from starlette.requests import Request

    from sluice.wiring import Container


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(mode="local", home=tmp_path / "home", registry="", store="", deployment_cache_ttl_s=0, triton_url_prefixes=["http://127.0.0.1:*"])


def _server(datatype: str) -> Starlette:
    meta = {"name": "m", "platform": "python", "inputs": [{"name": "x", "datatype": datatype, "shape": [-1, 4]}],
            "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 1]}]}  # fmt: skip
    config = {"max_batch_size": 8, "input": [{"name": "x", "data_type": f"TYPE_{datatype}", "dims": [4]}],
              "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [1]}]}  # fmt: skip

    async def answer(request: Request) -> Any:
        path = request.url.path
        return Response(b"") if path.endswith("/ready") else JSONResponse(config if path.endswith("/config") else meta)

    return Starlette(routes=[Route(p, answer) for p in ("/v2/models/m", "/v2/models/m/config", "/v2/models/m/ready")])


@pytest.mark.parametrize(("datatype", "status"), [("BF16", 422), ("FP32", 201)])
def test_a_model_taking_an_input_sluice_cannot_send_is_refused_when_registered(demo: Container, datatype: str, status: int) -> None:
    with serving(_server(datatype)) as url, TestClient(create_app(demo), raise_server_exceptions=False) as client:
        r = client.post("/api/v1/models/remote/versions", json={"triton_url": url, "model_name": "m"}, headers=auth(api_keys(demo)["acme"]))
    assert r.status_code == status, r.text
    if status == 422:
        assert r.json()["field"] == "model_name" and "'x' as BF16" in r.json()["error"]
