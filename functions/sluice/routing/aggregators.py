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

from sluice.domain.errors import BackendError, BadRequest
from sluice.domain.results import InferenceResult

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice.domain.signature import Signature, TensorSpec

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


def paired_values(signatures: Sequence[Signature]) -> list[list[TensorSpec]]:
    """Each member's value outputs in the order they are combined: by name where every member
    names the same ones, else by their place; as many as every member has (a member's extra
    outputs are its own, as a policy saved before every value was combined had them)."""
    specs = [[s for s in signature.outputs if s.role == "value"] for signature in signatures]
    names = {frozenset(s.name for s in member) for member in specs}
    if len(names) == 1 and all(len({s.name for s in member}) == len(member) for member in specs):
        order = [s.name for s in specs[0]]
        specs = [[next(s for s in member if s.name == name) for name in order] for member in specs]
    count = min(len(member) for member in specs)
    return [member[:count] for member in specs]


def _values(answer: Answer, specs: Sequence[TensorSpec]) -> list[np.ndarray]:
    """The member's value outputs `specs` (`paired_values`), as numbers."""
    if not specs or any(s.name not in answer.result.outputs for s in specs):
        raise BackendError(f"member '{answer.name}' gave no value output to aggregate", member=answer.name)
    out = []
    for spec in specs:
        try:
            out.append(np.asarray(answer.result.outputs[spec.name], dtype=np.float64))
        except (TypeError, ValueError):
            raise BackendError(f"member '{answer.name}' gave output '{spec.name}' values that are no numbers", member=answer.name) from None
    return out


def _stacked(arrays: list[np.ndarray], answers: Sequence[Answer], what: str) -> np.ndarray:
    """The members' arrays on a new first axis; arrays of other shapes are the members' fault."""
    shape = arrays[0].shape
    for answer, array in zip(answers, arrays, strict=True):
        if array.shape != shape:
            raise BackendError(
                f"member '{answer.name}' answered {what} of shape {list(array.shape)}, member '{answers[0].name}' {list(shape)}: they cannot be combined",
                member=answer.name,
            )
    return np.stack(arrays)


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


def aggregate(how: str, answers: Sequence[Answer], *, outputs: Sequence[str] | None = None) -> InferenceResult:
    """Combine answers into one result shaped like the first member's outputs; `outputs`: those
    the request asks for, picked from the combined result (every member gave every output
    its aggregator needs)."""
    combined = _aggregate(how, answers)
    if not outputs:
        return combined
    missing = [name for name in outputs if name not in combined.outputs]
    if missing:  # an output of one member's alone: no combined answer holds it
        raise BadRequest(
            f"output '{missing[0]}' is not one the ensemble combines: it answers {sorted(combined.outputs)}", field=f"outputs.{missing[0]}"
        )
    return InferenceResult(
        {name: array for name, array in combined.outputs.items() if name in outputs},
        {name: classes for name, classes in combined.classes.items() if name in outputs},
        {name: maps for name, maps in combined.maps.items() if name in outputs},
    )


def _aggregate(how: str, answers: Sequence[Answer]) -> InferenceResult:
    first = answers[0]
    if _rows(first.result) == 0:  # nothing to combine: the first member's empty answer is the answer
        return first.result
    weights = np.asarray([a.weight for a in answers], dtype=np.float64)
    if weights.sum() <= 0:  # every member weighs 0 (or the answering ones do): they count alike
        weights = np.ones_like(weights)
    label_spec = first.signature.output_with_role("label")
    prob_spec = first.signature.output_with_role("probabilities")
    if label_spec is None and prob_spec is None:
        paired = paired_values([a.signature for a in answers])
        per_member = [_values(a, specs) for a, specs in zip(answers, paired, strict=True)]
        out = {}
        for k, spec in enumerate(paired[0]):  # each value output of the ensemble, from each member's paired one
            combined = _combine(_stacked([values[k] for values in per_member], answers, f"'{spec.name}'"), weights, how)
            dtype = first.result.outputs[spec.name].dtype
            # A mean or a median of whole numbers is a fraction: kept as a float, never cut
            # back to the members' integers (their max is one of them).
            out[spec.name] = combined.astype(dtype) if dtype.kind == "f" or how == "max" else combined
        return InferenceResult(out)
    if how == "majority":
        return _majority(answers, weights)
    per_member = [_probabilities(a) for a in answers]
    if any(p is None for p in per_member):
        raise BackendError("every member must give probabilities for this aggregator")
    classes: list[Any] = []
    for member_classes, _ in per_member:  # type: ignore[misc]
        classes += [c for c in member_classes if c not in classes]
    _one_kind_of_class(classes, answers)
    index = {c: i for i, c in enumerate(classes)}
    rows = per_member[0][1].shape[0]  # type: ignore[index]
    stack = np.zeros((len(answers), rows, len(classes)))
    for k, (member_classes, probs) in enumerate(per_member):  # type: ignore[misc]
        if probs.ndim != 2 or probs.shape != (rows, len(member_classes)):
            raise BackendError(
                f"member '{answers[k].name}' answered probabilities of shape {list(probs.shape)} for {rows} rows of {len(member_classes)} classes",
                member=answers[k].name,
            )
        if np.isnan(probs).any():  # a NaN would win every argmax: no class to name
            raise BackendError(f"member '{answers[k].name}' answered a NaN probability", member=answers[k].name)
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
    _one_kind_of_class(classes, answers)
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


def _one_kind_of_class(classes: list[Any], answers: Sequence[Answer]) -> None:
    """Classes are all numbers or all text: members naming theirs in both (one 0/1, another
    "cat"/"dog") answer no common question, and a vote between them names no class."""
    kinds = {"text" if isinstance(c, str | bytes) else "number" for c in classes}
    if len(kinds) > 1:
        raise BackendError(
            f"members name their classes as numbers and as text ({', '.join(a.name for a in answers)}): they cannot be combined",
        )


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
        shapes = {tuple(tuple(o.shape) for o in specs) for specs in paired_values(signatures)}
        if len(shapes) > 1:
            return "members' value outputs have different shapes (or counts)"
    if kinds == {"classifier"}:
        labels = {_label_kind(s) for s in signatures} - {None}
        if len(labels) > 1:
            return "members' labels are numbers on some and text on others"
    return None


def _label_kind(signature: Signature) -> str | None:
    spec = signature.output_with_role("label")
    return None if spec is None else "text" if spec.datatype == "BYTES" else "number"
