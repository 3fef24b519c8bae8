"""What a `sagemaker` version's config says about the endpoint that serves it: its name, the
model, variant or inference component to invoke, how rows batch, and how it takes requests
(synchronous, asynchronous, or both above the synchronous limit)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sluice.codecs.triton import batchable
from sluice.domain.errors import BadRequest
from sluice.runtimes.base import required_text

if TYPE_CHECKING:
    from sluice.domain import ModelVersion


@dataclass(frozen=True, slots=True)
class EndpointTarget:
    endpoint_name: str
    target_model: str | None
    variant: str | None
    batched: bool
    max_batch_size: int | None  # known when sluice built the repository: requests split to fit
    endpoint_url: str | None = None  # a local twin's SageMaker port; None: the runtime's own
    asynchronous: bool = False  # the endpoint is asynchronous: every request goes through S3
    async_endpoint: str | None = None  # where requests above the synchronous limit go
    inference_component: str | None = None  # InvokeEndpoint's InferenceComponentName
    fallback: bool = False  # in process (the version's ONNX artifact) while the component has no copy

    @property
    def takes_async(self) -> bool:
        return self.asynchronous or self.async_endpoint is not None

    @classmethod
    def of(cls, version: ModelVersion) -> EndpointTarget:
        config = version.config or {}
        name = required_text(config, "endpoint_name", needs="a sagemaker version needs config.endpoint_name")
        max_batch = config.get("max_batch_size")
        batched = batchable(version.signature) if max_batch is None else int(max_batch) > 0
        limit = int(max_batch) if max_batch is not None and int(max_batch) > 0 else None
        url = config.get("endpoint_url") or None
        invocation = config.get("invocation", "sync")
        if invocation not in ("sync", "async"):
            raise BadRequest("config.invocation is sync or async", field="config.invocation")
        async_endpoint = config.get("async_endpoint_name") or None
        if async_endpoint is not None and not isinstance(async_endpoint, str):
            raise BadRequest("config.async_endpoint_name must be an endpoint name", field="config.async_endpoint_name")
        fallback = config.get("fallback")
        if fallback not in (None, "in_process"):
            raise BadRequest("config.fallback is in_process (or left out)", field="config.fallback")
        return cls(
            name, config.get("target_model") or None, config.get("variant") or None, batched, limit, url,
            asynchronous=invocation == "async", async_endpoint=async_endpoint,
            inference_component=config.get("inference_component") or None, fallback=fallback == "in_process",
        )  # fmt: skip
