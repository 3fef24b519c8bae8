"""Any Triton server, over its HTTP/REST protocol with `tritonclient`'s asyncio client.

A version names its server and model in `version.config`:
`{"url": "http://host:8000", "model_name": "...", "model_version"?: "1"}`. The model's
config, read from the server once, says how tensors travel: a tensor the model sees as
[batch] is declared `dims: [1]` plus a `reshape`, so it goes out as [batch, 1] and comes
back to the caller as [batch].
"""

from __future__ import annotations

import asyncio
import logging
import re
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.codecs.datatypes import v2_of_numpy
from sluice.domain.errors import (
    BackendError,
    BadRequest,
    DeadlineExceeded,
    InvalidInput,
    SluiceError,
    Unavailable,
)
from sluice.domain.origins import Allowed, check_origin, parse_origin
from sluice.domain.results import InferenceResult
from sluice.runtimes.triton_answers import ModelConfig, ModelMetadata, checked

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice.domain import ModelVersion
    from sluice.domain.signature import OutputRole, Signature

log = logging.getLogger(__name__)
_INPUT_NAME = re.compile(r"input '([^']+)'")


@dataclass(frozen=True, slots=True)
class TritonTarget:
    url: str  # host:port[/prefix], as tritonclient takes it
    ssl: bool
    model: str
    model_version: str

    @classmethod
    def of(cls, version: ModelVersion) -> TritonTarget:
        config = version.config or {}
        raw = config.get("url")
        if not isinstance(raw, str) or not raw:
            raise BadRequest("a triton version needs config.url (http://host:port)", field="config.url")
        origin = parse_origin(raw, field="config.url")
        model = check_model_name(str(config.get("model_name") or version.model))
        model_version = check_model_version(str(config.get("model_version", "") or ""))
        return cls(origin.netloc + origin.path, origin.scheme == "https", model, model_version)

    @property
    def origin_url(self) -> str:
        return f"{'https' if self.ssl else 'http'}://{self.url}"


_MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


def check_model_name(name: str, field: str = "model_name") -> str:
    """A model's name on a Triton server: it becomes a URL path segment, so one segment."""
    if not _MODEL_NAME.fullmatch(name) or name in (".", ".."):
        raise BadRequest("a Triton model name is 1-128 characters of letters, digits, '_', '.' or '-'", field=field)
    return name


def check_model_version(value: str, field: str = "model_version") -> str:
    if value and not (value.isascii() and value.isdigit() and len(value) <= 18):
        raise BadRequest("a Triton model version is a positive integer", field=field)
    return value


@dataclass(frozen=True, slots=True)
class _Tensor:
    datatype: str
    wire_dims: tuple[int, ...]  # `dims`: the shape on the wire, less the batch axis when batched
    model_dims: tuple[int, ...]  # `reshape.shape` when given: the shape the model sees


@dataclass(frozen=True, slots=True)
class ModelLayout:
    """What a model's config says about its tensors."""

    max_batch_size: int  # 0: the model takes no batch axis
    inputs: dict[str, _Tensor]
    outputs: dict[str, _Tensor]

    @property
    def batched(self) -> bool:
        return self.max_batch_size > 0

    @classmethod
    def from_config(cls, config: ModelConfig) -> ModelLayout:
        def tensors(entries: list[Any]) -> dict[str, _Tensor]:
            out = {}
            for entry in entries:
                dims = tuple(entry.dims)
                model = tuple(entry.reshape.shape) if entry.reshape is not None else dims
                datatype = entry.data_type.removeprefix("TYPE_")
                out[entry.name] = _Tensor("BYTES" if datatype == "STRING" else datatype, dims, model)
            return out

        return cls(config.max_batch_size, tensors(config.input), tensors(config.output))

    def _shape(self, tensor: _Tensor, *, wire: bool) -> tuple[int, ...]:
        dims = tensor.wire_dims if wire else tensor.model_dims
        return (-1, *dims) if self.batched else dims

    def to_wire(self, name: str, array: np.ndarray) -> np.ndarray:
        tensor = self.inputs.get(name)
        if tensor is None or tensor.wire_dims == tensor.model_dims or not self.batched:
            return array
        if array.ndim == len(tensor.model_dims) + 1:
            return array.reshape((array.shape[0], *tensor.wire_dims))
        return array

    def from_wire(self, name: str, array: np.ndarray) -> np.ndarray:
        tensor = self.outputs.get(name)
        if tensor is None or tensor.wire_dims == tensor.model_dims or not self.batched:
            return array
        if array.ndim == len(tensor.wire_dims) + 1:
            return array.reshape((array.shape[0], *tensor.model_dims))
        return array

    def model_shape(self, name: str, *, output: bool, model: str) -> tuple[int, ...]:
        tensor = (self.outputs if output else self.inputs).get(name)
        if tensor is None:
            kind = "output" if output else "input"
            raise BackendError(f"the Triton server's config for model '{model}' has no {kind} '{name}'", field="triton")
        return self._shape(tensor, wire=False)


def _role(name: str, known: Signature | None, n_outputs: int) -> OutputRole:
    spec = known.output(name) if known is not None else None
    if spec is not None and spec.role is not None:
        return spec.role
    lowered = name.lower()
    if "prob" in lowered:
        return "probabilities"
    if "label" in lowered and n_outputs > 1:
        return "label"
    return "value"


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
        # aiohttp sessions belong to the event loop that made them: one client per loop and URL.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, bool], Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._layouts: dict[tuple[str, str, str], ModelLayout] = {}
        self._targets: dict[tuple[Any, ...], TritonTarget] = {}
        self._http: Any = None  # tritonclient.http, once imported

    def _client(self, target: TritonTarget) -> Any:
        import tritonclient.http.aio as triton_aio  # heavy: imported on first use, not at cold start

        loop = asyncio.get_running_loop()
        clients = self._clients.setdefault(loop, {})
        key = (target.url, target.ssl)
        client = clients.get(key)
        if client is None:
            client = triton_aio.InferenceServerClient(
                target.url, ssl=target.ssl, conn_limit=self.connections, conn_timeout=self.timeout_s
            )
            _no_redirects(client)
            clients[key] = client
        return client

    def _target(self, version: ModelVersion) -> TritonTarget:
        config = version.config or {}
        key = (version.model, *(str(config.get(k, "")) for k in ("url", "model_name", "model_version")))
        target = self._targets.get(key)
        if target is None:
            target = TritonTarget.of(version)
            if self.allowed is not None:  # checked again at call time: settings may have changed
                check_origin(target.origin_url, self.allowed, field="config.url")
            self._targets[key] = target
        return target

    async def _call(self, target: TritonTarget, what: str, call: Any) -> Any:
        # The deadline is the client session's own total timeout (conn_timeout): one timer per
        # request, which aiohttp keeps anyway.
        try:
            return await call
        except SluiceError:
            raise
        except Exception as exc:
            raise _mapped(exc, target, what) from None

    async def _layout(self, target: TritonTarget) -> ModelLayout:
        key = (target.url, target.model, target.model_version)
        layout = self._layouts.get(key)
        if layout is None:
            client = self._client(target)
            config = await self._call(target, "config", client.get_model_config(target.model, target.model_version))
            if isinstance(config, dict) and isinstance(config.get("config"), dict):
                config = config["config"]
            layout = ModelLayout.from_config(checked(ModelConfig, config, what="model config", model=target.model))
            self._layouts[key] = layout
        return layout

    async def load(self, version: ModelVersion) -> None:
        target = self._target(version)
        await self._layout(target)
        client = self._client(target)
        ready = await self._call(target, "ready", client.is_model_ready(target.model, target.model_version))
        if not ready:
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
        rows = next(iter(inputs.values())).shape[0] if inputs and layout.batched else 0
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
        triton_http = self._http
        if triton_http is None:
            import tritonclient.http as triton_http  # heavy: imported on first use

            self._http = triton_http
        request = []
        for name, array in inputs.items():
            wire = layout.to_wire(name, array)
            try:
                datatype = v2_of_numpy(wire.dtype)
            except TypeError:
                raise InvalidInput(f"input '{name}' has dtype {wire.dtype}, which Triton cannot take", field=f"inputs.{name}") from None
            tensor = triton_http.InferInput(name, list(wire.shape), datatype)
            binary = wire.nbytes >= self.binary_threshold_bytes or datatype in ("FP16", "BF16")
            tensor.set_data_from_numpy(wire, binary_data=binary)
            request.append(tensor)
        requested = [triton_http.InferRequestedOutput(name, binary_data=True) for name in names]
        client = self._client(target)
        result = await self._call(
            target,
            "infer",
            client.infer(target.model, request, model_version=target.model_version, outputs=requested),
        )
        answer = {}
        for name in names:
            array = result.as_numpy(name)
            if array is None:
                raise BackendError(f"the Triton server answered without output '{name}'")
            answer[name] = layout.from_wire(name, _text(array))
        return answer

    async def unload(self, version: ModelVersion) -> None:
        target = self._target(version)
        self._layouts.pop((target.url, target.model, target.model_version), None)

    async def metadata(self, version: ModelVersion) -> Signature:
        from sluice.domain.signature import Signature, TensorSpec

        target = self._target(version)
        layout = await self._layout(target)
        client = self._client(target)
        answer = await self._call(target, "metadata", client.get_model_metadata(target.model, target.model_version))
        meta = checked(ModelMetadata, answer, what="model metadata", model=target.model)
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
        clients = self._clients.pop(asyncio.get_running_loop(), {})
        for client in clients.values():
            await client.close()


def _mapped(exc: Exception, target: TritonTarget, what: str) -> SluiceError:
    """Triton and transport failures as sluice errors; the raw text goes to the log only."""
    import aiohttp
    from tritonclient.utils import InferenceServerException

    kind = type(exc).__name__
    if isinstance(exc, InferenceServerException):
        status = str(exc.status() or "")
        message = str(exc.message() or "")
        log.warning("triton %s failed", what, extra={"model": target.model, "status": status, "error": message[:500]})
        if status == "400":
            found = _INPUT_NAME.search(message)
            if found:
                return InvalidInput(
                    f"the model server rejected input '{found.group(1)}' (its name, shape or datatype does not match the model)",
                    field=f"inputs.{found.group(1)}",
                )
            if "batch-size" in message or "batch size" in message:
                return InvalidInput("more rows than the model takes in one request (its max_batch_size)", field="inputs")
            return InvalidInput("the model server rejected the request's inputs", field="inputs")
        if status == "404":
            return BackendError(f"the Triton server has no model '{target.model}'")
        if status in ("429", "503"):
            return Unavailable("the Triton server is busy or not ready; retry shortly")
        return BackendError(f"the Triton server failed ({status or 'no status'})")
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return DeadlineExceeded(f"the Triton server did not answer within the deadline ({what})")
    if isinstance(exc, aiohttp.ClientConnectionError | ConnectionError | OSError):
        log.warning("triton %s: connection failed", what, extra={"model": target.model, "error_type": kind})
        return Unavailable("the Triton server is not reachable")
    log.warning("triton %s failed", what, extra={"model": target.model, "error_type": kind, "error": str(exc)[:500]})
    return BackendError(f"the Triton client failed ({kind})")


def _no_redirects(client: Any) -> None:
    """A Triton client that follows no redirect: the allowlist names the server it may reach,
    and a 3xx must not take it elsewhere (aiohttp follows them by default)."""
    import functools

    stub = getattr(client, "_stub", None)
    if stub is None:  # a client version without the attribute: nothing to narrow
        return
    stub.get = functools.partial(stub.get, allow_redirects=False)
    stub.post = functools.partial(stub.post, allow_redirects=False)
