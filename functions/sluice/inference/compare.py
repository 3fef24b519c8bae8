"""How a mirror's answer compares with the primary's. Pure NumPy."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sluice.domain.results import InferenceResult
    from sluice.domain.signature import Signature


def _aligned_probs(signature: Signature, result: InferenceResult, *, by_column: bool = False) -> dict[str, np.ndarray] | None:
    """A probabilities output's columns by class; by column number where `by_column` (or the
    answer names no classes)."""
    spec = signature.output_with_role("probabilities")
    if spec is None or spec.name not in result.outputs:
        return None
    probs = np.asarray(result.outputs[spec.name], dtype=np.float64)
    classes = (None if by_column else result.classes.get(spec.name)) or list(range(probs.shape[1]))
    return {str(c): probs[:, j] for j, c in enumerate(classes)}


def _named_classes(signature: Signature, result: InferenceResult) -> bool | None:
    """Whether the answer names its probabilities' classes (None: it has no probabilities)."""
    spec = signature.output_with_role("probabilities")
    return None if spec is None or spec.name not in result.outputs else spec.name in result.classes


def compare(
    primary_sig: Signature,
    primary: InferenceResult,
    mirror_sig: Signature,
    mirror: InferenceResult,
) -> tuple[dict[str, float], dict[str, float]]:
    """Counters (sums) and maxima for one request: label agreement per row, absolute
    differences of probabilities (aligned by class) or of values (matched by output).

    A row whose differences are not all finite numbers (an answer of NaN or infinite
    probabilities or values, or differences too large to square and sum) is left out of the
    differences and counted on its own (`diff_not_finite`, in rows): one such answer must
    not turn the running sums, and so the mean for every later request, into NaN. So are the
    rows of largest differences while the request's sum of squares would not be finite
    (finite rows far apart: two differences of 1e154): the sums handed on are always finite."""
    sums: dict[str, float] = {"compared": 1}
    maxes: dict[str, float] = {}
    p_label, m_label = primary_sig.output_with_role("label"), mirror_sig.output_with_role("label")
    if p_label and m_label and p_label.name in primary.outputs and m_label.name in mirror.outputs:
        a = np.asarray(primary.outputs[p_label.name]).reshape(-1)
        b = np.asarray(mirror.outputs[m_label.name]).reshape(-1)
        if a.shape == b.shape:
            sums["labelled"] = float(a.size)
            sums["agree"] = float(agreeing(a, b))
    diffs = _differences(primary_sig, primary, mirror_sig, mirror)
    if diffs:
        with np.errstate(over="ignore", invalid="ignore"):  # a square past float64's largest: not finite, left out
            squares = [np.square(d).sum(axis=1) for d in diffs]
        if len({len(s) for s in squares}) == 1:  # the outputs' rows are the request's rows: a row in or out whole
            kept, sumsq = _kept(np.sum(squares, axis=0))
            finite = [kept] * len(diffs)
        else:
            kept, sumsq = _kept(np.concatenate(squares))
            finite = np.split(kept, np.cumsum([len(s) for s in squares])[:-1])
        left_out = int(np.count_nonzero(~kept))
        flat = np.concatenate([d[f].reshape(-1) for d, f in zip(diffs, finite, strict=True)])
        # Each |d| is at most its square past 1 and at most 1 below: the sum is finite where the squares' is.
        sums.update(diff_sum=float(flat.sum()), diff_sumsq=sumsq, diff_n=float(flat.size))
        if left_out:
            sums["diff_not_finite"] = float(left_out)
        if flat.size:
            maxes["diff_max"] = float(flat.max())
        elif not left_out:
            maxes["diff_max"] = 0.0
    return sums, maxes


def _kept(rows: np.ndarray) -> tuple[np.ndarray, float]:
    """Which rows (each the sum of its squared differences) the sums keep, and the sum of
    theirs: the finite ones, the largest left out while their sum would not be finite."""
    keep = np.isfinite(rows)
    order = np.argsort(np.where(keep, rows, np.inf), kind="stable")
    with np.errstate(over="ignore", invalid="ignore"):
        running = np.cumsum(rows[order])  # not finite from the first row that takes it past float64's largest
    within = np.isfinite(running)
    keep[order[~within]] = False
    return keep, float(running[within][-1]) if within.any() else 0.0


def _differences(
    primary_sig: Signature, primary: InferenceResult, mirror_sig: Signature, mirror: InferenceResult
) -> list[np.ndarray]:
    """The absolute differences, each of shape (rows, k): the probabilities' (a column per
    class), or each value output's."""
    diffs: list[np.ndarray] = []
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: NaN, left out by the caller
        # One side names its classes, the other does not (a model whose graph says its labels
        # beside one that answers bare columns): the columns compared in order, as scikit-learn
        # orders both, never the labels against column numbers.
        named = {_named_classes(primary_sig, primary), _named_classes(mirror_sig, mirror)}
        by_column = named == {True, False}
        p_probs, m_probs = _aligned_probs(primary_sig, primary, by_column=by_column), _aligned_probs(mirror_sig, mirror, by_column=by_column)
        if p_probs is not None and m_probs is not None:
            rows = len(next(iter(p_probs.values())))
            columns = [
                np.abs(p_probs.get(cls, np.zeros(rows)) - m_probs.get(cls, np.zeros(rows)))
                for cls in p_probs.keys() | m_probs.keys()
            ]
            if columns:
                diffs.append(np.stack(columns, axis=1))
        else:
            for spec in primary_sig.outputs:
                if spec.role == "value" and spec.name in primary.outputs and spec.name in mirror.outputs:
                    a, b = np.asarray(primary.outputs[spec.name]), np.asarray(mirror.outputs[spec.name])
                    if a.dtype.kind not in "biuf" or b.dtype.kind not in "biuf":  # text (BYTES): no difference to measure
                        continue
                    a, b = a.astype(np.float64), b.astype(np.float64)
                    if a.shape == b.shape:
                        diffs.append(_by_row(np.abs(a - b)))
    return diffs


def _by_row(d: np.ndarray) -> np.ndarray:
    """`d` as (rows, values of a row); a scalar is one row of one value."""
    if d.ndim == 0:
        return d.reshape(1, 1)
    return d.reshape(d.shape[0], int(np.prod(d.shape[1:])))


def agreeing(a: np.ndarray, b: np.ndarray) -> int:
    """How many labels of `a` name the class `b`'s do, by the rule monitoring compares a
    prediction with its label (`class_word`): 1 and 1.0 are one class (as text they were two,
    and a candidate whose label output is a float disagreed with every row of its stable)."""
    if a.dtype.kind in "biuf" and b.dtype.kind in "biuf":
        return int(np.count_nonzero(a == b))
    from sluice.monitor.quality import class_word

    return sum(class_word(x) == class_word(y) for x, y in zip(a.tolist(), b.tolist(), strict=True))
