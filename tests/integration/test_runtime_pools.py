"""The `triton` and `sagemaker` runtimes' connections to one server, sized by
`SLUICE_RUNTIME_CONNECTIONS`: twenty predictions at once all reach a slow backend at once with
the default, and never more than the setting when it is lower.

The backend is a real HTTP server on loopback that answers as Triton does (its v2 routes, and
the SageMaker port's /invocations) and holds each inference until as many are in flight as the
test expects, or until a bounded wait runs out: what it counts is how many the runtime had open
at once, whatever the machine's speed."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from sluice.domain import ModelVersion
from sluice.domain.signature import Signature, TensorSpec
from sluice.settings import Settings
from sluice.wiring import build_runtimes, build_store
from tests.support import free_port, serving

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from starlette.requests import Request

AT_ONCE = 20
SIGNATURE = Signature((TensorSpec("x", "FP32", (-1, 4)),), (TensorSpec("y", "FP32", (-1, 1)),))
METADATA = {"name": "m", "platform": "python", "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
            "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 1]}]}  # fmt: skip
CONFIG = {"max_batch_size": 64, "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [4]}],
          "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [1]}]}  # fmt: skip
ANSWER = {"model_name": "m", "outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 1], "data": [0.5]}]}


class SlowBackend:
    """Holds each inference until `release_at` are in flight (or `wait_s` has passed)."""

    def __init__(self, release_at: int, wait_s: float) -> None:
        self.release_at, self.wait_s = release_at, wait_s
        self.in_flight = self.most = 0
        self.port = free_port()
        self._enough: asyncio.Event | None = None

        async def infer(request: Request) -> JSONResponse:
            await request.body()
            if self._enough is None:
                self._enough = asyncio.Event()
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            if self.in_flight >= self.release_at:
                self._enough.set()
            try:
                await asyncio.wait_for(self._enough.wait(), self.wait_s)
            except TimeoutError:
                pass
            finally:
                self.in_flight -= 1
            return JSONResponse(ANSWER)

        async def metadata(request: Request) -> JSONResponse:
            return JSONResponse(METADATA)

        async def config(request: Request) -> JSONResponse:
            return JSONResponse(CONFIG)

        self.app = Starlette(routes=[
            Route("/v2/models/m", metadata), Route("/v2/models/m/config", config),
            Route("/v2/models/m/infer", infer, methods=["POST"]), Route("/invocations", infer, methods=["POST"]),
        ])  # fmt: skip

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> Iterator[SlowBackend]:
    release_at, wait_s = request.param
    server = SlowBackend(release_at, wait_s)
    with serving(server.app, port=server.port):
        yield server


def _version(runtime: str, config: dict[str, Any]) -> ModelVersion:
    return ModelVersion("acme", "m", 1, runtime, "file:///m", "0" * 64, 0, SIGNATURE, config=config)  # type: ignore[arg-type]


def _burst(tmp_path: Path, backend: SlowBackend, kind: str, monkeypatch: pytest.MonkeyPatch, **settings: Any) -> None:
    """AT_ONCE predictions at once through the runtime of `kind` that the wiring builds."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")  # unsigned calls to the local server, all the same
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    chosen = Settings(mode="local", home=tmp_path / "home", triton_url_prefixes=[backend.url], region="us-east-1",
                      sagemaker_endpoint_url=backend.url, **settings)  # fmt: skip
    runtime = build_runtimes(chosen, build_store(chosen))[kind]
    if kind == "triton":
        version = _version("triton", {"url": backend.url, "model_name": "m"})
    else:
        version = _version("sagemaker", {"endpoint_name": "m", "max_batch_size": 64})
    x = {"x": np.ones((1, 4), dtype=np.float32)}

    async def burst() -> None:
        try:
            answers = await asyncio.gather(*(runtime.infer(version, x) for _ in range(AT_ONCE)))
            assert all(a.outputs["y"].tolist() == [[0.5]] for a in answers)
        finally:
            closed = runtime.close()  # type: ignore[attr-defined]  # Triton's is a coroutine
            if asyncio.iscoroutine(closed):
                await closed

    asyncio.run(burst())


@pytest.mark.parametrize("kind", ["triton", "sagemaker"])
@pytest.mark.parametrize("backend", [(AT_ONCE, 60.0)], indirect=True)
def test_with_the_default_twenty_predictions_reach_one_slow_backend_at_once(
    tmp_path: Path, backend: SlowBackend, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert Settings(mode="local").predictions.runtime_connections >= AT_ONCE
    _burst(tmp_path, backend, kind, monkeypatch)
    assert backend.most == AT_ONCE


@pytest.mark.parametrize("kind", ["triton", "sagemaker"])
@pytest.mark.parametrize("backend", [(8, 0.5)], indirect=True)
def test_the_setting_bounds_the_connections_to_one_server(
    tmp_path: Path, backend: SlowBackend, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _burst(tmp_path, backend, kind, monkeypatch, runtime_connections=8)
    assert backend.most == 8


# A worker of `sluice serve` ready before its first request --------------------------------
# Twenty predictions at once, shortly after `sluice serve --workers 2` started, took twice the
# backend's time: the worker that had taken no request yet built its services (ONNX Runtime, the
# registry) and imported the Triton client on its first ones, holding up its share of the burst
# until the server had answered the rest.
# It imports it only where a version runs on Triton: the import is a tenth of a worker's start.
TRITON_PROBE = """
import sys
from starlette.testclient import TestClient
from sluice.cli.serve import served_app
from sluice.domain import Model, ModelVersion
from sluice.domain.signature import Signature, TensorSpec

def started():
    app = served_app()
    with TestClient(app):  # the worker's startup, no request yet
        print('aiohttp' in sys.modules)
    return app.state.container

registry = started().registry
registry.create_model(Model("acme", "iris"))
spec = TensorSpec("x", "FP32", (-1, 4))
registry.add_version(ModelVersion(
    tenant="acme", model="iris", version=0, runtime="triton", artifact_uri="", sha256="", size_bytes=0,
    signature=Signature(inputs=(spec,), outputs=(spec,)), config={"url": "http://127.0.0.1:8100", "model_name": "iris"},
))
started()
"""


def test_a_worker_imports_the_triton_client_as_it_starts_where_a_version_runs_on_triton(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    env = {**os.environ, "SLUICE_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO / "functions")}
    done = subprocess.run([sys.executable, "-c", TRITON_PROBE], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.stdout.split() == ["False", "True"], done.stderr[-2000:]


def test_a_worker_builds_its_services_before_it_takes_a_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from starlette.testclient import TestClient

    from sluice.cli.serve import served_app
    from tests.support import forget_settings

    monkeypatch.setenv("SLUICE_HOME", str(tmp_path / "home"))
    forget_settings()
    try:
        app = served_app()
        with TestClient(app):  # the worker's startup, no request yet
            assert app.state.container is not None
    finally:
        forget_settings()


def test_a_burst_that_finds_its_deployment_expired_reads_it_once(demo: Any) -> None:
    """Each of them reading it on the loop's few threads held the last of a burst back."""
    from sluice.domain import Principal
    from sluice.domain.requests import PredictionRequest, RowInputs

    reads: list[tuple[str, str]] = []
    real = demo.registry.get_deployment

    def counted(tenant: str, name: str) -> Any:
        reads.append((tenant, name))
        time.sleep(0.05)  # a read that takes a while: the others come while it runs
        return real(tenant, name)

    demo.registry.get_deployment = counted
    service = demo.predictions
    principal = Principal("acme", frozenset({"predict"}), "test")

    async def burst() -> list[Any]:
        request = PredictionRequest(deployment="iris", inputs=RowInputs(inputs=[[5.1, 3.5, 1.4, 0.2]]))
        return await asyncio.gather(*(service.predict(principal, request) for _ in range(AT_ONCE)))

    answers = asyncio.run(burst())
    assert len(answers) == AT_ONCE and reads == [("acme", "iris")]
