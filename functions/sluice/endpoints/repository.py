"""Triton model repositories: build one from an ONNX version, package it, check a user's own.

The layout is what SageMaker's Triton container unpacks from `model.tar.gz` into its model
folder, with no leading directory:

    <model>/config.pbtxt
    <model>/<version>/model.onnx          (+ model.py in the `local` flavour)

Two flavours share it. `sagemaker` is the real container's config (the onnxruntime backend,
GPU instances). `local` runs the same model.onnx with ONNX Runtime inside Triton's python
backend, which is what the CPU-only local Triton (`sluice triton up`) can serve. A user's own
archive is checked in `sluice.endpoints.repository_check`.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from sluice import owner_only
from sluice.codecs.datatypes import INT32_MAX, UINT64_MAX
from sluice.codecs.triton import batchable, config_dims
from sluice.domain.errors import BadRequest, InvalidInput
from sluice.endpoints.repository_check import SCALAR_ADVICE

if TYPE_CHECKING:
    from sluice.domain import ModelVersion
    from sluice.domain.signature import Signature, TensorSpec
    from sluice.storage import ArtifactStore

Flavour = Literal["sagemaker", "local"]
FLAVOURS: tuple[str, ...] = ("sagemaker", "local")
InstanceKind = Literal["KIND_GPU", "KIND_CPU"]
DEFAULT_MAX_BATCH_SIZE = 64
# The widest numbers Triton's model_config.proto holds: max_batch_size, instance_group's count
# and dynamic_batching's preferred_batch_size are int32, max_queue_delay_microseconds uint64.
# Triton cannot parse a config.pbtxt with a larger one, so sluice refuses it before writing.

_CONFIG_TYPES = {
    "BOOL": "TYPE_BOOL",
    "UINT8": "TYPE_UINT8",
    "UINT16": "TYPE_UINT16",
    "UINT32": "TYPE_UINT32",
    "UINT64": "TYPE_UINT64",
    "INT8": "TYPE_INT8",
    "INT16": "TYPE_INT16",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "FP16": "TYPE_FP16",
    "FP32": "TYPE_FP32",
    "FP64": "TYPE_FP64",
    "BYTES": "TYPE_STRING",
}


@dataclass(frozen=True, slots=True)
class TritonOptions:
    """What config.pbtxt says beyond the signature."""

    max_batch_size: int | None = None  # None: 64 when every tensor has a dynamic batch axis, else 0
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 100
    instance_kind: InstanceKind | None = None  # None: GPU for `sagemaker`, CPU for `local`
    instance_count: int = 1
    tensorrt_fp16: bool = False  # `sagemaker` only: ONNX Runtime's TensorRT provider at FP16

    def __post_init__(self) -> None:
        if self.max_batch_size is not None and not 0 <= self.max_batch_size <= INT32_MAX:
            raise InvalidInput(f"max_batch_size must be 0 (no batching) to {INT32_MAX}", field="max_batch_size")
        if not 0 <= self.max_queue_delay_us <= UINT64_MAX:
            raise InvalidInput(f"max_queue_delay_us must be 0 to {UINT64_MAX}", field="max_queue_delay_us")
        if not 1 <= self.instance_count <= INT32_MAX:
            raise InvalidInput(f"instance_count must be 1 to {INT32_MAX}", field="instance_count")
        if self.instance_kind not in (None, "KIND_GPU", "KIND_CPU"):
            raise InvalidInput("instance_kind must be KIND_GPU or KIND_CPU", field="instance_kind")
        if any(not 1 <= size <= INT32_MAX for size in self.preferred_batch_sizes):
            raise InvalidInput(f"preferred batch sizes must be 1 to {INT32_MAX}", field="preferred_batch_sizes")


@dataclass(frozen=True, slots=True)
class BuiltModel:
    name: str
    path: Path  # <root>/<name>
    version: int
    max_batch_size: int
    config: str = field(repr=False)


# ZipMap ------------------------------------------------------------------------------------
def refuse_unservable_outputs(onnx_bytes: bytes) -> None:
    """Triton serves tensors only: refuse sequence/map outputs (skl2onnx's ZipMap) by name."""
    import onnxruntime as ort  # heavy: packaging happens off the request path

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(onnx_bytes, owner_only.no_external_data(options), providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own untyped errors for bad graphs
        raise InvalidInput(f"not a loadable ONNX model: {type(exc).__name__}", field="artifact") from None
    for output in session.get_outputs():
        if not output.type.startswith("tensor("):
            raise InvalidInput(
                f"output '{output.name}' is a {output.type}, which Triton cannot serve; "
                "convert the model with zipmap=False (skl2onnx: options={id(model): {'zipmap': False}}) "
                "so probabilities come out as a [batch, classes] tensor",
                field=f"outputs.{output.name}",
            )


# config.pbtxt ------------------------------------------------------------------------------
def _quote(text: str) -> str:
    """A protobuf text-format string literal (octal escapes for anything outside printable ASCII)."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _ints(values: tuple[int, ...]) -> str:
    return "[ " + ", ".join(str(v) for v in values) + " ]" if values else "[ ]"


def _tensor_block(spec: TensorSpec, *, batched: bool, kind: Literal["input", "output"]) -> str:
    datatype = _CONFIG_TYPES.get(spec.datatype)
    if datatype is None:
        raise InvalidInput(f"tensor '{spec.name}' has datatype {spec.datatype}, which Triton cannot declare", field=spec.name)
    dims, reshape = config_dims(spec.shape, batched=batched)
    if not dims:
        # Triton requires `dims` on every tensor and refuses an empty reshape without batching,
        # so a scalar cannot be declared at all: `dims: [ ]` is a config it will not load.
        raise InvalidInput(
            f"{kind} '{spec.name}' is a scalar (shape []), which Triton cannot declare: {SCALAR_ADVICE}",
            field=f"{kind}s.{spec.name}",
        )
    lines = [
        "  {",
        f"    name: {_quote(spec.name)}",
        f"    data_type: {datatype}",
        f"    dims: {_ints(dims)}",
    ]
    if reshape is not None:
        lines.append(f"    reshape: {{ shape: {_ints(reshape)} }}")
    lines.append("  }")
    return "\n".join(lines)


def resolve_max_batch_size(signature: Signature, options: TritonOptions) -> int:
    can_batch = batchable(signature)
    if options.max_batch_size is None:
        return DEFAULT_MAX_BATCH_SIZE if can_batch else 0
    if options.max_batch_size > 0 and not can_batch:
        raise InvalidInput(
            "max_batch_size > 0 needs a dynamic first axis on every input and output; "
            "export the model with a dynamic batch dimension or use max_batch_size 0",
            field="max_batch_size",
        )
    return options.max_batch_size


def model_config(name: str, signature: Signature, *, flavour: Flavour, options: TritonOptions) -> str:
    """config.pbtxt text for one model; inputs and outputs come from the signature."""
    if flavour not in FLAVOURS:
        raise InvalidInput(f"flavour must be one of {', '.join(FLAVOURS)}", field="flavour")
    max_batch = resolve_max_batch_size(signature, options)
    batched = max_batch > 0
    kind = options.instance_kind or ("KIND_GPU" if flavour == "sagemaker" else "KIND_CPU")
    parts = [
        f"name: {_quote(name)}",
        'backend: "onnxruntime"' if flavour == "sagemaker" else 'backend: "python"',
        f"max_batch_size: {max_batch}",
    ]
    if flavour == "sagemaker":
        parts.append('default_model_filename: "model.onnx"')
    parts.append("input [\n" + ",\n".join(_tensor_block(s, batched=batched, kind="input") for s in signature.inputs) + "\n]")
    parts.append("output [\n" + ",\n".join(_tensor_block(s, batched=batched, kind="output") for s in signature.outputs) + "\n]")
    if batched:
        preferred = tuple(sorted(set(options.preferred_batch_sizes)))
        if preferred and preferred[-1] > max_batch:
            raise InvalidInput(
                f"preferred batch size {preferred[-1]} exceeds max_batch_size {max_batch}",
                field="preferred_batch_sizes",
            )
        lines = ["dynamic_batching {"]
        if preferred:
            lines.append(f"  preferred_batch_size: {_ints(preferred)}")
        lines.append(f"  max_queue_delay_microseconds: {options.max_queue_delay_us}")
        lines.append("}")
        parts.append("\n".join(lines))
    parts.append(f"instance_group [\n  {{\n    kind: {kind}\n    count: {options.instance_count}\n  }}\n]")
    if options.tensorrt_fp16 and flavour == "sagemaker":
        parts.append(
            "optimization {\n"
            "  execution_accelerators {\n"
            "    gpu_execution_accelerator [\n"
            "      {\n"
            '        name: "tensorrt"\n'
            '        parameters { key: "precision_mode" value: "FP16" }\n'
            "      }\n"
            "    ]\n"
            "  }\n"
            "}"
        )
    return "\n".join(parts) + "\n"


# the local flavour's python backend model --------------------------------------------------
PYTHON_MODEL = '''"""Written by sluice: runs model.onnx with ONNX Runtime inside Triton's python backend."""

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.batched = int(config.get("max_batch_size", 0)) > 0
        params = {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(params.get("intra_op_threads") or 1)
        options.inter_op_num_threads = 1
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.inputs = [spec["name"] for spec in config["input"]]
        self.strings = {spec["name"] for spec in config["input"] if spec["data_type"] == "TYPE_STRING"}
        self.outputs = [spec["name"] for spec in config["output"]]

    def _feeds(self, request):
        feeds = {}
        for name in self.inputs:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is None:
                continue
            array = tensor.as_numpy()
            if name in self.strings:
                array = np.array(
                    [v.decode("utf-8") if isinstance(v, bytes) else v for v in array.reshape(-1)],
                    dtype=object,
                ).reshape(array.shape)
            feeds[name] = array
        return feeds

    def _respond(self, values):
        tensors = [pb_utils.Tensor(name, np.asarray(v)) for name, v in zip(self.outputs, values)]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def _error(self, exc):
        kind = type(exc).__name__
        invalid = getattr(pb_utils.TritonError, "INVALID_ARG", None)
        if invalid is not None and kind == "InvalidArgument":
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"onnxruntime {kind}: {exc}", invalid))
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"onnxruntime {kind}: {exc}"))

    def _joint(self, feeds):
        # Dynamic batching hands over several requests: run them as one batch, split after.
        sizes = [len(next(iter(f.values()))) for f in feeds]
        joined = {n: np.concatenate([f[n] for f in feeds]) for n in feeds[0]}
        values = self.session.run(self.outputs, joined)
        responses, start = [], 0
        for size in sizes:
            responses.append(self._respond([v[start : start + size] for v in values]))
            start += size
        return responses

    def execute(self, requests):
        feeds = [self._feeds(request) for request in requests]
        if self.batched and len(feeds) > 1 and all(f.keys() == feeds[0].keys() and f for f in feeds):
            try:
                return self._joint(feeds)
            except Exception:
                pass  # one bad request must not fail the others: run them one by one
        responses = []
        for feed in feeds:
            try:
                responses.append(self._respond(self.session.run(self.outputs, feed)))
            except Exception as exc:
                responses.append(self._error(exc))
        return responses
'''


# build and package -------------------------------------------------------------------------
def triton_model_name(version: ModelVersion) -> str:
    return version.model


def build_model(
    root: Path,
    name: str,
    version_number: int,
    signature: Signature,
    onnx_bytes: bytes,
    *,
    flavour: Flavour,
    options: TritonOptions | None = None,
) -> BuiltModel:
    """Write `<root>/<name>/config.pbtxt` and `<root>/<name>/<version>/model.onnx` (+ model.py)."""
    options = options or TritonOptions()
    if version_number < 1:
        raise InvalidInput("Triton version folders start at 1", field="version")
    refuse_unservable_outputs(onnx_bytes)
    config = model_config(name, signature, flavour=flavour, options=options)
    model_dir = root / name
    version_dir = model_dir / str(version_number)
    owner_only.folder(version_dir)
    owner_only.write(model_dir / "config.pbtxt", config.encode())
    owner_only.write(version_dir / "model.onnx", onnx_bytes)
    if flavour == "local":
        owner_only.write(version_dir / "model.py", PYTHON_MODEL.encode())
    return BuiltModel(name, model_dir, version_number, resolve_max_batch_size(signature, options), config)


def build_repository(
    root: Path,
    version: ModelVersion,
    store: ArtifactStore,
    *,
    flavour: Flavour,
    options: TritonOptions | None = None,
    name: str | None = None,
) -> BuiltModel:
    """A repository folder for a registered ONNX version, read from the artifact store."""
    if version.runtime == "triton" or version.artifact_uri.endswith(".tar.gz"):
        raise InvalidInput("this version is already a Triton repository; use its artifact as is", field="version")
    if name is not None and (not name or name in (".", "..") or any(c in name for c in "/\\\0")):
        raise BadRequest(f"name is the Triton model's folder under the repository: one path segment, not {name!r}", field="name")
    data = store.get(version.artifact_uri, sha256=version.sha256)
    return build_model(
        root,
        name or triton_model_name(version),
        version.version,
        version.signature,
        data,
        flavour=flavour,
        options=options,
    )


def export_repository(
    version: ModelVersion,
    store: ArtifactStore,
    out: Path,
    *,
    flavour: Flavour,
    options: TritonOptions | None = None,
    name: str | None = None,
) -> Path:
    """Write a version's repository to a folder, or to `model.tar.gz` when `out` ends in .tar.gz."""
    out = Path(out).expanduser()
    if not out.name.endswith((".tar.gz", ".tgz")):
        build_repository(out, version, store, flavour=flavour, options=options, name=name)
        return out
    import tempfile

    owner_only.folder(out.parent)
    with tempfile.TemporaryDirectory(prefix="sluice-repository-") as tmp:
        build_repository(Path(tmp), version, store, flavour=flavour, options=options, name=name)
        partial = out.with_name(out.name + ".partial")
        write_tarball(Path(tmp), partial)
        partial.replace(out)
    return out


def _tar_info(name: str, *, directory: bool, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    info.mode = 0o755 if directory else 0o644
    info.size = size
    info.mtime = 0  # the same repository gives the same bytes
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_tarball(root: Path, dest: Path | io.BufferedIOBase) -> None:
    """`model.tar.gz` with the repository's model folders at its top, as SageMaker expects."""
    root = Path(root)
    entries = sorted(p for p in root.rglob("*") if "__pycache__" not in p.parts)
    if not any(p.name == "config.pbtxt" for p in entries):
        raise InvalidInput(f"{root} holds no <model>/config.pbtxt", field="repository")
    target = owner_only.open_file(dest) if isinstance(dest, (str, Path)) else dest
    try:
        # gzip's header stamped with no time and no name (tarfile's "w:gz" writes the clock's
        # second): the same repository gives the same bytes, whenever it is packed.
        with gzip.GzipFile(filename="", mode="wb", fileobj=target, compresslevel=6, mtime=0) as packed, tarfile.open(fileobj=packed, mode="w") as tar:
            for path in entries:
                arcname = path.relative_to(root).as_posix()
                if path.is_dir():
                    tar.addfile(_tar_info(arcname, directory=True))
                elif path.is_file():
                    with path.open("rb") as fh:
                        tar.addfile(_tar_info(arcname, directory=False, size=path.stat().st_size), fh)
    finally:
        if target is not dest:
            target.close()


def tarball_bytes(root: Path) -> bytes:
    buffer = io.BytesIO()
    write_tarball(root, buffer)
    return buffer.getvalue()
