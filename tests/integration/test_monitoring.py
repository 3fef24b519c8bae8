"""Model monitoring through the API and the CLI, on the demo's iris: a baseline set from rows
and read back, the traffic served profiled on the request path and checked per revision, the
gauges at `/metrics`, each tenant's own; bad input named."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

from sluice.metrics import PrometheusMetrics
from sluice.monitor.checks import GONE_DRIFT
from tests.integration.conftest import auth, run_cli

if TYPE_CHECKING:
    from pathlib import Path

    from fastapi.testclient import TestClient

    from sluice.domain import Principal
    from sluice.wiring import Container

BASE = "/api/v1/deployments/iris"
CENTRE = np.array([5.8, 3.0, 3.7, 1.2])


def iris_rows(n: int, seed: int, shift: float = 0.0) -> list[list[float]]:
    rows = np.random.default_rng(seed).normal(scale=0.5, size=(n, 4)) + CENTRE
    rows[:, 2] += shift  # petal_length
    return rows.round(3).tolist()


def predict(client: TestClient, key: str, rows: list[list[float]]) -> None:
    for start in range(0, len(rows), 100):
        r = client.post("/api/v1/predictions", json={"deployment": "iris", "inputs": rows[start : start + 100]}, headers=auth(key))
        assert r.status_code == 200, r.text


def test_a_baseline_is_set_read_back_and_the_traffic_served_checked_against_it(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    key = keys["acme"]
    r = client.put(f"{BASE}/baseline", json={"inputs": iris_rows(3000, 0), "source": "train.csv"}, headers=auth(key))
    assert r.status_code == 200, r.text
    got = client.get(f"{BASE}/baseline", headers=auth(key)).json()
    assert got["revision"] == 1 and got["rows"] == 3000 and got["source"] == "train.csv"
    assert got["columns"]["petal_length"]["role"] == "input"
    assert abs(got["columns"]["petal_length"]["quantiles"]["p50"] - 3.7) < 0.1
    assert got["columns"]["output_label"]["kind"] == "category"  # the model's answers to the rows too

    predict(client, key, iris_rows(1000, 1))  # the training distribution: nothing raised
    status = client.get(f"{BASE}/monitor", headers=auth(key)).json()
    assert status["revision"] == 1 and status["verdict"] == "ok", status["windows"][0]["worst"]
    assert status["windows"][0]["rows"] == 1000

    client.put(BASE, json={"model": "iris", "version": 1}, headers=auth(key)).raise_for_status()  # revision 2
    predict(client, key, iris_rows(1000, 2, shift=1.5))  # petal_length moved
    status = client.get(f"{BASE}/monitor", headers=auth(key)).json()
    window = status["windows"][0]
    assert status["revision"] == 2 and status["verdict"] == "alert"
    assert window["worst"][0] == "petal_length" and window["columns"]["petal_length"]["verdict"] in ("drift", "out_of_range")
    assert window["columns"]["sepal_width"]["verdict"] == "ok"
    earlier = client.get(f"{BASE}/monitor?revision=1", headers=auth(key)).json()
    assert earlier["verdict"] == "ok"

    demo.telemetry.sink = PrometheusMetrics()  # type: ignore[union-attr]
    text = client.get("/metrics", headers=auth(key)).text
    assert 'ml_inference_drift{column="petal_length",deployment="iris",tenant="acme"}' in text
    assert 'ml_inference_monitor_alerts{deployment="iris",tenant="acme"} ' in text


def test_the_gauges_go_with_the_revision_and_the_deployment_they_were_checked_for(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    """A scrape shows the latest window of what is deployed now: a new revision with no window
    yet, or a deleted deployment, has no alert or drift left from before."""
    key = keys["acme"]
    demo.telemetry.sink = PrometheusMetrics()  # type: ignore[union-attr]
    client.put(f"{BASE}/baseline", json={"inputs": iris_rows(600, 0)}, headers=auth(key)).raise_for_status()
    predict(client, key, iris_rows(600, 1, shift=5.0))  # far out of range: alerts

    def gauges() -> list[str]:
        text = client.get("/metrics", headers=auth(key)).text
        return [line for line in text.splitlines() if line.startswith(("ml_inference_monitor_alerts{", "ml_inference_drift{"))]

    assert any(line.startswith('ml_inference_monitor_alerts{deployment="iris",tenant="acme"} ') and not line.endswith(" 0.0") for line in gauges())
    client.put(BASE, json={"model": "iris", "version": 1}, headers=auth(key)).raise_for_status()  # revision 2: no window yet
    assert gauges() == []
    predict(client, key, iris_rows(600, 2, shift=5.0))
    assert gauges()
    assert client.delete(BASE, headers=auth(key)).status_code == 204
    assert gauges() == []


def test_another_tenant_finds_nothing_and_bad_input_is_named(client: TestClient, keys: dict[str, str]) -> None:
    r = client.put(f"{BASE}/baseline", json={"inputs": iris_rows(600, 0)}, headers=auth(keys["acme"]))
    assert r.status_code == 200
    for method, path in (("GET", f"{BASE}/baseline"), ("GET", f"{BASE}/monitor"), ("PUT", f"{BASE}/baseline")):
        r = client.request(method, path, json={"inputs": iris_rows(5, 0)} if method == "PUT" else None, headers=auth(keys["globex"]))
        assert r.status_code == 404, (method, path, r.text)
    assert client.get(f"{BASE}/monitor", headers=auth(keys["acme_predict"])).status_code == 403
    r = client.put(f"{BASE}/baseline", json={"inputs": [[1.0, 2.0]]}, headers=auth(keys["acme"]))
    assert r.status_code in (400, 422) and r.json()["field"].startswith("inputs"), r.text
    r = client.get(f"{BASE}/monitor?windows=0", headers=auth(keys["acme"]))
    assert r.status_code == 422 and "windows" in r.text
    r = client.get("/api/v1/deployments/diabetes/monitor", headers=auth(keys["acme"]))
    assert r.status_code == 404 and r.json()["field"] == "baseline"


def test_the_cli_makes_a_baseline_from_a_file_and_shows_the_status(cli_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import MODELS

    assert run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0
    assert run_cli(capsys, "deployments", "create", "iris", "--model", "iris")[0] == 0
    data = tmp_path / "train.csv"
    rows = iris_rows(800, 5)
    data.write_text("sepal_length,sepal_width,petal_length,petal_width\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    code, out, err = run_cli(capsys, "monitor", "baseline", "iris", "--data", str(data))
    assert code == 0, err
    assert "800 rows from" in out and "petal_length" in out and "output_label" in out
    code, out, _ = run_cli(capsys, "monitor", "status", "iris")
    assert code == 0 and "no traffic profiled" in out
    code, _, err = run_cli(capsys, "monitor", "baseline", "iris", "--data", str(tmp_path / "nope.csv"))
    assert code == 2 and "[data]" in err
    # The rows a baseline leaves out are said, as a label file's are: skipped by reason, and past --limit.
    with data.open("a") as more:
        more.write("5.1,3.5,,0.2\n" + "5.0,3.4,1.5,0.2\n" * 3)
    code, out, err = run_cli(capsys, "monitor", "baseline", "iris", "--data", str(data), "--limit", "801")
    assert code == 0, err
    assert "801 rows from" in out and "skipped 1: missing value for 'petal_length' (row 800)" in out and "not read: 2 rows past --limit 801" in out


def test_a_rollout_whose_candidate_sees_drifted_inputs_is_rolled_back_by_the_drift_gate(
    client: TestClient, keys: dict[str, str], demo: Container, acme: Principal
) -> None:
    from sluice.services.rollouts import RolloutService
    from tests.conftest import MODELS

    key = keys["acme"]
    demo.models.push(acme, "iris", (MODELS / "iris.onnx").read_bytes())
    client.put(f"{BASE}/baseline", json={"inputs": iris_rows(2000, 0)}, headers=auth(key)).raise_for_status()
    rollouts = RolloutService(demo.registry, demo.deployments, monitor=lambda: demo.monitor)
    rollouts.start(acme, "iris", to="iris:2", steps="10,100", every="1h", gates="drift<=0.2", min_requests=5)
    for variant, shift in (("stable", 0.0), ("candidate", 0.0)):
        for start in range(0, 600, 100):
            body = {"deployment": "iris", "inputs": iris_rows(100, start, shift), "variant": variant}
            client.post("/api/v1/predictions", json=body, headers=auth(key)).raise_for_status()
    held = rollouts.tick("acme", "iris")
    assert held is not None and held.action == "hold" and held.numbers["metrics"]["drift"] < 0.2  # passes; the step lasts
    for start in range(0, 2000, 100):  # the candidate's traffic moves
        body = {"deployment": "iris", "inputs": iris_rows(100, 100 + start, 2.0), "variant": "candidate"}
        client.post("/api/v1/predictions", json=body, headers=auth(key)).raise_for_status()
    _, now = rollouts.status(acme, "iris")  # what the next look will do, on the numbers it will read
    assert now is not None and now["next"] == "rollback" and now["checks"][0]["value"] > 0.2
    decision = rollouts.tick("acme", "iris")
    assert decision is not None and decision.action == "rollback" and "drift<=0.2" in decision.reason


def test_windows_from_capture_leave_redacted_columns_unchecked_and_name_a_graphs_inputs_as_its_profiles_do(client: TestClient, keys: dict[str, str], demo: Container, acme: Principal) -> None:
    """A redacted column is not captured, so a window from capture cannot hold it: it is left
    out of the check (not an `absent` alert). A sequence's captured inputs are named by its
    transform's features, as its live profiles are: a baseline from capture and the traffic
    it was made from agree."""
    headers = auth(keys["acme"])
    assert client.put(BASE + "/baseline", json={"inputs": iris_rows(3000, 0)}, headers=headers).status_code == 200
    assert client.put(BASE, json={"capture": {"sample_percent": 100, "redact": ["petal_width"]}}, headers=headers).status_code == 200
    predict(client, keys["acme"], iris_rows(1000, 1))
    assert demo.capture is not None and demo.capture.drain()
    found = client.get(BASE + "/monitor?source=capture", headers=headers).json()
    assert found["verdict"] == "ok" and "petal_width" not in found["windows"][0]["columns"], found["windows"][0]["worst"]

    step = {"kind": "transform", "inputs": [{"name": "raw", "datatype": "FP32", "shape": [-1, 4], "feature_names": ["f1", "f2", "f3", "f4"]}], "ops": [{"op": "rename", "input": "raw", "output": "input"}]}
    policy = {"kind": "sequence", "steps": [{"name": "prep", "target": step}, {"name": "model", "target": {"kind": "single", "model": "iris", "version": 1}}]}
    demo.deployments.create(acme, "seq", policy, capture={"sample_percent": 100})
    for at in range(0, 600, 100):
        r = client.post("/api/v1/predictions", json={"deployment": "seq", "inputs": iris_rows(600, 2)[at : at + 100]}, headers=headers)
        assert r.status_code == 200, r.text
    assert demo.capture.drain()
    made = client.put("/api/v1/deployments/seq/baseline", json={"capture": {"since": "1h"}}, headers=headers)
    assert made.status_code == 200, made.text
    assert {"f1", "f2", "f3", "f4"} <= set(made.json()["columns"]), made.json()["columns"]
    demo.predictions.flush_stats_if_due()
    checked = client.get("/api/v1/deployments/seq/monitor", headers=headers).json()
    assert checked["verdict"] in ("ok", "too_few_rows"), checked


def test_a_label_for_a_request_of_a_deleted_deployment_matches_nothing_of_the_one_made_again(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    headers = auth(keys["acme"])
    demo.predictions.kept.mode = "all"  # type: ignore[union-attr]
    r = client.post("/api/v1/predictions", json={"deployment": "iris", "inputs": iris_rows(3, 1), "request_id": "old-1"}, headers=headers)
    assert r.status_code == 200
    demo.predictions.kept.flush()  # type: ignore[union-attr]
    assert client.delete(BASE, headers=headers).status_code == 204
    assert client.post("/api/v1/deployments", json={"name": "iris", "model": "iris"}, headers=headers).status_code == 201
    r = client.post(BASE + "/labels", json={"labels": [{"request_id": "old-1", "label": "setosa"}]}, headers=headers)
    assert r.status_code == 200 and (r.json()["matched"], r.json()["unmatched"]) == (0, 1), r.text


def _identity(elem: int) -> bytes:
    """`x` [-1] in, `y` [-1] out, of ONNX element type `elem` (FLOAT or STRING)."""
    from onnx import helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "identity",
        [helper.make_tensor_value_info("x", elem, [None])], [helper.make_tensor_value_info("y", elem, [None])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_a_column_whose_values_changed_kind_since_the_baseline_alerts_everywhere_it_is_read(
    client: TestClient, keys: dict[str, str], demo: Container, acme: Principal
) -> None:
    """A baseline of numbers, then a version that reads and answers text: the status, the
    gauges, the scheduled check and the drift gate each say the columns changed kind."""
    from onnx import TensorProto

    demo.models.push(acme, "ident", _identity(TensorProto.FLOAT))  # version 1: numbers
    demo.models.push(acme, "ident", _identity(TensorProto.STRING))  # version 2: text
    h = auth(keys["acme"])
    client.post("/api/v1/deployments", json={"name": "ident", "model": "ident", "version": 1}, headers=h).raise_for_status()
    client.put("/api/v1/deployments/ident/baseline", json={"inputs": np.arange(600, dtype=float).tolist()}, headers=h).raise_for_status()
    client.put("/api/v1/deployments/ident", json={"model": "ident", "version": 2}, headers=h).raise_for_status()
    r = client.post("/api/v1/predictions", json={"deployment": "ident", "inputs": ["a", "b"] * 300}, headers=h)
    assert r.status_code == 200, r.text
    r = client.get("/api/v1/deployments/ident/monitor", headers=h)
    assert r.status_code == 200, r.text
    (window,) = r.json()["windows"]
    assert window["verdict"] == "alert" and set(window["worst"]) == {"x", "y"}, window
    assert {c["verdict"] for c in window["columns"].values()} == {"type_changed"}
    demo.telemetry.sink = PrometheusMetrics()  # type: ignore[union-attr]
    scraped = client.get("/metrics", headers=h)
    assert scraped.status_code == 200 and 'ml_inference_monitor_alerts{deployment="ident",tenant="acme"} 2.0' in scraped.text
    closed = demo.monitor.closed("acme", "ident", at=window["window_end"] + 1)
    assert closed is not None and closed["check"]["verdict"] == "alert"
    assert demo.monitor.drift("acme", "ident", 2, "") == GONE_DRIFT  # the rollout gate: the most drift there is


@pytest.mark.parametrize("spelled", ["NaN", "Infinity", "-Infinity"])
def test_a_classifiers_label_that_is_not_a_finite_number_is_refused_naming_it(client: TestClient, keys: dict[str, str], demo: Container, spelled: str) -> None:
    """JSON's NaN (Python's parser takes it) was the class "nan": matched, a miss, accuracy
    lowered. A 400 naming the label, as another label that is no class gets."""
    headers = auth(keys["acme"])
    demo.predictions.kept.mode = "all"  # type: ignore[union-attr]
    r = client.post("/api/v1/predictions", json={"deployment": "iris", "inputs": iris_rows(3, 1), "request_id": "r-1"}, headers=headers)
    assert r.status_code == 200
    demo.predictions.kept.flush()  # type: ignore[union-attr]
    body = '{"labels": [{"request_id": "r-1", "row": 2, "label": ' + spelled + "}]}"
    r = client.post(BASE + "/labels", content=body, headers={**headers, "content-type": "application/json"})
    assert r.status_code == 400 and r.json()["field"] == "labels[0].label", r.text


def test_a_split_variant_may_not_be_named_as_monitoring_names_unsplit_traffic(client: TestClient, keys: dict[str, str]) -> None:
    """`default` is what monitoring calls the traffic of a deployment without a split
    (`?variant=default`): a split variant of that name read as the same traffic, its own quality
    out of reach. Refused, naming the variant's name; a policy stored with one keeps it."""
    split = {"kind": "split", "variants": [
        {"name": "b", "weight": 1, "target": {"model": "iris", "version": 1}},
        {"name": "default", "weight": 1, "target": {"model": "iris", "version": 1}},
    ]}  # fmt: skip
    r = client.post("/api/v1/deployments", json={"name": "split", "policy": split}, headers=auth(keys["acme"]))
    assert r.status_code == 422 and r.json()["field"] == "policy.variants.1.name" and "'default'" in r.json()["error"], r.text
    shadowed = {"kind": "shadow", "primary": split, "mirrors": [{"name": "m", "target": {"model": "iris", "version": 1}}]}
    r = client.post("/api/v1/deployments", json={"name": "split", "policy": shadowed}, headers=auth(keys["acme"]))
    assert r.status_code == 422 and r.json()["field"] == "policy.primary.variants.1.name", r.text
    switched = {"kind": "switch", "cases": [{"name": "c", "when": {"field": "inputs.x", "op": ">", "value": 1}, "target": {"model": "iris", "version": 1}}], "default": split}
    r = client.post("/api/v1/deployments", json={"name": "split", "policy": switched}, headers=auth(keys["acme"]))
    assert r.status_code == 422 and r.json()["field"] == "policy.default.variants.1.name", r.text  # a switch's split: counted unprefixed
    nested = {"kind": "split", "variants": [{"name": "outer", "weight": 1, "target": split}]}  # counted as outer/default: no clash
    assert client.post("/api/v1/deployments", json={"name": "split", "policy": nested}, headers=auth(keys["acme"])).status_code == 201


@pytest.mark.parametrize(
    ("window", "field", "words"),
    [
        ({"since": "40d"}, "capture.since", "at most 31 days"),
        ({"since": "2026-01-01T00:00:00Z", "until": "2026-03-01T00:00:00Z"}, "capture.since", "at most 31 days"),
        ({"since": "1h", "until": "2h"}, "capture.until", "after since"),
        ({"since": "yesterday-ish"}, "capture.since", ""),
    ],
    ids=["over-31-days-ago", "over-31-days-long", "until-first", "not-a-time"],
)
def test_a_capture_window_out_of_bounds_is_a_422_naming_its_end_as_every_bound_of_it_is(
    client: TestClient, keys: dict[str, str], window: dict[str, str], field: str, words: str
) -> None:
    """A baseline's capture window past 31 days, or ending before it starts, is refused as a time
    that does not read is, and as a replay's window is: a 422 naming `capture.since` or
    `capture.until` (it was a 400 beside the 422 of the same request's other bounds)."""
    r = client.put("/api/v1/deployments/iris/baseline", json={"capture": window}, headers=auth(keys["acme"]))
    assert (r.status_code, r.json()["field"]) == (422, field), r.text
    assert words in r.json()["error"], r.text
