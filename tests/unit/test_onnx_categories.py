"""ONNX Runtime's refusal of a category a one-hot encoder never saw, told apart from its other
failures by its kind and its fixed words alone."""

from __future__ import annotations

from sluice.runtimes.onnx_categories import encoder_inputs, unknown_category
from tests.models import one_hot_model

REFUSED = (
    "[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running OneHotEncoder node. "
    "Name:'OneHotEncoder1' Status Message: Unknown Category and zeros = 0."
)
Fail = type("Fail", (Exception,), {})
RuntimeException = type("RuntimeException", (Exception,), {})


def test_only_the_encoders_refusal_is_told_apart() -> None:
    assert unknown_category(Fail(REFUSED)) == "OneHotEncoder1"
    assert unknown_category(RuntimeException(REFUSED)) is None  # another kind: not the kernel's status
    assert unknown_category(Fail("Non-zero status code returned while running Gather node. Name:'g' Status Message: indices out of range")) is None
    assert unknown_category(Fail(REFUSED.replace("zeros = 0", "zeros = 1"))) is None


def test_the_inputs_an_encoder_reads_from_are_found_up_the_graph() -> None:
    assert encoder_inputs(one_hot_model()) == {"OneHotEncoder": ("color",)}
    assert encoder_inputs(b"\x3a\x05not a graph") == {}
    assert encoder_inputs(b"") == {}
