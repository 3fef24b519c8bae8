"""Every aggregator checked against results computed by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.domain.results import InferenceResult, rows_of
from sluice.domain.signature import Signature, TensorSpec
from sluice.routing.aggregators import Answer, aggregate, check_fits

INPUTS = (TensorSpec("x", "FP32", (-1, 2)),)
CLF = Signature(INPUTS, (TensorSpec("label", "BYTES", (-1,), role="label"), TensorSpec("probs", "FP32", (-1, -1), role="probabilities")))
REG = Signature(INPUTS, (TensorSpec("y", "FP32", (-1, 1), role="value"),))


def clf(name: str, labels: list[str], probs: list[list[float]], classes: list[str], weight: float = 1.0) -> Answer:
    result = InferenceResult({"label": np.array(labels, dtype=object), "probs": np.array(probs, dtype=np.float32)}, {"probs": classes})
    return Answer(name, weight, CLF, result)


def reg(name: str, values: list[float], weight: float = 1.0) -> Answer:
    return Answer(name, weight, REG, InferenceResult({"y": np.array(values, dtype=np.float32).reshape(-1, 1)}))


# Two rows, three members; member c lists its classes in another order.
A = clf("a", ["cat", "dog"], [[0.6, 0.4], [0.2, 0.8]], ["cat", "dog"], weight=1)
B = clf("b", ["cat", "cat"], [[0.9, 0.1], [0.7, 0.3]], ["cat", "dog"], weight=2)
C = clf("c", ["dog", "dog"], [[0.8, 0.2], [0.9, 0.1]], ["dog", "cat"], weight=1)  # dog first


def probs_of(result: InferenceResult) -> dict[str, list[float]]:
    classes = result.classes["probs"]
    return {c: result.outputs["probs"][:, j].tolist() for j, c in enumerate(classes)}


def test_mean_aligns_classes_and_averages() -> None:
    out = aggregate("mean", [A, B, C])
    p = probs_of(out)
    # cat: row0 (0.6+0.9+0.2)/3, row1 (0.2+0.7+0.1)/3
    assert p["cat"] == pytest.approx([1.7 / 3, 1.0 / 3])
    assert p["dog"] == pytest.approx([1.3 / 3, 2.0 / 3])
    assert out.outputs["label"].tolist() == ["cat", "dog"]


def test_weighted_mean() -> None:
    p = probs_of(aggregate("weighted_mean", [A, B, C]))
    # weights 1,2,1 -> cat row0 (0.6 + 1.8 + 0.2)/4 = 0.65 ; row1 (0.2 + 1.4 + 0.1)/4 = 0.425
    assert p["cat"] == pytest.approx([0.65, 0.425])


def test_soft_vote_is_the_label_of_the_mean() -> None:
    out = aggregate("soft_vote", [A, B, C])
    assert out.outputs["label"].tolist() == ["cat", "dog"]


def test_max_and_median() -> None:
    assert probs_of(aggregate("max", [A, B, C]))["cat"] == pytest.approx([0.9, 0.7])
    assert probs_of(aggregate("median", [A, B, C]))["dog"] == pytest.approx([0.4, 0.8])


def test_majority_vote_with_weights_and_ties() -> None:
    out = aggregate("majority", [A, B, C])
    # row0: cat (a) + cat (b, w2) vs dog (c) -> cat; row1: dog (a) + cat (b, w2) + dog (c) -> tie 2:2 -> a's label, dog
    assert out.outputs["label"].tolist() == ["cat", "dog"]
    p = probs_of(out)
    assert p["cat"] == pytest.approx([0.75, 0.5])


def test_regressors() -> None:
    members = [reg("a", [1.0, 10.0]), reg("b", [2.0, 20.0], weight=3), reg("c", [6.0, 0.0])]
    assert aggregate("mean", members).outputs["y"].reshape(-1).tolist() == pytest.approx([3.0, 10.0])
    assert aggregate("weighted_mean", members).outputs["y"].reshape(-1).tolist() == pytest.approx([(1 + 6 + 6) / 5, (10 + 60) / 5])
    assert aggregate("median", members).outputs["y"].reshape(-1).tolist() == pytest.approx([2.0, 10.0])
    assert aggregate("max", members).outputs["y"].reshape(-1).tolist() == pytest.approx([6.0, 20.0])


@pytest.mark.parametrize(
    ("how", "signatures", "problem"),
    [
        ("majority", [REG, REG], "needs classifiers"),
        ("soft_vote", [REG], "needs classifiers"),
        ("mean", [CLF, REG], "mix"),
        ("mean", [REG, Signature(INPUTS, (TensorSpec("y", "FP32", (-1, 3), role="value"),))], "different shapes"),
        ("mean", [CLF, Signature(INPUTS, (TensorSpec("label", "INT64", (-1,), role="label"), TensorSpec("p", "FP32", (-1, 2), role="value")))], "probability"),
    ],
)
def test_check_fits_explains_misfits(how: str, signatures: list[Signature], problem: str) -> None:
    assert problem in (check_fits(how, signatures) or "")


def test_check_fits_accepts_good_combinations() -> None:
    assert check_fits("mean", [CLF, CLF]) is None
    assert check_fits("median", [REG, REG]) is None
    assert check_fits("first_success", [REG]) is None


CLASSES = ["cat", "dog", "fox"]


@settings(max_examples=60, deadline=None)
@given(votes=st.lists(st.tuples(*[st.sampled_from(CLASSES)] * 3), min_size=1, max_size=6))
def test_a_majority_rows_shares_are_its_own_whatever_rows_it_is_answered_with(votes: list[tuple[str, str, str]]) -> None:
    """A row's shares are over the members' classes, in their order, whatever labels the other
    rows of its call took: one row alone and among others answer alike (a batch job's calls
    write one set of columns)."""

    def members(rows: list[tuple[str, str, str]]) -> list[Answer]:
        return [clf(name, [r[k] for r in rows], [[1 / 3] * 3] * len(rows), CLASSES) for k, name in enumerate("abc")]

    together = aggregate("majority", members(votes))
    assert together.classes["probs"] == CLASSES
    for i, row in enumerate(votes):
        alone = aggregate("majority", members([row]))
        assert alone.classes["probs"] == CLASSES
        assert alone.outputs["label"].tolist() == [together.outputs["label"][i]]
        np.testing.assert_array_equal(alone.outputs["probs"][0], together.outputs["probs"][i])


@pytest.mark.parametrize("how", ["mean", "weighted_mean", "soft_vote", "majority", "max", "median"])
def test_no_rows_are_combined_into_no_rows(how: str) -> None:
    """Members that answered no rows (ZipMap probabilities of no rows name no classes) make an
    answer of no rows, never an error."""
    empty = InferenceResult({"label": np.array([], dtype=object), "probs": np.zeros((0, 0), np.float32)})
    out = aggregate(how, [Answer(name, 1.0, CLF, empty) for name in "ab"])
    assert all(len(array) == 0 for array in out.outputs.values())


@given(shape=st.lists(st.integers(0, 3), max_size=3), others=st.integers(0, 2))
def test_rows_are_the_leading_dimension_and_a_scalar_is_one(shape: list[int], others: int) -> None:
    """The one count of rows every path uses: a batch's first dimension, one for a scalar."""
    first = np.zeros(shape, dtype=np.float32)
    arrays = {"a": first, **{f"o{i}": np.zeros((7,)) for i in range(others)}}
    assert rows_of(arrays) == (shape[0] if shape else 1)
    assert rows_of({}) == 0


@pytest.mark.parametrize(
    "labels",
    [np.array([0.0, np.nan], dtype=np.float32), np.array(["cat", float("nan")], dtype=object), np.array(["cat", np.float32("nan")], dtype=object)],
    ids=["fp32", "object-float", "object-numpy-float"],
)
def test_a_majority_vote_refuses_a_nan_label_naming_its_member(labels: np.ndarray) -> None:
    """A NaN is no class (it equals no label, itself included): the member that answered it
    fails the vote as a 502 naming it, never a 500 from counting it."""
    from sluice.domain.errors import BackendError

    voter = Signature(INPUTS, (TensorSpec("label", "FP32", (-1,), role="label"),))
    good = Answer("good", 1.0, voter, InferenceResult({"label": np.array([0.0, 1.0], dtype=np.float32)}))
    odd = Answer("odd", 1.0, voter, InferenceResult({"label": labels}))
    with pytest.raises(BackendError) as refused:
        aggregate("majority", [good, odd])
    assert (refused.value.status, refused.value.details["member"]) == (502, "odd") and "member 'odd'" in refused.value.message


REG2 = Signature(INPUTS, (TensorSpec("y", "FP32", (-1, 1), role="value"), TensorSpec("z", "FP32", (-1, 1), role="value")))
REG_INT = Signature(INPUTS, (TensorSpec("n", "INT64", (-1,), role="value"),))


@given(
    values=st.lists(st.lists(st.floats(-1e6, 1e6, width=32), min_size=2, max_size=2), min_size=2, max_size=4),
    how=st.sampled_from(["mean", "weighted_mean", "max", "median"]),
)
@settings(max_examples=60, deadline=None)
def test_every_value_output_of_a_regressor_is_combined_by_its_place(values: list[list[float]], how: str) -> None:
    """Members with two value outputs (named differently) give an ensemble with both: the k-th
    of each combined with the k-th of the others, as NumPy combines them by hand."""
    members = [
        Answer(f"m{i}", float(i + 1), REG2 if i == 0 else Signature(INPUTS, (TensorSpec("a", "FP32", (-1, 1), role="value"), TensorSpec("b", "FP32", (-1, 1), role="value"))),
               InferenceResult({("y" if i == 0 else "a"): np.float32([[y]]), ("z" if i == 0 else "b"): np.float32([[z]])}))
        for i, (y, z) in enumerate(values)
    ]  # fmt: skip
    out = aggregate(how, members).outputs
    weights = np.arange(1, len(values) + 1, dtype=np.float64)
    for k, name in enumerate(("y", "z")):
        column = np.asarray([v[k] for v in np.float32(values)], dtype=np.float64)
        expected = {"mean": column.mean(), "weighted_mean": (weights * column).sum() / weights.sum(), "max": column.max(), "median": np.median(column)}[how]
        assert out[name].shape == (1, 1) and out[name][0, 0] == pytest.approx(expected, rel=1e-5, abs=1e-3)


def test_asked_outputs_are_picked_from_the_combined_answer() -> None:
    both = [Answer(n, 1.0, REG2, InferenceResult({"y": np.float32([[v]]), "z": np.float32([[10 * v]])})) for n, v in (("a", 1.0), ("b", 3.0))]
    assert list(aggregate("mean", both, outputs=["z"]).outputs) == ["z"]
    assert aggregate("mean", both, outputs=["z"]).outputs["z"][0, 0] == pytest.approx(20.0)
    picked = aggregate("soft_vote", [A, B, C], outputs=["label"])
    assert list(picked.outputs) == ["label"] and picked.classes == {} and picked.outputs["label"].tolist() == ["cat", "dog"]


def test_a_mean_of_whole_numbers_is_not_cut_to_a_whole_number() -> None:
    members = [Answer(n, 1.0, REG_INT, InferenceResult({"n": np.int64([v])})) for n, v in (("a", 2), ("b", 3))]
    assert aggregate("mean", members).outputs["n"].tolist() == [2.5]
    assert aggregate("median", members).outputs["n"].tolist() == [2.5]
    assert aggregate("max", members).outputs["n"].tolist() == [3] and aggregate("max", members).outputs["n"].dtype == np.int64


@pytest.mark.parametrize("how", ["mean", "soft_vote", "max", "median", "weighted_mean", "majority"])
def test_members_that_cannot_be_combined_at_run_time_are_the_members_fault_never_a_crash(how: str) -> None:
    from sluice.domain.errors import BackendError

    if how != "majority":
        wide = Answer("wide", 1.0, REG, InferenceResult({"y": np.float32([[1.0, 2.0]])}))
        with pytest.raises(BackendError, match="member 'wide' answered 'y' of shape"):
            aggregate(how, [reg("a", [1.0]), wide])
        nan = clf("nan", ["cat"], [[float("nan"), 0.5]], ["cat", "dog"])
        with pytest.raises(BackendError, match="member 'nan' answered a NaN probability"):
            aggregate(how, [clf("a", ["cat"], [[0.6, 0.4]], ["cat", "dog"]), nan])
    numbers = Answer("ints", 1.0, Signature(INPUTS, (TensorSpec("label", "INT64", (-1,), role="label"), TensorSpec("probs", "FP32", (-1, -1), role="probabilities"))),
                     InferenceResult({"label": np.int64([0]), "probs": np.float32([[0.3, 0.7]])}, {"probs": [0, 1]}))  # fmt: skip
    with pytest.raises(BackendError, match="as numbers and as text"):
        aggregate(how, [numbers, clf("text", ["dog"], [[0.2, 0.8]], ["cat", "dog"])])


def test_check_fits_refuses_labels_of_two_kinds_and_value_outputs_of_two_counts() -> None:
    ints = Signature(INPUTS, (TensorSpec("label", "INT64", (-1,), role="label"), TensorSpec("probs", "FP32", (-1, -1), role="probabilities")))
    assert "numbers on some and text on others" in (check_fits("soft_vote", [CLF, ints]) or "")
    assert check_fits("mean", [REG2, REG2]) is None
    assert check_fits("mean", [REG, REG2]) is None and check_fits("mean", [REG2, REG]) is None  # the one they share is combined
    wide = Signature(INPUTS, (TensorSpec("y", "FP32", (-1, 3), role="value"), TensorSpec("z", "FP32", (-1, 1), role="value")))
    assert "different shapes" in (check_fits("mean", [REG2, wide]) or "")


def test_value_outputs_named_alike_are_paired_by_name_and_a_members_extra_ones_are_its_own() -> None:
    """(price, volume) and (volume, price) combine price with price; a member with an output the
    others have not (a policy saved when only the first value was combined) keeps answering."""
    pv = Signature(INPUTS, (TensorSpec("price", "FP32", (-1, 1), role="value"), TensorSpec("volume", "FP32", (-1, 1), role="value")))
    vp = Signature(INPUTS, (TensorSpec("volume", "FP32", (-1, 1), role="value"), TensorSpec("price", "FP32", (-1, 1), role="value")))
    a = Answer("a", 1.0, pv, InferenceResult({"price": np.float32([[10.0]]), "volume": np.float32([[1000.0]])}))
    b = Answer("b", 1.0, vp, InferenceResult({"volume": np.float32([[3000.0]]), "price": np.float32([[30.0]])}))
    out = aggregate("mean", [a, b]).outputs
    assert (out["price"][0, 0], out["volume"][0, 0]) == (20.0, 2000.0)
    spread = Answer("s", 1.0, REG2, InferenceResult({"y": np.float32([[4.0]]), "z": np.float32([[9.0]])}))
    assert {k: v[0, 0] for k, v in aggregate("mean", [spread, reg("r", [2.0])]).outputs.items()} == {"y": 3.0}
    assert {k: v[0, 0] for k, v in aggregate("mean", [reg("r", [2.0]), spread]).outputs.items()} == {"y": 3.0}


def test_an_output_asked_for_that_no_combined_answer_holds_is_refused_naming_it() -> None:
    from sluice.domain.errors import BadRequest

    spread = Answer("s", 1.0, REG2, InferenceResult({"y": np.float32([[4.0]]), "z": np.float32([[9.0]])}))
    with pytest.raises(BadRequest) as refused:
        aggregate("mean", [spread, reg("r", [2.0])], outputs=["z"])
    assert refused.value.field == "outputs.z" and refused.value.status == 400
