"""Ground truth through the API and the CLI, on the demo's iris: labels posted by request id
joined to the predictions kept for them, counted in the window each prediction was made in
however late they come; a label flip shown as an accuracy drop, in the route, at `/metrics`
and by the rollout gate `accuracy`; each tenant's own; bad input named."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from sluice.metrics import PrometheusMetrics
from tests.integration.conftest import auth, run_cli
from tests.integration.test_monitoring import iris_rows

if TYPE_CHECKING:
    from pathlib import Path

    from fastapi.testclient import TestClient

    from sluice.domain import Principal
    from sluice.wiring import Container

BASE = "/api/v1/deployments/iris"
HOUR = 3600
OTHER = {"setosa": "versicolor", "versicolor": "virginica", "virginica": "setosa"}


def predicted(client: TestClient, key: str, rows: list[list[float]], rid: str, **extra: Any) -> list[str]:
    body = {"deployment": "iris", "inputs": rows, "request_id": rid, **extra}
    r = client.post("/api/v1/predictions", json=body, headers=auth(key))
    assert r.status_code == 200 and r.json()["request_id"] == rid, r.text
    return [p["prediction"] for p in r.json()["predictions"]]


def labels(rid: str, said: list[str], flip_every: int = 0) -> list[dict[str, Any]]:
    """The labels of `said`, every `flip_every`th one changed (a label flip)."""
    return [{"request_id": rid, "row": i, "label": OTHER[s] if flip_every and i % flip_every == 0 else s} for i, s in enumerate(said)]


def test_late_labels_land_in_their_predictions_window_and_a_label_flip_drops_accuracy(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    key = keys["acme"]
    kept = demo.predictions.kept
    assert kept is not None
    kept.mode = "all"  # no baseline needed
    now = [100 * HOUR + 5.0]
    kept.clock = lambda: now[0]
    early = predicted(client, key, iris_rows(100, 1), "early")
    now[0] += 2 * HOUR  # two windows later
    late = predicted(client, key, iris_rows(100, 2), "late")
    r = client.post(f"{BASE}/labels", json={"labels": labels("late", late, flip_every=2)}, headers=auth(keys["acme_predict"]))
    assert r.status_code == 200, r.text
    assert r.json() | {"windows": None} == {"deployment": "iris", "received": 100, "matched": 100, "unmatched": 0, "duplicate": 0, "not_comparable": 0, "windows": None}
    # The early window's labels come last, with an unknown id, a row past the request's, and one given twice.
    body = [*labels("early", early), {"request_id": "nobody", "label": "setosa"}, {"request_id": "early", "row": 100, "label": "setosa"}]
    got = client.post(f"{BASE}/labels", json={"labels": [*body, body[0]]}, headers=auth(key)).json()
    assert (got["matched"], got["unmatched"], got["duplicate"]) == (100, 2, 1)
    assert got["windows"] == [{"revision": 1, "window_start": 100 * HOUR, "rows": 100}]

    status = client.get(f"{BASE}/monitor?windows=5", headers=auth(key)).json()
    assert status["baseline"] is None and status["verdict"] == "no_baseline"
    newest, oldest = status["quality"]
    assert (newest["window_start"], oldest["window_start"]) == (102 * HOUR, 100 * HOUR)
    assert oldest["accuracy"] == 1.0 and oldest["rows"] == 100
    assert newest["accuracy"] == 0.5 and newest["variants"]["default"]["accuracy"] == 0.5
    assert newest["auc"] < 0.6 and oldest["auc"] > 0.9  # iris's three classes: one against the rest, from each class's probability
    again = client.post(f"{BASE}/labels", json={"labels": labels("late", late)}, headers=auth(key)).json()
    assert again["duplicate"] == 100  # a file posted twice is counted once

    demo.telemetry.sink = PrometheusMetrics()  # type: ignore[union-attr]
    text = client.get("/metrics", headers=auth(key)).text
    assert 'ml_inference_model_quality{deployment="iris",metric="accuracy",tenant="acme",variant=""} 0.5' in text


def test_an_answer_from_the_prediction_cache_is_labelled_like_a_computed_one(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    """A caller told a cached answer labels it by its request id: matched, and in the quality."""
    key = keys["acme"]
    assert demo.predictions.kept is not None
    demo.predictions.kept.mode = "all"
    r = client.put(BASE, json={"cache": {"ttl_s": 300, "max_entries": 100}}, headers=auth(key))
    assert r.status_code == 200, r.text
    rows = iris_rows(10, 3)
    computed = predicted(client, key, rows, "computed")
    body = {"deployment": "iris", "inputs": rows, "request_id": "cached"}
    hit = client.post("/api/v1/predictions", json=body, headers=auth(key)).json()
    assert hit["cached"] is True and [p["prediction"] for p in hit["predictions"]] == computed
    got = client.post(f"{BASE}/labels", json={"labels": [*labels("computed", computed), *labels("cached", computed, flip_every=1)]}, headers=auth(key)).json()
    assert (got["matched"], got["unmatched"]) == (20, 0)
    (window,) = client.get(f"{BASE}/monitor", headers=auth(key)).json()["quality"]
    assert window["rows"] == 20 and window["accuracy"] == 0.5  # the cached answer's labels all flipped


def test_labels_whose_counts_could_not_be_written_count_when_posted_again(
    client: TestClient, keys: dict[str, str], demo: Container, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows are claimed (each counted once), then their window's counts written: a write
    that fails (a throttled table) lets its rows go, so the client's retry counts them rather
    than calling them duplicates of labels that were never counted."""
    from sluice.domain.errors import Unavailable

    key = keys["acme"]
    kept = demo.predictions.kept
    assert kept is not None
    kept.mode = "all"
    now = [100 * HOUR + 5.0]
    kept.clock = lambda: now[0]
    early = predicted(client, key, iris_rows(10, 1), "early")
    now[0] += 2 * HOUR
    late = predicted(client, key, iris_rows(10, 2), "late")
    written = demo.registry.add_outcomes
    calls = []

    def second_fails(*args: Any, **kwargs: Any) -> None:
        calls.append(args)
        if len(calls) == 2:
            raise Unavailable("the table is throttled")
        written(*args, **kwargs)

    monkeypatch.setattr(demo.registry, "add_outcomes", second_fails)
    both = [*labels("early", early), *labels("late", late)]
    assert client.post(f"{BASE}/labels", json={"labels": both}, headers=auth(key)).status_code == 503
    monkeypatch.setattr(demo.registry, "add_outcomes", written)
    again = client.post(f"{BASE}/labels", json={"labels": both}, headers=auth(key)).json()
    assert (again["matched"], again["duplicate"]) == (10, 10)  # the window written stands; the other counts now
    quality = client.get(f"{BASE}/monitor?windows=5", headers=auth(key)).json()["quality"]
    assert sorted(q["rows"] for q in quality) == [10, 10]


def test_a_deployment_created_again_counts_labels_of_its_own_requests(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    """iris deleted and created again: a label for its own request, under an id the deleted one
    had labelled, is matched and counted. Before, it was a `duplicate` and never counted."""
    key = keys["acme"]
    assert demo.predictions.kept is not None
    demo.predictions.kept.mode = "all"
    policy = client.get(BASE, headers=auth(key)).json()["policy"]
    said = predicted(client, key, iris_rows(3, 1), "order-1")
    assert client.post(f"{BASE}/labels", json={"labels": labels("order-1", said)}, headers=auth(key)).json()["matched"] == 3
    assert client.delete(BASE, headers=auth(key)).status_code == 204
    assert client.post("/api/v1/deployments", json={"name": "iris", "policy": policy}, headers=auth(key)).status_code == 201
    said = predicted(client, key, iris_rows(3, 2), "order-1")
    got = client.post(f"{BASE}/labels", json={"labels": labels("order-1", said)}, headers=auth(key)).json()
    assert (got["matched"], got["duplicate"]) == (3, 0)
    again = client.post(f"{BASE}/labels", json={"labels": labels("order-1", said)}, headers=auth(key)).json()
    assert (again["matched"], again["duplicate"]) == (0, 3)  # once only
    (window,) = client.get(f"{BASE}/monitor", headers=auth(key)).json()["quality"]
    assert window["rows"] == 3


def test_another_tenant_is_refused_and_bad_labels_are_named(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    kept = demo.predictions.kept
    assert kept is not None
    kept.mode = "all"
    said = predicted(client, keys["acme"], iris_rows(3, 1), "mine")
    r = client.post(f"{BASE}/labels", json={"labels": labels("mine", said)}, headers=auth(keys["globex"]))
    assert r.status_code == 404, r.text
    for bad, field in (
        ({"labels": []}, "labels"),
        ({"labels": [{"label": "setosa"}]}, "labels.0.request_id"),
        ({"labels": [{"request_id": "mine", "label": ["setosa"]}]}, "labels.0.label"),
        ({"labels": [{"request_id": "mine", "label": "setosa", "row": -1}]}, "labels.0.row"),
        ({"labels": [{"request_id": "mine", "label": "setosa"}, {"request_id": "mine", "row": 1, "label": True}]}, "labels[1].label"),
    ):
        r = client.post(f"{BASE}/labels", json=bad, headers=auth(keys["acme"]))
        assert r.status_code in (400, 422) and r.json()["field"] == field, (bad, r.text)
    ok = client.post(f"{BASE}/labels", json={"labels": labels("mine", said)}, headers=auth(keys["acme"])).json()
    assert ok["matched"] == 3  # the refused post counted nothing


def test_a_regressors_label_too_large_to_measure_is_refused_and_the_window_keeps_its_rmse(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    """A label whose squared error would overflow the window's sums (1e200) is a 4xx naming it,
    before anything is counted; labels up to 1e100 leave the RMSE a number."""
    key = keys["acme"]
    assert demo.predictions.kept is not None
    demo.predictions.kept.mode = "all"
    for rid in ("d1", "d2", "d3"):
        body = {"deployment": "diabetes", "inputs": [[0.01] * 10], "request_id": rid}
        assert client.post("/api/v1/predictions", json=body, headers=auth(key)).status_code == 200
    url = "/api/v1/deployments/diabetes"
    for bad in (1e200, -1e200, 10**400):
        r = client.post(f"{url}/labels", json={"labels": [{"request_id": "d1", "label": 150.0}, {"request_id": "d2", "label": bad}]}, headers=auth(key))
        assert r.status_code in (400, 422) and r.json()["field"] == "labels[1].label", r.text
    got = client.post(f"{url}/labels", json={"labels": [{"request_id": rid, "label": v} for rid, v in (("d1", 150.0), ("d2", 1e100), ("d3", -1e100))]}, headers=auth(key))
    assert got.json()["matched"] == 3, got.text  # the refused posts counted nothing
    (window,) = client.get(f"{url}/monitor", headers=auth(key)).json()["quality"]
    assert window["rows"] == 3 and window["rmse"] == pytest.approx(1e100 * (2 / 3) ** 0.5)


def test_a_regressors_answer_of_nan_is_matched_but_leaves_its_windows_errors_numbers(client: TestClient, keys: dict[str, str]) -> None:
    """diabetes answers NaN for finite float32 inputs near their maximum: its label is matched
    and said `not_comparable`, and the window's MAE, RMSE and bias are those of the other rows."""
    import math

    import numpy as np

    h = auth(keys["acme"])
    url = "/api/v1/deployments/diabetes"
    rng = np.random.default_rng(0)
    client.put(f"{url}/baseline", json={"inputs": rng.normal(size=(600, 10)).round(3).tolist()}, headers=h).raise_for_status()
    for i in range(20):
        r = client.post("/api/v1/predictions", json={"deployment": "diabetes", "inputs": rng.normal(size=(1, 10)).tolist(), "request_id": f"ok-{i}"}, headers=h)
        assert r.status_code == 200, r.text
    r = client.post("/api/v1/predictions", json={"deployment": "diabetes", "inputs": [[3e38] * 10], "request_id": "big"}, headers=h)
    assert r.status_code == 200, r.text
    posted = [{"request_id": f"ok-{i}", "label": 100.0} for i in range(20)] + [{"request_id": "big", "label": 100.0}]
    r = client.post(f"{url}/labels", json={"labels": posted}, headers=h)
    assert r.status_code == 200, r.text
    assert (r.json()["matched"], r.json()["not_comparable"], r.json()["windows"][0]["rows"]) == (21, 1, 20), r.json()
    (window,) = client.get(f"{url}/monitor", headers=h).json()["quality"]
    assert window["rows"] == 20 and all(isinstance(window[k], float) and math.isfinite(window[k]) for k in ("mae", "rmse", "bias")), window
    again = client.post(f"{url}/labels", json={"labels": posted[-1:]}, headers=h).json()
    assert (again["duplicate"], again["not_comparable"]) == (1, 0)  # counted once, as any row


def test_an_empty_label_is_the_class_a_model_names_so_and_no_regressors_label(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    """A model may predict the class "" (or " "): its ground truth was a 422 for the whole post
    (one such row failed a post of 10,000 labels). Only a regressor refuses empty text."""
    import numpy as np

    from sluice.domain.results import InferenceResult
    from sluice.domain.signature import Signature, TensorSpec
    from sluice.monitor.quality import predicted as kept_doc

    sig = Signature(inputs=(TensorSpec("x", "FP32", (-1, 1)),), outputs=(TensorSpec("label", "BYTES", (-1,), role="label"),))
    doc = kept_doc(sig, InferenceResult({"label": np.array(["", " ", "spam"], object)}))
    assert doc is not None and doc["predicted"] == ["", " ", "spam"]
    demo.monitor.registry.keep_predictions("acme", "iris", [{"request_id": "e1", "revision": 1, "variant": "", "window": 36 * HOUR, **doc}], expires_at=4e9)
    posted = [{"request_id": "e1", "row": i, "label": v} for i, v in enumerate(["", " ", ""])]
    r = client.post(f"{BASE}/labels", json={"labels": posted}, headers=auth(keys["acme"]))
    assert r.status_code == 200 and r.json()["matched"] == 3, r.text
    (window,) = client.get(f"{BASE}/monitor", headers=auth(keys["acme"])).json()["quality"]
    assert window["rows"] == 3 and window["accuracy"] == pytest.approx(2 / 3)
    demo.monitor.registry.keep_predictions("acme", "diabetes", [{"request_id": "v1", "revision": 1, "variant": "", "window": 36 * HOUR, "kind": "value", "predicted": [1.0]}], expires_at=4e9)
    for empty in ("", " "):
        r = client.post("/api/v1/deployments/diabetes/labels", json={"labels": [{"request_id": "v1", "label": empty}]}, headers=auth(keys["acme"]))
        assert r.status_code in (400, 422) and r.json()["field"] == "labels[0].label", r.text


def test_a_rollout_whose_candidate_gets_flipped_labels_is_rolled_back_by_the_accuracy_gate(
    client: TestClient, keys: dict[str, str], demo: Container, acme: Principal
) -> None:
    from sluice.services.rollouts import RolloutService
    from tests.conftest import MODELS

    key, kept = keys["acme"], demo.predictions.kept
    assert kept is not None
    kept.mode = "all"
    demo.models.push(acme, "iris", (MODELS / "iris.onnx").read_bytes())
    rollouts = RolloutService(demo.registry, demo.deployments, monitor=lambda: demo.monitor)
    rollouts.start(acme, "iris", to="iris:2", steps="10,100", every="1h", gates="accuracy>=0.9", min_requests=2)
    for variant, flip in (("stable", 2), ("candidate", 0)):
        said = predicted(client, key, iris_rows(120, 3), variant, variant=variant)
        client.post(f"{BASE}/labels", json={"labels": labels(variant, said, flip)}, headers=auth(key)).raise_for_status()
    held = rollouts.tick("acme", "iris")
    assert held is not None and held.action == "hold" and held.numbers["metrics"]["accuracy"] == 1.0  # the candidate's alone
    said = predicted(client, key, iris_rows(120, 4), "flipped", variant="candidate")
    client.post(f"{BASE}/labels", json={"labels": labels("flipped", said, 2)}, headers=auth(key)).raise_for_status()
    _, now = rollouts.status(acme, "iris")  # what the next look will do, on the numbers it will read
    assert now is not None and now["next"] == "rollback" and now["checks"][0]["passes"] is False
    decision = rollouts.tick("acme", "iris")
    assert decision is not None and decision.action == "rollback" and "accuracy>=0.9" in decision.reason
    assert now["metrics"]["accuracy"] == decision.numbers["metrics"]["accuracy"]


def test_the_cli_posts_labels_from_a_file_and_shows_the_quality(cli_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sluice.cli import pieces
    from tests.conftest import MODELS

    assert run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0
    assert run_cli(capsys, "deployments", "create", "iris", "--model", "iris")[0] == 0
    registry = pieces.monitor().registry
    record = {"revision": 1, "variant": "", "window": 36 * HOUR, "kind": "class"}
    registry.keep_predictions("default", "iris", [{"request_id": f"r{i}", **record, "predicted": ["setosa"]} for i in range(4)], expires_at=4e9)
    data = tmp_path / "labels.csv"
    data.write_text("request_id,label\nr0,setosa\nr1,setosa\nr2,virginica\nr3,setosa\nr9,setosa\n")
    code, out, err = run_cli(capsys, "monitor", "labels", "iris", "--file", str(data))
    assert code == 0, err
    assert "5 labels for iris: 4 matched, 1 unmatched, 0 duplicate" in out
    code, out, _ = run_cli(capsys, "monitor", "status", "iris")
    assert code == 0 and "no baseline" in out and "0.75" in out  # accuracy: three of four
    code, _, err = run_cli(capsys, "monitor", "labels", "iris", "--file", str(tmp_path / "nope.csv"))
    assert code == 2 and "[file]" in err
    for name, text in (("empty.csv", "request_id,label\nr4,\nr5,\nr6,\n"), ("bad-ids.csv", "request_id,label\n,setosa\n")):
        (tmp_path / name).write_text(text)  # nothing to post, whether the reader or the label rules skip every row
        code, _, err = run_cli(capsys, "monitor", "labels", "iris", "--file", str(tmp_path / name))
        assert code == 2 and f"{name} holds no label to post (rows skipped: " in err, err
    assert "missing value for 'label': 3" in run_cli(capsys, "monitor", "labels", "iris", "--file", str(tmp_path / "empty.csv"))[2]


def _kept(name: str, kind: str, said: Any, ids: list[str], window: int = 36 * HOUR) -> None:
    """Predictions kept for `ids` of deployment `name` (each said `said`), as a request keeps them."""
    from sluice.cli import pieces

    record = {"revision": 1, "variant": "", "window": window, "kind": kind, "predicted": [said]}
    pieces.monitor().registry.keep_predictions("default", name, [{"request_id": rid, **record} for rid in ids], expires_at=4e9)


def _label_file(tmp_path: Path, fmt: str, ids: list[str], column: list[Any]) -> Path:
    """`column`'s labels for `ids`, as a JSON Lines, CSV or Parquet writer writes them (a
    number as a number, text as text; Parquet's column typed by its values)."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / f"labels.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps({"request_id": rid, "label": v}) + "\n" for rid, v in zip(ids, column, strict=True)))
    elif fmt == "csv":
        path.write_text("request_id,label\n" + "".join(f"{rid},{v}\n" for rid, v in zip(ids, column, strict=True)))
    else:
        pq.write_table(pa.table({"request_id": ids, "label": column}), path)
    return path


@pytest.mark.parametrize(
    ("said", "column", "pairs"),
    [
        # a 0/1 classifier: a float column's 1.0 is the API's 1.0, class "1"
        (["1", "0", "1"], [1.0, 0.0, 0.0], {("1", "1", 1), ("0", "0", 1), ("0", "1", 1)}),
        (["1", "0"], [1, 0], {("1", "1", 1), ("0", "0", 1)}),
        # text classes "1.1" and "1.10" (versions) stay two, as the API's "1.1" and "1.10" are
        (["1.1", "1.10", "1.10", "v2"], ["1.1", "1.10", "1.1", "v2"], {("1.1", "1.1", 1), ("1.10", "1.10", 1), ("1.1", "1.10", 1), ("v2", "v2", 1)}),
        ([" ", "spam"], [" ", "spam"], {(" ", " ", 1), ("spam", "spam", 1)}),  # whitespace is a label, not a missing one
    ],
    ids=["float 0/1", "int 0/1", "text 1.1/1.10", "whitespace"],
)
def test_a_label_from_a_file_is_what_the_same_label_posted_to_the_api_is(
    cli_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], said: list[str], column: list[Any], pairs: set[tuple[str, str, int]]
) -> None:
    """`sluice monitor labels --file` read the label column as text: a float column's 1.0 was
    the class "1.0" (counted wrong for a prediction of class 1), while the API's 1.0 is class
    "1". Each label of a JSON Lines, CSV or Parquet file is posted as the JSON value the API
    would get for it: a number column's as a number, text as text."""
    import json

    from sluice.cli import pieces
    from sluice.domain import Principal
    from sluice.types.monitoring import Labels
    from tests.conftest import MODELS

    assert run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0
    assert run_cli(capsys, "deployments", "create", "iris", "--model", "iris")[0] == 0
    monitor = pieces.monitor()
    sources = ("api", "jsonl", "csv", "parquet")
    for k, source in enumerate(sources):  # each source's labels in a window of its own
        for i, s in enumerate(said):
            _kept("iris", "class", s, [f"{source}-{i}"], window=(36 + k) * HOUR)
    api = [{"request_id": f"api-{i}", "label": v} for i, v in enumerate(column)]
    body = Labels.model_validate_json(json.dumps({"labels": api}))  # as the route reads a post
    assert monitor.add_labels(Principal("default", frozenset({"predict"}), "t"), "iris", [(x.request_id, x.row, x.label) for x in body.labels])["matched"] == len(column)
    for fmt in sources[1:]:
        file = _label_file(tmp_path, fmt, [f"{fmt}-{i}" for i in range(len(column))], column)
        code, out, err = run_cli(capsys, "monitor", "labels", "iris", "--file", str(file))
        assert code == 0 and f"{len(column)} labels for iris: {len(column)} matched" in out and "skipped" not in out, (fmt, out, err)
    by_source = {sources[window // HOUR - 36]: {tuple(p) for p in doc[""]["pairs"]} for window, doc in monitor.registry.read_outcomes("default", "iris", 1)}
    assert by_source == dict.fromkeys(sources, pairs)


def test_a_csv_column_of_numbers_only_is_read_as_numbers(cli_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """CSV has no types: a label column pyarrow reads as numbers is posted as numbers (`1.10` is
    the API's 1.10, class "1.1"; `007` is 7); one holding text is text as written."""
    from sluice.cli import pieces
    from tests.conftest import MODELS

    assert run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0
    assert run_cli(capsys, "deployments", "create", "iris", "--model", "iris")[0] == 0
    monitor = pieces.monitor()
    for k, column in enumerate((["1.10", "007"], ["1.10", "007", "x"])):
        for i in range(len(column)):
            _kept("iris", "class", "?", [f"c{k}-{i}"], window=(36 + k) * HOUR)
        file = tmp_path / f"labels-{k}.csv"
        file.write_text("request_id,label\n" + "".join(f"c{k}-{i},{v}\n" for i, v in enumerate(column)))
        assert run_cli(capsys, "monitor", "labels", "iris", "--file", str(file))[0] == 0
    actual = {window // HOUR - 36: {p[0] for p in doc[""]["pairs"]} for window, doc in monitor.registry.read_outcomes("default", "iris", 1)}
    assert actual == {0: {"1.1", "7"}, 1: {"1.10", "007", "x"}}


def test_every_row_of_a_label_file_is_posted_skipped_with_why_or_said_unread(
    cli_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows with no request id or no label were dropped without a word (a 5-row file said "3
    labels", exit 0), and so were the rows past --limit: each is counted now, skipped rows by
    reason with their first row numbers (from 0, as a batch job's error files number them).
    Skipped rows do not fail the command, as a batch job's refused rows do not."""
    import json

    from tests.conftest import MODELS

    assert run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0
    assert run_cli(capsys, "deployments", "create", "iris", "--model", "iris")[0] == 0
    _kept("iris", "class", "setosa", [f"r{i}" for i in range(4)])
    data = tmp_path / "labels.csv"
    data.write_text("request_id,label\nr0,setosa\nr1,\nr2,versicolor\n,setosa\nr3,setosa\n")
    code, out, err = run_cli(capsys, "monitor", "labels", "iris", "--file", str(data))
    assert code == 0, err
    assert "3 labels for iris: 3 matched" in out
    assert "skipped 1: missing value for 'label' (row 1)" in out and "skipped 1: missing value for 'request_id' (row 3)" in out
    lines = tmp_path / "labels.jsonl"  # an empty request id or a null label in JSON is as missing as CSV's empty cell ("" and whitespace are labels)
    lines.write_text("".join(json.dumps(row) + "\n" for row in (
        {"request_id": "", "label": "setosa"}, {"request_id": "r0", "label": None}, *({"request_id": f"x{i}", "label": "setosa"} for i in range(10)),
    )))  # fmt: skip
    code, out, err = run_cli(capsys, "monitor", "labels", "iris", "--file", str(lines), "--limit", "6", "--json")
    assert code == 0, err
    doc = json.loads(out)
    rows = doc["rows"]
    assert rows["total"] == 12 and rows["unread"] == 5 and rows["skipped"] == 2  # the reader's skip (a null) is not one of the 6 read
    assert doc["received"] + rows["skipped"] + rows["unread"] == rows["total"]
    assert rows["skipped_by_reason"] == {"missing value for 'request_id'": {"rows": 1, "first": [0]}, "missing value for 'label'": {"rows": 1, "first": [1]}}
    code, out, _ = run_cli(capsys, "monitor", "labels", "iris", "--file", str(lines), "--limit", "6")
    assert code == 0 and "not read: 5 rows past --limit 6" in out


@pytest.mark.parametrize(
    ("rows", "reason"),
    [
        ('{"request_id": "r0", "label": null}\n{"request_id": "r1"}\n', "missing value for 'label': 2"),
        ("".join(f'{{"request_id": "{"x" * 200}{i}", "label": "setosa"}}\n' for i in range(3)), "'request_id' is longer than 128 characters: 3"),
    ],
    ids=["missing labels", "long request ids"],
)
def test_a_label_file_with_no_label_left_to_post_is_an_error_naming_why(
    cli_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: str, reason: str
) -> None:
    """A file whose every label is blank, or every request id too long, said "0 labels ... 0
    matched" and exited 0; a file with no usable row is an error (exit 2), as the docs say."""
    from tests.conftest import MODELS

    assert run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0
    assert run_cli(capsys, "deployments", "create", "iris", "--model", "iris")[0] == 0
    data = tmp_path / "labels.jsonl"
    data.write_text(rows)
    for extra in ((), ("--json",)):
        code, out, err = run_cli(capsys, "monitor", "labels", "iris", "--file", str(data), *extra)
        assert code == 2 and "[file]" in err and "labels.jsonl holds no " in err and reason in err, (out, err)
        assert "0 labels" not in out


def test_a_label_file_refused_for_a_bad_label_in_a_later_part_counts_nothing(cli_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI posts a file in parts of 10,000 labels; a label its prediction cannot be compared
    with (a word for a regressor) past the first part refuses the file, naming its row, before
    any part is counted: the file, mended, is then posted whole."""
    from sluice.cli import pieces
    from tests.conftest import MODELS

    assert run_cli(capsys, "models", "push", "diabetes", str(MODELS / "diabetes_mlp.onnx"))[0] == 0
    assert run_cli(capsys, "deployments", "create", "diabetes", "--model", "diabetes")[0] == 0
    _kept("diabetes", "value", 100.0, ["good", "bad"])
    data = tmp_path / "labels.csv"
    filler = "".join(f"nobody-{i},1.0\n" for i in range(10_000))  # unmatched: never compared
    data.write_text("request_id,label\ngood,150\n" + filler + "bad,not-a-number\n")
    code, _, err = run_cli(capsys, "monitor", "labels", "diabetes", "--file", str(data))
    assert code != 0 and "file row 10001" in err, err
    registry = pieces.monitor().registry
    assert registry.read_outcomes("default", "diabetes", 1) == []
    data.write_text("request_id,label\ngood,150\n" + filler + "bad,120\n")
    code, out, _ = run_cli(capsys, "monitor", "labels", "diabetes", "--file", str(data))
    assert code == 0 and "10002 labels for diabetes: 2 matched, 10000 unmatched, 0 duplicate" in out, out


def test_a_float_label_column_s_nan_is_a_missing_label_skipped_not_the_class_nan(cli_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Parquet label column of floats with a NaN (a missing value): the row is skipped, said,
    as a missing label is; it was posted as the class "nan", matched, and counted a miss."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.conftest import MODELS

    assert run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0
    assert run_cli(capsys, "deployments", "create", "iris", "--model", "iris")[0] == 0
    _kept("iris", "class", 1, ["r0", "r1", "r2"])
    path = tmp_path / "nan.parquet"
    pq.write_table(pa.table({"request_id": ["r0", "r1", "r2"], "label": [1.0, 1.0, float("nan")]}), path)
    text = tmp_path / "nan.csv"
    text.write_text("request_id,label\nr0,1.0\nr1,1.0\nr2,nan\n")
    for given in (path, text):  # a CSV column of numbers too
        code, out, err = run_cli(capsys, "monitor", "labels", "iris", "--file", str(given), "--json")
        assert code == 0, err
        said = json.loads(out)
        assert (said["received"], said["matched"] + said["duplicate"]) == (2, 2), said
