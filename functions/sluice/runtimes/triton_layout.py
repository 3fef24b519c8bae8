"""What a triton version names (server, protocol, model) and what its model's config says
about tensors: shared by the HTTP and the gRPC transports of `sluice.runtimes.triton`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import BackendError, BadRequest
from sluice.domain.origins import parse_origin
from sluice.domain.values import decimal, parse_version
from sluice.runtimes.base import required_text

if TYPE_CHECKING:
    import numpy as np

    from sluice.domain import ModelVersion
    from sluice.runtimes.triton_answers import ModelConfig

PROTOCOLS = ("http", "grpc")


def check_protocol(value: Any, field: str = "protocol") -> str:
    protocol = value or "http"
    if protocol not in PROTOCOLS:
        raise BadRequest("a Triton protocol is 'http' or 'grpc'", field=field)
    return str(protocol)


@dataclass(frozen=True, slots=True)
class TritonTarget:
    url: str  # host:port[/prefix], as tritonclient takes it (gRPC: host:port)
    ssl: bool
    model: str
    model_version: str
    protocol: str = "http"

    @classmethod
    def of(cls, version: ModelVersion) -> TritonTarget:
        config = version.config or {}
        raw = required_text(config, "url", needs="a triton version needs config.url (http://host:port)")
        origin = parse_origin(raw, field="config.url")
        model = check_model_name(str(config.get("model_name") or version.model))
        model_version = check_model_version(str(config.get("model_version", "") or ""))
        protocol = check_protocol(config.get("protocol"), field="config.protocol")
        if protocol == "grpc" and origin.path not in ("", "/"):
            raise BadRequest("a gRPC Triton address is scheme://host:port, without a path", field="config.url")
        url = origin.netloc if protocol == "grpc" else origin.netloc + origin.path
        return cls(url, origin.scheme == "https", model, model_version, protocol)

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
    """A version on a Triton server (int64 there too), as every door reads one; empty: its latest."""
    if value:
        parse_version(value, field=field)
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
        return self._reshaped(self.inputs.get(name), array, to_wire=True)

    def from_wire(self, name: str, array: np.ndarray) -> np.ndarray:
        return self._reshaped(self.outputs.get(name), array, to_wire=False)

    def _reshaped(self, tensor: _Tensor | None, array: np.ndarray, *, to_wire: bool) -> np.ndarray:
        """A tensor in the model's dims as the wire's (a config's `reshape`), or back: a batch
        of rows when the model batches, the whole tensor when it does not. Triton's inference
        API takes and gives `dims`, whatever the model sees, with or without batching."""
        if tensor is None or tensor.wire_dims == tensor.model_dims:
            return array
        have, want = (tensor.model_dims, tensor.wire_dims) if to_wire else (tensor.wire_dims, tensor.model_dims)
        if self.batched and array.ndim == len(have) + 1:
            shape = (array.shape[0], *want)
        elif not self.batched and array.ndim == len(have):
            shape = want
        else:
            return array
        try:
            return array.reshape(shape)
        except ValueError:  # not the declared size (or dims with two variable axes): Triton says why
            return array

    def model_shape(self, name: str, *, output: bool, model: str) -> tuple[int, ...]:
        tensor = (self.outputs if output else self.inputs).get(name)
        if tensor is None:
            kind = "output" if output else "input"
            raise BackendError(f"the Triton server's config for model '{model}' has no {kind} '{name}'", field="triton")
        return self._shape(tensor, wire=False)


def _ints(value: Any) -> Any:
    # protobuf's JSON writes int64 as strings: dims "8" are the number 8.
    if isinstance(value, list):
        return [int(v) if isinstance(v, str) and decimal(v.removeprefix("-")) is not None else v for v in value]
    return value


def json_config(answer: Any) -> Any:
    """A model config as Triton's HTTP API writes it, from either protocol's answer
    (gRPC wraps it in `{"config": ...}` and writes int64 numbers as strings)."""
    if isinstance(answer, dict) and isinstance(answer.get("config"), dict):
        answer = answer["config"]
    if not isinstance(answer, dict):
        return answer
    out = dict(answer)
    if isinstance(out.get("max_batch_size"), str) and (size := decimal(out["max_batch_size"])) is not None:
        out["max_batch_size"] = size
    for side in ("input", "output"):
        if isinstance(out.get(side), list):
            out[side] = [_tensor_ints(t) for t in out[side]]
    return out


def _tensor_ints(tensor: Any) -> Any:
    if not isinstance(tensor, dict):
        return tensor
    fixed = {**tensor, "dims": _ints(tensor.get("dims", []))}
    if isinstance(tensor.get("reshape"), dict):
        fixed["reshape"] = {**tensor["reshape"], "shape": _ints(tensor["reshape"].get("shape", []))}
    return fixed


def json_metadata(answer: Any) -> Any:
    """Model metadata with int64 shapes as numbers (gRPC's JSON writes them as strings)."""
    if not isinstance(answer, dict):
        return answer
    out = dict(answer)
    for side in ("inputs", "outputs"):
        if isinstance(out.get(side), list):
            out[side] = [{**t, "shape": _ints(t.get("shape", []))} if isinstance(t, dict) else t for t in out[side]]
    return out
