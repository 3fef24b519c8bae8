"""Checks every request against the target version's signature before a runtime sees it."""

from __future__ import annotations

import warnings
from math import isfinite
from typing import TYPE_CHECKING

import numpy as np

from sluice.caching import keep
from sluice.codecs.casts import cast_exact, holds_text
from sluice.codecs.datatypes import FLOAT_TYPES, V2_TO_NUMPY
from sluice.domain.errors import InvalidInput, NotFinite, PayloadTooLarge

# A number past a float input's range (3.5e38 for FP32) becomes infinite as it is read, and the
# check below refuses it saying so: NumPy's warning of the same, printed on stderr once per place
# (a stream's or a worker's log), says nothing more.
warnings.filterwarnings("ignore", "overflow encountered in cast", RuntimeWarning)

if TYPE_CHECKING:
    from collections.abc import Collection

    from sluice.domain.signature import Signature, TensorSpec


def check_shape(spec: TensorSpec, shape: tuple[int, ...], *, field: str) -> None:
    if len(shape) != len(spec.shape):
        raise InvalidInput(
            f"input '{spec.name}' needs {len(spec.shape)} dimensions {_show(spec.shape)}, got {list(shape)}",
            field=f"{field}.shape",
        )
    for axis, (want, got) in enumerate(zip(spec.shape, shape, strict=True)):
        if want != -1 and want != got:
            raise InvalidInput(
                f"input '{spec.name}' needs size {want} on axis {axis} {_show(spec.shape)}, got {list(shape)}",
                field=f"{field}.shape",
            )


def _show(shape: tuple[int, ...]) -> str:
    return "(shape [" + ", ".join("?" if d == -1 else str(d) for d in shape) + "])"


def check_inputs(
    signature: Signature,
    arrays: dict[str, np.ndarray],
    *,
    max_elements: int,
    datatypes: dict[str, str] | None = None,
    field: str = "inputs",
    finite: Collection[str] = (),
) -> dict[str, np.ndarray]:
    """Return the arrays ready for a runtime, or raise InvalidInput naming the first problem.

    `datatypes` holds the v2 datatype a client declared per input: declared types must match
    exactly (as Triton requires); undeclared ones (plain JSON) are cast to the signature's.
    `finite` names inputs that hold finite numbers by construction (a transform's outputs that
    no op of it could make NaN or infinite): those are not looked through again.
    """
    ready = _checked_at_once(signature.inputs, arrays, max_elements, datatypes, finite)
    if ready is not None:
        return ready
    expected = {spec.name for spec in signature.inputs}
    unexpected = sorted(set(arrays) - expected)
    if unexpected:
        raise InvalidInput(
            f"unexpected input '{unexpected[0]}'; this version takes {sorted(expected)}",
            field=f"{field}.{unexpected[0]}",
        )
    total = 0
    ready: dict[str, np.ndarray] = {}
    for spec in signature.inputs:
        where = f"{field}.{spec.name}"
        array = arrays.get(spec.name)
        if array is None:
            raise InvalidInput(f"missing input '{spec.name}'", field=where)
        declared = (datatypes or {}).get(spec.name)
        if declared is not None and declared != spec.datatype:
            raise InvalidInput(
                f"input '{spec.name}' is {spec.datatype}, not {declared}", field=f"{where}.datatype"
            )
        total += array.size
        if total > max_elements:
            raise PayloadTooLarge(
                f"the request has more than {max_elements} elements; use batch inference for large inputs",
                field=field,
            )
        check_shape(spec, array.shape, field=where)
        dtype = V2_TO_NUMPY[spec.datatype]
        if array.dtype != dtype or spec.datatype == "BYTES":  # an object array's values are looked through too
            try:
                array = cast_exact(array, spec.datatype, dtype)
            except (ValueError, TypeError, OverflowError):
                text = ": text or finite numbers, not null, true/false, an object or a list" if spec.datatype == "BYTES" else ""
                raise InvalidInput(f"input '{spec.name}' must hold {spec.datatype} values{text}", field=where) from None
        if spec.datatype in FLOAT_TYPES and spec.name not in finite and not np.isfinite(array).all():
            past = "" if spec.datatype == "FP64" else f", or numbers past {spec.datatype}'s range"
            raise NotFinite(f"input '{spec.name}' holds NaN or infinite values{past}", field=where)
        ready[spec.name] = array
    return ready


# What a request's inputs most often are (each of the signature's dtype and shape, finite):
# checked in one pass from a plan made once per signature, every problem left to the full
# check above, which names it.
_Plan = tuple[frozenset[str], tuple[tuple[str, str, np.dtype, int, tuple[tuple[int, int], ...], bool], ...]]
_PLANS: dict[int, tuple[tuple[TensorSpec, ...], _Plan]] = {}
_ALL = np.logical_and.reduce  # `ndarray.all` without the Python function it goes through
SMALL = 4096  # up to this many values, counting them is quicker than a reduction (its set-up)
TINY = 32  # up to this many, reading them as Python floats is quicker than either
MAX_PLANS = 256  # signatures met (one per version, transform step): a bound, whatever the traffic


def _plan_of(inputs: tuple[TensorSpec, ...]) -> _Plan:
    found = _PLANS.get(id(inputs))
    if found is not None and found[0] is inputs:
        return found[1]
    plan = (
        frozenset(spec.name for spec in inputs),
        tuple(
            (spec.name, spec.datatype, V2_TO_NUMPY[spec.datatype], len(spec.shape),
             tuple((axis, size) for axis, size in enumerate(spec.shape) if size != -1), spec.datatype in FLOAT_TYPES)
            for spec in inputs
        ),
    )  # fmt: skip
    keep(_PLANS, id(inputs), (inputs, plan), MAX_PLANS)
    return plan


def _checked_at_once(
    inputs: tuple[TensorSpec, ...], arrays: dict[str, np.ndarray], max_elements: int, datatypes: dict[str, str] | None, finite: Collection[str]
) -> dict[str, np.ndarray] | None:
    """The arrays in the signature's order when each already is what the signature says
    (dtype, shape, no NaN or infinity) or numbers cast to a float input's dtype, within
    `max_elements`; None for anything else."""
    names, specs = _plan_of(inputs)
    if arrays.keys() != names:
        return None
    total = 0
    cast: dict[str, np.ndarray] | None = None
    for name, datatype, dtype, ndim, fixed, floats in specs:
        array = arrays[name]
        if array.ndim != ndim or (datatypes and datatypes.get(name, datatype) != datatype):
            return None
        if datatype == "BYTES" and array.dtype == dtype and not holds_text(array, numbers=True):
            return None
        if array.dtype != dtype:
            # Plain JSON numbers (float64, int64) for a float input: cast as the full check casts
            # them (`cast_exact`), the cast values then checked as any; anything else is its own.
            if not floats or array.dtype.kind not in "fiu" or array.size > max_elements:
                return None
            array = array.astype(dtype, copy=False)
            cast = cast or {}
            cast[name] = array
        shape = array.shape
        for axis, size in fixed:
            if shape[axis] != size:
                return None
        if floats and name not in finite:
            if array.size <= TINY:  # a row or two: read as Python floats (NumPy's set-up is the cost)
                if not all(map(isfinite, array.ravel().tolist())):
                    return None
            else:
                ok = np.isfinite(array)
                if not (np.count_nonzero(ok) == ok.size if ok.size <= SMALL else _ALL(ok, axis=None)):
                    return None
        total += array.size
    if total > max_elements:
        return None
    if cast:
        return {name: cast.get(name, arrays[name]) for name, *_ in specs}
    return {name: arrays[name] for name, *_ in specs}
