"""Model quality from labelled predictions (`sluice.monitor.quality`): the counts merged from
several label posts give scikit-learn's figures for the same pairs all at once, and what a
prediction said is read from a classifier's or a regressor's answer."""

from __future__ import annotations

import math
import tracemalloc
from types import ModuleType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.domain.results import InferenceResult
from sluice.domain.rollouts import Rollout, evaluate
from sluice.domain.signature import Signature, TensorSpec
from sluice.monitor.quality import (
    CLASS,
    MAX_CLASSES,
    MAX_LABEL,
    SCORE_BINS,
    VALUE,
    Outcomes,
    merged,
    predicted,
)


@pytest.fixture
def metrics() -> ModuleType:
    """scikit-learn's metrics, imported by the tests that compare with them (not at collection,
    which every pytest-xdist worker does: scikit-learn costs seconds of CPU to import)."""
    return pytest.importorskip("sklearn.metrics")


def test_a_binary_classifier_in_three_posts_matches_scikit_learn(metrics: ModuleType) -> None:
    rng = np.random.default_rng(3)
    actual = rng.integers(0, 2, 3000)
    scores = np.clip(actual * 0.25 + rng.random(3000) * 0.75, 0, 1).round(3)  # informative, not perfect
    said = (scores >= 0.5).astype(int)
    docs = []
    for part in np.array_split(np.arange(3000), 3):
        out = Outcomes(CLASS)
        for i in part:
            out.add_class(str(actual[i]), str(said[i]), float(scores[i]), "1")
        docs.append({"candidate": out.to_dict()})
    got = merged(docs)["candidate"].metrics()
    assert got["rows"] == 3000 and got["positive"] == "1"
    assert got["accuracy"] == pytest.approx(metrics.accuracy_score(actual, said))
    assert got["precision"] == pytest.approx(metrics.precision_score(actual, said))
    assert got["recall"] == pytest.approx(metrics.recall_score(actual, said))
    # Scores on a 0.001 grid fall one to a bin: the rank statistic is exact.
    assert got["auc"] == pytest.approx(metrics.roc_auc_score(actual, scores), abs=1e-9)
    coarse = np.floor(rng.random(3000) * SCORE_BINS * 10) / (SCORE_BINS * 10)  # ten scores a bin: within the stated bound
    out = Outcomes(CLASS)
    for a, s in zip(actual, coarse, strict=True):
        out.add_class(str(a), "0", float(s), "1")
    assert abs(out.auc() - metrics.roc_auc_score(actual, coarse)) < 0.002  # type: ignore[operator]


def test_a_three_class_classifier_is_macro_averaged_and_a_regressor_has_its_errors(metrics: ModuleType) -> None:
    rng = np.random.default_rng(4)
    actual = rng.choice(["setosa", "versicolor", "virginica"], 500)
    said = np.where(rng.random(500) < 0.7, actual, rng.choice(["setosa", "versicolor", "virginica"], 500))
    out = Outcomes(CLASS)
    for a, p in zip(actual, said, strict=True):
        out.add_class(str(a), str(p))
    got = out.metrics()
    assert got["accuracy"] == pytest.approx(metrics.accuracy_score(actual, said))
    assert got["precision"] == pytest.approx(metrics.precision_score(actual, said, average="macro"))
    assert got["recall"] == pytest.approx(metrics.recall_score(actual, said, average="macro"))
    assert got["auc"] is None
    y, guess = rng.normal(size=400), rng.normal(size=400)
    values = Outcomes(VALUE)
    for a, p in zip(y, guess, strict=True):
        values.add_value(float(a), float(p))
    again = Outcomes.from_dict(values.to_dict()).metrics()
    assert again["mae"] == pytest.approx(metrics.mean_absolute_error(y, guess))
    assert again["rmse"] == pytest.approx(np.sqrt(metrics.mean_squared_error(y, guess)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(-MAX_LABEL, MAX_LABEL), st.floats(width=32, allow_nan=False, allow_infinity=False)), min_size=1, max_size=50))
def test_every_label_a_post_accepts_leaves_a_regressors_errors_numbers(pairs: list[tuple[float, float]]) -> None:
    """Labels up to MAX_LABEL (the post refuses the rest) against any float32 prediction: no
    sum overflows, so MAE, RMSE and bias stay numbers, merged or not."""
    halves = [Outcomes(VALUE), Outcomes(VALUE)]
    for i, (actual, said) in enumerate(pairs):
        halves[i % 2].add_value(actual, said)
    halves[0].merge(Outcomes.from_dict(halves[1].to_dict()))
    got = halves[0].metrics()
    assert all(math.isfinite(got[k]) for k in ("mae", "rmse", "bias")), got


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(-1e6, 1e6), st.one_of(st.none(), st.floats(width=32))), min_size=1, max_size=50))
def test_a_prediction_that_is_no_finite_number_is_in_no_figure(pairs: list[tuple[float, float | None]]) -> None:
    """A regressor's NaN or infinity (kept as null, or as NaN by an older record) is not
    counted: the window's figures are those of the other rows alone, never NaN."""
    every, comparable = Outcomes(VALUE), Outcomes(VALUE)
    for actual, said in pairs:
        counted = every.add_value(actual, said)
        assert counted == (said is not None and math.isfinite(said))
        if counted:
            comparable.add_value(actual, said)  # type: ignore[arg-type]
    assert every.metrics() == comparable.metrics()
    assert all(math.isfinite(v) for v in every.metrics().values())


def test_a_regressors_answer_of_nan_or_infinity_is_kept_as_null() -> None:
    value = Signature(inputs=(), outputs=(TensorSpec("y", "FP32", (-1,)),))
    answer = InferenceResult({"y": np.array([1.5, np.nan, np.inf, -np.inf], np.float32)})
    assert predicted(value, answer) == {"kind": VALUE, "predicted": [1.5, None, None, None]}


def test_a_multi_class_auc_in_three_posts_is_scikit_learns_one_against_the_rest_macro(metrics: ModuleType) -> None:
    classes = ["setosa", "versicolor", "virginica"]
    rng = np.random.default_rng(5)
    actual = rng.integers(0, 3, 1500)
    # Informative scores on the bins' 0.001 grid, each row's summing to 1 (as scikit-learn checks).
    raw = rng.dirichlet([1, 1, 1], 1500) + np.eye(3)[actual] * 0.6
    grid = np.floor(raw / raw.sum(axis=1, keepdims=True) * 1000).astype(int)
    grid[np.arange(1500), actual] += 1000 - grid.sum(axis=1)
    scores = grid / 1000
    said = scores.argmax(axis=1)
    docs = []
    for part in np.array_split(np.arange(1500), 3):
        out = Outcomes(CLASS)
        for i in part:
            out.add_class(classes[actual[i]], classes[said[i]], class_scores=dict(zip(classes, scores[i].tolist(), strict=True)))
        docs.append({"": out.to_dict()})
    got = merged(docs)[""].metrics()
    expected = metrics.roc_auc_score(actual, scores, multi_class="ovr", average="macro")
    assert 0.6 < expected < 0.99 and got["auc"] == pytest.approx(expected, abs=1e-9)
    assert got["accuracy"] == pytest.approx(metrics.accuracy_score(actual, said))
    three = Signature(inputs=(), outputs=(TensorSpec("label", "BYTES", (-1,), role="label"), TensorSpec("probs", "FP32", (-1, 3), role="probabilities")))
    answer = InferenceResult({"label": np.array(["virginica"], dtype=object), "probs": np.array([[0.1, 0.2, 0.7]], np.float32)}, classes={"probs": classes})
    kept = predicted(three, answer)
    assert kept is not None and kept["classes"] == classes and kept["class_scores"] == [[pytest.approx(0.1), pytest.approx(0.2), pytest.approx(0.7)]]


def test_what_an_answer_predicted_is_read_by_the_outputs_roles() -> None:
    two = Signature(inputs=(), outputs=(TensorSpec("label", "INT64", (-1,), role="label"), TensorSpec("probs", "FP32", (-1, 2), role="probabilities")))
    result = InferenceResult({"label": np.array([0, 1]), "probs": np.array([[0.9, 0.1], [0.2, 0.8]], np.float32)}, classes={"probs": [0, 1]})
    assert predicted(two, result) == {"kind": CLASS, "predicted": ["0", "1"], "scores": [pytest.approx(0.1), pytest.approx(0.8)], "positive": "1"}
    value = Signature(inputs=(), outputs=(TensorSpec("y", "FP32", (-1, 1)),))
    assert predicted(value, InferenceResult({"y": np.array([[1.5], [2.0]], np.float32)})) == {"kind": VALUE, "predicted": [1.5, 2.0]}
    wide = Signature(inputs=(), outputs=(TensorSpec("emb", "FP32", (-1, 8)),))
    assert predicted(wide, InferenceResult({"emb": np.zeros((2, 8), np.float32)})) is None


def test_a_two_class_models_precision_and_recall_have_no_value_when_its_positive_class_never_came() -> None:
    """A fraud model that neither predicted nor was told of any fraud has no precision or
    recall of fraud: not a perfect 1.0, which a `recall>=0.9` gate would pass on."""
    out = Outcomes(CLASS)
    for _ in range(200):
        out.add_class("0", "0", 0.1, "1")
    got = out.metrics()
    assert (got["accuracy"], got["precision"], got["recall"], got["positive"]) == (1.0, None, None, "1")
    labelled = Outcomes(CLASS)  # fraud labelled, never said: a candidate that misses it all fails a precision gate
    for actual in ("1", "0") * 100:
        labelled.add_class(actual, "0", 0.1, "1")
    assert (labelled.metrics()["precision"], labelled.metrics()["recall"]) == (0.0, 0.0)
    rollout = Rollout(model="fraud", version=2, stable={}, steps=(10.0, 100.0), every_s=60.0, gates="recall>=0.9", min_requests=100)
    decision = evaluate(rollout, {"candidate_requests": 1000, "recall": got["recall"]}, now=3600.0)
    assert (decision.action, decision.reason) == ("hold", "gate recall>=0.9 has no value yet")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("012"), st.sampled_from("012")), min_size=1, max_size=60), st.integers(1, 3))
def test_a_two_class_models_precision_and_recall_are_its_positive_classs_whatever_labels_come(pairs: list[tuple[str, str]], posts: int) -> None:
    """Class "1" of a two-class model, among labels that may be neither of its classes (a
    stray "2"), over any number of posts: scikit-learn's figure of that class (0 where it
    divides by nothing, `zero_division=0`), None where the class was neither said nor labelled."""
    metrics = pytest.importorskip("sklearn.metrics")
    docs = []
    for part in range(posts):
        out = Outcomes(CLASS)
        for actual, said in pairs[part::posts]:
            out.add_class(actual, said, 0.9 if said == "1" else 0.1, "1")
        docs.append({"": out.to_dict()})
    got = merged(docs)[""].metrics()
    actual, said = [a for a, _ in pairs], [p for _, p in pairs]
    for name, score in (("precision", metrics.precision_score), ("recall", metrics.recall_score)):
        (expected,) = score(actual, said, labels=["1"], average=None, zero_division=0)
        assert got[name] == (None if "1" not in actual and "1" not in said else pytest.approx(expected)), (name, got)
    assert got["accuracy"] == pytest.approx(metrics.accuracy_score(actual, said))


def test_a_window_names_at_most_max_classes_and_each_keeps_its_own_figures() -> None:
    """10,000 distinct labels (one post's worth) are not 10,000 classes kept and read back:
    MAX_CLASSES of them are named, the rest counted as one "other". Accuracy stays exact, each
    named class's counts are its own in whichever order the posts merge, and reading the
    window takes no table of classes by classes."""
    rng = np.random.default_rng(6)
    actual = [f"label-{i}" for i in rng.integers(0, 10_000, 10_000)]
    said = [a if rng.random() < 0.3 else f"label-{i}" for a, i in zip(actual, rng.integers(0, 10_000, 10_000), strict=True)]
    halves = [Outcomes(CLASS), Outcomes(CLASS)]
    for i, (a, p) in enumerate(zip(actual, said, strict=True)):
        halves[i % 2].add_class(a, p)
    window = Outcomes.from_dict(halves[0].to_dict())
    window.merge(Outcomes.from_dict(halves[1].to_dict()))
    backwards = Outcomes.from_dict(halves[1].to_dict())
    backwards.merge(Outcomes.from_dict(halves[0].to_dict()))
    assert backwards.metrics() == window.metrics()
    named = {c for pair in window.pairs for c in pair if c is not None}
    assert len(named) == MAX_CLASSES and len(window.pairs) <= (MAX_CLASSES + 1) ** 2
    tracemalloc.start()
    try:
        got = window.metrics()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000, f"{peak / 1e6:.1f} MB to read one window's quality"
    assert got["rows"] == 10_000 and got["accuracy"] == pytest.approx(np.mean(np.array(actual) == np.array(said)))
    for c in named:  # a named class's figures, by a direct count: the macro mean is of these
        hits = sum(a == p == c for a, p in zip(actual, said, strict=True))
        assert sum(n for (a, p), n in window.pairs.items() if p == c) == said.count(c)
        assert sum(n for (a, p), n in window.pairs.items() if a == c) == actual.count(c)
        assert window.pairs.get((c, c), 0) == hits
    two = Outcomes(CLASS)
    for i in range(1000):
        two.add_class(f"stray-{i}", "0", 0.2, "1")  # the positive class comes after the bound
    two.add_class("1", "1", 0.8, "1")
    assert (two.metrics()["precision"], two.metrics()["recall"]) == (1.0, 1.0)
