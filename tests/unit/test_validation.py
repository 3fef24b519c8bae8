from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.domain.errors import InvalidInput, PayloadTooLarge
from sluice.domain.signature import Signature, TensorSpec
from sluice.validation import check_inputs

SIG = Signature(
    inputs=(TensorSpec("x", "FP32", (-1, 3)), TensorSpec("ids", "INT64", (-1,))),
    outputs=(TensorSpec("y", "FP32", (-1, 1), role="value"),),
)


def check(arrays: dict[str, np.ndarray], **kw: object) -> dict[str, np.ndarray]:
    return check_inputs(SIG, arrays, max_elements=kw.pop("max_elements", 1000), **kw)  # type: ignore[arg-type]


def good() -> dict[str, np.ndarray]:
    return {"x": np.ones((2, 3)), "ids": np.array([1, 2])}


def test_casts_plain_numbers_to_the_signature_types() -> None:
    ready = check(good())
    assert ready["x"].dtype == np.float32 and ready["ids"].dtype == np.int64


@pytest.mark.parametrize(
    ("arrays", "field", "words"),
    [
        ({"x": np.ones((2, 3))}, "inputs.ids", "missing input 'ids'"),
        ({**good(), "z": np.ones(1)}, "inputs.z", "unexpected input 'z'"),
        ({**good(), "x": np.ones((2, 4))}, "inputs.x.shape", "size 3 on axis 1"),
        ({**good(), "x": np.ones(3)}, "inputs.x.shape", "needs 2 dimensions"),
        ({**good(), "x": np.array([[1.0, np.nan, 2.0]])}, "inputs.x", "NaN or infinite"),
        ({**good(), "x": np.array([[1.0, np.inf, 2.0]])}, "inputs.x", "NaN or infinite"),
        ({**good(), "ids": np.array([1.5, 2.0])}, "inputs.ids", "INT64"),
        ({**good(), "ids": np.array(["a", "b"])}, "inputs.ids", "INT64"),
        ({**good(), "ids": np.array([2.0**70, 1.0])}, "inputs.ids", "INT64"),
    ],
)
def test_rejects_with_the_field_named(arrays: dict[str, np.ndarray], field: str, words: str) -> None:
    with pytest.raises(InvalidInput) as err:
        check(arrays)
    assert err.value.field == field
    assert words in err.value.message
    assert err.value.status == 400


def test_declared_v2_datatype_must_match_exactly() -> None:
    with pytest.raises(InvalidInput) as err:
        check(good(), datatypes={"x": "FP64"})
    assert err.value.field == "inputs.x.datatype"


def test_element_limit_is_413() -> None:
    with pytest.raises(PayloadTooLarge) as err:
        check({"x": np.ones((400, 3)), "ids": np.arange(400)}, max_elements=1000)
    assert err.value.status == 413 and "batch" in err.value.message


def typed() -> dict[str, np.ndarray]:
    """Inputs already of the signature's dtypes (what a transform step hands a model)."""
    return {"ids": np.array([1, 2]), "x": np.ones((2, 3), np.float32)}


@pytest.mark.parametrize(
    ("arrays", "kw", "field"),
    [
        ({**typed(), "x": np.array([[1.0, np.nan, 2.0]], np.float32)}, {}, "inputs.x"),
        ({**typed(), "x": np.ones((2, 4), np.float32)}, {}, "inputs.x.shape"),
        ({"x": np.ones((2, 3), np.float32)}, {}, "inputs.ids"),
        (typed(), {"datatypes": {"x": "FP64"}}, "inputs.x.datatype"),
        (typed(), {"max_elements": 7}, "inputs"),
    ],
)
def test_inputs_already_of_the_signature_types_are_checked_as_thoroughly(arrays: dict[str, np.ndarray], kw: dict[str, object], field: str) -> None:
    with pytest.raises((InvalidInput, PayloadTooLarge)) as err:
        check(arrays, **kw)
    assert err.value.field == field


def test_inputs_already_of_the_signature_types_come_back_in_its_order_and_finite_ones_are_not_looked_through() -> None:
    given = typed()
    ready = check(given)
    assert list(ready) == ["x", "ids"] and ready["x"] is given["x"]
    nan = {**typed(), "x": np.full((1, 3), np.nan, np.float32)}
    assert check(nan, finite=frozenset({"x"}))["x"] is nan["x"]


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 12), data=st.data())
def test_a_few_values_read_as_python_floats_are_refused_as_numpy_refuses_them(rows: int, data: st.DataObject) -> None:
    """Up to 32 values are looked through as Python floats, more with NumPy: either way an
    array is let through exactly when NumPy finds every value finite."""
    x = np.asarray(data.draw(st.lists(st.floats(width=32), min_size=3 * rows, max_size=3 * rows)), np.float32).reshape(rows, 3)
    given_ = {"x": x, "ids": np.arange(rows)}
    if np.isfinite(x).all():
        assert check(given_)["x"] is x
    else:
        with pytest.raises(InvalidInput, match="NaN or infinite"):
            check(given_)


_values = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**40), 2**40), st.just(1e300))


@settings(max_examples=100, deadline=None)
@given(
    rows=st.integers(0, 40),
    kind=st.sampled_from(["float64", "int64", "float32", "float16", "bool", "int32"]),
    datatype=st.sampled_from(["FP32", "FP64", "FP16", "INT64"]),
    width=st.sampled_from([2, 3]),
    data=st.data(),
)
def test_the_one_pass_check_answers_as_the_full_check(rows: int, kind: str, datatype: str, width: int, data: st.DataObject) -> None:
    """Whatever the inputs (plain JSON numbers to cast, values a cast overflows, the signature's
    own dtype, another width), the one-pass check gives what the full check gives: the same
    arrays (dtype and values, in the signature's order) or the same error."""
    import warnings

    import sluice.validation as validation

    signature = Signature(inputs=(TensorSpec("x", datatype, (-1, 2)), TensorSpec("ids", "INT64", (-1,))), outputs=())
    values = data.draw(st.lists(_values, min_size=rows * width, max_size=rows * width))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = np.asarray(values, np.float64).astype(kind).reshape(rows, width)
    arrays = {"ids": np.arange(rows), "x": x}

    def outcome(check_at_once: object) -> object:
        saved = validation._checked_at_once
        validation._checked_at_once = check_at_once  # type: ignore[assignment]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ready = check_inputs(signature, dict(arrays), max_elements=60)
        except (InvalidInput, PayloadTooLarge) as error:
            return (type(error), error.field, str(error))
        finally:
            validation._checked_at_once = saved
        return [(name, a.dtype, a.shape, a.tolist()) for name, a in ready.items()]

    fast, full = outcome(validation._checked_at_once), outcome(lambda *a: None)
    assert repr(fast) == repr(full)  # repr: NaN equals NaN


WORDS = Signature(inputs=(TensorSpec("word", "BYTES", (-1,)),), outputs=(TensorSpec("echo", "BYTES", (-1,)),))
NOT_TEXT = st.one_of(st.none(), st.booleans(), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2), st.lists(st.text(max_size=2), max_size=2))


NOT_TEXT_OR_FINITE = st.one_of(NOT_TEXT, st.sampled_from([float("inf"), float("-inf"), float("nan")]))  # "inf" is no text a caller sent


@given(words=st.lists(st.one_of(st.text(max_size=4), st.integers(), st.floats(allow_nan=False, allow_infinity=False)), max_size=6), odd=NOT_TEXT_OR_FINITE, at=st.integers(0, 6), declared=st.booleans())
def test_a_bytes_input_takes_text_and_numbers_never_null_booleans_objects_or_lists(words: list[object], odd: object, at: int, declared: bool) -> None:
    """A model would read null as "None" and an object as "{'a': 1}": refused naming the
    input, whichever door built the array (an object array of JSON values), where text and
    numbers go through as they are."""
    kw = {"datatypes": {"word": "BYTES"}} if declared else {}
    array = np.empty(len(words), dtype=object)
    array[:] = words
    assert check_inputs(WORDS, {"word": array}, max_elements=100, **kw)["word"].tolist() == words
    bad = np.empty(len(words) + 1, dtype=object)
    for i, v in enumerate([*words[:at], odd, *words[at:]]):
        bad[i] = v
    with pytest.raises(InvalidInput) as refused:
        check_inputs(WORDS, {"word": bad}, max_elements=100, **kw)
    assert refused.value.field == "inputs.word" and "not null, true/false, an object or a list" in refused.value.message



def test_a_number_past_fp32s_range_is_refused_saying_so_without_numpys_warning() -> None:
    """3.5e38 read into an FP32 input is infinite (as a request's JSON is read): refused naming
    the input and the range; and reading it prints no NumPy RuntimeWarning on stderr once the
    core is imported (a stream's log printed one)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import sluice
    from sluice.domain.errors import NotFinite

    with pytest.raises(NotFinite, match="past FP32's range"):
        check({**good(), "x": np.asarray([[np.inf, 1.0, 2.0]], dtype=np.float32)})
    read = "import sluice.validation, numpy as np; np.asarray([[3.5e38, 1.0]], dtype=np.float32)"
    env = {**os.environ, "PYTHONPATH": str(Path(sluice.__file__).parents[1])}
    done = subprocess.run([sys.executable, "-W", "default", "-c", read], capture_output=True, text=True, check=True, timeout=60, env=env)
    assert "overflow" not in done.stderr, done.stderr
