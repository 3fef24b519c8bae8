"""A `triton` version's model configuration through sluice's gRPC service: the real local
Triton's own JSON config, read into Triton's `ModelConfig` message."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from sluice.domain import Principal
from sluice.settings import Settings
from sluice.wiring import Container
from tests.integration.triton.conftest import allowing

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.endpoints.local_triton import LocalTriton

pytestmark = pytest.mark.triton
grpcclient = pytest.importorskip("tritonclient.grpc")
ACME = Principal("acme", frozenset({"admin", "predict"}), "test-acme")


def test_a_triton_versions_config_is_its_servers(triton_server: LocalTriton, tmp_path: Path) -> None:
    from tests.integration.grpc.conftest import run_server

    settings = Settings(mode="local", home=tmp_path / "home", deployment_cache_ttl_s=0, triton_url_prefixes=allowing(triton_server))
    container = Container.from_settings(settings)
    asyncio.run(container.models.register_triton(ACME, "mlp-t", triton_server.http_url, model_name="mlp"))
    container.deployments.create(ACME, "mlp-t", {"model": "mlp-t", "version": 1})
    _, key = container.keys.create("acme", ["predict"])
    with run_server(container) as url:
        client = grpcclient.InferenceServerClient(url)
        config = client.get_model_config("mlp-t", headers={"authorization": f"Bearer {key}"}).config
    # The server's config (python backend, max_batch_size 16), under the deployment's name.
    assert (config.name, config.backend, config.max_batch_size) == ("mlp-t", "python", 16)
    assert [(t.name, list(t.dims)) for t in config.input] == [("x", [8])]
    assert [t.name for t in config.output] == ["y"]
