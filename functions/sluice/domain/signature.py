"""What a model version takes and gives: tensor names, v2 datatypes and shapes.

Read from the ONNX graph when a version is pushed, stored with the version, and used to
validate every request before it reaches a runtime.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

DYNAMIC = -1
OutputRole = Literal["label", "probabilities", "value"]


def role_by_name(name: str, n_outputs: int) -> OutputRole:
    """An output's role as its name suggests, where nothing says better: probabilities when it
    says `prob`, the label when it says `label` beside other outputs, else a plain value."""
    lowered = name.lower()
    if "prob" in lowered:
        return "probabilities"
    if "label" in lowered and n_outputs > 1:
        return "label"
    return "value"


@dataclass(frozen=True, slots=True)
class TensorSpec:
    name: str
    datatype: str
    shape: tuple[int, ...]  # -1 marks a dynamic dimension
    role: OutputRole | None = None  # outputs only: how plain JSON presents it
    feature_names: tuple[str, ...] | None = None  # inputs only: column names of the last axis
    # A probabilities output's column labels, where the model's graph says them and no ZipMap
    # answers them (read at push: `runtimes.onnx_signature.classifier_labels`): whichever runtime
    # answers the version, its columns are these classes (`domain.results.with_classes`).
    classes: tuple[int | str, ...] | None = None
    # Outputs only: its NaN stands for no value (a lookup's event times, where a record has none),
    # so a batch part writes it as null in every format, as JSON does.
    nan_missing: bool = False

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if not self.nan_missing:
            del data["nan_missing"]
        data["shape"] = list(self.shape)
        if self.feature_names is not None:
            data["feature_names"] = list(self.feature_names)
        if self.classes is not None:
            data["classes"] = list(self.classes)
        return {k: v for k, v in data.items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TensorSpec:
        names, classes = data.get("feature_names"), data.get("classes")
        return cls(
            name=data["name"],
            datatype=data["datatype"],
            shape=tuple(int(d) for d in data["shape"]),
            role=data.get("role"),
            feature_names=tuple(names) if names is not None else None,
            classes=tuple(classes) if classes is not None else None,
            nan_missing=data.get("nan_missing") is True,
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


def check_feature_names(names: Sequence[str]) -> tuple[str, ...]:
    """An input's column names as given (pushed with a model, or its metadata's): each named,
    each once. A name given twice fed one value to two columns; an empty one named none."""
    from sluice.domain.errors import Unprocessable

    seen: set[str] = set()
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name.strip():
            raise Unprocessable(f"feature name {i + 1} of {len(names)} is empty: each column is named", field="feature_names")
        if name in seen:
            raise Unprocessable(f"feature name '{name[:64]}' is given twice: each column is named once", field="feature_names")
        seen.add(name)
    return tuple(names)
