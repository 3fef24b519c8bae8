"""Any Triton server, over its HTTP/REST protocol (binary tensors over aiohttp,
`sluice.runtimes.triton_http`) or its gRPC protocol (`tritonclient.grpc.aio`,
`sluice.runtimes.triton_grpc`).

A version names its server and model in `version.config`:
`{"url": "http://host:8000", "model_name": "...", "model_version"?: "1", "protocol"?: "grpc"}`
(gRPC: `http://host:8001` is an insecure channel, `https://` a TLS one). The model's config,
read from the server once, says how tensors travel: a tensor the model sees as [batch] is
declared `dims: [1]` plus a `reshape`, so it goes out as [batch, 1] and comes back to the
caller as [batch].
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.domain.errors import (
    BackendError,
    DeadlineExceeded,
    InvalidInput,
    SluiceError,
    Unavailable,
)
from sluice.domain.origins import Allowed, check_origin
from sluice.domain.results import InferenceResult, rows_of
from sluice.domain.signature import role_by_name
from sluice.runtimes.triton_answers import ModelConfig, ModelMetadata, checked, rejected_input
from sluice.runtimes.triton_http import HttpTransport
from sluice.runtimes.triton_layout import (
    ModelLayout,
    TritonTarget,
    check_model_name,
    check_model_version,
    check_protocol,
    json_config,
    json_metadata,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice.domain import ModelVersion
    from sluice.domain.signature import OutputRole, Signature

__all__ = ["ModelLayout", "TritonRuntime", "TritonTarget", "check_model_name", "check_model_version", "check_protocol"]

log = logging.getLogger(__name__)


def _role(name: str, known: Signature | None, n_outputs: int) -> OutputRole:
    spec = known.output(name) if known is not None else None
    if spec is not None and spec.role is not None:
        return spec.role
    return role_by_name(name, n_outputs)


def _text(array: np.ndarray) -> np.ndarray:
    if array.dtype != object:
        return array
    flat = [v.decode("utf-8", errors="replace") if isinstance(v, bytes) else v for v in array.reshape(-1)]
    return np.array(flat, dtype=object).reshape(array.shape)


class TritonRuntime:
    """Runs versions on a Triton server named in their config."""

    kind = "triton"

    def __init__(
        self,
        *,
        timeout_s: float = 25.0,
        binary_threshold_bytes: int = 0,
        connections: int = 64,
        allowed: tuple[Allowed, ...] | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.allowed = allowed  # the servers it may call (None: any, for tools that were given one)
        self.binary_threshold_bytes = binary_threshold_bytes
        self.connections = connections
        self._layouts: dict[tuple[str, str, str, str], ModelLayout] = {}
        self._targets: dict[tuple[Any, ...], tuple[TritonTarget, Any]] = {}  # and the allowlist it passed
        self._transports: dict[str, Any] = {"http": HttpTransport(self)}

    def _transport(self, target: TritonTarget) -> Any:
        transport = self._transports.get(target.protocol)
        if transport is None:
            from sluice.runtimes.triton_grpc import GrpcTransport

            transport = self._transports[target.protocol] = GrpcTransport(self)
        return transport

    def _target(self, version: ModelVersion) -> TritonTarget:
        config = version.config or {}
        get = config.get
        key = (version.model, str(get("url", "")), str(get("model_name", "")), str(get("model_version", "")), str(get("protocol", "")))
        kept = self._targets.get(key)
        allowed = self.allowed
        if kept is not None and kept[1] is allowed:  # admitted by the allowlist in force now
            return kept[0]
        target = kept[0] if kept is not None else TritonTarget.of(version)
        if allowed is not None:  # checked again at every call whose allowlist is not the one it passed
            check_origin(target.origin_url, allowed, field="config.url")
        self._targets[key] = (target, allowed)
        return target

    async def _call(self, target: TritonTarget, what: str, call: Any) -> Any:
        try:
            return await call
        except SluiceError:
            raise
        except Exception as exc:
            raise _mapped(exc, self._transport(target), target, what) from None

    async def model_config(self, version: ModelVersion) -> dict[str, Any]:
        """The model's config as its server's HTTP API writes it (either protocol)."""
        target = self._target(version)
        answer = await self._call(target, "config", self._transport(target).config(target))
        config = json_config(answer)
        checked(ModelConfig, config, what="model config", model=target.model)
        return config

    async def _layout(self, target: TritonTarget) -> ModelLayout:
        key = (target.protocol, target.url, target.model, target.model_version)
        layout = self._layouts.get(key)
        if layout is None:
            config = json_config(await self._call(target, "config", self._transport(target).config(target)))
            layout = ModelLayout.from_config(checked(ModelConfig, config, what="model config", model=target.model))
            self._layouts[key] = layout
        return layout

    async def load(self, version: ModelVersion) -> None:
        target = self._target(version)
        await self._layout(target)
        if not await self._call(target, "ready", self._transport(target).ready(target)):
            raise Unavailable(f"model '{target.model}' is not ready on its Triton server")

    async def infer(
        self,
        version: ModelVersion,
        inputs: dict[str, np.ndarray],
        outputs: Sequence[str] | None = None,
    ) -> InferenceResult:
        target = self._target(version)
        layout = await self._layout(target)
        names = list(outputs) if outputs else list(layout.outputs)
        rows = rows_of(inputs) if layout.batched else 0
        limit = layout.max_batch_size
        if rows <= limit or not layout.batched:
            return InferenceResult(await self._infer_once(target, layout, inputs, names))
        # More rows than the model batches: send slices of max_batch_size, concurrently.
        parts = await asyncio.gather(
            *(
                self._infer_once(target, layout, {k: v[i : i + limit] for k, v in inputs.items()}, names)
                for i in range(0, rows, limit)
            )
        )
        return InferenceResult({name: np.concatenate([p[name] for p in parts]) for name in names})

    async def _infer_once(
        self, target: TritonTarget, layout: ModelLayout, inputs: dict[str, np.ndarray], names: list[str]
    ) -> dict[str, np.ndarray]:
        wire = {name: layout.to_wire(name, array) for name, array in inputs.items()}
        result = await self._call(target, "infer", self._transport(target).infer(target, wire, names))
        answer = {}
        for name in names:
            array = result.as_numpy(name)
            if array is None:
                raise BackendError(f"the Triton server answered without output '{name}'")
            answer[name] = layout.from_wire(name, _text(array) if array.dtype == object else array)
        return answer

    async def unload(self, version: ModelVersion) -> None:
        target = self._target(version)
        self._layouts.pop((target.protocol, target.url, target.model, target.model_version), None)

    async def metadata(self, version: ModelVersion) -> Signature:
        from sluice.domain.signature import Signature, TensorSpec

        target = self._target(version)
        layout = await self._layout(target)
        answer = await self._call(target, "metadata", self._transport(target).metadata(target))
        meta = checked(ModelMetadata, json_metadata(answer), what="model metadata", model=target.model)
        known = version.signature
        inputs = tuple(
            TensorSpec(
                m.name,
                m.datatype,
                layout.model_shape(m.name, output=False, model=target.model),
                feature_names=(known.input(m.name).feature_names if known and known.input(m.name) else None),
            )
            for m in meta.inputs
        )
        outputs = tuple(
            TensorSpec(
                m.name,
                m.datatype,
                layout.model_shape(m.name, output=True, model=target.model),
                role=_role(m.name, known, len(meta.outputs)),
            )
            for m in meta.outputs
        )
        return Signature(inputs, outputs, metadata={"platform": meta.platform[:256]})

    async def close(self) -> None:
        """Close this event loop's connections."""
        for transport in self._transports.values():
            await transport.close()


def _mapped(exc: Exception, transport: Any, target: TritonTarget, what: str) -> SluiceError:
    """Triton and transport failures as sluice errors, the same for both protocols (a gRPC
    status is first read as the HTTP status Triton gives for it); the raw text goes to the
    log only."""
    kind = type(exc).__name__
    answered = transport.failure(exc)
    if answered is not None:
        status, message = answered
        log.warning("triton %s failed", what, extra={"model": target.model, "status": status, "error": message[:500]})
        if status == "400":
            return rejected_input(message) or InvalidInput("the model server rejected the request's inputs", field="inputs")
        if status == "404":
            return BackendError(f"the Triton server has no model '{target.model}'")
        if status in ("429", "503"):
            return Unavailable("the Triton server is busy or not ready; retry shortly")
        if status == "unreachable":
            return Unavailable("the Triton server is not reachable")
        if status == "504":
            return DeadlineExceeded(f"the Triton server did not answer within the deadline ({what})")
        return BackendError(f"the Triton server failed ({status or 'no status'})")
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return DeadlineExceeded(f"the Triton server did not answer within the deadline ({what})")
    if transport.unreachable(exc):
        log.warning("triton %s: connection failed", what, extra={"model": target.model, "error_type": kind})
        return Unavailable("the Triton server is not reachable")
    log.warning("triton %s failed", what, extra={"model": target.model, "error_type": kind, "error": str(exc)[:500]})
    return BackendError(f"the Triton client failed ({kind})")
