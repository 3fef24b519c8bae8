from __future__ import annotations

import pytest

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
