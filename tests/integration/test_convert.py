"""`sluice models push` with a scikit-learn, XGBoost, LightGBM or PyTorch model: converted to
ONNX here, checked against the original on sample rows, refused when they disagree, and then
served like any pushed ONNX version."""

from __future__ import annotations

import json
import sys
from importlib.util import find_spec
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.csv as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.integration.conftest import run_cli

if TYPE_CHECKING:
    from pathlib import Path

IRIS_NAMES = ["sepal_length", "sepal_width", "petal_length", "petal_width"]

# The extra is looked for, not imported, at collection: skl2onnx imports scikit-learn, seconds
# of CPU that every pytest-xdist worker would pay; the tests import what they use.
pytestmark = [
    pytest.mark.usefixtures("cli_home"),
    pytest.mark.skipif(
        find_spec("joblib") is None or find_spec("skl2onnx") is None, reason="needs the sklearn extra (joblib, skl2onnx)"
    ),
]


@pytest.fixture(scope="module")
def iris() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_iris

    data = load_iris()
    return data.data, data.target


@pytest.fixture(scope="module")
def diabetes() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_diabetes

    data = load_diabetes()
    return data.data, data.target


def iris_csv(path: Path, x: np.ndarray) -> Path:
    pc.write_csv(pa.table({n: x[:, i] for i, n in enumerate(IRIS_NAMES)}), path)
    return path


def diabetes_parquet(path: Path, x: np.ndarray) -> Path:
    pq.write_table(pa.table({f"f{i}": x[:, i] for i in range(x.shape[1])}), path)
    return path


def test_a_scikit_learn_classifier_is_converted_checked_pushed_and_served(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, iris: tuple[np.ndarray, np.ndarray]
) -> None:
    import joblib
    from sklearn.linear_model import LogisticRegression

    x, y = iris
    model = LogisticRegression(max_iter=500).fit(x, y)
    joblib.dump(model, tmp_path / "iris.joblib")
    code, out, err = run_cli(capsys, "models", "push", "iris", str(tmp_path / "iris.joblib"), "--sample", str(iris_csv(tmp_path / "s.csv", x)))
    assert code == 0, err
    assert "converted from sklearn, checked on 150 rows of s.csv" in out and "labels agree on 100.00%" in out
    assert "pushed iris version 1" in out
    assert run_cli(capsys, "deployments", "create", "iris", "--model", "iris")[0] == 0
    code, out, err = run_cli(capsys, "predict", "iris", "--inputs", json.dumps(x[[0, 100]].tolist()))
    assert code == 0, err
    answer = json.loads(out)
    assert [p["prediction"] for p in answer["predictions"]] == [int(c) for c in model.predict(x[[0, 100]])]
    # The sample's header named the features: the version takes them by name.
    code, out, _ = run_cli(capsys, "models", "show", "iris", "--version", "1")
    assert json.loads(out)["signature"]["inputs"][0]["feature_names"] == IRIS_NAMES


def test_a_regressor_with_float32_drift_is_refused_at_tolerance_zero(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, diabetes: tuple[np.ndarray, np.ndarray]
) -> None:
    import joblib
    from sklearn.ensemble import GradientBoostingRegressor

    x, y = diabetes
    joblib.dump(GradientBoostingRegressor(n_estimators=20, random_state=0).fit(x, y), tmp_path / "gbr.pkl")
    sample = str(diabetes_parquet(tmp_path / "s.parquet", x))
    code, out, err = run_cli(capsys, "models", "push", "gbr", str(tmp_path / "gbr.pkl"), "--sample", sample, "--tolerance", "0")
    assert code == 2 and "pushed" not in out
    assert "disagrees with the original on values: largest difference" in err and "nothing was pushed" in err
    assert run_cli(capsys, "models", "list")[1].strip() == "(none)"
    # Within the default tolerance (1e-4 of each value) the same model goes in.
    code, out, err = run_cli(capsys, "models", "push", "gbr", str(tmp_path / "gbr.pkl"), "--sample", sample)
    assert code == 0, err
    assert "max abs diff" in out and "pushed gbr version 1" in out


def test_a_sample_that_does_not_fit_the_model_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, iris: tuple[np.ndarray, np.ndarray]
) -> None:
    import joblib
    from sklearn.linear_model import LogisticRegression

    x, y = iris
    joblib.dump(LogisticRegression(max_iter=500).fit(x, y), tmp_path / "iris.joblib")
    three = tmp_path / "three.csv"
    pc.write_csv(pa.table({n: x[:, i] for i, n in enumerate(IRIS_NAMES[:3])}), three)
    code, _, err = run_cli(capsys, "models", "push", "iris", str(tmp_path / "iris.joblib"), "--sample", str(three))
    assert code == 2 and "4 features; 3 names" in err
    code, _, err = run_cli(capsys, "models", "push", "iris", str(tmp_path / "iris.joblib"), "--sample", str(iris_csv(tmp_path / "s.csv", x)),
                        "--feature-names", "a,b,c,d")  # fmt: skip
    assert code == 2 and "no column 'a'" in err


def test_feature_names_given_must_be_the_ones_a_model_was_fitted_on_in_their_order(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, iris: tuple[np.ndarray, np.ndarray]
) -> None:
    """A model fitted on named columns reads them by position: names given in another order
    would feed each value to another feature (the check cannot see it: the original is given
    the same columns in the same places), so they are refused, as are other names."""
    import joblib
    import pandas as pd
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = iris
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(pd.DataFrame(x, columns=IRIS_NAMES), y)
    joblib.dump(model, tmp_path / "named.joblib")
    sample = str(iris_csv(tmp_path / "s.csv", x))
    push = ("models", "push", "named", str(tmp_path / "named.joblib"), "--sample", sample, "--feature-names")
    code, out, err = run_cli(capsys, *push, ",".join(reversed(IRIS_NAMES)))
    assert code == 2 and "pushed" not in out and "in that order" in err and "another order" in err, err
    code, out, err = run_cli(capsys, *push, "a,b,c,d")
    assert code == 2 and "the model was fitted on the features sepal_length, sepal_width" in err and "differ" in err, err
    code, out, err = run_cli(capsys, *push, ",".join(IRIS_NAMES))  # its own names: as without any
    assert code == 0 and "pushed named version 1" in out, err


def test_a_lightgbm_model_fitted_on_names_with_spaces_takes_them_as_given(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, iris: tuple[np.ndarray, np.ndarray]
) -> None:
    """LightGBM keeps `sepal length (cm)` as `sepal_length_(cm)`: the DataFrame's own names
    given at push (as an MLflow signature gives them) are its fitted names, not others."""
    lgb = pytest.importorskip("lightgbm")
    import joblib
    import pandas as pd

    x, y = iris
    names = ["sepal length (cm)", "sepal width (cm)", "petal length (cm)", "petal width (cm)"]
    model = lgb.LGBMClassifier(n_estimators=5, verbose=-1).fit(pd.DataFrame(x, columns=names), y)
    joblib.dump(model, tmp_path / "lgb.joblib")
    sample = tmp_path / "s.csv"
    pc.write_csv(pa.table({n: x[:, i] for i, n in enumerate(names)}), sample)
    code, out, err = run_cli(capsys, "models", "push", "lgb", str(tmp_path / "lgb.joblib"), "--sample", str(sample), "--feature-names", ",".join(names))
    assert code == 0 and "pushed lgb version 1" in out, err


def test_an_xgboost_classifier_and_regressor_round_trip(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, iris: tuple[np.ndarray, np.ndarray], diabetes: tuple[np.ndarray, np.ndarray]
) -> None:
    xgb = pytest.importorskip("xgboost")
    pytest.importorskip("onnxmltools")
    x, y = iris
    booster = xgb.train({"objective": "multi:softprob", "num_class": 3, "max_depth": 3}, xgb.DMatrix(x, label=y), num_boost_round=8)
    booster.save_model(tmp_path / "iris.ubj")
    code, out, err = run_cli(capsys, "models", "push", "iris", str(tmp_path / "iris.ubj"), "--sample", str(iris_csv(tmp_path / "s.csv", x)))
    assert code == 0, err
    assert "converted from xgboost" in out and "labels agree on 100.00%" in out
    dx, dy = diabetes
    xgb.train({"objective": "reg:squarederror"}, xgb.DMatrix(dx, label=dy), num_boost_round=8).save_model(tmp_path / "d.json")
    code, out, err = run_cli(capsys, "models", "push", "d", str(tmp_path / "d.json"), "--sample", str(diabetes_parquet(tmp_path / "d.parquet", dx)))
    assert code == 0, err
    assert "converted from xgboost, checked on 442 rows" in out


def test_a_lightgbm_booster_round_trips_and_a_wrong_sample_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, diabetes: tuple[np.ndarray, np.ndarray]
) -> None:
    lgb = pytest.importorskip("lightgbm")
    pytest.importorskip("onnxmltools")
    x, y = diabetes
    params = {"objective": "binary", "verbose": -1}
    lgb.train(params, lgb.Dataset(x, label=(y > 140).astype(int)), num_boost_round=8).save_model(tmp_path / "b.txt")
    code, out, err = run_cli(capsys, "models", "push", "b", str(tmp_path / "b.txt"), "--sample", str(diabetes_parquet(tmp_path / "d.parquet", x)))
    assert code == 0, err
    assert "converted from lightgbm" in out and "labels agree" in out
    # A deliberately mismatched check: a model that is not the one in the file cannot pass.
    from sluice.convert.check import ConversionDisagrees, compare
    from sluice.convert.frameworks import load, to_onnx

    loaded = load(tmp_path / "b.txt", "lightgbm")
    other = lgb.train(params, lgb.Dataset(x, label=(y > 200).astype(int)), num_boost_round=8)
    other.save_model(tmp_path / "other.txt")
    wrong = to_onnx(load(tmp_path / "other.txt", "lightgbm"), 10, x.astype(np.float32))
    with pytest.raises(ConversionDisagrees) as refused:
        compare(loaded, wrong, x.astype(np.float32), 1e-4)
    assert refused.value.details["max_abs_diff"] > 0.01


@pytest.mark.slow
def test_torchscript_and_exported_programs_round_trip(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    module = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).eval()
    torch.jit.script(module).save(str(tmp_path / "m.pt"))
    code, out, err = run_cli(capsys, "models", "push", "m", str(tmp_path / "m.pt"))
    assert code == 2 and "--n-features" in err
    code, out, err = run_cli(capsys, "models", "push", "m", str(tmp_path / "m.pt"), "--n-features", "4")
    assert code == 0, err
    assert "converted from torchscript, checked on 256 generated rows" in out
    pytest.importorskip("onnxscript")
    batch = torch.export.Dim("batch")
    program = torch.export.export(module, (torch.randn(2, 4),), dynamic_shapes=({0: batch},))
    torch.export.save(program, str(tmp_path / "m.pt2"))
    code, out, err = run_cli(capsys, "models", "push", "m", str(tmp_path / "m.pt2"))  # the program carries its example input
    assert code == 0, err
    assert "converted from torch-export" in out and "pushed m version 2" in out


def test_a_missing_converter_is_a_message_and_a_non_zero_exit(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, iris: tuple[np.ndarray, np.ndarray]
) -> None:
    import joblib
    from sklearn.linear_model import LogisticRegression

    x, y = iris
    joblib.dump(LogisticRegression(max_iter=500).fit(x, y), tmp_path / "iris.joblib")
    monkeypatch.setitem(sys.modules, "skl2onnx", None)  # as if the extra were not installed
    code, out, err = run_cli(capsys, "models", "push", "iris", str(tmp_path / "iris.joblib"))
    assert code == 2 and out == ""
    assert "pip install 'sluice[convert]'" in err
    code, _, err = run_cli(capsys, "models", "push", "iris", str(tmp_path / "model.bin"), "--format", "sklearn")
    assert code == 2 and "no such file" in err


# What the check compares, for every kind of classifier ---------------------------------------
def test_a_check_that_can_compare_nothing_refuses_the_push(capsys: pytest.CaptureFixture[str], tmp_path: Path, iris: tuple[np.ndarray, np.ndarray]) -> None:
    """XGBoost's binary:hinge predicts classes; its ONNX model answers margins (0.70, -0.49):
    there is nothing to compare, which once passed as "max abs diff 0" and was pushed."""
    xgb = pytest.importorskip("xgboost")
    pytest.importorskip("onnxmltools")
    x, y = iris
    xgb.train({"objective": "binary:hinge", "max_depth": 2}, xgb.DMatrix(x, label=(y > 0).astype(int)), 5).save_model(tmp_path / "h.json")
    code, out, err = run_cli(capsys, "models", "push", "h", str(tmp_path / "h.json"), "--sample", str(iris_csv(tmp_path / "s.csv", x)))
    assert (code, out) == (2, "")
    assert "error [file]: the ONNX model answers values where the original answers labels" in err and "nothing was pushed" in err
    assert run_cli(capsys, "models", "list")[1].strip() == "(none)"


def test_classifiers_without_probabilities_are_checked_on_their_labels(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, iris: tuple[np.ndarray, np.ndarray]
) -> None:
    import joblib
    from sklearn.linear_model import RidgeClassifier
    from sklearn.svm import LinearSVC

    x, y = iris
    sample = str(iris_csv(tmp_path / "s.csv", x))
    svc = LinearSVC().fit(x, np.where(y > 0, 7, 3))
    joblib.dump(svc, tmp_path / "svc.joblib")
    joblib.dump(RidgeClassifier().fit(x, y), tmp_path / "ridge.joblib")
    for name in ("svc", "ridge"):
        code, out, err = run_cli(capsys, "models", "push", name, str(tmp_path / f"{name}.joblib"), "--sample", sample)
        assert code == 0, err
        assert "checked on 150 rows of s.csv: labels agree on 100.00%" in out  # no "max abs diff": no values compared
    assert run_cli(capsys, "deployments", "create", "svc", "--model", "svc")[0] == 0
    code, out, err = run_cli(capsys, "predict", "svc", "--inputs", json.dumps(x[[0, 100]].tolist()))
    assert code == 0, err
    assert [p["prediction"] for p in json.loads(out)["predictions"]] == svc.predict(x[[0, 100]]).tolist() == [3, 7]
    for name in ("svc", "ridge"):  # their decision scores are served as what they are: no probabilities, no confidence
        if name != "svc":
            assert run_cli(capsys, "deployments", "create", f"{name}-v2", "--model", name)[0] == 0
        code, out, err = run_cli(capsys, "predict", name if name == "svc" else f"{name}-v2", "--inputs", json.dumps(x[[0, 100]].tolist()))
        assert code == 0, err
        for answer in json.loads(out)["predictions"]:
            assert "probabilities" not in answer and "confidence" not in answer, answer
    # With labels all there is, one that differs refuses the push.
    from sluice.convert.check import ConversionDisagrees, compare
    from sluice.convert.frameworks import estimator, to_onnx

    other = to_onnx(estimator(LinearSVC().fit(x, np.where(y > 1, 7, 3)), "other"), 4, x.astype(np.float32))
    with pytest.raises(ConversionDisagrees, match=r"disagrees with the original on the labels of \d+ of 150 rows") as refused:
        compare(estimator(svc, "svc"), other, x.astype(np.float32), 1e-4)
    assert refused.value.field == "file" and refused.value.details["label_agreement"] < 0.9


def test_boosters_a_converter_refuses_or_that_predict_classes_are_a_message_not_a_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, iris: tuple[np.ndarray, np.ndarray]
) -> None:
    xgb = pytest.importorskip("xgboost")
    lgb = pytest.importorskip("lightgbm")
    pytest.importorskip("onnxmltools")
    x, y = iris
    sample = str(iris_csv(tmp_path / "s.csv", x))
    params = {"objective": "multi:softmax", "num_class": 3, "max_depth": 2}
    xgb.train(params, xgb.DMatrix(x, label=y), 5).save_model(tmp_path / "softmax.json")
    code, out, err = run_cli(capsys, "models", "push", "softmax", str(tmp_path / "softmax.json"), "--sample", sample)
    assert code == 0, err
    assert "labels agree on 100.00%" in out
    lgb.train({"objective": "cross_entropy", "verbose": -1}, lgb.Dataset(x, label=(y > 0).astype(int)), 5).save_model(tmp_path / "xent.txt")
    code, out, err = run_cli(capsys, "models", "push", "xent", str(tmp_path / "xent.txt"), "--sample", sample)
    assert (code, out) == (2, "")
    assert "error [file]: onnxmltools cannot convert this Booster with objective 'cross_entropy' to ONNX" in err


def test_outputs_of_other_shapes_refuse_naming_the_file(tmp_path: Path, iris: tuple[np.ndarray, np.ndarray]) -> None:
    """A three-class original against a two-class ONNX model: a refusal, not numpy's reshape error."""
    lgb = pytest.importorskip("lightgbm")
    pytest.importorskip("onnxmltools")
    from sluice.convert.check import compare
    from sluice.convert.frameworks import estimator, to_onnx
    from sluice.domain.errors import BadRequest

    x, y = iris
    three = estimator(lgb.LGBMClassifier(n_estimators=3, verbose=-1).fit(x, y), "three")
    two = to_onnx(estimator(lgb.LGBMClassifier(n_estimators=3, verbose=-1).fit(x, (y > 0).astype(int)), "two"), 4, x.astype(np.float32))
    with pytest.raises(BadRequest, match=r"answers probabilities of shape \[150, 2\] where the original answers \[150, 3\]") as refused:
        compare(three, two, x.astype(np.float32), 1e-4)
    assert refused.value.field == "file"


def test_a_nan_on_one_side_only_is_a_disagreement_and_on_both_sides_agrees(diabetes: tuple[np.ndarray, np.ndarray]) -> None:
    """A NaN compared as a number passed every tolerance: a conversion answering NaN where the
    original answers a number (or the reverse) was pushed, "largest difference 0". NaN (or the
    same infinity) on both sides still agrees."""
    import dataclasses

    from sklearn.linear_model import LinearRegression

    from sluice.convert.check import ConversionDisagrees, compare
    from sluice.convert.frameworks import estimator, to_onnx

    x, y = diabetes
    rows = x.astype(np.float32)
    model = LinearRegression().fit(rows, y)
    loaded = estimator(model, "m")
    onnx = to_onnx(loaded, rows.shape[1], rows)
    by_hand = dataclasses.replace(loaded, predict=lambda r: {"values": (r.astype(np.float64) @ model.coef_ + model.intercept_).reshape(-1, 1)})
    holed = rows.copy()
    holed[3, 0] = np.nan  # both sides answer NaN for row 3
    assert compare(by_hand, onnx, holed, 1e-3)[0] is not None
    one_sided = dataclasses.replace(loaded, predict=lambda r: {"values": np.where(np.arange(len(r))[:, None] == 5, np.nan, by_hand.predict(r)["values"])})
    with pytest.raises(ConversionDisagrees, match="disagrees with the original on values"):
        compare(one_sided, onnx, rows, 1e-3)


@settings(max_examples=8, deadline=None)
@given(st.sampled_from([["cat", "dog"], ["b", "a", "c"], [3, 7], [-1, 10, 2], [0, 1]]))
def test_a_lightgbm_classifiers_labels_are_its_classes(classes: list[object]) -> None:
    """The check once compared the booster's class index (0, 1) with the ONNX model's class
    ("dog", 7) and reported "labels agree on 0.00%" for a faithful conversion."""
    lgb = pytest.importorskip("lightgbm")
    pytest.importorskip("onnxmltools")
    from sklearn.datasets import load_iris

    from sluice.convert.check import compare
    from sluice.convert.frameworks import estimator, to_onnx

    x, y = load_iris(return_X_y=True)
    labels = np.array(classes, dtype=object if isinstance(classes[0], str) else np.int64)[y % len(classes)]
    model = lgb.LGBMClassifier(n_estimators=5, verbose=-1).fit(x, labels)
    loaded = estimator(model, "m")
    rows = x.astype(np.float32)
    assert compare(loaded, to_onnx(loaded, 4, rows), rows, 1e-4)[1] == 1.0


def test_declared_output_shapes_are_what_the_model_answers(diabetes: tuple[np.ndarray, np.ndarray]) -> None:
    """skl2onnx declares a forest of two targets `[N, 1]`: the pushed model declares `[N, 2]`,
    what it answers, so its signature (and an ensemble's checks) read two values."""
    import onnx
    from sklearn.ensemble import RandomForestRegressor

    from sluice.convert.check import convert_loaded
    from sluice.convert.frameworks import estimator

    x, y = diabetes
    forest = RandomForestRegressor(n_estimators=3, random_state=0).fit(x, np.stack([y, -y], axis=1))
    converted = convert_loaded(estimator(forest, "forest"))
    (output,) = onnx.load_from_string(converted.onnx).graph.output
    assert [d.dim_value or d.dim_param for d in output.type.tensor_type.shape.dim] == ["N", 2]


def test_true_false_classes_are_refused_rather_than_served_as_0_and_1(iris: tuple[np.ndarray, np.ndarray]) -> None:
    from sklearn.linear_model import LogisticRegression

    from sluice.convert.check import convert_loaded
    from sluice.convert.frameworks import estimator
    from sluice.domain.errors import BadRequest

    x, y = iris
    with pytest.raises(BadRequest, match="classes are true/false") as refused:
        convert_loaded(estimator(LogisticRegression(max_iter=500).fit(x, y == 2), "flag"))
    assert refused.value.field == "file"
    convert_loaded(estimator(LogisticRegression(max_iter=500).fit(x, (y == 2).astype(int)), "flag"))  # 0/1 as integers: taken


def test_a_feature_count_or_sample_that_cannot_be_is_a_message_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, iris: tuple[np.ndarray, np.ndarray]
) -> None:
    import joblib
    from sklearn.linear_model import LogisticRegression

    x, y = iris
    joblib.dump(LogisticRegression(max_iter=500).fit(x, y), tmp_path / "m.joblib")
    model = str(tmp_path / "m.joblib")
    for flags, words in ((["--n-features", "7"], "[n_features]: n_features is 7: the model takes 4"), (["--sample", str(tmp_path / "nope.csv")], "[sample]: no such file")):
        code, _, err = run_cli(capsys, "models", "push", "m", model, *flags)
        assert code == 2 and words in err and "Traceback" not in err, err
    for bad in ("0", "-3"):
        with pytest.raises(SystemExit) as refused:
            run_cli(capsys, "models", "push", "m", model, "--n-features", bad)
        assert refused.value.code == 2


@pytest.mark.parametrize("which", ["SVC", "Perceptron", "SGDClassifier", "LinearSVC"])
def test_decision_scores_are_a_plain_value_whatever_the_converter_wraps_them_in(which: str, iris: tuple[np.ndarray, np.ndarray]) -> None:
    """skl2onnx gives some of these a ZipMap of their scores (a map a row, read as
    probabilities whatever its name): the scores come out a float tensor, `scores`."""
    import onnxruntime as ort
    from sklearn.linear_model import Perceptron, SGDClassifier
    from sklearn.svm import SVC, LinearSVC

    from sluice.convert.check import convert_loaded
    from sluice.convert.frameworks import estimator
    from sluice.runtimes.onnx_signature import signature_from_session

    x, y = iris
    model = {"SVC": SVC(), "Perceptron": Perceptron(), "SGDClassifier": SGDClassifier(loss="hinge"), "LinearSVC": LinearSVC()}[which].fit(x, y)
    converted = convert_loaded(estimator(model, which))
    signature = signature_from_session(ort.InferenceSession(converted.onnx))
    roles = {o.name: o.role for o in signature.outputs}
    assert "probabilities" not in roles.values() and "scores" in roles, roles
    (scores,) = [o for o in signature.outputs if o.name == "scores"]
    assert scores.datatype == "FP32" and scores.shape[0] == -1 and len(scores.shape) == 2
