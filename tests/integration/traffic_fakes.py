"""A runtime that behaves (it sleeps, answers or fails as each version's config says), for
timing tests that real models on two cores cannot make exact."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.domain import Model, ModelVersion
from sluice.domain.errors import Accepted, BackendError, Conflict
from sluice.domain.results import InferenceResult
from sluice.domain.signature import Signature, TensorSpec

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.runtimes.sagemaker import SageMakerRuntime
    from sluice.wiring import Container

INPUT = (TensorSpec("input", "FP32", (-1, 4)),)
REGRESSOR = Signature(INPUT, (TensorSpec("y", "FP32", (-1, 1), role="value"),))


class SleepyRuntime:
    """`config`: sleep_s (seconds before answering), fail (raise BackendError), queued (answer
    as an asynchronous endpoint does a request above its limit: Accepted), value (the answer)."""

    # A kind the domain names (the registry stores no other) that the local demo never uses:
    # the fake stands in for a remote endpoint, slow or failing.
    kind = "sagemaker"

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.running = 0  # calls asleep now
        self.most = 0  # and the most ever at once: calls that ran concurrently, whatever the clock

    async def load(self, version: ModelVersion) -> None:
        return None

    async def infer(self, version: ModelVersion, inputs: dict[str, np.ndarray], outputs: Any = None) -> InferenceResult:
        self.calls.append(version.ref)
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(version.config.get("sleep_s", 0.0))
        finally:
            self.running -= 1
        if version.config.get("fail"):
            raise BackendError(f"{version.ref} failed on purpose")
        if version.config.get("queued"):
            raise Accepted(f"{version.ref} queued the request", result_id="0" * 32, location=f"/api/v1/results/{'0' * 32}")
        rows = next(iter(inputs.values())).shape[0]
        return InferenceResult({"y": np.full((rows, 1), version.config.get("value", 0.0), dtype=np.float32)})

    async def unload(self, version: ModelVersion) -> None:
        return None

    async def metadata(self, version: ModelVersion) -> Signature:
        return version.signature


def add_fake(registry: Any, tenant: str, model: str, **config: Any) -> ModelVersion:
    with contextlib.suppress(Conflict):
        registry.create_model(Model(tenant, model))
    return registry.add_version(
        ModelVersion(tenant, model, 0, "sagemaker", "fake://", "0" * 64, 0, REGRESSOR, config=config)
    )


class Echo:
    """A Triton container's /invocations: 7.0 for every row of the request (v2 JSON)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def invoke_endpoint(self, **params: Any) -> dict[str, Any]:
        self.calls.append(params)
        header = json.loads(params["Body"][: int(params["ContentType"].rsplit("=", 1)[1])])
        rows = header["inputs"][0]["shape"][0]
        body = {"outputs": [{"name": "y", "datatype": "FP32", "shape": [rows, 1], "data": [7.0] * rows}]}
        return {"Body": io.BytesIO(json.dumps(body).encode()), "ContentType": "application/json"}


def async_echo(demo: Container, acme: Principal, url: str = "http://127.0.0.1:9") -> tuple[SageMakerRuntime, Echo]:
    """`demo`'s sagemaker runtime in front of an `Echo` (run as the local twin runs it), and
    acme's deployment `big` of an asynchronous endpoint at `url`."""
    from sluice.runtimes.sagemaker import SageMakerRuntime
    from sluice.storage.results import results_for

    container = Echo()
    runtime = SageMakerRuntime(container, endpoint_url=url, results=results_for(demo.store))
    demo.runtimes["sagemaker"] = runtime
    add_fake(demo.registry, "acme", "big", endpoint_name="big-ep", endpoint_url=url, invocation="async")
    demo.deployments.create(acme, "big", {"kind": "single", "model": "big", "version": 1})
    return runtime, container
