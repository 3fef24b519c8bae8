"""How a mirror's answer compares with the primary's. Pure NumPy."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sluice.domain.results import InferenceResult
    from sluice.domain.signature import Signature


def _aligned_probs(signature: Signature, result: InferenceResult) -> dict[str, np.ndarray] | None:
    spec = signature.output_with_role("probabilities")
    if spec is None or spec.name not in result.outputs:
        return None
    probs = np.asarray(result.outputs[spec.name], dtype=np.float64)
    classes = result.classes.get(spec.name) or list(range(probs.shape[1]))
    return {str(c): probs[:, j] for j, c in enumerate(classes)}


def compare(
    primary_sig: Signature,
    primary: InferenceResult,
    mirror_sig: Signature,
    mirror: InferenceResult,
) -> tuple[dict[str, float], dict[str, float]]:
    """Counters (sums) and maxima for one request: label agreement per row, absolute
    differences of probabilities (aligned by class) or of values (matched by output)."""
    sums: dict[str, float] = {"compared": 1}
    maxes: dict[str, float] = {}
    p_label, m_label = primary_sig.output_with_role("label"), mirror_sig.output_with_role("label")
    if p_label and m_label and p_label.name in primary.outputs and m_label.name in mirror.outputs:
        a = np.asarray(primary.outputs[p_label.name]).reshape(-1)
        b = np.asarray(mirror.outputs[m_label.name]).reshape(-1)
        if a.shape == b.shape:
            sums["labelled"] = float(a.size)
            sums["agree"] = float(np.sum(a.astype(str) == b.astype(str)))
    diffs: list[np.ndarray] = []
    p_probs, m_probs = _aligned_probs(primary_sig, primary), _aligned_probs(mirror_sig, mirror)
    if p_probs is not None and m_probs is not None:
        for cls in p_probs.keys() | m_probs.keys():
            rows = len(next(iter(p_probs.values())))
            diffs.append(np.abs(p_probs.get(cls, np.zeros(rows)) - m_probs.get(cls, np.zeros(rows))))
    else:
        for spec in primary_sig.outputs:
            if spec.role == "value" and spec.name in primary.outputs and spec.name in mirror.outputs:
                a = np.asarray(primary.outputs[spec.name], dtype=np.float64)
                b = np.asarray(mirror.outputs[spec.name], dtype=np.float64)
                if a.shape == b.shape:
                    diffs.append(np.abs(a - b).reshape(-1))
    if diffs:
        flat = np.concatenate(diffs)
        sums.update(diff_sum=float(flat.sum()), diff_sumsq=float(np.square(flat).sum()), diff_n=float(flat.size))
        maxes["diff_max"] = float(flat.max()) if flat.size else 0.0
    return sums, maxes
