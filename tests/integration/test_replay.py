"""Replay: captured requests run again against a candidate, offline, give the verdict a live
shadow gave on the same inputs; every captured row is scored or failed, with its reason."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import boto3
import numpy as np
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import settings as examples
from hypothesis import strategies as st
from moto import mock_aws

from sluice.api.app import create_app
from sluice.capture.reader import S3Capture
from sluice.domain.errors import InvalidRequest, Unprocessable
from tests.conftest import MODELS
from tests.integration.conftest import auth

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.wiring import Container

SINGLE = {"kind": "single", "model": "iris", "version": 1}


@pytest.fixture
def shadowed(demo: Container, acme: Principal) -> Container:
    """iris answers with version 1 (logistic) and mirrors version 2 (random forest) on every
    request, capturing every request."""
    demo.models.push(acme, "iris", (MODELS / "iris_forest.onnx").read_bytes())
    mirror = {"name": "forest", "sample_percent": 100, "target": {"kind": "single", "model": "iris", "version": 2}}
    demo.deployments.update(acme, "iris", {"kind": "shadow", "primary": SINGLE, "mirrors": [mirror]}, capture={"sample_percent": 100})
    return demo


def _traffic(client: TestClient, key: str, n: int) -> int:
    rng = np.random.default_rng(7)
    rows = 0
    for i in range(n):
        batch = rng.uniform([4.3, 2.0, 1.0, 0.1], [7.9, 4.4, 6.9, 2.5], size=(1 + i % 4, 4)).round(1).tolist()
        r = client.post("/api/v1/predictions", json={"deployment": "iris", "inputs": batch, "request_id": f"r{i}"}, headers=auth(key))
        assert r.status_code == 200, r.text
        rows += len(batch)
    return rows


def test_a_replay_gives_the_verdict_the_live_shadow_gave(shadowed: Container, acme: Principal, keys: dict[str, str]) -> None:
    client = TestClient(create_app(shadowed))
    rows = _traffic(client, keys["acme"], 80)
    assert shadowed.capture is not None and shadowed.capture.drain()
    live = shadowed.deployments.stats(acme, "iris")["mirrors"]["forest"]
    assert live["compared"] == 80 and live["agreement"] < 1.0  # the two models do disagree somewhere
    out = shadowed.replay.replay(acme, "iris", since="1h", against="iris:2")
    assert (out["records"], out["rows"], out["scored_rows"], out["failed_rows"], out["failures"]) == (80, rows, rows, 0, {})
    v = out["verdict"]
    assert v["compared"] == 80
    assert v["agreement"] == live["agreement"] and v["agreement_ci95"] == live["agreement_ci95"]
    assert v["mean_abs_diff"] == pytest.approx(live["mean_abs_diff"], rel=1e-6)
    assert v["max_abs_diff"] == pytest.approx(live["max_abs_diff"], rel=1e-6)
    assert out["latency"]["captured_p50_ms"] > 0 and out["rows_per_s"] > 0
    # Against a deployment instead of a version: the same verdict.
    shadowed.deployments.create(acme, "forest", {"kind": "single", "model": "iris", "version": 2})
    again = shadowed.replay.replay(acme, "iris", since="1h", against="forest")
    assert again["against"] == "deployment forest" and again["verdict"]["agreement"] == v["agreement"]
    # And over the API.
    r = client.post("/api/v1/deployments/iris/replay", json={"since": "1h", "against": "iris:2"}, headers=auth(keys["acme"]))
    assert r.status_code == 200 and r.json()["verdict"]["agreement"] == v["agreement"]
    # A window before any traffic replays nothing.
    empty = shadowed.replay.replay(acme, "iris", since="3h", until="2h", against="iris:2")
    assert empty["records"] == 0 and empty["verdict"]["agreement"] is None


def test_every_captured_row_is_scored_or_failed_with_its_reason(shadowed: Container, acme: Principal, keys: dict[str, str]) -> None:
    client = TestClient(create_app(shadowed))
    first = _traffic(client, keys["acme"], 10)
    shadowed.deployments.update(acme, "iris", None, capture={"sample_percent": 100, "redact": ["petal_width"]})
    second = _traffic(client, keys["acme"], 6)
    shadowed.deployments.update(acme, "iris", None, capture={"sample_percent": 100, "include": ["inputs"]})
    third = _traffic(client, keys["acme"], 4)
    assert shadowed.capture is not None and shadowed.capture.drain()
    out = shadowed.replay.replay(acme, "iris", since="1h", against="iris:2")
    assert out["records"] == 20 and out["rows"] == first + second + third
    assert out["scored_rows"] == first
    assert out["failures"] == {"inputs redacted or not captured": second, "outputs not captured": third}
    assert out["scored_rows"] + out["failed_rows"] == out["rows"]


ILL_FORMED = {
    "rows as text": ({"rows": "one"}, 0),
    "rows below zero": ({"rows": -5}, 0),
    "inputs a list": ({"inputs": [1, 2]}, 1),
    "a tensor's shape of text": ({"inputs": {"input": {"datatype": "FP32", "shape": ["x", 4], "data": []}}}, 1),
    "version a list": ({"version": [1]}, 1),
    "revision as text": ({"revision": "three"}, 1),
    "model a number": ({"model": 7}, 1),
}


@pytest.mark.parametrize("case", sorted(ILL_FORMED))
def test_a_record_of_the_wrong_shape_is_counted_unreadable_and_the_replay_goes_on(
    shadowed: Container, acme: Principal, keys: dict[str, str], settings: Any, case: str
) -> None:
    """A captured line that parses but is not a record's shape stopped the whole replay (a 500,
    no verdict for the good ones) or counted negative rows."""
    client = TestClient(create_app(shadowed), raise_server_exceptions=False)
    rows = _traffic(client, keys["acme"], 3)
    assert shadowed.capture is not None and shadowed.capture.drain()
    (written,) = (settings.home_path / "capture").rglob("*.jsonl")
    good = json.loads(written.read_text().splitlines()[0])
    changes, failed = ILL_FORMED[case]
    with written.open("a") as f:
        f.write(json.dumps({**good, **changes}) + "\n")
    r = client.post("/api/v1/deployments/iris/replay", json={"since": "1h", "against": "iris:2"}, headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["records"] == 4 and out["scored_rows"] == rows
    assert out["failures"] == ({"unreadable record": good["rows"]} if failed else {})
    assert out["rows"] == rows + failed * good["rows"] and out["scored_rows"] + out["failed_rows"] == out["rows"]


def test_a_deployment_made_again_replays_none_of_the_old_ones_requests(shadowed: Container, acme: Principal, keys: dict[str, str]) -> None:
    """Capture is kept under the deployment's name: requests captured for a deployment deleted
    before this one was made under it are not this one's, to replay or to take a baseline from."""
    client = TestClient(create_app(shadowed))
    _traffic(client, keys["acme"], 5)
    assert shadowed.capture is not None and shadowed.capture.drain()
    assert shadowed.replay.replay(acme, "iris", since="1h", against="iris:2")["records"] == 5
    shadowed.deployments.delete(acme, "iris")
    shadowed.deployments.create(acme, "iris", SINGLE, capture={"sample_percent": 100})
    assert shadowed.replay.replay(acme, "iris", since="1h", against="iris:2")["records"] == 0
    r = client.put("/api/v1/deployments/iris/baseline", json={"capture": {"since": "1h"}}, headers=auth(keys["acme"]))
    assert r.status_code == 400 and r.json()["field"] == "capture", r.text  # nothing of its own captured yet
    rows = _traffic(client, keys["acme"], 3)
    assert shadowed.capture.drain()
    out = shadowed.replay.replay(acme, "iris", since="1h", against="iris:2")
    assert (out["records"], out["rows"]) == (3, rows)


def _v2(client: TestClient, key: str, request_id: str, rows: list[list[float]], outputs: list[str] | None = None) -> None:
    body: dict[str, Any] = {"id": request_id, "inputs": [{"name": "input", "datatype": "FP32", "shape": [len(rows), 4], "data": [x for row in rows for x in row]}]}
    if outputs is not None:
        body["outputs"] = [{"name": name} for name in outputs]
    r = client.post("/v2/models/iris/infer", json=body, headers=auth(key))
    assert r.status_code == 200, r.text


@pytest.fixture
def mixed_outputs(shadowed: Container, keys: dict[str, str], settings: Any) -> tuple[Container, Path]:
    """Ten captured requests of two rows, the first asking for the label only: its record has
    fewer outputs than the others'. Returns the capture file."""
    client = TestClient(create_app(shadowed))
    rng = np.random.default_rng(7)
    for i in range(10):
        rows = rng.uniform([4.3, 2.0, 1.0, 0.1], [7.9, 4.4, 6.9, 2.5], size=(2, 4)).round(1).tolist()
        _v2(client, keys["acme"], f"r{i}", rows, ["output_label"] if i == 0 else None)
    assert shadowed.capture is not None and shadowed.capture.drain()
    (found,) = (settings.home_path / "capture").rglob("*.jsonl")
    return shadowed, found


@examples(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(order=st.permutations(range(10)))
def test_the_verdict_is_the_same_whatever_the_order_of_the_records(mixed_outputs: tuple[Container, Path], acme: Principal, order: list[int]) -> None:
    """Records of one version whose requests asked for different outputs: each record's
    outputs are compared, whichever comes first."""
    container, found = mixed_outputs
    lines = found.read_text().splitlines(keepends=True)
    found.write_text("".join(lines[i] for i in order))
    out = container.replay.replay(acme, "iris", since="1h", against="iris:2")
    assert (out["records"], out["rows"], out["scored_rows"], out["failed_rows"], out["failures"]) == (10, 20, 20, 0, {})
    found.write_text("".join(lines))
    reference = container.replay.replay(acme, "iris", since="1h", against="iris:2")
    assert out["verdict"] == reference["verdict"]
    assert out["verdict"]["compared"] == 10 and out["verdict"]["mean_abs_diff"] is not None  # nine records carry probabilities


def test_a_request_of_no_rows_fails_no_row(shadowed: Container, acme: Principal, keys: dict[str, str]) -> None:
    client = TestClient(create_app(shadowed))
    _v2(client, keys["acme"], "zero", [])
    for i in range(3):
        _v2(client, keys["acme"], f"one{i}", [[5.9, 3.0, 5.1, 1.8]])
    assert shadowed.capture is not None and shadowed.capture.drain()
    out = shadowed.replay.replay(acme, "iris", since="1h", against="iris:2")
    assert (out["records"], out["rows"], out["scored_rows"], out["failed_rows"], out["failures"]) == (4, 3, 3, 0, {})


def test_bad_replays_name_the_field(shadowed: Container, acme: Principal, keys: dict[str, str]) -> None:
    with pytest.raises(Unprocessable) as missing:
        shadowed.replay.replay(acme, "iris", since="1h", against="iris:9")
    assert missing.value.field == "against"
    for kw, field in (({"since": "yesterday-ish"}, "since"), ({"since": "1h", "until": "2h"}, "until"), ({"since": "40d"}, "since")):
        with pytest.raises(InvalidRequest) as bad:
            shadowed.replay.replay(acme, "iris", against="iris:2", **kw)
        assert bad.value.field == field
    client = TestClient(create_app(shadowed))
    r = client.post("/api/v1/deployments/iris/replay", json={"since": "1h", "against": "no such thing"}, headers=auth(keys["acme"]))
    assert r.status_code == 422 and r.json()["field"] == "against"


def test_the_s3_reader_reads_the_delivery_streams_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    now = time.time()
    hour = time.strftime("dt=%Y-%m-%d/hour=%H", time.gmtime(now))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(now - 1))
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="batch")
        for tenant in ("acme", "globex"):
            body = "".join(json.dumps({"request_id": f"{tenant}-{i}", "time": stamp, "tenant": tenant}) + "\n" for i in range(3))
            s3.put_object(Bucket="batch", Key=f"capture/tenant={tenant}/deployment=iris/{hour}/sluice-capture-1-abc", Body=body.encode())
        found: list[dict[str, Any]] = list(S3Capture("batch", client=s3).records("acme", "iris", now - 60, now + 1))
        assert [r["request_id"] for r in found] == ["acme-0", "acme-1", "acme-2"]
        assert list(S3Capture("batch", client=s3).records("acme", "iris", now + 10, now + 60)) == []


def test_captured_scalar_requests_replay_each_alone_and_are_compared(demo: Container, acme: Principal, keys: dict[str, str]) -> None:
    """A model whose input is a scalar (shape []): its captured requests are replayed one call
    each (a scalar takes no batch) and each compared, one row, with what was captured."""
    from tests.models import relu_model

    demo.models.push(acme, "scalar", relu_model([]))
    demo.models.push(acme, "scalar", relu_model([]))  # the same graph again: version 2 agrees everywhere
    demo.deployments.create(acme, "scalar", {"kind": "single", "model": "scalar", "version": 1}, capture={"sample_percent": 100})
    client = TestClient(create_app(demo))
    values = [-2.0, -0.5, 0.0, 1.5, 3.0, 8.25]
    for x in values:
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [], "data": [x]}]}
        assert client.post("/v2/models/scalar/infer", json=body, headers=auth(keys["acme"])).status_code == 200
    assert demo.capture is not None and demo.capture.drain()
    out = demo.replay.replay(acme, "scalar", since="1h", against="scalar:2")
    assert (out["records"], out["rows"], out["scored_rows"], out["failed_rows"], out["failures"]) == (6, 6, 6, 0, {}), out
    assert out["verdict"]["compared"] == 6 and out["verdict"]["max_abs_diff"] == 0.0, out["verdict"]


def test_a_model_with_a_text_output_replays_to_a_verdict(demo: Container, acme: Principal, keys: dict[str, str]) -> None:
    """A model answering text beside numbers (the demo's `words`: `code` INT64 and `echo`
    BYTES, both values): replayed against itself, its numbers compared and its text left out of
    the differences (a 500: the text was read as floats)."""
    import sys

    from tests.conftest import REPO

    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from make_demo_models import words as words_model
    finally:
        sys.path.pop(0)
    version = demo.models.push(acme, "words", words_model())
    demo.deployments.create(acme, "words", {"kind": "single", "model": "words", "version": version.version}, capture={"sample_percent": 100})
    client = TestClient(create_app(demo))
    body = {"inputs": [{"name": "text", "shape": [2, 1], "datatype": "BYTES", "data": ["red", "blue"]}]}
    assert client.post("/v2/models/words/infer", json=body, headers=auth(keys["acme"])).status_code == 200
    assert demo.capture is not None and demo.capture.drain()
    r = client.post("/api/v1/deployments/words/replay", json={"since": "1h", "against": "words"}, headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    assert r.json()["scored_rows"] == 2 and r.json()["verdict"]["max_abs_diff"] == 0.0
