"""Ensemble aggregators: combine members' answers row by row. Pure NumPy.

Classifier members are aligned by class label (members may order their classes differently);
regressor members must give values of one shape.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.domain.errors import BackendError
from sluice.domain.results import InferenceResult

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice.domain.signature import Signature

CLASSIFIER_ONLY = frozenset({"majority", "soft_vote"})


@dataclass(frozen=True, slots=True)
class Answer:
    """One member's successful answer."""

    name: str
    weight: float
    signature: Signature
    result: InferenceResult


def _probabilities(answer: Answer) -> tuple[list[Any], np.ndarray] | None:
    spec = answer.signature.output_with_role("probabilities")
    if spec is None or spec.name not in answer.result.outputs:
        return None
    probs = np.asarray(answer.result.outputs[spec.name], dtype=np.float64)
    classes = answer.result.classes.get(spec.name) or list(range(probs.shape[1]))
    return list(classes), probs


def _rows(result: InferenceResult) -> int:
    first = next(iter(result.outputs.values()), None)
    return 1 if first is None or np.ndim(first) == 0 else len(first)


def _labels(answer: Answer) -> np.ndarray | None:
    spec = answer.signature.output_with_role("label")
    if spec is None or spec.name not in answer.result.outputs:
        return None
    return np.asarray(answer.result.outputs[spec.name]).reshape(-1)


def _values(answer: Answer) -> np.ndarray:
    spec = next((s for s in answer.signature.outputs if s.role == "value"), None)
    if spec is None or spec.name not in answer.result.outputs:
        raise BackendError(f"member '{answer.name}' gave no value output to aggregate")
    return np.asarray(answer.result.outputs[spec.name], dtype=np.float64)


def _combine(stack: np.ndarray, weights: np.ndarray, how: str) -> np.ndarray:
    if how in ("mean", "soft_vote"):
        return stack.mean(axis=0)
    if how == "weighted_mean":
        return np.tensordot(weights / weights.sum(), stack, axes=1)
    if how == "max":
        return stack.max(axis=0)
    if how == "median":
        return np.median(stack, axis=0)
    raise ValueError(how)


def aggregate(how: str, answers: Sequence[Answer]) -> InferenceResult:
    """Combine answers into one result shaped like the first member's outputs."""
    first = answers[0]
    if _rows(first.result) == 0:  # nothing to combine: the first member's empty answer is the answer
        return first.result
    weights = np.asarray([a.weight for a in answers], dtype=np.float64)
    if weights.sum() <= 0:  # every member weighs 0 (or the answering ones do): they count alike
        weights = np.ones_like(weights)
    label_spec = first.signature.output_with_role("label")
    prob_spec = first.signature.output_with_role("probabilities")
    if label_spec is None and prob_spec is None:
        stacked = np.stack([_values(a) for a in answers])
        value_spec = next(s for s in first.signature.outputs if s.role == "value")
        combined = _combine(stacked, weights, how).astype(first.result.outputs[value_spec.name].dtype)
        return InferenceResult({value_spec.name: combined})
    if how == "majority":
        return _majority(answers, weights)
    per_member = [_probabilities(a) for a in answers]
    if any(p is None for p in per_member):
        raise BackendError("every member must give probabilities for this aggregator")
    classes: list[Any] = []
    for member_classes, _ in per_member:  # type: ignore[misc]
        classes += [c for c in member_classes if c not in classes]
    index = {c: i for i, c in enumerate(classes)}
    rows = per_member[0][1].shape[0]  # type: ignore[index]
    stack = np.zeros((len(answers), rows, len(classes)))
    for k, (member_classes, probs) in enumerate(per_member):  # type: ignore[misc]
        for j, c in enumerate(member_classes):
            stack[k, :, index[c]] = probs[:, j]
    combined = _combine(stack, weights, how)
    labels = np.asarray([classes[i] for i in combined.argmax(axis=1)])
    return _classifier_result(first, labels, combined.astype(np.float32), classes)


def _majority(answers: Sequence[Answer], weights: np.ndarray) -> InferenceResult:
    votes = [_labels(a) for a in answers]
    if any(v is None for v in votes):
        raise BackendError("every member must give a label for a majority vote")
    for answer, vote in zip(answers, votes, strict=True):
        if _holds_nan(vote):  # type: ignore[arg-type]
            raise BackendError(f"member '{answer.name}' answered a NaN label, which is no class to vote for", member=answer.name)
    rows = len(votes[0])  # type: ignore[arg-type]
    # The members' classes (as soft_vote aligns them), so a row's shares are the same among any
    # other rows; a label no member lists (a member without probabilities) comes after them.
    classes: list[Any] = []
    for answer in answers:
        spec = answer.signature.output_with_role("probabilities")
        classes += [c for c in (answer.result.classes.get(spec.name) or ()) if c not in classes] if spec is not None else []
    classes += [c for c in dict.fromkeys(c for v in votes for c in v.tolist()) if c not in classes]  # type: ignore[union-attr]
    labels, shares = [], np.zeros((rows, len(classes)), dtype=np.float32)
    for i in range(rows):
        tally: Counter[Any] = Counter()
        for k, v in enumerate(votes):
            tally[v[i].item() if hasattr(v[i], "item") else v[i]] += weights[k]  # type: ignore[index]
        # Ties go to the label of the earliest member among the tied (stable, documented).
        top = max(tally.values())
        winner = next(v[i] for v in votes if tally[v[i].item() if hasattr(v[i], "item") else v[i]] == top)  # type: ignore[index]
        labels.append(winner)
        for label, count in tally.items():
            shares[i, classes.index(label)] = count / weights.sum()
    return _classifier_result(answers[0], np.asarray(labels), shares, classes)


def _holds_nan(labels: np.ndarray) -> bool:
    """Whether labels hold a NaN: it equals no label, itself included, so it can neither be
    counted nor named among the classes. Text labels (the common case) are not looked at."""
    if labels.dtype.kind in "fc":
        return bool(np.isnan(labels).any())
    if labels.dtype == object:
        return any(isinstance(v, float | np.floating) and math.isnan(v) for v in labels.tolist())
    return False


def _classifier_result(first: Answer, labels: np.ndarray, probs: np.ndarray, classes: list[Any]) -> InferenceResult:
    outputs: dict[str, np.ndarray] = {}
    result_classes: dict[str, list[Any]] = {}
    label_spec = first.signature.output_with_role("label")
    prob_spec = first.signature.output_with_role("probabilities")
    if label_spec is not None:
        original = first.result.outputs.get(label_spec.name)
        outputs[label_spec.name] = labels.astype(original.dtype) if original is not None and original.dtype != object else labels
    if prob_spec is not None:
        outputs[prob_spec.name] = probs
        result_classes[prob_spec.name] = list(classes)
    return InferenceResult(outputs, result_classes)


def check_fits(how: str, signatures: Sequence[Signature]) -> str | None:
    """Why `how` cannot combine members with these signatures, or None when it can."""
    kinds = {"classifier" if s.is_classifier or s.output_with_role("probabilities") else "regressor" for s in signatures}
    if len(kinds) > 1:
        return "members mix classifiers and regressors"
    if how == "first_success":
        return None
    if how in CLASSIFIER_ONLY and kinds == {"regressor"}:
        return f"'{how}' needs classifiers (label or probability outputs)"
    if how == "majority" and any(s.output_with_role("label") is None for s in signatures):
        return "'majority' needs a label output on every member"
    if kinds == {"classifier"} and how != "majority" and any(s.output_with_role("probabilities") is None for s in signatures):
        return f"'{how}' over classifiers needs a probability output on every member"
    if kinds == {"regressor"}:
        shapes = {tuple(next((o.shape for o in s.outputs if o.role == "value"), ())) for s in signatures}
        if len(shapes) > 1:
            return "members' value outputs have different shapes"
    return None
