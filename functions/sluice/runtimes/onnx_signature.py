"""A version's signature as ONNX Runtime reads it from the graph."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.codecs.datatypes import ONNX_TO_V2
from sluice.codecs.protobuf_fields import LENGTH_DELIMITED, fields, varint
from sluice.domain.errors import InvalidInput, Unprocessable
from sluice.domain.signature import (
    DYNAMIC,
    OutputRole,
    Signature,
    TensorSpec,
    check_feature_names,
    role_by_name,
)

if TYPE_CHECKING:
    from collections.abc import Iterator


def _dims(shape: list[Any] | None) -> tuple[int, ...]:
    # ORT reports symbolic dims as strings and unknown ones as None; a tensor whose rank is
    # unknown it reports as a scalar's, []: `check_ranked` tells the two apart.
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
    if feature_names and len(session.get_inputs()) != 1:  # given by the caller: never dropped unsaid
        raise Unprocessable(
            f"feature names name the columns of a model's one input; this model takes {len(session.get_inputs())} inputs",
            field="feature_names",
        )
    from_metadata = feature_names is None and bool(meta.get("feature_names"))
    if from_metadata:
        feature_names = [n.strip() for n in meta["feature_names"].split(",") if n.strip()]  # an exporter's trailing comma: no name
    raw_inputs = session.get_inputs()
    inputs = []
    for arg in raw_inputs:
        datatype, _ = _element_type(arg.type)
        shape = _dims(arg.shape)
        names = None
        if feature_names and len(raw_inputs) == 1:
            try:
                if len(shape) != 2 or shape[1] not in (DYNAMIC, len(feature_names)):
                    raise Unprocessable(f"{len(feature_names)} feature names do not fit input shape {list(shape)}", field="feature_names")
                names = check_feature_names(feature_names)
            except Unprocessable as exc:  # names the model's own metadata carried: the artifact's fault, not a field the caller sent
                if not from_metadata:
                    raise
                raise Unprocessable(f"the model's feature_names metadata: {exc.message}", field="artifact") from None
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


def check_ranked(data: bytes, signature: Signature) -> None:
    """Refuse a model an input of which declares no shape at all (its rank unknown, as some
    exported graphs leave it): ONNX Runtime reports that input as a scalar's, every request is
    checked against the shape recorded, and a batch would never be taken. A scalar input
    (a shape of no dimensions, declared) is kept."""
    external = external_initializers(data)
    if external:
        raise InvalidInput(
            f"not a loadable ONNX model: its weights name a file (external data: {', '.join(map(repr, external[:3]))}); send the model with its weights inside",
            field="artifact",
        )
    scalars = {spec.name for spec in signature.inputs if not spec.shape}
    for name in sorted(scalars & unranked_inputs(data)):
        raise Unprocessable(
            f"input '{name}' declares no shape (its rank is unknown), so requests cannot be checked against it: "
            "give the input its shape in the graph (a dimension that varies as a name, e.g. ['batch', 4]) and push again",
            field="artifact",
        )


# ONNX protobuf field numbers: ModelProto.graph, GraphProto.input, ValueInfoProto.name and
# .type, TypeProto.tensor_type, TypeProto.Tensor.shape.
_GRAPH, _INPUT, _NAME, _TYPE, _TENSOR_TYPE, _SHAPE = 7, 11, 1, 2, 1, 2


def unranked_inputs(data: bytes) -> set[str]:
    """The graph inputs of tensor type that declare no shape, read from the serialized model
    (the onnx package is not needed to serve, and ONNX Runtime does not say): none where the
    bytes do not read as protobuf."""
    found: set[str] = set()
    try:
        for graph in _messages(data, 0, len(data), _GRAPH):
            for value in _messages(data, *graph, _INPUT):
                name = next((bytes(data[a:b]).decode() for a, b in _messages(data, *value, _NAME)), None)
                for kind in _messages(data, *value, _TYPE):
                    for tensor in _messages(data, *kind, _TENSOR_TYPE):
                        if name is not None and next(_messages(data, *tensor, _SHAPE), None) is None:
                            found.add(name)
    except (IndexError, ValueError, UnicodeDecodeError):
        return set()
    return found


# GraphProto.initializer, TensorProto.name and .external_data (a weight's bytes in a file it names)
_INITIALIZER, _TENSOR_NAME, _EXTERNAL_DATA = 5, 8, 13


def external_initializers(data: bytes) -> list[str]:
    """The graph's initializers whose bytes are in a file they name (ONNX external data), read
    from the serialized model. ONNX Runtime refuses one a node uses when it loads, and loads a
    model whose only such initializer nothing uses: refused at push all the same, as the docs
    say (such a file is named relative to wherever the model is read from)."""
    found: list[str] = []
    try:
        for graph in _messages(data, 0, len(data), _GRAPH):
            for tensor in _messages(data, *graph, _INITIALIZER):
                if next(_messages(data, *tensor, _EXTERNAL_DATA), None) is not None:
                    found.append(next((bytes(data[a:b]).decode("utf-8", "replace") for a, b in _messages(data, *tensor, _TENSOR_NAME)), ""))
    except (IndexError, ValueError):
        return []
    return found


def _messages(data: bytes, start: int, end: int, number: int) -> Iterator[tuple[int, int]]:
    """The spans of field `number`'s length-delimited values in the message at data[start:end];
    the other fields are skipped by their lengths, never read."""
    for field, wire, _, value, at in fields(data, start, end):
        if field == number and wire == LENGTH_DELIMITED:
            yield value, at


# GraphProto.node; NodeProto.op_type, .attribute, .domain; AttributeProto.name, .ints, .strings
_NODE, _OP_TYPE, _ATTRIBUTE, _DOMAIN = 1, 4, 5, 7
_ATTR_NAME, _ATTR_INTS, _ATTR_STRINGS = 1, 8, 9
CLASSIFIERS = frozenset({"LinearClassifier", "TreeEnsembleClassifier", "SVMClassifier"})


def classifier_labels(data: bytes) -> list[int | str] | None:
    """The class labels of the graph's one `ai.onnx.ml` classifier node (its
    `classlabels_strings`, `classlabels_int64s` or `classlabels_ints`), read from the serialized model: what names
    the columns of its probabilities where no ZipMap does (a scikit-learn classifier exported
    with `zipmap=False`: ONNX Runtime answers a bare [rows, classes] tensor). None where the
    graph has no such node, or several (which of them a probabilities output is, is not said)."""
    found: list[list[int | str]] = []
    try:
        for graph in _messages(data, 0, len(data), _GRAPH):
            for node in _messages(data, *graph, _NODE):
                if _text(data, node, _DOMAIN) != "ai.onnx.ml" or _text(data, node, _OP_TYPE) not in CLASSIFIERS:
                    continue
                labels: list[int | str] = []
                for attribute in _messages(data, *node, _ATTRIBUTE):
                    name = _text(data, attribute, _ATTR_NAME)
                    if name == "classlabels_strings":
                        labels = [bytes(data[a:b]).decode() for a, b in _messages(data, *attribute, _ATTR_STRINGS)]
                    elif name in ("classlabels_int64s", "classlabels_ints"):  # TreeEnsembleClassifier, Linear and SVM
                        labels = list(_int64s(data, attribute))
                found.append(labels)
    except (IndexError, ValueError, UnicodeDecodeError):
        return None
    return found[0] if len(found) == 1 and found[0] else None


def _text(data: bytes, span: tuple[int, int], number: int) -> str | None:
    return next((bytes(data[a:b]).decode() for a, b in _messages(data, *span, number)), None)


def _int64s(data: bytes, span: tuple[int, int]) -> Iterator[int]:
    """AttributeProto.ints, packed or not, as the signed 64-bit integers they are."""
    for number, wire, _, value, at in fields(data, *span):
        if number != _ATTR_INTS:
            continue
        if wire == LENGTH_DELIMITED:  # packed
            while value < at:
                unsigned, value = varint(data, value)
                yield unsigned - (1 << 64) if unsigned >= 1 << 63 else unsigned
        elif wire == 0:
            unsigned = varint(data, value)[0]
            yield unsigned - (1 << 64) if unsigned >= 1 << 63 else unsigned
