"""Model quality from labelled predictions (`sluice.monitor.quality`): the counts merged from
several label posts give scikit-learn's figures for the same pairs all at once, and what a
prediction said is read from a classifier's or a regressor's answer."""

from __future__ import annotations

import math
from types import ModuleType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.domain.errors import InvalidInput
from sluice.domain.labels import MAX_LABEL, class_name, label_of
from sluice.domain.results import InferenceResult
from sluice.domain.signature import Signature, TensorSpec
from sluice.monitor.quality import CLASS, SCORE_BINS, VALUE, Outcomes, merged, predicted


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
    assert predicted(two, result) == {"kind": CLASS, "numbers": True, "predicted": ["0", "1"], "scores": [pytest.approx(0.1), pytest.approx(0.8)], "positive": "1"}
    value = Signature(inputs=(), outputs=(TensorSpec("y", "FP32", (-1, 1)),))
    assert predicted(value, InferenceResult({"y": np.array([[1.5], [2.0]], np.float32)})) == {"kind": VALUE, "predicted": [1.5, 2.0]}
    wide = Signature(inputs=(), outputs=(TensorSpec("emb", "FP32", (-1, 8)),))
    assert predicted(wide, InferenceResult({"emb": np.zeros((2, 8), np.float32)})) is None


# What a label is (`sluice.domain.labels`): one rule for the labels route and a file's rows,
# which a batch reader hands on as text, named by what the model's classes are.
WHOLE = st.integers(-(2**53), 2**53)


@given(WHOLE, st.sampled_from(["{}.0", "{}.", "{}.000", "{}e0", "{}E+0", " {} "]))
def test_a_whole_number_is_one_class_of_a_model_of_number_classes_however_it_is_written(n: int, form: str) -> None:
    """1, 1.0, "1", "1.0" and "1e0" are one class of a 0/1 model: a file's label column, read as
    text, names the class the API's number does (a JSON Lines or CSV 1.0 was "1.0", no class)."""
    forms = (n, float(n), str(n), form.format(n), repr(float(n)))
    assert {class_name(v, numbers=True) for v in forms} == {label_of(CLASS, v, "f", numbers=True) for v in forms} == {str(n)}


@given(st.integers(2**53, 2**80))
def test_a_whole_number_past_a_floats_precision_is_the_number_written(n: int) -> None:
    assert class_name(str(n), numbers=True) == class_name(n, numbers=True) == str(n)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_float_and_its_text_are_one_class_of_number_classes(x: float) -> None:
    assert class_name(repr(x), numbers=True) == class_name(x, numbers=True) == class_name(class_name(x, numbers=True), numbers=True)


@given(st.text(max_size=20), st.text(max_size=20))
def test_text_classes_are_named_as_they_are_written(a: str, b: str) -> None:
    """A model of text classes ("1.10" and "1.1", two versions; "007", a code) has each as it
    is written, a label and a predicted one alike: two texts are never one class (a label
    "1.10" of a prediction "1.1" was counted right)."""
    assert class_name(a, numbers=False) == label_of(CLASS, a, "f", numbers=False) == a
    assert (class_name(a, numbers=False) == class_name(b, numbers=False)) == (a == b)


@pytest.mark.parametrize(("said", "truth"), [("1.1", "1.10"), ("2.5", "2.50"), ("1000", "1e3"), ("7", "007")])
def test_a_prediction_of_one_text_class_labelled_another_is_wrong(said: str, truth: str) -> None:
    sig = Signature(inputs=(), outputs=(TensorSpec("label", "BYTES", (-1,), role="label"),))
    doc = predicted(sig, InferenceResult({"label": np.array([said], object)}))
    assert doc is not None and doc["numbers"] is False and doc["predicted"] == [said]
    out = Outcomes(CLASS, numbers=False)
    out.add_class(label_of(CLASS, truth, "f", numbers=doc["numbers"]), doc["predicted"][0])  # type: ignore[arg-type]
    assert out.metrics()["accuracy"] == 0.0


def test_a_predicted_float_class_is_named_as_its_label_is() -> None:
    sig = Signature(inputs=(TensorSpec("x", "FP32", (-1, 1)),), outputs=(TensorSpec("label", "FP32", (-1,), role="label"),))
    result = InferenceResult({"label": np.array([1.0, 0.0], dtype=np.float32)})
    doc = predicted(sig, result)
    assert doc is not None and doc["numbers"] is True
    assert doc["predicted"] == ["1", "0"] == [label_of(CLASS, v, "f", numbers=True) for v in ("1.0", 0)]
    by_classes = predicted(Signature(inputs=(), outputs=(TensorSpec("p", "FP32", (-1, 2), role="probabilities"),)),
                           InferenceResult({"p": np.array([[0.2, 0.8]], np.float32)}))  # fmt: skip
    assert by_classes is not None and by_classes["numbers"] is True and by_classes["positive"] == "1"  # class labels 0 and 1: numbers


@given(st.floats(-MAX_LABEL, MAX_LABEL))
def test_a_regressors_label_written_as_text_is_its_number(x: float) -> None:
    assert label_of(VALUE, repr(x), "f") == label_of(VALUE, x, "f") == x


@pytest.mark.parametrize("bad", ["1_000", "١٢", "abc", "", "nan", "1e200"])
def test_a_regressors_label_is_refused_where_a_batch_reader_reads_no_number(bad: str) -> None:
    """Text is a number in the batch readers' grammar, not Python's float(): no `1_000`, no
    digits of other scripts."""
    with pytest.raises(InvalidInput) as refused:
        label_of(VALUE, bad, "labels[0].label")
    assert refused.value.field == "labels[0].label"



# Counts stored before a model's kind of classes was kept with them: the code before the label
# rule (a float class kept as "1.0", a label read from a file as written) and the code that
# named every number-like text a number. Each is read under today's names.
def _doc(pairs: list[tuple[str, str, int]], positive: str | None = None, scores: dict[str, list[list[int]]] | None = None, **extra: object) -> dict:
    part: dict[str, object] = {"kind": CLASS, "rows": sum(n for _, _, n in pairs), "pairs": [list(p) for p in pairs], **extra}
    if positive is not None:
        part.update(positive=positive, scores=scores or {})
    return {"": part}


def _today(numbers: bool, pairs: list[tuple[str, str, int]], positive: str | None = None) -> dict:
    out = Outcomes(CLASS, numbers=numbers)
    for actual, said, n in pairs:
        for _ in range(n):
            out.add_class(actual, said, 0.9 if actual == positive else 0.1, positive)
    return {"": out.to_dict()}


@pytest.mark.parametrize(
    ("stored", "today", "classes", "positive"),
    [
        # 0/1 classifier, integer labels: a file's "1.0" was a class of its own
        ([_doc([("1.0", "1", 2), ("0", "0", 1)], "1", {"pos": [[900, 2]], "neg": [[100, 1]]})], _today(True, [("1", "1", 1), ("0", "0", 1)], "1"), {"0", "1"}, "1"),
        # float label output: predictions were kept as "1.0", the API's labels as "1"
        ([_doc([("1", "1.0", 2), ("0", "0.0", 2)], "1.0", {"pos": [[900, 2]], "neg": [[100, 2]]})], _today(True, [("1", "1", 1)], "1"), {"0", "1"}, "1"),
        # text classes "0.0"/"1.0": before the rule as written; since c95f4882 as "0"/"1"
        ([_doc([("1.0", "1.0", 2), ("0.0", "1.0", 1)], "1.0", {"pos": [[900, 2]], "neg": [[100, 1]]}),
          _doc([("1", "1", 1), ("0", "0", 1)], "1", {"pos": [[900, 1]], "neg": [[100, 1]]})],
         _today(False, [("1.0", "1.0", 1), ("0.0", "0.0", 1)], "1.0"), {"0.0", "1.0"}, "1.0"),
        # only counts from before: numbers when every class writes one, words as they are
        ([_doc([("1.0", "1", 2)], "1", {"pos": [[900, 2]]}), _doc([("0", "0.0", 1)], "1.0", {"neg": [[100, 1]]})], None, {"0", "1"}, "1"),
        ([_doc([("setosa", "setosa", 2), ("1", "setosa", 1)])], _today(False, [("virginica", "setosa", 1)]), {"setosa", "virginica", "1"}, None),
    ],
)
def test_counts_stored_before_are_read_under_todays_class_names(stored: list[dict], today: dict | None, classes: set[str], positive: str | None) -> None:
    """Counts stored before (one class under two names: "1.0" and "1") are read as the counts
    stored since name the classes: a window or a rollout gate spanning the upgrade saw four
    classes of a two-class model, lost its positive class and dropped rows from its AUC."""
    docs = [*stored, *([today] if today else [])]
    for order in (docs, docs[::-1]):
        got = merged(order)[""]
        assert got.names() == classes
        rows = sum(d[""]["rows"] for d in docs)
        assert got.rows == rows and sum(got.pairs.values()) == rows
        metrics = got.metrics()
        assert metrics.get("positive") == positive
        if positive is not None:
            assert sum(n for side in got.scores.values() for n in side.values()) == rows  # every row's score in the AUC
            assert metrics["auc"] is not None
