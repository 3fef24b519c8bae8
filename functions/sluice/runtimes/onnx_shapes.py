"""The shapes (and, where small, the values) that ONNX operators make of constant inputs: the
rules `sluice.runtimes.onnx_constants` sizes a model's constant part by, and how a tensor is
known to it (`Known`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable

VALUE_ELEMENTS = 4096  # the values of tensors this small are read and computed (shapes, repeats, ranges); of larger ones, the shape

# TensorProto.DataType: the bytes an element takes (a string's, as a pointer would), and the
# numpy type of those whose values are read.
ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 8: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 14: 8, 15: 16, 16: 2}
NUMPY = {1: "<f4", 2: "u1", 3: "i1", 4: "<u2", 5: "<i2", 6: "<i4", 7: "<i8", 9: "?", 11: "<f8", 12: "<u4", 13: "<u8"}
FLOAT, INT64, BOOL = 1, 7, 9

UNARY = frozenset((
    "Identity", "Neg", "Abs", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
    "Exp", "Log", "Sqrt", "Relu", "Sigmoid", "Tanh", "Floor", "Ceil", "Round", "Sign", "Not", "Reciprocal", "Erf",
    "Elu", "Selu", "LeakyRelu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "ThresholdedRelu", "Celu", "Gelu",
    "Mish", "Softmax", "LogSoftmax", "Hardmax", "CumSum", "Clip", "BitwiseNot", "Dropout", "Shrink", "Trilu",
    "LpNormalization", "LayerNormalization", "InstanceNormalization", "BatchNormalization", "GroupNormalization",
    "RMSNormalization", "MeanVarianceNormalization", "LRN", "ReverseSequence", "ScatterND", "ScatterElements", "Scatter",
))
BROADCAST = frozenset((
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "PRelu", "BitShift", "BitwiseAnd",
    "BitwiseOr", "BitwiseXor", "And", "Or", "Xor",
))
COMPARE = frozenset((
    "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "IsNaN", "IsInf",
))
VALUES: dict[str, Callable[..., Any]] = {
    "Identity": lambda a: a, "Neg": np.negative, "Abs": np.abs, "Floor": np.floor, "Ceil": np.ceil, "Sqrt": np.sqrt,
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Pow": np.power, "Where": np.where,
    "Max": lambda *a: reduce(np.maximum, a), "Min": lambda *a: reduce(np.minimum, a), "Sum": lambda *a: reduce(np.add, a),
    "Div": lambda a, b: np.trunc(a / b).astype(a.dtype) if a.dtype.kind in "iu" else a / b,
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Known:
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
        return math.prod(self.shape) * ITEMSIZE.get(self.dtype, 4) if self.shape is not None else self.most or 0


UNKNOWN = Known(None, 0)


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    rank = max(map(len, shapes))
    out = []
    for dims in zip(*((1,) * (rank - len(s)) + s for s in shapes), strict=True):
        sized = {d for d in dims if d != 1}
        if len(sized) > 1:
            raise ValueError("shapes that do not broadcast")
        out.append(sized.pop() if sized else 1)
    return tuple(out)


def einsum(equation: str, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
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
    broadcast = broadcast_shape(*ellipses) if ellipses else ()
    if not arrow:
        letters = terms.replace(",", "").replace("...", "")
        result = "..." + "".join(sorted(x for x in set(letters) if letters.count(x) == 1))
    head, dots, tail = result.partition("...")
    return (*(sizes[x] for x in head), *(broadcast if dots else ()), *(sizes[x] for x in tail))




def output_of(walk: Any, node: dict[str, Any], ins: list[Known | None]) -> Known | list[Known]:
    """The output(s) of `node`, whose inputs are all constants, as its rule works them out from
    `ins` (`walk`: the graph being read, for the node's attributes and the model's opset); a
    rule that cannot be followed raises (the caller counts the output unknown)."""
    op, attr = node["op"], lambda name, default=None: walk.attribute(node, name, default)
    # What a node lacks (an input not given, a shape not known) fails its rule: `compute` says unknown.
    shapes: list[Any] = [k.shape if k is not None else None for k in ins]
    values: list[Any] = [k.value if k is not None else None for k in ins]
    first = ins[0] if ins else None
    dtype = first.dtype if first is not None else 0

    def small(shape: tuple[int, ...], dtype: int, make: Callable[[], Any]) -> Known:
        """The output's shape, and its value where it is small and its inputs' values are
        held (a row of a large table has a shape but no value here: the shape stands)."""
        value = None
        if math.prod(shape) <= VALUE_ELEMENTS and dtype in NUMPY:
            try:
                with np.errstate(all="ignore"):
                    value = np.asarray(make()).astype(NUMPY[dtype]).reshape(shape)
            except Exception:  # an input's value not held (past VALUE_ELEMENTS): the size is still known
                value = None
        return Known(tuple(int(d) for d in shape), dtype, value)

    def axes_of(index: int, rank: int) -> list[int] | None:
        given = values[index] if len(values) > index and node["inputs"][index] else attr("axes")
        return None if given is None else [int(a) % rank if rank else 0 for a in np.ravel(given)]

    if op == "Constant":
        for name in ("value", "sparse_value"):
            if name in walk.attributes(node):
                return attr(name)
        for name, kind in (("value_int", INT64), ("value_ints", INT64), ("value_float", FLOAT), ("value_floats", FLOAT)):
            if name in walk.attributes(node):
                given = np.array(attr(name), dtype=NUMPY[kind])
                return Known(given.shape, kind, given)
        return UNKNOWN
    if op == "ConstantOfShape":
        fill = attr("value") or Known((1,), FLOAT, np.zeros(1, dtype="<f4"))
        shape = tuple(int(d) for d in values[0])
        return small(shape, fill.dtype, lambda: np.full(shape, fill.value.ravel()[0]))
    if op in ("RandomNormal", "RandomUniform"):
        return Known(tuple(attr("shape")), attr("dtype", FLOAT))
    if op in ("RandomNormalLike", "RandomUniformLike", "Bernoulli", "EyeLike"):
        return Known(shapes[0], attr("dtype", dtype))
    if op == "Expand":
        shape = broadcast_shape(shapes[0], tuple(int(d) for d in values[1]))
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
        return Known((*shapes[0][:axis], int(values[1].item()), *shapes[0][axis:]), ins[2].dtype)
    if op == "Pad":
        pads = [int(p) for p in (values[1] if len(values) > 1 else attr("pads"))]
        rank = len(shapes[0])
        axes = axes_of(3, rank) or list(range(rank))
        shape = list(shapes[0])
        for i, axis in enumerate(axes):
            shape[axis] += pads[i] + pads[i + len(axes)]
        return Known(tuple(shape), dtype)
    if op in ("Resize", "Upsample"):
        if op == "Resize" and walk.opset >= 11 and len(values) > 3 and node["inputs"][3]:
            return Known(tuple(int(d) for d in values[3]), dtype)
        scales = values[2] if op == "Resize" and walk.opset >= 11 else values[1] if len(values) > 1 else attr("scales")
        return Known(tuple(math.floor(d * s) for d, s in zip(shapes[0], np.ravel(scales), strict=True)), dtype)
    if op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
        return Known((int(values[0].item()),), attr("output_datatype", FLOAT))
    if op == "NonZero":  # as many as the input has elements, at most
        nonzero = int(np.count_nonzero(values[0])) if values[0] is not None else math.prod(shapes[0])
        return Known((len(shapes[0]), nonzero), INT64)
    if op == "Einsum":
        return Known(einsum(attr("equation").decode(), shapes), dtype)
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
        batch = broadcast_shape(a[:-2], b[:-2])
        return Known((*batch, *a[-2:-1], *b[-1:]), dtype)
    if op == "Gemm":
        a, b = shapes[0], shapes[1]
        return Known((a[1] if attr("transA", 0) else a[0], b[0] if attr("transB", 0) else b[1]), dtype)
    if op == "Gather":
        axis = attr("axis", 0) % len(shapes[0])
        shape = (*shapes[0][:axis], *shapes[1], *shapes[0][axis + 1 :])
        return small(shape, dtype, lambda: np.take(values[0], values[1], axis=axis))
    if op == "Concat":
        axis = attr("axis", 0) % len(shapes[0])
        shape = (*shapes[0][:axis], sum(s[axis] for s in shapes), *shapes[0][axis + 1 :])
        return small(shape, dtype, lambda: np.concatenate(values, axis=axis))
    if op in BROADCAST or op in COMPARE or op == "Where":
        shape = broadcast_shape(*shapes)
        kind = BOOL if op in COMPARE else ins[1].dtype if op == "Where" else dtype
        if op == "Mod" and len(values) == 2 and all(v is not None for v in values):  # fmod: the dividend's sign
            return small(shape, kind, lambda: (np.fmod if attr("fmod", 0) else np.mod)(*values))
        if op in VALUES and all(v is not None for v in values):
            return small(shape, kind, lambda: VALUES[op](*values))
        return Known(shape, kind)
    if op in UNARY or op in ("Cast", "CastLike"):
        kind = {"Cast": attr("to", dtype), "CastLike": ins[-1].dtype}.get(op, dtype)
        if (op in VALUES or op == "Cast") and values[0] is not None:
            return small(shapes[0], kind, lambda: VALUES.get(op, lambda a: a)(values[0]))
        return Known(shapes[0], kind)
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
        return small((len(dims),), INT64, lambda: dims)
    if op == "Size":
        return small((), INT64, lambda: math.prod(shapes[0]))
    if op.startswith("Reduce") or op in ("ArgMax", "ArgMin"):
        rank = len(shapes[0])
        axes = [attr("axis", 0) % rank] if op.startswith("Arg") else axes_of(1, rank)
        if axes is None:
            axes = [] if attr("noop_with_empty_axes", 0) else list(range(rank))
        keep = attr("keepdims", 1)
        shape = tuple(1 if i in axes else d for i, d in enumerate(shapes[0]) if keep or i not in axes)
        kind = INT64 if op.startswith("Arg") else dtype
        reduce = {"ReduceSum": np.sum, "ReduceProd": np.prod, "ReduceMax": np.max, "ReduceMin": np.min}.get(op)
        if reduce is not None and values[0] is not None:
            return small(shape, kind, lambda: reduce(values[0], axis=tuple(axes), keepdims=bool(keep)))
        return Known(shape, kind)
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
    return UNKNOWN
