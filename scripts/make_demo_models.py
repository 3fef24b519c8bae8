"""Train the demo models and write them as ONNX files (deterministic; run by `make models`).

- iris.onnx        logistic regression on the iris data set (label + ZipMap probabilities)
- iris_forest.onnx a random forest on the same data: the "new version" of the README tour
- diabetes_mlp.onnx a small multi-layer perceptron regressor on the diabetes data set
- mlp_large.onnx   (with --large) a float MLP of about 10 MB for benchmarks, no training
- embed.onnx, score.onnx, fraud.onnx (with --graphs) the small linear models the example
  policies name (`examples/policies/sequence.json`, `transform.json`, `examples/features/fraud.json`):
  embed takes `input` [-1, 4] and gives `embedding` [-1, 2]; score takes `embedding` [-1, 2],
  fraud `features` [-1, 3], and both give `score` [-1, 1]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

IRIS_FEATURES = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
DIABETES_FEATURES = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]


def _convert(estimator: object, n_features: int, feature_names: list[str], doc: str) -> bytes:
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType

    onx = to_onnx(estimator, initial_types=[("input", FloatTensorType([None, n_features]))], target_opset=17)
    prop = onx.metadata_props.add()
    prop.key, prop.value = "feature_names", ",".join(feature_names)
    onx.doc_string = doc
    return onx.SerializeToString()


def iris(forest: bool = False) -> bytes:
    from sklearn.datasets import load_iris
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression

    data = load_iris()
    x, y = data.data, data.target_names[data.target]  # string labels: "setosa", …
    if forest:
        model = RandomForestClassifier(n_estimators=20, max_depth=4, random_state=0)
    else:
        model = LogisticRegression(max_iter=500, random_state=0)
    model.fit(x.astype(np.float32), y)
    return _convert(model, 4, IRIS_FEATURES, f"iris {type(model).__name__}")


def diabetes_mlp() -> bytes:
    from sklearn.datasets import load_diabetes
    from sklearn.neural_network import MLPRegressor

    x, y = load_diabetes(return_X_y=True)
    model = MLPRegressor(hidden_layer_sizes=(32, 16), max_iter=2000, random_state=0)
    model.fit(x.astype(np.float32), y)
    return _convert(model, 10, DIABETES_FEATURES, "diabetes MLPRegressor")


def large_mlp(width: int = 1024, depth: int = 3, n_inputs: int = 256, n_outputs: int = 10) -> bytes:
    """A float MLP of about 10 MB of weights (1024-wide, random), for throughput benchmarks."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev, prev_width = "input", n_inputs
    for i in range(depth):
        w = (rng.standard_normal((prev_width, width)) / np.sqrt(prev_width)).astype(np.float32)
        b = np.zeros(width, dtype=np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [
            helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [f"h{i}"]),
            helper.make_node("Relu", [f"h{i}"], [f"a{i}"]),
        ]
        prev, prev_width = f"a{i}", width
    w = (rng.standard_normal((prev_width, n_outputs)) / np.sqrt(prev_width)).astype(np.float32)
    inits += [numpy_helper.from_array(w, "w_out"), numpy_helper.from_array(np.zeros(n_outputs, np.float32), "b_out")]
    nodes.append(helper.make_node("Gemm", [prev, "w_out", "b_out"], ["output"]))
    graph = helper.make_graph(
        nodes,
        "mlp_large",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", n_inputs])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", n_outputs])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def words(vocabulary: tuple[str, ...] = ("red", "green", "blue")) -> bytes:
    """A string model: `text` (BYTES [batch, 1]) gives its `code` in the vocabulary (-1 when
    absent, INT64) and the text back (`echo`, BYTES): for BYTES tensors in and out."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node(
            "LabelEncoder", ["text"], ["code"], domain="ai.onnx.ml",
            keys_strings=list(vocabulary), values_int64s=list(range(len(vocabulary))), default_int64=-1,
        ),
        helper.make_node("Identity", ["text"], ["echo"]),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "words",
        [helper.make_tensor_value_info("text", TensorProto.STRING, ["batch", 1])],
        [
            helper.make_tensor_value_info("code", TensorProto.INT64, ["batch", 1]),
            helper.make_tensor_value_info("echo", TensorProto.STRING, ["batch", 1]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 2)])
    model.ir_version = 8
    return model.SerializeToString()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "models")
    parser.add_argument("--large", action="store_true", help="also write mlp_large.onnx (~10 MB)")
    parser.add_argument("--graphs", action="store_true", help="also write embed.onnx, score.onnx and fraud.onnx (the example policies' models)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    files = {"iris.onnx": iris(), "iris_forest.onnx": iris(forest=True), "diabetes_mlp.onnx": diabetes_mlp()}
    if args.large:
        files["mlp_large.onnx"] = large_mlp()
    if args.graphs:
        import sys

        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository: its tests' model makers
        from tests.models import embed_model, score_model

        files |= {"embed.onnx": embed_model(), "score.onnx": score_model(), "fraud.onnx": score_model("features", 3)}
    for name, data in files.items():
        (args.out / name).write_bytes(data)
        print(f"wrote {args.out / name} ({len(data)} bytes)")


if __name__ == "__main__":
    main()
