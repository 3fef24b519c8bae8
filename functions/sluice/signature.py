"""What a model version takes and gives: tensor names, v2 datatypes and shapes.

Read from the ONNX graph when a version is pushed, stored with the version, and used to
validate every request before it reaches a runtime.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from sluice.codecs.datatypes import ONNX_TO_V2
from sluice.errors import Unprocessable

DYNAMIC = -1
OutputRole = Literal["label", "probabilities", "value"]


@dataclass(frozen=True, slots=True)
class TensorSpec:
    name: str
    datatype: str
    shape: tuple[int, ...]  # -1 marks a dynamic dimension
    role: OutputRole | None = None  # outputs only: how plain JSON presents it
    feature_names: tuple[str, ...] | None = None  # inputs only: column names of the last axis

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["shape"] = list(self.shape)
        if self.feature_names is not None:
            data["feature_names"] = list(self.feature_names)
        return {k: v for k, v in data.items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TensorSpec:
        names = data.get("feature_names")
        return cls(
            name=data["name"],
            datatype=data["datatype"],
            shape=tuple(int(d) for d in data["shape"]),
            role=data.get("role"),
            feature_names=tuple(names) if names is not None else None,
        )


@dataclass(frozen=True, slots=True)
class Signature:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    metadata: dict[str, str] = field(default_factory=dict)

    def input(self, name: str) -> TensorSpec | None:
        return next((spec for spec in self.inputs if spec.name == name), None)

    def output(self, name: str) -> TensorSpec | None:
        return next((spec for spec in self.outputs if spec.name == name), None)

    def output_with_role(self, role: OutputRole) -> TensorSpec | None:
        return next((spec for spec in self.outputs if spec.role == role), None)

    @property
    def is_classifier(self) -> bool:
        return self.output_with_role("label") is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "inputs": [spec.to_dict() for spec in self.inputs],
            "outputs": [spec.to_dict() for spec in self.outputs],
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Signature:
        return cls(
            inputs=tuple(TensorSpec.from_dict(d) for d in data["inputs"]),
            outputs=tuple(TensorSpec.from_dict(d) for d in data["outputs"]),
            metadata=dict(data.get("metadata") or {}),
        )


def _dims(shape: list[Any] | None) -> tuple[int, ...]:
    # ORT reports symbolic dims as strings and unknown ones as None.
    return tuple(d if isinstance(d, int) and d >= 0 else DYNAMIC for d in (shape or []))


def _element_type(onnx_type: str) -> tuple[str, bool]:
    """`tensor(float)` -> ("FP32", False); `seq(map(int64,tensor(float)))` -> ("FP32", True)."""
    if onnx_type.startswith("seq(map("):
        return "FP32", True
    if onnx_type.startswith("tensor(") and onnx_type.endswith(")"):
        element = onnx_type[len("tensor(") : -1]
        if element in ONNX_TO_V2:
            return ONNX_TO_V2[element], False
    raise Unprocessable(f"unsupported ONNX type {onnx_type!r}", field="artifact")


def _output_role(name: str, datatype: str, zipmap: bool, n_outputs: int) -> OutputRole:
    lowered = name.lower()
    if zipmap or "prob" in lowered:
        return "probabilities"
    if "label" in lowered and n_outputs > 1:
        return "label"
    return "value"


def signature_from_session(session: Any, feature_names: list[str] | None = None) -> Signature:
    """Build a signature from an `onnxruntime.InferenceSession`.

    Feature names come from the argument, else from the model's `feature_names` metadata
    property (comma separated), and apply to a single 2-D input.
    """
    meta = dict(session.get_modelmeta().custom_metadata_map)
    if feature_names is None and meta.get("feature_names"):
        feature_names = [n.strip() for n in meta["feature_names"].split(",") if n.strip()]
    raw_inputs = session.get_inputs()
    inputs = []
    for arg in raw_inputs:
        datatype, _ = _element_type(arg.type)
        shape = _dims(arg.shape)
        names = None
        if feature_names and len(raw_inputs) == 1:
            if len(shape) != 2 or shape[1] not in (DYNAMIC, len(feature_names)):
                raise Unprocessable(
                    f"{len(feature_names)} feature names do not fit input shape {list(shape)}",
                    field="feature_names",
                )
            names = tuple(feature_names)
            shape = (shape[0], len(feature_names))
        inputs.append(TensorSpec(arg.name, datatype, shape, feature_names=names))
    raw_outputs = session.get_outputs()
    outputs = []
    for arg in raw_outputs:
        datatype, zipmap = _element_type(arg.type)
        shape = (DYNAMIC, DYNAMIC) if zipmap else _dims(arg.shape)
        role = _output_role(arg.name, datatype, zipmap, len(raw_outputs))
        outputs.append(TensorSpec(arg.name, datatype, shape, role=role))
    return Signature(tuple(inputs), tuple(outputs), metadata=meta)
