"""Triton's own extensions that tools call (model configuration, statistics, repository
index), answered for the tenant's deployments: a deployment is the Triton "model".

A `triton` version's config is its server's; an `onnx` or `sagemaker` version's is derived
from its signature as sluice's repository builder would write it. Statistics are sluice's
own counters for the deployment's current revision (a request answered or failed there),
in Triton's `model_stats` shape."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.codecs.triton import batchable, config_dims
from sluice.domain.errors import Unavailable
from sluice.domain.signature import Signature
from sluice.stats.histogram import PREFIX, bucket_value
from sluice.stats.recorder import LAST_REQUEST

if TYPE_CHECKING:
    from sluice.domain import ModelVersion, Principal
    from sluice.domain.results import Resolved
    from sluice.inference.predictions import PredictionService
    from sluice.runtimes import Runtime
    from sluice.services.deployments import DeploymentService

PLATFORMS = {"onnx": "onnxruntime_onnx", "triton": "triton", "sagemaker": "onnxruntime_onnx"}
DEFAULT_MAX_BATCH_SIZE = 64  # what sluice's Triton repository builder declares by default
NS_PER_MS = 1_000_000


def derived_config(name: str, version: ModelVersion, answers: Signature | None = None) -> dict[str, Any]:
    """Triton's JSON model config for a version sluice runs from its signature; `answers`: what
    the deployment answers where the version does not say (a sequence's last step), as its
    metadata says it (`inference.metadata.metadata_of`)."""
    signature = version.signature if answers is None else Signature(version.signature.inputs, answers.outputs, version.signature.metadata)
    batched = batchable(signature)
    declared = (version.config or {}).get("max_batch_size")
    max_batch = (declared if isinstance(declared, int) and declared > 0 else DEFAULT_MAX_BATCH_SIZE) if batched else 0

    def tensor(spec: Any) -> dict[str, Any]:
        dims, reshape = config_dims(spec.shape, batched=batched)
        out: dict[str, Any] = {
            "name": spec.name,
            "data_type": "TYPE_STRING" if spec.datatype == "BYTES" else f"TYPE_{spec.datatype}",
            "dims": list(dims),
        }
        if reshape is not None:
            out["reshape"] = {"shape": list(reshape)}
        return out

    return {
        "name": name,
        "platform": PLATFORMS.get(version.runtime, version.runtime),
        "backend": "onnxruntime",
        "version_policy": {"specific": {"versions": [version.version]}},
        "max_batch_size": max_batch,
        "input": [tensor(s) for s in signature.inputs],
        "output": [tensor(s) for s in signature.outputs],
        "parameters": {"model": {"string_value": version.model}},
    }


def _duration(count: float, ns: float) -> dict[str, int]:
    return {"count": int(count), "ns": int(ns)}


def model_stats(name: str, version: int, counters: dict[str, float]) -> dict[str, Any]:
    """One `model_stats` entry from a deployment's counters, as Triton counts: a request
    answered from the prediction cache is a success (with the request's time) and a
    `cache_hit` (with the lookup's), not an execution, nor inferences, nor `compute_infer`; a
    computed answer of a caching deployment is a `cache_miss` too, with the time spent looking
    it up and keeping it."""
    requests, errors = counters.get("requests", 0), counters.get("errors", 0)
    success = max(requests - errors, 0)
    hits = counters.get("cache_hits", 0)
    computed = max(success - hits, 0)
    latency_ms = counters.get("latency_ms_sum")
    if latency_ms is None:  # counters from before the sum was kept: the histogram's estimate
        latency_ms = sum(bucket_value(int(k[len(PREFIX) :])) * v for k, v in counters.items() if k.startswith(PREFIX))
    hit_ms = counters.get("cache_hit_ms_sum", 0)
    hit_request_ms = counters.get("cache_hit_request_ms_sum", hit_ms)
    zero = _duration(0, 0)
    return {
        "name": name,
        "version": str(version),
        "last_inference": int(counters.get(LAST_REQUEST, 0)),
        "inference_count": int(counters.get("rows", computed)),  # rows computed: Triton counts no cache hit here
        "execution_count": int(computed),
        "inference_stats": {
            "success": _duration(success, (latency_ms + hit_request_ms) * NS_PER_MS),
            "fail": _duration(errors, 0),
            "queue": zero,
            "compute_input": zero,
            "compute_infer": _duration(computed, latency_ms * NS_PER_MS),
            "compute_output": zero,
            "cache_hit": _duration(hits, hit_ms * NS_PER_MS),
            "cache_miss": _duration(counters.get("cache_misses", 0), counters.get("cache_miss_ms_sum", 0) * NS_PER_MS),
        },
        "batch_stats": [],
    }


def control_refused() -> Unavailable:
    """Explicit load / unload, refused as a Triton without explicit model control refuses it
    (503 / UNAVAILABLE, in its words): sluice loads a deployment's model on its first call."""
    return Unavailable(
        "explicit model load / unload is not allowed: sluice loads a deployment's model on its first call;"
        " deployments are managed under /api/v1/deployments",
        field="name",
    )


class TritonExtensions:
    def __init__(self, predictions: PredictionService, deployments: DeploymentService, runtimes: dict[str, Runtime]) -> None:
        self.predictions = predictions
        self.deployments = deployments
        self.runtimes = runtimes

    async def config(self, principal: Principal, name: str, version: int | None = None) -> dict[str, Any]:
        resolved = await self.predictions.resolve(principal, name, version=version)
        chosen = resolved.version
        if chosen.runtime == "triton" and resolved.answers is None:  # the server's model is what answers
            runtime: Any = self.runtimes.get("triton")
            if runtime is not None and hasattr(runtime, "model_config"):
                # The server's own config, under the name the client asked for.
                return {**await runtime.model_config(chosen), "name": name}
        return derived_config(name, chosen, resolved.answers)

    async def stats(self, principal: Principal, name: str | None = None, version: int | None = None) -> dict[str, Any]:
        principal.require("predict")
        if name is None:
            targets = [await self._resolved(principal, dep.name) for dep in self.deployments.list(principal)]
            resolved = [r for r in targets if r is not None]
        else:
            resolved = [await self.predictions.resolve(principal, name, version=version)]
        entries = []
        for r in resolved:
            counters = self.deployments.counters(principal, r.deployment)
            entries.append(model_stats(r.deployment.name, r.version.version, counters))
        return {"model_stats": entries}

    async def _resolved(self, principal: Principal, name: str) -> Resolved | None:
        from sluice.domain.errors import SluiceError

        try:
            return await self.predictions.resolve(principal, name)
        except SluiceError:  # a deployment whose version went away: no statistics to give
            return None

    async def index(self, principal: Principal, *, ready: bool = False) -> list[dict[str, Any]]:
        principal.require("predict")
        entries = []
        for dep in self.deployments.list(principal):
            resolved = await self._resolved(principal, dep.name)
            if resolved is None:
                entries.append({"name": dep.name, "version": "", "state": "UNAVAILABLE", "reason": "its model version cannot be resolved"})
            else:
                entries.append({"name": dep.name, "version": str(resolved.version.version), "state": "READY", "reason": ""})
        return [e for e in entries if e["state"] == "READY"] if ready else entries
