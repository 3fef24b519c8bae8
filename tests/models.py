"""Small ONNX models built in tests, for behaviours the demo models in `models/` do not show."""

from __future__ import annotations

import numpy as np

LOOKUP_TABLE = np.linspace(0.0, 0.9, 10, dtype=np.float32)  # what `lookup_model` answers for codes 0..9


def lookup_model() -> bytes:
    """`code` [-1, 1] INT64 in, `score` [-1, 1] FP32 out: `LOOKUP_TABLE[code]`. Any integer
    fits the signature, but ONNX Runtime refuses a code outside -10..9 (Gather's bounds): a
    value the checks accept and the model rejects, as a real model rejects one."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [
            helper.make_node("Squeeze", ["code", "axis"], ["codes"]),
            helper.make_node("Gather", ["table", "codes"], ["scores"], axis=0),
            helper.make_node("Unsqueeze", ["scores", "axis"], ["score"]),
        ],
        "lookup",
        [helper.make_tensor_value_info("code", TensorProto.INT64, [None, 1])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, [None, 1])],
        initializer=[numpy_helper.from_array(LOOKUP_TABLE, "table"), numpy_helper.from_array(np.array([1], dtype=np.int64), "axis")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def total_model() -> bytes:
    """`x` [-1, 2] FP32 in, `total` [1, 2] out: the column sums of the whole batch, one row
    whatever the rows asked (a model that does not answer row by row)."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x", "axis"], ["total"], keepdims=1)],
        "total",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])],
        [helper.make_tensor_value_info("total", TensorProto.FLOAT, [1, 2])],
        initializer=[numpy_helper.from_array(np.array([0], dtype=np.int64), "axis")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


EMBED_WEIGHTS = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, -0.5]], dtype=np.float32)
SCORE_WEIGHTS = np.array([[1.0], [2.0]], dtype=np.float32)


def embed_model() -> bytes:
    """`input` [-1, 4] FP32 (the iris features) in, `embedding` [-1, 2] FP32 out:
    `input @ EMBED_WEIGHTS`. The first step of a two-model sequence."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "weights"], ["embedding"])],
        "embed",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, [None, 2])],
        initializer=[numpy_helper.from_array(EMBED_WEIGHTS, "weights")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def score_model(input_name: str = "embedding", width: int = 2) -> bytes:
    """`input_name` [-1, width] FP32 in, `score` [-1, 1] FP32 out: `x @ SCORE_WEIGHTS` (width
    2; else a column of ones). Fed by `embed_model` by name (the default), or through a
    sequence's map (any other name)."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", [input_name, "weights"], ["score"])],
        "score",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [None, width])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, [None, 1])],
        initializer=[numpy_helper.from_array(SCORE_WEIGHTS if width == 2 else np.ones((width, 1), np.float32), "weights")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def grid_model() -> bytes:
    """`grid` [-1, 2, 2] FP32 in, `sum` [-1, 1] FP32 out: each row's sum. An input of rank 3
    (a row is a 2x2 grid, not a list)."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["grid", "axes"], ["total"], keepdims=0), helper.make_node("Unsqueeze", ["total", "one"], ["sum"])],
        "grid",
        [helper.make_tensor_value_info("grid", TensorProto.FLOAT, [None, 2, 2])],
        [helper.make_tensor_value_info("sum", TensorProto.FLOAT, [None, 1])],
        initializer=[numpy_helper.from_array(np.array([1, 2], dtype=np.int64), "axes"), numpy_helper.from_array(np.array([1], dtype=np.int64), "one")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def iris_of_classes(labels: tuple[str, ...] = ("A", "B", "C")) -> bytes:
    """The demo iris model with its three classes named `labels`: the same answers, other
    classes (a switch's cases that cannot share a probabilities tensor)."""
    import onnx

    from tests.conftest import MODELS

    model = onnx.load(str(MODELS / "iris.onnx"))
    for node in model.graph.node:
        for attribute in node.attribute:
            if attribute.name == "classlabels_strings":
                del attribute.strings[:]
                attribute.strings.extend(label.encode() for label in labels)
    return model.SerializeToString()


def relu_model(shape: list[int | None] | None) -> bytes:
    """`x` FP32 in, `y` = Relu(x) out, both of `shape`: `[]` a scalar (rank 0), None no shape
    declared at all (any rank, as many exported graphs say)."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def sum_model(values: int) -> bytes:
    """`input` [-1, values] FP32 in, `total` [-1, 1] FP32 out: each row's sum (a large tensor
    in, a small answer out: what a request's bytes cost, beside the model's work)."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["input"], ["total"], keepdims=1, axes=[1])],
        "sum",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, values])],
        [helper.make_tensor_value_info("total", TensorProto.FLOAT, [None, 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 7
    return model.SerializeToString()


def ratio_model() -> bytes:
    """`x` [-1, 1] INT64 in, `y` [-1, 1] INT64 out: 100 // x, row by row. A row of 0 makes
    ONNX Runtime fail the whole call (`Fail`: integer division by zero), whatever the other
    rows hold: a model that fails on one record's values."""
    from onnx import TensorProto, helper

    hundred = helper.make_tensor("hundred", TensorProto.INT64, [], [100])
    graph = helper.make_graph(
        [helper.make_node("Div", ["hundred", "x"], ["y"])],
        "ratio",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [None, 1])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [None, 1])],
        [hundred],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def echo_int_model(datatype: str = "INT64") -> bytes:
    """`x` [-1, 1] in, `y` [-1, 1] out, the same values, of `datatype` (INT64, UINT64, INT32 or
    INT8): what a row's integer input reached the model as."""
    from onnx import TensorProto, helper

    kind = {"UINT64": TensorProto.UINT64, "INT32": TensorProto.INT32, "INT8": TensorProto.INT8}.get(datatype, TensorProto.INT64)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "echo",
        [helper.make_tensor_value_info("x", kind, [None, 1])],
        [helper.make_tensor_value_info("y", kind, [None, 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def filled_model(shape: list[int], fills: int = 1) -> bytes:
    """`x` [-1, 1] FP32 in, `y` [-1, 1] FP32 out: x plus the sum of `fills` tensors of `shape`
    ConstantOfShape makes from a constant shape (each 1.0 + its number): a model of a few
    hundred bytes whose constant part ONNX Runtime computes, as large as `shape` says, when it
    makes the session."""
    from onnx import TensorProto, helper

    nodes, last = [], "x"
    for i in range(fills):
        fill = helper.make_tensor("fill", TensorProto.FLOAT, [1], [1.0 + i])
        nodes += [
            helper.make_node("ConstantOfShape", ["shape"], [f"filled{i}"], name=f"fill{i}", value=fill),
            helper.make_node("ReduceSum", [f"filled{i}"], [f"sum{i}"], keepdims=0),
            helper.make_node("Add", [last, f"sum{i}"], [f"plus{i}"]),
        ]
        last = f"plus{i}"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    graph = helper.make_graph(
        nodes, "filled", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])],
        initializer=[helper.make_tensor("shape", TensorProto.INT64, [len(shape)], shape)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


BIAS = np.array([7.0, 8.0, 9.0], dtype=np.float32)


def with_constants_model() -> bytes:
    """`x` [-1, 3] FP32 in; out `y` [-1, 3] (x + BIAS), `bias` [3] (BIAS, one value for the
    whole answer) and `mean` [] (the mean of every x): a model answering beside its rows what
    is not one value per row."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "b"], ["y"]),
            helper.make_node("Identity", ["b"], ["bias"]),
            helper.make_node("ReduceMean", ["x"], ["mean"], keepdims=0),
        ],
        "with_constants",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3]),
            helper.make_tensor_value_info("bias", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("mean", TensorProto.FLOAT, []),
        ],
        initializer=[numpy_helper.from_array(BIAS, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def one_hot_model() -> bytes:
    """A scikit-learn pipeline converted to ONNX: `color` (a string, one-hot encoded, unknown
    categories refused, as `handle_unknown="error"` does) beside `size` (a float, scaled), then
    a logistic regression. Two inputs, so that the one a failure comes from can be named."""
    import pandas as pd
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    frame = pd.DataFrame({"color": ["red", "green", "blue", "red"], "size": [1.0, 2.0, 3.0, 4.0]})
    columns = ColumnTransformer([("color", OneHotEncoder(handle_unknown="error"), ["color"]), ("size", StandardScaler(), ["size"])])
    pipeline = Pipeline([("features", columns), ("model", LogisticRegression())]).fit(frame, [0, 1, 1, 0])
    types = [("color", StringTensorType([None, 1])), ("size", FloatTensorType([None, 1]))]
    return convert_sklearn(pipeline, initial_types=types, target_opset={"": 17, "ai.onnx.ml": 3}, options={id(pipeline): {"zipmap": False}}).SerializeToString()
