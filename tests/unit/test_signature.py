from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.domain.errors import Unprocessable
from sluice.domain.signature import Signature
from sluice.services.models import read_signature
from tests.conftest import MODELS


def test_classifier_signature_reads_names_types_and_roles() -> None:
    sig = read_signature((MODELS / "iris.onnx").read_bytes())
    (inp,) = sig.inputs
    assert (inp.name, inp.datatype, inp.shape) == ("input", "FP32", (-1, 4))
    assert inp.feature_names == ("sepal_length", "sepal_width", "petal_length", "petal_width")
    label = sig.output_with_role("label")
    probs = sig.output_with_role("probabilities")
    assert label is not None and label.datatype == "BYTES"
    assert probs is not None and probs.name == "output_probability"
    assert sig.is_classifier


def test_regressor_signature_has_one_value_output() -> None:
    sig = read_signature((MODELS / "diabetes_mlp.onnx").read_bytes())
    assert [o.role for o in sig.outputs] == ["value"]
    assert sig.inputs[0].shape == (-1, 10)
    assert not sig.is_classifier


def test_feature_names_given_at_push_override_and_must_fit() -> None:
    data = (MODELS / "iris.onnx").read_bytes()
    sig = read_signature(data, ["a", "b", "c", "d"])
    assert sig.inputs[0].feature_names == ("a", "b", "c", "d")
    with pytest.raises(Unprocessable) as err:
        read_signature(data, ["a", "b"])
    assert err.value.field == "feature_names"


def test_signature_round_trips_through_dict() -> None:
    sig = read_signature((MODELS / "iris.onnx").read_bytes())
    assert Signature.from_dict(sig.to_dict()) == sig


def test_garbage_is_not_a_model() -> None:
    from sluice.domain.errors import InvalidInput

    with pytest.raises(InvalidInput) as err:
        read_signature(b"not an onnx file")
    assert err.value.field == "artifact"


DIMS = st.one_of(st.none(), st.integers(1, 4), st.sampled_from(["batch", "n"]))


@settings(max_examples=40, deadline=None)
@given(shape=st.one_of(st.none(), st.lists(DIMS, max_size=3)))
def test_an_input_of_unknown_rank_is_refused_and_any_declared_rank_is_kept(shape: list[int | str | None] | None) -> None:
    """ONNX Runtime reports an input that declares no shape as it reports a scalar; the push
    tells them apart: no shape is refused naming the artifact, a declared one (a scalar's, of
    no dimensions, too) is the signature's, each varying dimension dynamic."""
    from tests.models import relu_model

    data = relu_model(shape)
    if shape is None:
        with pytest.raises(Unprocessable) as err:
            read_signature(data)
        assert err.value.field == "artifact" and "declares no shape" in str(err.value)
        return
    (spec,) = read_signature(data).inputs
    assert spec.shape == tuple(d if isinstance(d, int) else -1 for d in shape)


def test_what_does_not_read_as_protobuf_declares_no_unranked_input() -> None:
    from sluice.runtimes.onnx_signature import unranked_inputs

    data = (MODELS / "iris.onnx").read_bytes()
    assert unranked_inputs(data) == set()
    for cut in (1, 7, len(data) // 2, len(data) - 1):
        assert unranked_inputs(data[:cut]) == set()  # a partial message: nothing found, never an error
    assert unranked_inputs(b"\xff" * 16) == set()
