"""A category a model's one-hot encoder never saw, told apart from ONNX Runtime's other failures.

A scikit-learn `OneHotEncoder(handle_unknown="error")` converts to ONNX's `ai.onnx.ml`
OneHotEncoder with `zeros=0`, whose kernel in ONNX Runtime fails a call given a category not in
its list with one fixed status ("Unknown Category and zeros = 0.", a `Fail`) naming the node:
the caller's value, not the model's failure. The graph inputs the node reads from are found by
walking the serialized graph up from it (the model's bytes read on this failure alone)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sluice.codecs.protobuf_fields import LENGTH_DELIMITED, fields

if TYPE_CHECKING:
    from collections.abc import Iterable

_UNKNOWN = re.compile(r"running OneHotEncoder node\. Name:'([^']*)' Status Message: Unknown Category and zeros = 0\.")

# ONNX protobuf field numbers: ModelProto.graph; GraphProto.node, .initializer, .input;
# NodeProto.input, .output, .name, .op_type; ValueInfoProto.name; TensorProto.name.
_GRAPH = 7
_NODE, _INITIALIZER, _INPUT = 1, 5, 11
_N_INPUT, _N_OUTPUT, _N_NAME, _N_OP = 1, 2, 3, 4
_V_NAME, _T_NAME = 1, 8


def unknown_category(exc: Exception) -> str | None:
    """The name of the OneHotEncoder node that refused a category it never saw, where `exc`
    is that refusal; None for any other failure."""
    if type(exc).__name__ != "Fail":
        return None
    found = _UNKNOWN.search(str(exc))
    return found.group(1) if found else None


def encoder_inputs(data: bytes) -> dict[str, tuple[str, ...]]:
    """Each OneHotEncoder node of the model's main graph by name, with the graph inputs its
    value comes from, in the graph's order. A model that does not read as one: no nodes."""
    try:
        return _encoder_inputs(data)
    except (ValueError, IndexError, UnicodeDecodeError):
        return {}


def _encoder_inputs(data: bytes) -> dict[str, tuple[str, ...]]:
    graph = next(((start, end) for number, wire, _, start, end in fields(data) if number == _GRAPH and wire == LENGTH_DELIMITED), None)
    if graph is None:
        return {}
    inputs: list[str] = []
    constants: set[str] = set()
    producers: dict[str, list[str]] = {}  # a value's name: the inputs of the node that makes it
    encoders: dict[str, list[str]] = {}
    for number, wire, _, start, end in fields(data, *graph):
        if wire != LENGTH_DELIMITED:
            continue
        if number == _INPUT:
            inputs += _texts(data, start, end, _V_NAME)
        elif number == _INITIALIZER:
            constants.update(_texts(data, start, end, _T_NAME))
        elif number == _NODE:
            node_inputs, outputs, name, op = [], [], "", ""
            for field, kind, _, at, until in fields(data, start, end):
                if kind != LENGTH_DELIMITED or field not in (_N_INPUT, _N_OUTPUT, _N_NAME, _N_OP):
                    continue
                text = data[at:until].decode()
                if field == _N_INPUT:
                    node_inputs.append(text)
                elif field == _N_OUTPUT:
                    outputs.append(text)
                elif field == _N_NAME:
                    name = text
                elif field == _N_OP:
                    op = text
            for output in outputs:
                producers[output] = node_inputs
            if op == "OneHotEncoder":
                encoders[name] = node_inputs
    graph_inputs = [name for name in inputs if name not in constants]
    return {name: _reaching(read, producers, graph_inputs) for name, read in encoders.items()}


def _reaching(start: Iterable[str], producers: dict[str, list[str]], graph_inputs: list[str]) -> tuple[str, ...]:
    seen: set[str] = set()
    todo = list(start)
    while todo:
        value = todo.pop()
        if value and value not in seen:
            seen.add(value)
            todo += producers.get(value, ())
    return tuple(name for name in graph_inputs if name in seen)


def _texts(data: bytes, start: int, end: int, number: int) -> list[str]:
    return [data[at:until].decode() for field, wire, _, at, until in fields(data, start, end) if field == number and wire == LENGTH_DELIMITED]
