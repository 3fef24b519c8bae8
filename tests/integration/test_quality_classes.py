"""Model quality and data quality read right where the model's classes or values are spelled
unlike the labels: a classifier exported without ZipMap, a float label output, a three-class
model's window that saw two classes, a regressor's huge answer, a number sent to a text input,
and the unsplit traffic asked for by the name the answer gives it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.domain.results import InferenceResult
from sluice.domain.signature import Signature, TensorSpec
from sluice.monitor.quality import CLASS, Outcomes, predicted
from sluice.services.monitoring import _label
from tests.integration.conftest import auth
from tests.integration.test_monitoring import _identity, iris_rows, predict

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

    from sluice.domain import Principal
    from sluice.wiring import Container


def _labelled(
    client: TestClient, key: str, demo: Container, deployment: str, inputs: list[Any], truth: list[Any], *, one_by_one: bool = False
) -> dict[str, Any]:
    """`inputs` predicted as one request (or a request a row), each row labelled with `truth`:
    the window's quality."""
    h = auth(key)
    for i, part in enumerate([[row] for row in inputs] if one_by_one else [inputs]):
        r = client.post("/api/v1/predictions", json={"deployment": deployment, "inputs": part, "request_id": f"r{i}"}, headers=h)
        assert r.status_code == 200, r.text
    demo.predictions.kept.flush()
    labels = [{"request_id": f"r{i}", "row": 0, "label": t} for i, t in enumerate(truth)] if one_by_one else [
        {"request_id": "r0", "row": i, "label": t} for i, t in enumerate(truth)
    ]  # fmt: skip
    r = client.post(f"/api/v1/deployments/{deployment}/labels", json={"labels": labels}, headers=h)
    assert r.status_code == 200, r.text
    return client.get(f"/api/v1/deployments/{deployment}/monitor", headers=h).json()["quality"][0]


@pytest.mark.parametrize("one_by_one", [False, True])
@pytest.mark.parametrize("classes", [(0, 1), (1, 2), (0, 2), ("no", "yes")])
def test_a_classifier_exported_without_zipmap_is_never_scored_against_the_wrong_class(
    client: TestClient, keys: dict[str, str], demo: Container, acme: Principal, classes: tuple[Any, Any], one_by_one: bool
) -> None:
    """Its probabilities come with no ZipMap naming their columns. Taking the columns for "0" and
    "1" gave the model of classes 1 and 2 an AUC of 1 - AUC and the first class's precision, and
    the one of "no" and "yes" none at all; a request of one row predicting 0 could not tell 0 and
    1 from 0 and 2. The columns are the graph's classifier's labels (its `classlabels_*`)."""
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import precision_score, recall_score, roc_auc_score

    rng = np.random.default_rng(0)
    x = rng.normal(size=(460, 2)).astype(np.float32)
    truth = np.where(x[:, 0] + 0.8 * x[:, 1] + rng.normal(size=460) > 0, classes[1], classes[0])
    model = LogisticRegression().fit(x[:400], truth[:400])
    demo.models.push(acme, "bin", to_onnx(model, x[:1], options={id(model): {"zipmap": False}}, target_opset=17).SerializeToString())
    demo.predictions.kept.mode = "all"
    client.post("/api/v1/deployments", json={"name": "bin", "model": "bin"}, headers=auth(keys["acme"])).raise_for_status()
    test, said = x[400:], model.predict(x[400:])
    quality = _labelled(client, keys["acme"], demo, "bin", test.tolist(), [t.item() for t in truth[400:]], one_by_one=one_by_one)
    # The later class, as scikit-learn's positive class by default
    assert quality["precision"] == pytest.approx(precision_score(truth[400:], said, pos_label=classes[1]))
    assert quality["recall"] == pytest.approx(recall_score(truth[400:], said, pos_label=classes[1]))
    # Its probabilities' columns are named by the graph's classifier's labels (no ZipMap to name
    # them): the scores are the later class's, whatever the labels are and however the rows came.
    assert quality["auc"] == pytest.approx(roc_auc_score(truth[400:] == classes[1], model.predict_proba(test)[:, 1]), abs=0.01)


TWO = Signature(
    inputs=(TensorSpec("x", "FP32", (-1, 2)),),
    outputs=(TensorSpec("label", "FP32", (-1,), role="label"), TensorSpec("probabilities", "FP32", (-1, 2), role="probabilities")),
)


@given(st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=8), st.sampled_from(["int", "float", "text"]))
def test_a_float_label_output_and_a_label_of_the_same_number_are_one_class(said: list[int], spelled: str) -> None:
    label = np.array(said, np.float64)
    probs = np.full((len(said), 2), 0.5, np.float32)
    doc = predicted(TWO, InferenceResult({"label": label, "probabilities": probs}))
    assert doc is not None
    posted = [{"int": n, "float": float(n), "text": str(n)}[spelled] for n in said]
    outcomes = Outcomes(CLASS)
    for row, value in enumerate(posted):
        outcomes.add_class(_label(CLASS, value, "labels[0].label"), doc["predicted"][row])
    assert outcomes.metrics()["accuracy"] == 1.0


def test_a_three_class_models_window_that_saw_two_keeps_its_macro_figures() -> None:
    from sklearn.metrics import precision_score

    pairs = [("setosa", "setosa")] * 50 + [("versicolor", "setosa")] * 10 + [("versicolor", "versicolor")] * 40
    outcomes = Outcomes(CLASS)
    for actual, said in pairs:
        outcomes.add_class(actual, said, class_scores={"setosa": 0.5, "versicolor": 0.3, "virginica": 0.2})
    metrics = outcomes.metrics()
    assert "positive" not in metrics
    assert metrics["precision"] == pytest.approx(precision_score(*zip(*pairs, strict=True), average="macro", zero_division=0))


def test_a_regressors_huge_answer_is_not_comparable_and_the_window_keeps_its_rmse(
    client: TestClient, keys: dict[str, str], demo: Container, acme: Principal
) -> None:
    from onnx import TensorProto

    demo.models.push(acme, "reg", _identity(TensorProto.DOUBLE))
    demo.predictions.kept.mode = "all"
    client.post("/api/v1/deployments", json={"name": "reg", "model": "reg"}, headers=auth(keys["acme"])).raise_for_status()
    quality = _labelled(client, keys["acme"], demo, "reg", [1e200, 2.0, 4.0], [0, 1, 1])
    assert quality["rows"] == 2 and quality["rmse"] == pytest.approx(np.sqrt((1 + 9) / 2))


def test_a_number_sent_to_a_text_input_is_a_value_not_a_missing_one(
    client: TestClient, keys: dict[str, str], demo: Container, acme: Principal
) -> None:
    from onnx import TensorProto

    demo.models.push(acme, "codes", _identity(TensorProto.STRING))
    h = auth(keys["acme"])
    client.post("/api/v1/deployments", json={"name": "codes", "model": "codes"}, headers=h).raise_for_status()
    baseline = client.put("/api/v1/deployments/codes/baseline", json={"inputs": ["0", "1", "2"] * 200}, headers=h)
    assert baseline.status_code == 200, baseline.text
    assert client.post("/api/v1/predictions", json={"deployment": "codes", "inputs": [0, 1, 2] * 200}, headers=h).status_code == 200
    column = client.get("/api/v1/deployments/codes/monitor", headers=h).json()["windows"][0]["columns"]["x"]
    assert column["verdict"] == "ok" and column["missing_rate"] == 0  # every 0 was missing: a `missing` alert


def test_the_unsplit_traffic_is_read_by_the_name_its_quality_is_given(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    demo.predictions.kept.mode = "all"
    h = auth(keys["acme"])
    assert client.put("/api/v1/deployments/iris/baseline", json={"inputs": iris_rows(600, 0)}, headers=h).status_code == 200
    predict(client, keys["acme"], iris_rows(300, 1))
    r = client.post("/api/v1/predictions", json={"deployment": "iris", "inputs": iris_rows(3, 2), "request_id": "q"}, headers=h)
    said = [p["prediction"] for p in r.json()["predictions"]]
    demo.predictions.kept.flush()
    client.post("/api/v1/deployments/iris/labels", json={"labels": [{"request_id": "q", "row": i, "label": s} for i, s in enumerate(said)]}, headers=h)
    everything = client.get("/api/v1/deployments/iris/monitor", headers=h).json()
    assert list(everything["quality"][0]["variants"]) == ["default"]
    named = client.get("/api/v1/deployments/iris/monitor?variant=default", headers=h).json()
    assert named["verdict"] == everything["verdict"] and named["quality"] == everything["quality"]
    assert named["windows"][0]["columns"] == everything["windows"][0]["columns"]


@pytest.mark.parametrize(
    ("elem", "baseline", "traffic"),
    [
        ("INT64", list(range(1_700_000_001, 1_700_000_601)), list(range(1_700_000_601, 1_700_001_201))),  # epoch seconds
        ("DOUBLE", [1e39 * (1 + i / 600) for i in range(600)], [1e300] * 600),  # past 32-bit floats' range
    ],
)
def test_numbers_are_sketched_as_they_are_sent(
    client: TestClient, keys: dict[str, str], demo: Container, acme: Principal, elem: str, baseline: list[float], traffic: list[float]
) -> None:
    """Sketched as 32-bit floats, epoch seconds read back as 1700000640 for a baseline ending at
    1700000600 (traffic all past it only partly out of range), and FP64 values past 3.4e38 as
    infinities: no quantile at all, and traffic 10^261 times the baseline's read as no drift."""
    from onnx import TensorProto

    demo.models.push(acme, "nums", _identity(getattr(TensorProto, elem)))
    h = auth(keys["acme"])
    client.post("/api/v1/deployments", json={"name": "nums", "model": "nums"}, headers=h).raise_for_status()
    made = client.put("/api/v1/deployments/nums/baseline", json={"inputs": baseline}, headers=h)
    assert made.status_code == 200, made.text
    column = made.json()["columns"]["x"]
    assert (column["min"], column["max"]) == (min(baseline), max(baseline))
    assert client.post("/api/v1/predictions", json={"deployment": "nums", "inputs": traffic}, headers=h).status_code == 200
    window = client.get("/api/v1/deployments/nums/monitor", headers=h).json()["windows"][0]["columns"]["x"]
    assert window["verdict"] != "ok" and window["out_of_range"] == 1.0, window


def test_a_profile_written_with_32_bit_floats_still_reads_and_merges_with_one_of_doubles() -> None:
    import base64

    import datasketches as ds

    from sluice.monitor.sketches import Column

    old = ds.kll_floats_sketch(200)
    old.update(np.arange(1000, dtype=np.float32))
    written = {"kind": "number", "role": "input", "count": 1000, "missing": 0, "sketch": base64.b64encode(old.serialize()).decode()}
    assert Column.from_dict(written).summary()["max"] == 999.0
    wide = Column("number", "input")
    wide.add(np.arange(2000, dtype=np.float64) + 2**25 + 1)  # whole numbers no 32-bit float holds
    assert wide.to_dict()["numbers"] == "f64" and Column.from_dict(wide.to_dict()).summary()["max"] == 2**25 + 2000
    for first, second in ((Column.from_dict(written), Column.from_dict(wide.to_dict())), (Column.from_dict(wide.to_dict()), Column.from_dict(written))):
        first.merge(second)  # either way round
        assert (first.sketch.n, first.sketch.get_min_value(), first.sketch.get_max_value()) == (3000, 0, 2**25 + 2000)
    # Values a 32-bit float holds keep the sketch half the size (a window's 64 columns fit one DynamoDB item)
    usual = Column("number", "input")
    usual.add(np.random.default_rng(0).normal(size=1000))
    assert "numbers" not in usual.to_dict()


@pytest.mark.parametrize("labels", [("ant", "bee", "cat"), (-5, 7, 9)])
def test_a_classifier_without_zipmap_answers_its_probabilities_by_its_labels(client: TestClient, keys: dict[str, str], demo: Container, acme: Principal, labels: tuple[Any, ...]) -> None:
    """The prediction said "cat" while the probabilities were keyed "0", "1", "2" (their columns'
    numbers) and v2's classification said "0.95:2": the labels are the graph classifier's."""
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression

    x = np.random.default_rng(0).normal(size=(90, 3)).astype(np.float32)
    y = np.asarray(labels, dtype=object)[(x[:, 0] > 0).astype(int) + (x[:, 1] > 0)]
    model = LogisticRegression().fit(x, y.astype(type(labels[0])))
    demo.models.push(acme, "tri", to_onnx(model, x[:1], options={id(model): {"zipmap": False}}, target_opset=17).SerializeToString())
    client.post("/api/v1/deployments", json={"name": "tri", "model": "tri"}, headers=auth(keys["acme"])).raise_for_status()
    row = [1.0, 2.0, 3.0]
    expected = dict(zip(map(str, model.classes_.tolist()), model.predict_proba(np.asarray([row], np.float32))[0].tolist(), strict=True))
    plain = client.post("/api/v1/predictions", json={"deployment": "tri", "inputs": [row]}, headers=auth(keys["acme"])).json()
    assert plain["probabilities"] == pytest.approx(expected, abs=1e-5) and str(plain["prediction"]) == max(expected, key=expected.get)
    v2 = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 3], "data": row}], "outputs": [{"name": "probabilities", "parameters": {"classification": 1}}]}
    [top] = client.post("/v2/models/tri/infer", json=v2, headers=auth(keys["acme"])).json()["outputs"][0]["data"]
    assert top.split(":")[2] == max(expected, key=expected.get), top
