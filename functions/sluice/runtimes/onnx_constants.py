"""What a model computes from its constants alone, read from the serialized graph before ONNX
Runtime sees it.

A node whose inputs are all constants (initializers, Constant nodes, what such nodes compute)
is computed when the session is made (ONNX Runtime's constant folding keeps its result as a
weight) or on every call: a model of a few hundred bytes whose ConstantOfShape, Expand or Tile
makes a tensor of [50000, 50000] takes gigabytes of the process that loads it, and every tenant
it serves with it. The shapes are worked out here from the constants' values (shapes, repeats,
ranges are small tensors) without making any tensor larger than those; a node whose output
shape cannot be worked out so counts as much as its inputs, unless it is one that can make
more than it takes (a ConstantOfShape, Range, Einsum, NonZero, Loop...): such a node is refused,
its size not being known before ONNX Runtime makes it. DequantizeLinear and QuantizeLinear are
not folded (ONNX Runtime fuses QDQ pairs into integer operators and keeps int8 weights int8):
what they make is not counted as constant.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.codecs.protobuf_fields import LENGTH_DELIMITED, fields, varint
from sluice.domain.errors import Unprocessable

if TYPE_CHECKING:
    from collections.abc import Callable

MAX_CONSTANT_BYTES = 256 * 1024**2  # what a model may compute from its constants alone, or twice its own size where that is more
_VALUE_ELEMENTS = 4096  # the values of tensors this small are read and computed (shapes, repeats, ranges); of larger ones, the shape

# ONNX protobuf field numbers: ModelProto.graph, .opset_import (OperatorSetIdProto.domain, .version);
# GraphProto.node, .initializer, .input, .output, .sparse_initializer (and ValueInfoProto.name, as AttributeProto.name, 1); NodeProto.input, .output, .name, .op_type, .attribute, .domain;
# AttributeProto.name, .f, .i, .s, .t, .g, .floats, .ints, .graphs, .sparse_tensor; TensorProto.dims,
# .data_type, .float_data, .int32_data, .int64_data, .name, .raw_data, .double_data,
# .uint64_data; SparseTensorProto.values, .dims.
_GRAPH, _OPSET, _O_DOMAIN, _O_VERSION = 7, 8, 1, 2
_NODE, _INITIALIZER, _INPUT, _OUTPUT, _SPARSE_INITIALIZER = 1, 5, 11, 12, 15
_N_INPUT, _N_OUTPUT, _N_NAME, _N_OP, _N_ATTRIBUTE, _N_DOMAIN = 1, 2, 3, 4, 5, 7
_A_NAME, _A_F, _A_I, _A_S, _A_T, _A_G, _A_FLOATS, _A_INTS, _A_GRAPHS, _A_SPARSE = 1, 2, 3, 4, 5, 6, 7, 8, 11, 22
_T_DIMS, _T_TYPE, _T_FLOATS, _T_INT32S, _T_INT64S, _T_NAME, _T_RAW, _T_DOUBLES, _T_UINT64S = 1, 2, 4, 5, 7, 8, 9, 10, 11
_S_VALUES, _S_DIMS = 1, 3

# TensorProto.DataType: the bytes an element takes (a string's, as a pointer would), and the
# numpy type of those whose values are read.
_ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 8: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 14: 8, 15: 16, 16: 2}
_NUMPY = {1: "<f4", 2: "u1", 3: "i1", 4: "<u2", 5: "<i2", 6: "<i4", 7: "<i8", 9: "?", 11: "<f8", 12: "<u4", 13: "<u8"}
_FLOAT, _INT64, _BOOL = 1, 7, 9
# The operators that hold subgraphs (ONNX Runtime refuses a graph attribute its operator does not declare)
_SUBGRAPHS = frozenset(("If", "Loop", "Scan", "SequenceMap", "BeamSearch", "GreedySearch", "Sampling", "WhisperBeamSearch"))

_UNARY = frozenset((
    "Identity", "Neg", "Abs", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
    "Exp", "Log", "Sqrt", "Relu", "Sigmoid", "Tanh", "Floor", "Ceil", "Round", "Sign", "Not", "Reciprocal", "Erf",
    "Elu", "Selu", "LeakyRelu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "ThresholdedRelu", "Celu", "Gelu",
    "Mish", "Softmax", "LogSoftmax", "Hardmax", "CumSum", "Clip", "BitwiseNot", "Dropout", "Shrink", "Trilu",
    "LpNormalization", "LayerNormalization", "InstanceNormalization", "BatchNormalization", "GroupNormalization",
    "RMSNormalization", "MeanVarianceNormalization", "LRN", "ReverseSequence", "ScatterND", "ScatterElements", "Scatter",
))
# The operators whose output may be larger than their inputs together: one of them computed from
# constants whose output cannot be sized is refused (any other counts as much as its inputs).
_EXPANDING = frozenset((
    "ConstantOfShape", "Expand", "Tile", "Range", "Pad", "Resize", "Upsample", "Einsum", "MatMul", "Gemm", "MatMulInteger",
    "QLinearMatMul", "Conv", "ConvInteger", "QLinearConv", "ConvTranspose", "DeformConv", "MaxPool", "AveragePool", "LpPool",
    "MaxUnpool", "NonZero", "OneHot", "EyeLike", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
    "Bernoulli", "Multinomial", "HannWindow", "HammingWindow", "BlackmanWindow", "Col2Im", "DFT", "STFT", "MelWeightMatrix",
    "Loop", "Scan", "CenterCropPad", "Gather", "GatherND", "GridSample", "AffineGrid", "RoiAlign", "MaxRoiPool", "LSTM", "GRU",
    "RNN", "Attention", "ImageDecoder", "TfIdfVectorizer", "StringSplit",
))
# ONNX Runtime keeps these out of constant folding (QDQ pairs become integer operators): their
# outputs are not constants.
_NOT_FOLDED = frozenset(("DequantizeLinear", "QuantizeLinear", "DynamicQuantizeLinear"))
_BROADCAST = frozenset((
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "PRelu", "BitShift", "BitwiseAnd",
    "BitwiseOr", "BitwiseXor", "And", "Or", "Xor",
))
_COMPARE = frozenset((
    "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "IsNaN", "IsInf",
))
_VALUES: dict[str, Callable[..., Any]] = {
    "Identity": lambda a: a, "Neg": np.negative, "Abs": np.abs, "Floor": np.floor, "Ceil": np.ceil, "Sqrt": np.sqrt,
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Pow": np.power, "Where": np.where,
    "Max": lambda *a: reduce(np.maximum, a), "Min": lambda *a: reduce(np.minimum, a), "Sum": lambda *a: reduce(np.add, a),
    "Div": lambda a, b: np.trunc(a / b).astype(a.dtype) if a.dtype.kind in "iu" else a / b,
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Known:
    """A constant: its shape (None where it is not known), element type (0: not known), for a
    small one its value and, where its shape is not known, the most bytes it may take (None:
    not known either)."""

    shape: tuple[int, ...] | None
    dtype: int
    value: np.ndarray | None = None
    most: int | None = None

    @property
    def sized(self) -> bool:
        return self.shape is not None or self.most is not None

    @property
    def bytes(self) -> int:
        return math.prod(self.shape) * _ITEMSIZE.get(self.dtype, 4) if self.shape is not None else self.most or 0


_UNKNOWN = _Known(None, 0)


def check_constant_sizes(data: bytes) -> None:
    """Refuse a model whose nodes would compute, from its constants alone, more than
    `MAX_CONSTANT_BYTES` in all (or twice the model's own size, where that is more), naming
    the node that takes it past, or one that can make more than it takes and whose size cannot
    be told. Bytes that do not read as an ONNX model are let be: ONNX Runtime says what is
    wrong with them (nothing but this refusal comes out of reading them)."""
    try:
        walk = _Walk(data, max(MAX_CONSTANT_BYTES, 2 * len(data)), _opset(data))
        for graph in _spans(data, 0, len(data), _GRAPH):
            walk.graph(*graph, {})
    except Unprocessable:
        raise
    except Exception:  # a model this cannot read is ONNX Runtime's to refuse
        return


def _opset(data: bytes) -> int:
    """The model's default-domain opset (Resize's inputs differ before 11)."""
    for start, end in _spans(data, 0, len(data), _OPSET):
        domain = next((_text(data, span) for span in _spans(data, start, end, _O_DOMAIN)), "")
        if domain in ("", "ai.onnx"):
            return next((varint(data, value)[0] for field, wire, _, value, _ in fields(data, start, end) if field == _O_VERSION and wire == 0), 1)
    return 1


def _spans(data: bytes, start: int, end: int, number: int) -> list[tuple[int, int]]:
    return [(value, at) for field, wire, _, value, at in fields(data, start, end) if field == number and wire == LENGTH_DELIMITED]


def _text(data: bytes, span: tuple[int, int]) -> str:
    return bytes(data[span[0] : span[1]]).decode()


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _varints(data: bytes, start: int, end: int, signed: bool = True) -> list[int]:
    out = []
    while start < end:
        value, start = varint(data, start)
        out.append(_signed(value) if signed else value)
    return out


def _ints(data: bytes, start: int, end: int, number: int, signed: bool = True) -> list[int]:
    """A repeated integer field, packed or not (uint64_data is read unsigned)."""
    out: list[int] = []
    for field, wire, _, value, at in fields(data, start, end):
        if field == number:
            if wire == LENGTH_DELIMITED:
                out.extend(_varints(data, value, at, signed))
            else:
                out.append(_signed(varint(data, value)[0]) if signed else varint(data, value)[0])
    return out


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    rank = max(map(len, shapes))
    out = []
    for dims in zip(*((1,) * (rank - len(s)) + s for s in shapes), strict=True):
        sized = {d for d in dims if d != 1}
        if len(sized) > 1:
            raise ValueError("shapes that do not broadcast")
        out.append(sized.pop() if sized else 1)
    return tuple(out)


def _einsum(equation: str, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The shape an Einsum makes of operands of these shapes: each letter's dimension, the
    ellipsis' dimensions broadcast; without `->`, the ellipsis then the letters used once, in order."""
    terms, arrow, result = equation.replace(" ", "").partition("->")
    sizes: dict[str, int] = {}
    ellipses = []
    for term, shape in zip(terms.split(","), shapes, strict=True):
        head, dots, tail = term.partition("...")
        ellipsis = shape[len(head) : len(shape) - len(tail)] if dots else ()
        if len(head) + len(ellipsis) + len(tail) != len(shape):
            raise ValueError("an operand whose rank the equation does not say")
        ellipses.append(tuple(ellipsis))
        for letter, dim in zip(head + tail, (*shape[: len(head)], *shape[len(shape) - len(tail) :]), strict=True):
            if sizes.get(letter, 1) != 1 and dim not in (1, sizes[letter]):
                raise ValueError("a letter of two sizes")
            sizes[letter] = max(sizes.get(letter, 1), dim) if dim != 1 else sizes.get(letter, 1)
    broadcast = _broadcast(*ellipses) if ellipses else ()
    if not arrow:
        letters = terms.replace(",", "").replace("...", "")
        result = "..." + "".join(sorted(x for x in set(letters) if letters.count(x) == 1))
    head, dots, tail = result.partition("...")
    return (*(sizes[x] for x in head), *(broadcast if dots else ()), *(sizes[x] for x in tail))


class _Walk:
    def __init__(self, data: bytes, bound: int, opset: int) -> None:
        self.data = data
        self.bound = bound
        self.opset = opset
        self.total = 0

    def graph(self, start: int, end: int, outer: dict[str, _Known]) -> tuple[dict[str, _Known], list[str]]:
        """The graph's nodes in the order their inputs are made (Kahn's), each computed where
        its inputs are all constants; a subgraph sees what its graph knows. What the graph
        knows, and its outputs' names, come back (a loop's body says what each step makes)."""
        known = dict(outer)
        nodes: list[tuple[int, int]] = []
        inputs: list[str] = []
        outputs: list[str] = []
        for field, wire, _, value, at in fields(self.data, start, end):
            if wire != LENGTH_DELIMITED:
                continue
            if field == _INPUT:
                inputs.extend(_text(self.data, span) for span in _spans(self.data, value, at, _A_NAME))
            elif field == _OUTPUT:
                outputs.extend(_text(self.data, span) for span in _spans(self.data, value, at, _A_NAME))
            elif field == _INITIALIZER:
                name, tensor = self.tensor(value, at)
                known[name] = tensor
            elif field == _SPARSE_INITIALIZER:  # made dense when the model loads
                name, tensor = self.sparse(value, at)
                known[name] = tensor
                self.count(tensor, f"sparse initializer '{name}'")
            elif field == _NODE:
                nodes.append((value, at))
        for name in inputs:  # a subgraph's input (a loop's step, say) hides a constant of its graph's of that name
            if name in outer and known.get(name) is outer[name]:
                del known[name]
        parsed = [self.node(*span) for span in nodes]
        made = {out for node in parsed for out in node["outputs"] if out}
        waiting: dict[str, list[int]] = defaultdict(list)
        missing = [0] * len(parsed)
        for i, node in enumerate(parsed):
            for name in {x for x in node["inputs"] if x in made}:
                waiting[name].append(i)
                missing[i] += 1
        # A node holding subgraphs goes after the nodes ready with it: what its subgraphs use of
        # this graph's is known by then (as ONNX Runtime orders it, by what a subgraph uses too).
        ready = deque(i for i, n in enumerate(missing) if n == 0 and parsed[i]["op"] not in _SUBGRAPHS)
        later = deque(i for i, n in enumerate(missing) if n == 0 and parsed[i]["op"] in _SUBGRAPHS)
        while ready or later:
            i = ready.popleft() if ready else later.popleft()
            node = parsed[i]
            bodies = []
            if node["op"] in _SUBGRAPHS:
                for _, (value, at) in self.attributes(node).items():
                    for span in (*_spans(self.data, value, at, _A_G), *_spans(self.data, value, at, _A_GRAPHS)):
                        bodies.append(self.graph(*span, known))
            ins = [known.get(x) if x else None for x in node["inputs"]]
            constant = node["op"] not in _NOT_FOLDED and (
                node["op"] in ("Constant", "RandomNormal", "RandomUniform")
                or (bool(node["inputs"]) and all(k is not None for x, k in zip(node["inputs"], ins, strict=True) if x))
            )
            label = f"node '{node['name']}'" if node["name"] else f"node {i + 1}"
            ours = node["domain"] in ("", "ai.onnx")
            if node["op"] == "Loop" and ours and bodies and not constant:
                for tensor in self.loop(node, ins, bodies[0], constant)[len(node["inputs"]) - 2 :]:
                    self.count(tensor, f"{label} (Loop)")  # its scan outputs, as many steps as it takes, made on every call
            if constant:
                if not ours and node["domain"] == "com.microsoft" and node["op"] in _EXPANDING:
                    outs = self.compute(node, ins)  # ONNX Runtime's own namesakes of ONNX's operators (Range, ...)
                elif not ours:
                    outs = []
                elif node["op"] == "Loop" and bodies:
                    outs = self.loop(node, ins, bodies[0], constant)
                else:
                    outs = self.compute(node, ins)
                for j, out in enumerate(node["outputs"]):
                    tensor = outs[j] if j < len(outs) else _UNKNOWN
                    if not tensor.sized and (ours or node["domain"] == "com.microsoft"):
                        if node["op"] in _EXPANDING or not ours:
                            raise Unprocessable(
                                f"{label} ({node['op']}) would compute a tensor from the model's constants alone, as the model "
                                "loads, whose size cannot be told from the model; make such a tensor from the inputs, or keep "
                                "it as a weight",
                                field="artifact",
                            )
                        if all(k is None or k.sized for k in ins):  # no more than it takes
                            tensor = _Known(None, 0, most=sum(k.bytes for k in ins if k is not None))
                    if out:
                        known[out] = tensor
                    if node["op"] != "Constant" or "sparse_value" in self.attributes(node):  # a Constant's dense value is in the file
                        self.count(tensor, f"{label} ({node['op']})")
            for out in node["outputs"]:
                for j in waiting.pop(out, ()):
                    missing[j] -= 1
                    if missing[j] == 0:
                        (later if parsed[j]["op"] in _SUBGRAPHS else ready).append(j)
        return known, outputs

    def loop(self, node: dict[str, Any], ins: list[_Known | None], body: tuple[dict[str, _Known], list[str]], constant: bool) -> list[_Known]:
        """A Loop's outputs: the values it carries, as its body leaves them, then each scan
        output as many times as it steps. The steps are its trip count where no condition is
        given; with one, the trip count bounds them where the loop is all constants (otherwise
        they are not known)."""
        known, outputs = body
        carried = len(node["inputs"]) - 2
        trips = ins[0].value if ins and ins[0] is not None and ins[0].value is not None else None
        if trips is not None and (constant or len(node["inputs"]) < 2 or not node["inputs"][1]):
            steps: int | None = max(int(np.ravel(trips)[0]), 0)
        else:
            steps = None
        out = []
        for j, name in enumerate(outputs[1:]):
            made = known.get(name) or _UNKNOWN
            if j < carried:
                out.append(made if made.sized else _UNKNOWN)
            elif steps is None or not made.sized:
                out.append(_UNKNOWN)
            elif made.shape is not None:
                out.append(_Known((steps, *made.shape), made.dtype))
            else:
                out.append(_Known(None, 0, most=steps * made.bytes))
        return out

    def count(self, tensor: _Known, what: str) -> None:
        self.total += tensor.bytes
        if self.total > self.bound:
            raise Unprocessable(
                f"{what} would compute a tensor of shape {list(tensor.shape or ())} ({tensor.bytes:,} bytes) from the model's constants "
                f"alone, as the model loads: with it the model's constant part comes to {self.total:,} bytes, above the "
                f"{self.bound:,} a model may compute so ({MAX_CONSTANT_BYTES // 1024**2} MiB, or twice the model's own size); "
                "make such a tensor from the inputs, or keep it as a weight",
                field="artifact",
            )

    def node(self, start: int, end: int) -> dict[str, Any]:
        data = self.data
        node: dict[str, Any] = {"inputs": [], "outputs": [], "name": "", "op": "", "domain": "", "attributes": []}
        for field, wire, _, value, at in fields(data, start, end):
            if wire != LENGTH_DELIMITED:
                continue
            if field == _N_INPUT:
                node["inputs"].append(_text(data, (value, at)))
            elif field == _N_OUTPUT:
                node["outputs"].append(_text(data, (value, at)))
            elif field in (_N_NAME, _N_OP, _N_DOMAIN):
                node[{_N_NAME: "name", _N_OP: "op", _N_DOMAIN: "domain"}[field]] = _text(data, (value, at))
            elif field == _N_ATTRIBUTE:
                node["attributes"].append((value, at))
        return node

    def attributes(self, node: dict[str, Any]) -> dict[str, tuple[int, int]]:
        """A node's attributes by name, read when asked: a tree ensemble's run to a million
        numbers, each a field of its own, and only the nodes computed from constants, or
        holding subgraphs, are read."""
        if isinstance(node["attributes"], list):
            node["attributes"] = {
                next((_text(self.data, name) for name in _spans(self.data, *span, _A_NAME)), ""): span for span in node["attributes"]
            }
        return node["attributes"]

    def tensor(self, start: int, end: int) -> tuple[str, _Known]:
        data = self.data
        dims = _ints(data, start, end, _T_DIMS)
        name, dtype, raw, typed = "", _FLOAT, None, None
        for field, wire, _, value, at in fields(data, start, end):
            if field == _T_TYPE and wire == 0:
                dtype = varint(data, value)[0]
            elif field == _T_NAME and wire == LENGTH_DELIMITED:
                name = _text(data, (value, at))
            elif field == _T_RAW and wire == LENGTH_DELIMITED:
                raw = (value, at)
            elif field in (_T_FLOATS, _T_INT32S, _T_INT64S, _T_DOUBLES, _T_UINT64S):
                typed = field
        if any(d < 0 for d in dims):
            return name, _UNKNOWN
        shape = tuple(dims)
        count = math.prod(shape)
        value = None
        if count <= _VALUE_ELEMENTS and dtype in _NUMPY:
            kind = np.dtype(_NUMPY[dtype])
            if raw is not None and raw[1] - raw[0] == count * kind.itemsize:
                value = np.frombuffer(bytes(data[raw[0] : raw[1]]), dtype=kind).reshape(shape)
            elif typed in (_T_INT32S, _T_INT64S, _T_UINT64S):
                ints = _ints(data, start, end, typed, signed=typed != _T_UINT64S)
                if len(ints) == count:  # a value out of its type's range wraps, as a cast would
                    value = np.array(ints, dtype="<u8" if typed == _T_UINT64S else "<i8").astype(kind).reshape(shape)
            elif typed in (_T_FLOATS, _T_DOUBLES):
                floats = [
                    bytes(data[v:a]) if w == LENGTH_DELIMITED else bytes(data[v : v + (4 if typed == _T_FLOATS else 8)])
                    for f, w, _, v, a in fields(data, start, end)
                    if f == typed
                ]
                array = np.frombuffer(b"".join(floats), dtype="<f4" if typed == _T_FLOATS else "<f8")
                value = array.astype(kind).reshape(shape) if array.size == count else None
        return name, _Known(shape, dtype, value)

    def sparse(self, start: int, end: int) -> tuple[str, _Known]:
        name, values = next((self.tensor(*span) for span in _spans(self.data, start, end, _S_VALUES)), ("", _UNKNOWN))
        dims = _ints(self.data, start, end, _S_DIMS)
        return name, _Known(tuple(dims), values.dtype) if all(d >= 0 for d in dims) else _UNKNOWN

    def attribute(self, node: dict[str, Any], name: str, default: Any = None) -> Any:
        """An attribute's value: an int, a float, bytes, a list of ints, or a tensor (`_Known`)."""
        span = self.attributes(node).get(name)
        if span is None:
            return default
        data = self.data
        for field, wire, _, value, at in fields(data, *span):
            if field == _A_I and wire == 0:
                return _signed(varint(data, value)[0])
            if field == _A_F and wire == 5:
                return float(np.frombuffer(bytes(data[value : value + 4]), dtype="<f4")[0])
            if field == _A_S and wire == LENGTH_DELIMITED:
                return bytes(data[value:at])
            if field == _A_T and wire == LENGTH_DELIMITED:
                return self.tensor(value, at)[1]
            if field == _A_SPARSE and wire == LENGTH_DELIMITED:
                return self.sparse(value, at)[1]
            if field == _A_FLOATS:
                return [float(x) for x in np.frombuffer(bytes(data[value:at]), dtype="<f4")] if wire == LENGTH_DELIMITED else default
        ints = _ints(data, *span, _A_INTS)
        return ints if ints or any(f == _A_INTS for f, *_ in fields(data, *span)) else default

    def compute(self, node: dict[str, Any], ins: list[_Known | None]) -> list[_Known]:
        """The outputs of a node whose inputs are all constants: a shape where it can be worked
        out, a value where that is small too; unknown otherwise."""
        try:
            made = self._compute(node, ins)
            return [out if out.shape is None or all(d >= 0 for d in out.shape) else _UNKNOWN for out in (made if isinstance(made, list) else [made])]
        except Exception:  # a rule that cannot be followed: the output's size is not known
            return []

    def _compute(self, node: dict[str, Any], ins: list[_Known | None]) -> _Known | list[_Known]:
        op, attr = node["op"], lambda name, default=None: self.attribute(node, name, default)
        # What a node lacks (an input not given, a shape not known) fails its rule: `compute` says unknown.
        shapes: list[Any] = [k.shape if k is not None else None for k in ins]
        values: list[Any] = [k.value if k is not None else None for k in ins]
        first = ins[0] if ins else None
        dtype = first.dtype if first is not None else 0

        def small(shape: tuple[int, ...], dtype: int, make: Callable[[], Any]) -> _Known:
            """The output's shape, and its value where it is small and its inputs' values are
            held (a row of a large table has a shape but no value here: the shape stands)."""
            value = None
            if math.prod(shape) <= _VALUE_ELEMENTS and dtype in _NUMPY:
                try:
                    with np.errstate(all="ignore"):
                        value = np.asarray(make()).astype(_NUMPY[dtype]).reshape(shape)
                except Exception:  # an input's value not held (past _VALUE_ELEMENTS): the size is still known
                    value = None
            return _Known(tuple(int(d) for d in shape), dtype, value)

        def axes_of(index: int, rank: int) -> list[int] | None:
            given = values[index] if len(values) > index and node["inputs"][index] else attr("axes")
            return None if given is None else [int(a) % rank if rank else 0 for a in np.ravel(given)]

        if op == "Constant":
            for name in ("value", "sparse_value"):
                if name in self.attributes(node):
                    return attr(name)
            for name, kind in (("value_int", _INT64), ("value_ints", _INT64), ("value_float", _FLOAT), ("value_floats", _FLOAT)):
                if name in self.attributes(node):
                    given = np.array(attr(name), dtype=_NUMPY[kind])
                    return _Known(given.shape, kind, given)
            return _UNKNOWN
        if op == "ConstantOfShape":
            fill = attr("value") or _Known((1,), _FLOAT, np.zeros(1, dtype="<f4"))
            shape = tuple(int(d) for d in values[0])
            return small(shape, fill.dtype, lambda: np.full(shape, fill.value.ravel()[0]))
        if op in ("RandomNormal", "RandomUniform"):
            return _Known(tuple(attr("shape")), attr("dtype", _FLOAT))
        if op in ("RandomNormalLike", "RandomUniformLike", "Bernoulli", "EyeLike"):
            return _Known(shapes[0], attr("dtype", dtype))
        if op == "Expand":
            shape = _broadcast(shapes[0], tuple(int(d) for d in values[1]))
            return small(shape, dtype, lambda: np.broadcast_to(values[0], shape))
        if op == "Tile":
            repeats = [int(r) for r in values[1]]
            return small(tuple(d * r for d, r in zip(shapes[0], repeats, strict=True)), dtype, lambda: np.tile(values[0], repeats))
        if op == "Range":
            start, limit, delta = (v.item() for v in values[:3])
            n = max(math.ceil((limit - start) / delta), 0)
            return small((n,), dtype, lambda: np.arange(n) * delta + start)
        if op == "OneHot":
            rank = len(shapes[0])
            axis = attr("axis", -1) % (rank + 1)
            return _Known((*shapes[0][:axis], int(values[1].item()), *shapes[0][axis:]), ins[2].dtype)
        if op == "Pad":
            pads = [int(p) for p in (values[1] if len(values) > 1 else attr("pads"))]
            rank = len(shapes[0])
            axes = axes_of(3, rank) or list(range(rank))
            shape = list(shapes[0])
            for i, axis in enumerate(axes):
                shape[axis] += pads[i] + pads[i + len(axes)]
            return _Known(tuple(shape), dtype)
        if op in ("Resize", "Upsample"):
            if op == "Resize" and self.opset >= 11 and len(values) > 3 and node["inputs"][3]:
                return _Known(tuple(int(d) for d in values[3]), dtype)
            scales = values[2] if op == "Resize" and self.opset >= 11 else values[1] if len(values) > 1 else attr("scales")
            return _Known(tuple(math.floor(d * s) for d, s in zip(shapes[0], np.ravel(scales), strict=True)), dtype)
        if op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
            return _Known((int(values[0].item()),), attr("output_datatype", _FLOAT))
        if op == "NonZero":  # as many as the input has elements, at most
            nonzero = int(np.count_nonzero(values[0])) if values[0] is not None else math.prod(shapes[0])
            return _Known((len(shapes[0]), nonzero), _INT64)
        if op == "Einsum":
            return _Known(_einsum(attr("equation").decode(), shapes), dtype)
        if op == "Split":
            axis = attr("axis", 0) % len(shapes[0])
            parts = len(node["outputs"])
            given = values[1] if len(values) > 1 and node["inputs"][1] else attr("split")
            if given is None:
                step = -(-shapes[0][axis] // parts)
                sizes = [min(step, max(shapes[0][axis] - step * k, 0)) for k in range(parts)]
            else:
                sizes = [int(d) for d in np.ravel(given)]
            if sum(sizes) != shapes[0][axis] or len(sizes) != parts:
                raise ValueError("a split that does not add up")
            bounds = np.cumsum(sizes)[:-1]
            return [
                small((*shapes[0][:axis], size, *shapes[0][axis + 1 :]), dtype, lambda k=k: np.split(values[0], bounds, axis=axis)[k])
                for k, size in enumerate(sizes)
            ]
        if op == "MatMul":
            a, b = shapes[0], shapes[1]
            batch = _broadcast(a[:-2], b[:-2])
            return _Known((*batch, *a[-2:-1], *b[-1:]), dtype)
        if op == "Gemm":
            a, b = shapes[0], shapes[1]
            return _Known((a[1] if attr("transA", 0) else a[0], b[0] if attr("transB", 0) else b[1]), dtype)
        if op == "Gather":
            axis = attr("axis", 0) % len(shapes[0])
            shape = (*shapes[0][:axis], *shapes[1], *shapes[0][axis + 1 :])
            return small(shape, dtype, lambda: np.take(values[0], values[1], axis=axis))
        if op == "Concat":
            axis = attr("axis", 0) % len(shapes[0])
            shape = (*shapes[0][:axis], sum(s[axis] for s in shapes), *shapes[0][axis + 1 :])
            return small(shape, dtype, lambda: np.concatenate(values, axis=axis))
        if op in _BROADCAST or op in _COMPARE or op == "Where":
            shape = _broadcast(*shapes)
            kind = _BOOL if op in _COMPARE else ins[1].dtype if op == "Where" else dtype
            if op == "Mod" and len(values) == 2 and all(v is not None for v in values):  # fmod: the dividend's sign
                return small(shape, kind, lambda: (np.fmod if attr("fmod", 0) else np.mod)(*values))
            if op in _VALUES and all(v is not None for v in values):
                return small(shape, kind, lambda: _VALUES[op](*values))
            return _Known(shape, kind)
        if op in _UNARY or op in ("Cast", "CastLike"):
            kind = {"Cast": attr("to", dtype), "CastLike": ins[-1].dtype}.get(op, dtype)
            if (op in _VALUES or op == "Cast") and values[0] is not None:
                return small(shapes[0], kind, lambda: _VALUES.get(op, lambda a: a)(values[0]))
            return _Known(shapes[0], kind)
        if op == "Transpose":
            perm = attr("perm") or list(reversed(range(len(shapes[0]))))
            return small(tuple(shapes[0][p] for p in perm), dtype, lambda: np.transpose(values[0], perm))
        if op == "Reshape":
            wanted = [int(d) for d in values[1]]
            shape = [shapes[0][i] if d == 0 and not attr("allowzero", 0) else d for i, d in enumerate(wanted)]
            if -1 in shape:
                rest = math.prod(d for d in shape if d != -1)
                shape[shape.index(-1)] = math.prod(shapes[0]) // rest if rest else 0
            return small(tuple(shape), dtype, lambda: np.reshape(values[0], shape))
        if op == "Flatten":
            axis = attr("axis", 1) % (len(shapes[0]) + 1)
            shape = (math.prod(shapes[0][:axis]), math.prod(shapes[0][axis:]))
            return small(shape, dtype, lambda: np.reshape(values[0], shape))
        if op == "Unsqueeze":
            rank = len(shapes[0]) + len(np.ravel(values[1] if len(values) > 1 else attr("axes")))
            shape = list(shapes[0])
            for axis in sorted(axes_of(1, rank) or ()):
                shape.insert(axis, 1)
            return small(tuple(shape), dtype, lambda: np.reshape(values[0], shape))
        if op == "Squeeze":
            axes = axes_of(1, len(shapes[0]))
            shape = [d for i, d in enumerate(shapes[0]) if not (d == 1 if axes is None else i in axes)]
            return small(tuple(shape), dtype, lambda: np.reshape(values[0], shape))
        if op == "Shape":
            dims = shapes[0][attr("start", 0) : attr("end", len(shapes[0]))]
            return small((len(dims),), _INT64, lambda: dims)
        if op == "Size":
            return small((), _INT64, lambda: math.prod(shapes[0]))
        if op.startswith("Reduce") or op in ("ArgMax", "ArgMin"):
            rank = len(shapes[0])
            axes = [attr("axis", 0) % rank] if op.startswith("Arg") else axes_of(1, rank)
            if axes is None:
                axes = [] if attr("noop_with_empty_axes", 0) else list(range(rank))
            keep = attr("keepdims", 1)
            shape = tuple(1 if i in axes else d for i, d in enumerate(shapes[0]) if keep or i not in axes)
            kind = _INT64 if op.startswith("Arg") else dtype
            reduce = {"ReduceSum": np.sum, "ReduceProd": np.prod, "ReduceMax": np.max, "ReduceMin": np.min}.get(op)
            if reduce is not None and values[0] is not None:
                return small(shape, kind, lambda: reduce(values[0], axis=tuple(axes), keepdims=bool(keep)))
            return _Known(shape, kind)
        if op == "Slice":
            rank = len(shapes[0])

            def read(index: int, name: str) -> list[int] | None:
                found = values[index] if len(values) > index and node["inputs"][index] else attr(name)
                return None if found is None else [int(x) for x in np.ravel(found)]

            starts, ends = read(1, "starts"), read(2, "ends")
            axes = [a % rank for a in read(3, "axes") or range(len(starts))]
            steps = read(4, "steps") or [1] * len(starts)
            cuts = [slice(None)] * rank
            for axis, begin, stop, step in zip(axes, starts, ends, steps, strict=True):
                cuts[axis] = slice(begin, stop, step)
            shape = tuple(len(range(*cut.indices(d))) for cut, d in zip(cuts, shapes[0], strict=True))
            return small(shape, dtype, lambda: values[0][tuple(cuts)])
        return _UNKNOWN
