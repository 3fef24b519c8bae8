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


def _constant_graph(nodes: list[object], initializers: list[object], sparse: tuple[object, ...] = (), domains: tuple[str, ...] = ()) -> bytes:
    """`x` [-1, 1] FP32 in; `y` out, made by `nodes` from `x` and the initializers (and the
    operators of `domains`, version 1)."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes, "constants", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=initializers, sparse_initializer=list(sparse),
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), *(helper.make_opsetid(domain, 1) for domain in domains)])
    model.ir_version = 8
    return model.SerializeToString()


def _large(kind: str) -> bytes:
    """A model under 1 KB whose constant part makes a tensor of 9000 x 9000 floats (324 MB)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    def ints(name: str, values: list[int]) -> object:
        return numpy_helper.from_array(np.array(values, dtype=np.int64), name)

    def floats(name: str, values: object) -> object:
        return numpy_helper.from_array(np.array(values, dtype=np.float32), name)

    add = helper.make_node("Add", ["x", "big"], ["y"])
    if kind == "Expand":
        return _constant_graph([helper.make_node("Expand", ["one", "shape"], ["big"], name="grow"), add], [floats("one", [1.0]), ints("shape", [9000, 9000])])
    if kind == "Tile":
        return _constant_graph([helper.make_node("Tile", ["one", "repeats"], ["big"], name="grow"), add], [floats("one", [[1.0]]), ints("repeats", [9000, 9000])])
    if kind == "Mul":  # a shape computed from constants: 3000 * 3 twice over
        return _constant_graph([
            helper.make_node("Mul", ["n", "three"], ["side"]), helper.make_node("Concat", ["side", "side"], ["shape"], axis=0),
            helper.make_node("ConstantOfShape", ["shape"], ["big"], name="grow"), add,
        ], [ints("n", [3000]), ints("three", [3])])  # fmt: skip
    if kind == "Range":  # two ranges of 9000 floats broadcast into their product
        return _constant_graph([
            helper.make_node("Range", ["zero", "n", "step"], ["r"]), helper.make_node("Unsqueeze", ["r", "axis"], ["column"]),
            helper.make_node("Mul", ["column", "r"], ["big"], name="grow"), add,
        ], [floats("zero", 0.0), floats("n", 9000.0), floats("step", 1.0), ints("axis", [1])])  # fmt: skip
    if kind == "sparse":
        sparse = helper.make_sparse_tensor(floats("grow", [1.0]), ints("at", [0]), [9000, 9000])
        return _constant_graph([helper.make_node("Add", ["x", "grow"], ["y"])], [], (sparse,))
    assert kind == "If"  # in a branch, from a shape its graph holds
    branch = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["shape"], ["filled"], name="grow")], "then", [],
        [helper.make_tensor_value_info("filled", TensorProto.FLOAT, None)],
    )  # fmt: skip
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["same"])], "else", [], [helper.make_tensor_value_info("same", TensorProto.FLOAT, None)])
    when = helper.make_node("If", ["yes"], ["y"], then_branch=branch, else_branch=other)
    return _constant_graph([when], [ints("shape", [9000, 9000]), numpy_helper.from_array(np.array(True), "yes")])


@pytest.mark.parametrize("kind", ["Expand", "Tile", "Mul", "Range", "sparse", "If"])
def test_a_model_whose_constants_make_a_large_tensor_is_refused_naming_the_node(kind: str) -> None:
    """ONNX Runtime computes what a model makes from its constants alone as it makes the
    session: a tiny model so took gigabytes of the process. The shape is worked out from the
    constants without making the tensor, and the model refused naming what makes it."""
    data = _large(kind)
    assert len(data) < 1024
    with pytest.raises(Unprocessable) as err:
        read_signature(data)
    assert err.value.field == "artifact" and "'grow'" in err.value.message and "[9000, 9000]" in err.value.message, err.value.message


def test_what_a_model_makes_of_its_inputs_or_of_small_constants_is_not_counted() -> None:
    """A shape read from an input is not known before a request: nothing is refused for it."""
    import numpy as np
    from onnx import helper, numpy_helper

    from tests.models import filled_model

    of_input = _constant_graph(
        [helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("ConstantOfShape", ["shape"], ["zeros"]), helper.make_node("Add", ["x", "zeros"], ["y"])], []
    )
    weight = numpy_helper.from_array(np.ones((256, 256), dtype=np.float32), "w")
    transposed = _constant_graph([helper.make_node("Transpose", ["w"], ["t"]), helper.make_node("ReduceSum", ["t"], ["s"], keepdims=0), helper.make_node("Add", ["x", "s"], ["y"])], [weight])
    for data in (of_input, transposed, filled_model([1000, 1000], fills=3), *(p.read_bytes() for p in sorted(MODELS.glob("*.onnx")))):
        assert read_signature(data).outputs


def _unsized(kind: str) -> bytes:
    """A model of a few hundred bytes whose constant part makes 16000 x 16000 floats (1 GB) by
    an operator the shapes were once not worked out for: each goes through the check."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    def ints(name: str, values: object) -> object:
        return numpy_helper.from_array(np.array(values, dtype=np.int64), name)

    def floats(name: str, values: object) -> object:
        return numpy_helper.from_array(np.array(values, dtype=np.float32), name)

    n, add = 16000, [helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0), helper.make_node("Add", ["x", "s"], ["y"])]
    ranges = [floats("zero", 0.0), floats("n", float(n)), floats("one", 1.0)]
    if kind == "Mod":  # a shape made by an operator once without a value rule
        return _constant_graph([helper.make_node("Mod", ["shape", "m"], ["side"]), helper.make_node("ConstantOfShape", ["side"], ["big"], name="grow"), *add], [ints("shape", [n, n]), ints("m", [10**9])])
    if kind == "Split":
        return _constant_graph([
            helper.make_node("Split", ["shapes", "parts"], ["a", "side"]), helper.make_node("ConstantOfShape", ["side"], ["big"], name="grow"), *add,
        ], [ints("shapes", [7, n, n]), ints("parts", [1, 2])])  # fmt: skip
    if kind == "Einsum":
        return _constant_graph([helper.make_node("Range", ["zero", "n", "one"], ["r"]), helper.make_node("Einsum", ["r", "r"], ["big"], name="grow", equation="i,j->ij"), *add], ranges)
    if kind == "HannWindow":
        return _constant_graph([helper.make_node("HannWindow", ["size"], ["big"], name="grow"), *add], [ints("size", n * n)])
    if kind == "Resize-10":  # inputs X, scales before opset 11
        data = _constant_graph([helper.make_node("Resize", ["one", "scales"], ["big"], name="grow", mode="nearest"), *add], [floats("one", [[1.0]]), floats("scales", [n, n])])
        return data.replace(helper.make_opsetid("", 17).SerializeToString(), helper.make_opsetid("", 10).SerializeToString())
    if kind == "NonZero":  # the indices of 130 M true values: 1 GB of int64
        true = helper.make_tensor("t", TensorProto.BOOL, [1], [True])
        return _constant_graph([
            helper.make_node("ConstantOfShape", ["count"], ["mask"], value=true), helper.make_node("NonZero", ["mask"], ["at"], name="grow"),
            helper.make_node("Cast", ["at"], ["big"], to=TensorProto.FLOAT), *add,
        ], [ints("count", [130_000_000])])  # fmt: skip
    if kind == "Loop":  # a row of the constants, once a step, 16000 steps
        body = helper.make_graph(
            [helper.make_node("Identity", ["going"], ["goes"]), helper.make_node("Identity", ["r"], ["row"])], "step",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("going", TensorProto.BOOL, [])],
            [helper.make_tensor_value_info("goes", TensorProto.BOOL, []), helper.make_tensor_value_info("row", TensorProto.FLOAT, None)],
        )  # fmt: skip
        return _constant_graph([helper.make_node("Range", ["zero", "n", "one"], ["r"]), helper.make_node("Loop", ["steps", ""], ["big"], name="grow", body=body), *add], [*ranges, ints("steps", n)])
    assert kind == "unknown"  # an operator that makes more than it takes, of a size not told (a window of a size computed by a custom domain's node)
    custom = helper.make_node("Identity", ["size"], ["side"], domain="com.example")
    return _constant_graph([custom, helper.make_node("HannWindow", ["side"], ["big"], name="grow"), *add], [ints("size", n)])


@pytest.mark.parametrize("kind", ["Mod", "Split", "Einsum", "HannWindow", "Resize-10", "NonZero", "Loop", "unknown"])
def test_a_tiny_model_making_gigabytes_by_any_operator_is_refused_naming_the_node(kind: str) -> None:
    """Each of these made ONNX Runtime take over a gigabyte loading (or first running) a model
    of a few hundred bytes: its output is sized and counted, a loop's scan outputs once per
    step, or, where its size cannot be told, the node is refused for that. No session is made
    of them here (the check ONNX Runtime's sessions go through is called alone)."""
    from sluice.runtimes.onnx_constants import check_constant_sizes

    data = _unsized(kind)
    assert len(data) < 512
    with pytest.raises(Unprocessable) as err:
        check_constant_sizes(data)
    assert err.value.field == "artifact" and "'grow'" in err.value.message, err.value.message
    if kind == "unknown":
        assert "cannot be told" in err.value.message, err.value.message


def test_models_whose_constants_are_small_or_quantized_or_of_any_value_are_read() -> None:
    """What a model makes of small constants by operators with no rule (counted as much as
    their inputs), a QDQ model's int8 weight (ONNX Runtime keeps it int8, DequantizeLinear is
    not folded), unsigned constants of any value and small sized expansions all pass."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from sluice.runtimes.onnx_constants import check_constant_sizes

    weight = numpy_helper.from_array(np.ones((4, 4), dtype=np.int8), "w")
    qdq = _constant_graph([  # were its float weight folded, the Tile would make 20000 x 20000 floats of it
        helper.make_node("DequantizeLinear", ["w", "scale", "zero"], ["wf"]), helper.make_node("Tile", ["wf", "repeats"], ["big"]),
        helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0), helper.make_node("Add", ["x", "s"], ["y"]),
    ], [weight, numpy_helper.from_array(np.array(0.01, np.float32), "scale"), numpy_helper.from_array(np.array(0, np.int8), "zero"),
        numpy_helper.from_array(np.array([5000, 5000], np.int64), "repeats")])  # fmt: skip
    check_constant_sizes(qdq)  # no session made of it: the model is for the check only
    widest = helper.make_tensor("mask", TensorProto.UINT64, [1], [2**64 - 1])
    wrapped = helper.make_tensor("byte", TensorProto.INT32, [1], [300])
    wrapped.data_type = TensorProto.UINT8  # out of its type's range: read as a cast would, not refused
    unsigned = _constant_graph([helper.make_node("Identity", ["x"], ["y"])], [widest, wrapped])
    ruleless = _constant_graph([
        helper.make_node("LpNormalization", ["v"], ["n"]), helper.make_node("Einsum", ["n", "n"], ["outer"], equation="i,j->ij"),
        helper.make_node("HannWindow", ["size"], ["window"]), helper.make_node("Unique", ["window"], ["once"]),
        helper.make_node("ReduceSum", ["outer"], ["s"], keepdims=0), helper.make_node("ReduceSum", ["once"], ["t"], keepdims=0),
        helper.make_node("Add", ["s", "t"], ["st"]), helper.make_node("Add", ["x", "st"], ["y"]),
    ], [numpy_helper.from_array(np.ones(1000, np.float32), "v"), numpy_helper.from_array(np.array(1000, np.int64), "size")])  # fmt: skip
    for data in (unsigned, ruleless):
        assert read_signature(data).outputs


def test_one_row_of_a_large_constant_table_is_read_and_onnx_runtimes_own_range_is_counted() -> None:
    """A row of a table too large for its values to be held here (an embedding's row, a
    PyTorch export's weight[0]) keeps the shape its rule works out: read. ONNX Runtime's own
    Range (com.microsoft) on constants is sized as ONNX's is: 960 MB of floats, refused."""
    import numpy as np
    from onnx import helper, numpy_helper

    from sluice.runtimes.onnx_constants import check_constant_sizes

    table = numpy_helper.from_array(np.zeros((30522, 64), np.float32), "table")
    row = _constant_graph([helper.make_node("Gather", ["table", "at"], ["row"], axis=0), helper.make_node("ReduceSum", ["row"], ["s"], keepdims=0), helper.make_node("Add", ["x", "s"], ["y"])],
                          [table, numpy_helper.from_array(np.array(101, np.int64), "at")])  # fmt: skip
    assert read_signature(row).outputs
    contrib = _constant_graph(
        [helper.make_node("Range", ["start", "limit", "step"], ["big"], domain="com.microsoft", name="grow"), helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0),
         helper.make_node("Add", ["x", "s"], ["y"])],
        [numpy_helper.from_array(np.array(v, np.float32), name) for name, v in (("start", 0.0), ("limit", 2.4e8), ("step", 1.0))],
        domains=("com.microsoft",),
    )  # fmt: skip
    with pytest.raises(Unprocessable) as err:
        check_constant_sizes(contrib)
    assert "'grow'" in err.value.message and "960,000,000 bytes" in err.value.message, err.value.message
