"""Which tensors a `transform` node gives hold finite numbers whatever the rows, worked out
from its ops alone (`sluice.routing.transforms.Plan.finite`): a model step fed by a transform
looks for NaN and infinity only where an op could have made them. Ops that divide
(standardize, min_max), log1p (of -1 or less), a cast or a concat of FP64 into FP32 may; so
may anything taken from a model's answer (a later step's inputs), and an op whose parameters
are not finite. Codes, labels, integers and ops that keep finite numbers finite (select,
clip, fill, softmax, platt, top_k) do not."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.domain.transforms import Transform

_MAY_OVERFLOW = ("standardize", "min_max", "log1p")  # a division, or log1p at or below -1
_INHERIT = ("select", "clip", "fill", "softmax", "platt", "top_k")  # finite in, finite out


def finite_outputs(node: Transform, *, checked: bool) -> frozenset[str]:
    """The tensors `node` gives whose numbers are finite whatever the rows. Inputs are finite
    when `checked` (and the node declares them: a first step); a later step's inputs are a
    model's outputs, which nothing checked. Each tensor is followed by (datatype or None,
    whether it may hold NaN or infinity)."""
    given = checked and node.inputs is not None
    state: dict[str, tuple[str | None, bool]] = {s.name: (s.datatype, False) for s in node.inputs or ()} if given else {}

    def of(name: str) -> tuple[str | None, bool]:
        return state.get(name, (None, True))

    for op in node.ops:
        kind = op.op
        if kind == "keep":
            state = {name: of(name) for name in op.names}
            continue
        if kind == "concat":
            parts = [of(name) for name in op.inputs]
            state[op.output] = ("FP32", any(maybe or datatype in ("FP64", None) for datatype, maybe in parts))
            continue
        datatype, maybe = of(op.input)
        floated = None if datatype is None else "FP64" if datatype == "FP64" else "FP32"
        if kind == "rename":
            state.pop(op.input, None)
            made = (datatype, maybe)
        elif kind in _INHERIT:
            made = (datatype if kind in ("select", "clip") else floated, maybe or not _finite_parameters(op))
        elif kind in _MAY_OVERFLOW:
            made = (floated, True)
        elif kind == "cast":
            narrowed = op.datatype == "FP32" and datatype in ("FP64", None)
            made = (op.datatype, op.datatype in ("FP32", "FP64") and (maybe or narrowed))
        else:  # integers, codes and labels, whatever the values: only an ordinal's `unknown` may not be finite
            made = (_MADE[kind](op), not _finite_parameters(op) and kind == "ordinal")
        state[op.target] = made
        if kind == "top_k":
            state[op.indices] = ("INT64", False)
    return frozenset(name for name, (_, maybe) in state.items() if not maybe)


_MADE: dict[str, Callable[[Any], str]] = {
    "bucketize": lambda op: "INT64", "hash": lambda op: "INT64", "one_hot": lambda op: "FP32", "ordinal": lambda op: "FP32",
    "argmax": lambda op: "BYTES" if op.labels else "INT64", "threshold": lambda op: "BYTES" if op.labels else "BOOL",
}  # fmt: skip


def _finite_parameters(op: Any) -> bool:
    """No parameter of `op` is NaN or infinite (a policy's JSON may hold them), nor past what
    FP32 holds: an op computes in its tensor's type, where such a number is infinite."""
    for value in vars(op).values():
        for number in value if isinstance(value, list) else (value,):
            if type(number) in (int, float) and not abs(number) <= FP32_MAX:  # NaN too
                return False
    return True


FP32_MAX = 3.4028234663852886e38  # FP32's largest finite number
