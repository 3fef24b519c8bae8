"""A version's signature as ONNX Runtime reads it from the graph."""

from __future__ import annotations

from typing import Any

from sluice.codecs.datatypes import ONNX_TO_V2
from sluice.domain.errors import Unprocessable
from sluice.domain.signature import DYNAMIC, OutputRole, Signature, TensorSpec, role_by_name


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
    return "probabilities" if zipmap else role_by_name(name, n_outputs)


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
