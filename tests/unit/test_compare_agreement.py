"""A mirror's labels agree with the primary's by the rule monitoring compares a prediction with
its label (`class_word`): a candidate whose label output is a float (1.0) names the classes an
integer one (1) does. Compared as text they disagreed on every row, and an identical candidate
was rolled back by its agreement gate (offline replay said the same)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from sluice.inference.compare import agreeing
from sluice.monitor.quality import class_word

SPELLINGS = {
    "int64": lambda v: np.asarray(v, dtype=np.int64),
    "float32": lambda v: np.asarray(v, dtype=np.float32),
    "float64": lambda v: np.asarray(v, dtype=np.float64),
    "text": lambda v: np.asarray([str(x) for x in v], dtype=object),
    "bytes": lambda v: np.asarray([str(x).encode() for x in v], dtype=object),
    "fixed text": lambda v: np.asarray([str(x) for x in v]),
}


@given(
    st.lists(st.integers(-1000, 1000), min_size=1, max_size=40),
    st.sampled_from(sorted(SPELLINGS)), st.sampled_from(sorted(SPELLINGS)), st.data(),
)  # fmt: skip
def test_labels_agree_where_they_name_one_class_whatever_their_type(labels: list[int], left: str, right: str, data: st.DataObject) -> None:
    other = data.draw(st.lists(st.integers(-1000, 1000), min_size=len(labels), max_size=len(labels)))
    a, b = SPELLINGS[left](labels), SPELLINGS[right](other)
    assert agreeing(a, b) == sum(x == y for x, y in zip(labels, other, strict=True))
    assert agreeing(a, SPELLINGS[right](labels)) == len(labels)


def test_a_class_is_its_text_a_whole_number_as_one_is_written() -> None:
    assert class_word(1.0) == class_word(1) == class_word("1") == class_word(b"1") == "1"
    assert class_word(1.5) == "1.5" and class_word(b"\xff") != class_word(b"\xfe")  # two byte strings, two classes


@given(st.lists(st.lists(st.floats(0, 1), min_size=3, max_size=3), min_size=1, max_size=20), st.data())
def test_probabilities_named_by_one_side_alone_are_compared_column_by_column(rows: list[list[float]], data: st.DataObject) -> None:
    """A primary whose graph names its classes (10, 20, 30) beside a mirror answering bare
    columns: the columns are compared in order (as scikit-learn orders both), never the labels
    against the column numbers (a mirror of the same probabilities read a mean difference of 1/3)."""
    from sluice.domain.results import InferenceResult
    from sluice.domain.signature import Signature, TensorSpec
    from sluice.inference.compare import compare

    signature = Signature((TensorSpec("x", "FP32", (-1, 3)),), (TensorSpec("probabilities", "FP32", (-1, 3), role="probabilities"),))
    p = np.asarray(rows, np.float32)
    m = np.asarray(data.draw(st.lists(st.lists(st.floats(0, 1), min_size=3, max_size=3), min_size=len(rows), max_size=len(rows))), np.float32)
    named = InferenceResult({"probabilities": p}, classes={"probabilities": [10, 20, 30]})
    for primary, mirror in ((named, InferenceResult({"probabilities": m})), (InferenceResult({"probabilities": p}), InferenceResult({"probabilities": m}, classes={"probabilities": ["a", "b", "c"]}))):
        sums, maxes = compare(signature, primary, signature, mirror)
        expected = np.abs(p.astype(np.float64) - m.astype(np.float64))
        assert maxes["diff_max"] == float(expected.max())
        assert abs(sums["diff_sum"] - float(expected.sum())) < 1e-9 and sums["diff_n"] == expected.size
