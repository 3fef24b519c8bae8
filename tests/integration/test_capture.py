"""Data capture: sampled requests written off the request path, through the real prediction
path (TestClient -> PredictionService) into real sinks (JSON Lines files, Firehose on moto),
and sinks that are slow or fail never reaching an answer."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import settings as examples
from hypothesis import strategies as st
from moto import mock_aws

from sluice.capture.capturer import Capturer
from sluice.capture.sinks import FirehoseSink, FolderSink
from sluice.domain.capture import CaptureSettings
from sluice.domain.errors import InvalidRequest
from tests.integration.conftest import auth

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.wiring import Container

FEATURES = {"sepal_length": 5.9, "sepal_width": 3.0, "petal_length": 5.1, "petal_width": 1.8}
CAPTURE = {"sample_percent": 100, "include": ["inputs", "outputs"], "redact": ["petal_width"]}


class Recording:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def write(self, records: Any) -> tuple[int, int]:
        with self.lock:
            self.records += list(records)
        return 0, 0


class Blocked:
    """Holds every write until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.records: list[dict[str, Any]] = []

    def write(self, records: Any) -> tuple[int, int]:
        self.release.wait()
        self.records += list(records)
        return 0, 0


class Broken:
    def write(self, records: Any) -> tuple[int, int]:
        raise OSError("disk on fire")


def _capture_on(container: Container, acme: Principal, capture: dict[str, Any] = CAPTURE) -> None:
    container.deployments.update(acme, "iris", None, capture=capture)


def _predict(client: TestClient, key: str, n: int) -> list[dict[str, Any]]:
    answers = []
    for i in range(n):
        r = client.post(
            "/api/v1/predictions",
            json={"deployment": "iris", "features": FEATURES, "request_id": f"req-{i}"},
            headers=auth(key),
        )
        assert r.status_code == 200, r.text
        answers.append(r.json())
    return answers


def test_every_sampled_request_is_written_with_its_metadata_and_redacted(demo: Container, client: TestClient, acme: Principal, keys: dict[str, str], settings: Any) -> None:
    assert isinstance(demo.capture.sink, FolderSink)  # type: ignore[union-attr]
    _capture_on(demo, acme)
    _predict(client, keys["acme"], 300)
    assert demo.capture is not None and demo.capture.drain()
    assert demo.capture.counts() == {"sampled": 300, "written": 300, "dropped": 0, "failed": 0, "queued": 0}
    root: Path = settings.home_path / "capture"
    files = list(root.glob("tenant=acme/deployment=iris/dt=*/hour=*/part-*.jsonl"))
    assert files, list(root.rglob("*"))
    records = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert sorted(r["request_id"] for r in records) == sorted(f"req-{i}" for i in range(300))
    record = records[0]
    dep = demo.deployments.get(acme, "iris")
    assert (record["tenant"], record["deployment"], record["revision"], record["model"], record["version"]) == ("acme", "iris", dep.revision, "iris", 1)
    assert record["latency_ms"] > 0 and record["time"].endswith("Z") and record["rows"] == 1
    (tensor,) = record["inputs"].values()
    assert tensor["shape"] == [1, 4] and tensor["data"][:3] == pytest.approx([5.9, 3.0, 5.1]) and tensor["data"][3] is None
    assert record["redacted"] == ["petal_width"]
    assert "virginica" in json.dumps(record["outputs"])
    assert oct(files[0].stat().st_mode & 0o777) == "0o600"


def test_sampling_keeps_about_the_share_asked_and_nothing_for_other_deployments(demo: Container, client: TestClient, acme: Principal, keys: dict[str, str]) -> None:
    sink = Recording()
    demo.predictions.capture = Capturer(sink)
    _capture_on(demo, acme, {"sample_percent": 10})
    _predict(client, keys["acme"], 400)
    r = client.post("/api/v1/predictions", json={"deployment": "diabetes", "inputs": [[0.0] * 10]}, headers=auth(keys["acme"]))
    assert r.status_code == 200
    demo.predictions.capture.drain()
    assert 5 <= len(sink.records) <= 100  # 10% of 400, far from the edges
    assert {r["deployment"] for r in sink.records} == {"iris"}
    assert all("inputs" in r and "outputs" in r for r in sink.records)


def test_a_blocked_sink_never_holds_an_answer_and_a_full_queue_drops_and_counts(demo: Container, client: TestClient, acme: Principal, keys: dict[str, str]) -> None:
    sink = Blocked()
    capturer = Capturer(sink, max_queue=5, batch=2)
    demo.predictions.capture = capturer
    _capture_on(demo, acme)
    answers = _predict(client, keys["acme"], 60)  # would never return if an answer waited on the sink
    assert all(a["prediction"] == "virginica" for a in answers)
    assert capturer.sampled == 60 and capturer.dropped >= 60 - 5 - 2
    sink.release.set()
    assert capturer.drain()
    assert capturer.written + capturer.dropped == 60 and capturer.failed == 0
    assert len(sink.records) == capturer.written


def test_a_failing_sink_never_touches_an_answer(demo: Container, client: TestClient, acme: Principal, keys: dict[str, str]) -> None:
    before = _predict(client, keys["acme"], 1)[0]
    capturer = Capturer(Broken())
    demo.predictions.capture = capturer
    _capture_on(demo, acme)
    answers = _predict(client, keys["acme"], 40)
    assert {a["prediction"] for a in answers} == {before["prediction"]}
    assert capturer.drain()
    assert capturer.failed == 40 and capturer.written == 0


def test_capture_settings_are_checked_and_name_the_field(demo: Container, client: TestClient, keys: dict[str, str]) -> None:
    for capture, field in (
        ({"sample_percent": 0}, "capture.sample_percent"),
        ({"sample_percent": 101}, "capture.sample_percent"),
        ({"sample_percent": 5, "include": ["everything"]}, "capture.include.0"),
        ({"sample_percent": 5, "redact": "petal_width"}, "capture.redact"),
        ({"sample_percent": 5, "keep": True}, "capture.keep"),
    ):
        r = client.put("/api/v1/deployments/iris", json={"capture": capture}, headers=auth(keys["acme"]))
        assert r.status_code == 422, r.text
        assert r.json()["field"] == field, r.text
    r = client.put("/api/v1/deployments/iris", json={"capture": {"sample_percent": 5, "redact": ["petal_width"]}}, headers=auth(keys["acme"]))
    assert r.status_code == 200 and r.json()["capture"] == {"sample_percent": 5.0, "include": ["inputs", "outputs"], "redact": ["petal_width"]}
    assert r.json()["policy"] == {"kind": "single", "model": "iris", "version": 1}  # the policy stays
    r = client.put("/api/v1/deployments/iris", json={"capture": None}, headers=auth(keys["acme"]))
    assert r.status_code == 200 and r.json()["capture"] is None


IRIS_NAMES = ("input", "sepal_length", "sepal_width", "petal_length", "petal_width")


@examples(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    known=st.lists(st.sampled_from(IRIS_NAMES), max_size=3, unique=True),
    other=st.text(min_size=1, max_size=128).filter(lambda x: x not in IRIS_NAMES) | st.sampled_from(["Petal_Width", "petal_width ", "petal-width", "petal width"]),
    at=st.integers(0, 3),
)
def test_redact_names_only_the_deployments_inputs_and_features(demo: Container, acme: Principal, known: list[str], other: str, at: int) -> None:
    """A name that is not exactly one of iris's input or features would redact nothing: it is
    refused (422 naming its place in the list), and the setting stays as it was; the names
    that are pass."""
    before = demo.deployments.get(acme, "iris").capture
    redact = [*known[:at], other, *known[at:]]
    with pytest.raises(InvalidRequest) as refused:
        demo.deployments.update(acme, "iris", None, capture={"sample_percent": 100, "redact": redact})
    assert refused.value.field == f"capture.redact.{redact.index(other)}" and "petal_width" in refused.value.message
    assert demo.deployments.get(acme, "iris").capture == before
    assert demo.deployments.update(acme, "iris", None, capture={"sample_percent": 100, "redact": known}).capture.redact == tuple(known)  # type: ignore[union-attr]


def test_redacted_names_must_fit_the_policy_they_are_saved_with(demo: Container, client: TestClient, acme: Principal, keys: dict[str, str]) -> None:
    """Over the API, on create and on update, and when a new policy would take other features
    than those a kept setting redacts."""
    single = {"kind": "single", "model": "iris", "version": 1}
    r = client.post("/api/v1/deployments", json={"name": "other", "policy": single, "capture": {"sample_percent": 5, "redact": ["Petal_Width"]}}, headers=auth(keys["acme"]))
    assert r.status_code == 422 and r.json()["field"] == "capture.redact.0", r.text
    r = client.put("/api/v1/deployments/iris", json={"capture": {"sample_percent": 5, "redact": ["sepal_width", "petal-width"]}}, headers=auth(keys["acme"]))
    assert r.status_code == 422 and r.json()["field"] == "capture.redact.1", r.text
    _capture_on(demo, acme)  # redacts petal_width
    step = {"kind": "transform", "inputs": [{"name": "raw", "datatype": "FP32", "shape": [-1, 4], "feature_names": ["ssn", "b", "cc", "d"]}], "ops": [{"op": "rename", "input": "raw", "output": "input"}]}
    sequence = {"kind": "sequence", "steps": [{"name": "prep", "target": step}, {"name": "model", "target": single}]}
    r = client.put("/api/v1/deployments/iris", json={"policy": sequence}, headers=auth(keys["acme"]))
    assert r.status_code == 422 and r.json()["field"] == "capture.redact.0" and "'ssn'" in r.json()["error"], r.text
    r = client.put("/api/v1/deployments/iris", json={"policy": sequence, "capture": {"sample_percent": 5, "redact": ["ssn"]}}, headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text


def test_a_stored_name_that_matches_nothing_blocks_no_change_that_keeps_it(demo: Container, client: TestClient, acme: Principal, keys: dict[str, str]) -> None:
    """Older releases stored any name: one that matches none of a deployment's inputs (it
    redacted nothing then either) stays through changes that do not give it again, to the
    deployment or to one that references it; given again it is refused, and a change that takes
    away a name that did match still is, for a deployment that references the changed one too."""
    single = {"kind": "single", "model": "iris", "version": 1}
    demo.deployments.create(acme, "front", {"kind": "ref", "deployment": "iris"})
    for name, redact in (("iris", ("zip",)), ("front", ("zip", "petal_width"))):  # as an older release stored them
        stored = demo.registry.get_deployment("acme", name)
        demo.registry.update_deployment(replace(stored, capture=CaptureSettings(100.0, redact=redact)), expected_revision=stored.revision)
    same_inputs = {"kind": "split", "variants": [{"name": "a", "weight": 50, "target": single}, {"name": "b", "weight": 50, "target": single}]}
    for body in ({"cache": None}, {"policy": single}, {"policy": same_inputs}, {"batching": None}):
        r = client.put("/api/v1/deployments/iris", json=body, headers=auth(keys["acme"]))
        assert r.status_code == 200 and r.json()["capture"]["redact"] == ["zip"], (body, r.text)
    r = client.put("/api/v1/deployments/iris", json={"capture": {"sample_percent": 5, "redact": ["zip"]}}, headers=auth(keys["acme"]))
    assert r.status_code == 422 and r.json()["field"] == "capture.redact.0", r.text
    step = {"kind": "transform", "inputs": [{"name": "raw", "datatype": "FP32", "shape": [-1, 4], "feature_names": ["ssn", "b", "cc", "d"]}], "ops": [{"op": "rename", "input": "raw", "output": "input"}]}
    sequence = {"kind": "sequence", "steps": [{"name": "prep", "target": step}, {"name": "model", "target": single}]}
    r = client.put("/api/v1/deployments/iris", json={"policy": sequence}, headers=auth(keys["acme"]))
    assert r.status_code == 422 and r.json()["field"] == "policy" and "'front'" in r.json()["error"] and "'petal_width'" in r.json()["error"], r.text


def test_each_tenant_is_captured_under_its_own_partition(demo: Container, client: TestClient, acme: Principal, globex: Principal, keys: dict[str, str], settings: Any) -> None:
    from tests.conftest import MODELS

    demo.models.push(globex, "iris", (MODELS / "iris.onnx").read_bytes())
    demo.deployments.create(globex, "iris", {"kind": "single", "model": "iris", "version": 1}, capture={"sample_percent": 100})
    _capture_on(demo, acme)
    _predict(client, keys["acme"], 3)
    _predict(client, keys["globex"], 2)
    assert demo.capture is not None and demo.capture.drain()
    root = settings.home_path / "capture"
    for tenant, n in (("acme", 3), ("globex", 2)):
        lines = [json.loads(x) for f in root.glob(f"tenant={tenant}/deployment=iris/*/*/*.jsonl") for x in f.read_text().splitlines()]
        assert len(lines) == n and {r["tenant"] for r in lines} == {tenant}


def test_firehose_sink_puts_record_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="captured")
        firehose = boto3.client("firehose", region_name="us-east-1")
        firehose.create_delivery_stream(
            DeliveryStreamName="sluice-capture",
            ExtendedS3DestinationConfiguration={
                "RoleARN": "arn:aws:iam::123456789012:role/firehose", "BucketARN": "arn:aws:s3:::captured", "Prefix": "capture/",
            },
        )  # fmt: skip
        calls: list[int] = []
        put = firehose.put_record_batch

        def counting(**kw: Any) -> Any:
            calls.append(len(kw["Records"]))
            return put(**kw)

        monkeypatch.setattr(firehose, "put_record_batch", counting)
        records = [{"request_id": f"r{i}", "tenant": "acme", "deployment": "iris", "time": "2026-11-26T15:00:00.000Z"} for i in range(1201)]
        huge = {"request_id": "huge", "tenant": "acme", "deployment": "iris", "time": "2026-11-26T15:00:00.000Z", "inputs": "x" * 1_100_000}
        assert FirehoseSink("sluice-capture", client=firehose).write([*records, huge]) == (1, 0)  # too large: dropped
        assert calls == [500, 500, 201]
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="captured")["Contents"]]
        lines = [x for k in keys for x in s3.get_object(Bucket="captured", Key=k)["Body"].read().decode().splitlines() if x]
        assert sorted(json.loads(x)["request_id"] for x in lines) == sorted(f"r{i}" for i in range(1201))


class Refusing:
    """A Firehose client (moto's behind it) that refuses, as PutRecordBatch answers a throttled
    put, every record whose request id is in `refused`, and raises on a call holding one in
    `raising`."""

    def __init__(self, firehose: Any, refused: set[str], raising: tuple[str, ...] = ()) -> None:
        self.firehose, self.refused, self.raising = firehose, refused, raising

    def put_record_batch(self, DeliveryStreamName: str, Records: list[dict[str, bytes]]) -> dict[str, Any]:
        ids = [json.loads(r["Data"])["request_id"] for r in Records]
        if any(rid in self.raising for rid in ids):
            raise ConnectionError("the stream is unreachable")
        kept = [r for r, rid in zip(Records, ids, strict=True) if rid not in self.refused]
        if kept:
            self.firehose.put_record_batch(DeliveryStreamName=DeliveryStreamName, Records=kept)
        answers = [{"ErrorCode": "ServiceUnavailableException", "ErrorMessage": "Slow down."} if rid in self.refused else {"RecordId": rid} for rid in ids]
        return {"FailedPutCount": sum("ErrorCode" in a for a in answers), "RequestResponses": answers}


def _delivery_stream(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="captured")
    firehose = boto3.client("firehose", region_name="us-east-1")
    firehose.create_delivery_stream(
        DeliveryStreamName="sluice-capture",
        ExtendedS3DestinationConfiguration={"RoleARN": "arn:aws:iam::123456789012:role/firehose", "BucketARN": "arn:aws:s3:::captured", "Prefix": "capture/"},
    )
    return s3, firehose


def _delivered(s3: Any) -> list[str]:
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="captured").get("Contents", [])]
    return [json.loads(x)["request_id"] for k in keys for x in s3.get_object(Bucket="captured", Key=k)["Body"].read().decode().splitlines() if x]


def test_records_firehose_refuses_are_counted_one_by_one(demo: Container, client: TestClient, acme: Principal, keys: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """One record refused twice among twenty: nineteen written, one failed (CaptureWritten and
    CaptureFailed say so), not the whole batch."""
    with mock_aws():
        s3, firehose = _delivery_stream(monkeypatch)
        capturer = Capturer(FirehoseSink("sluice-capture", client=Refusing(firehose, {"req-7"})), gather_s=0.5)
        demo.predictions.capture = capturer
        _capture_on(demo, acme)
        _predict(client, keys["acme"], 20)
        assert capturer.drain()
        assert capturer.counts() == {"sampled": 20, "written": 19, "dropped": 0, "failed": 1, "queued": 0}
        assert sorted(_delivered(s3)) == sorted(f"req-{i}" for i in range(20) if i != 7)


def test_a_firehose_call_that_fails_does_not_stop_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    with mock_aws():
        s3, firehose = _delivery_stream(monkeypatch)
        records = [{"request_id": f"r{i}", "tenant": "acme", "deployment": "iris", "time": "2026-11-26T15:00:00.000Z"} for i in range(1201)]
        sink = FirehoseSink("sluice-capture", client=Refusing(firehose, {"r1100"}, raising=("r600",)))
        assert sink.write(records) == (0, 501)  # the second call's 500, and one refused in the third
        assert sorted(_delivered(s3)) == sorted(f"r{i}" for i in [*range(500), *range(1000, 1201)] if i != 1100)


def test_concurrent_load_loses_no_sampled_record(demo: Container, acme: Principal) -> None:
    import asyncio

    from sluice.domain.requests import PredictionRequest, RowInputs

    sink = Recording()
    capturer = Capturer(sink, batch=64)
    demo.predictions.capture = capturer
    _capture_on(demo, acme)

    async def load() -> list[Any]:
        requests = [
            PredictionRequest(deployment="iris", inputs=RowInputs(inputs=[[5.9, 3.0, 5.1, 1.8]] * (1 + i % 3)), request_id=f"load-{i}")
            for i in range(2000)
        ]
        return await asyncio.gather(*(demo.predictions.predict(acme, r) for r in requests))

    answers = asyncio.run(load())
    assert len(answers) == 2000
    assert capturer.drain()
    assert capturer.counts() == {"sampled": 2000, "written": 2000, "dropped": 0, "failed": 0, "queued": 0}
    assert sorted(r["request_id"] for r in sink.records) == sorted(f"load-{i}" for i in range(2000))
    assert sum(r["rows"] for r in sink.records) == sum(1 + i % 3 for i in range(2000))


def test_a_graph_redacts_the_features_its_callers_send(demo: Container, client: TestClient, acme: Principal, keys: dict[str, str], settings: Any) -> None:
    """A sequence whose transform reads `raw` (features ssn, b, cc, d) before iris: `ssn` and
    `cc` are left out of what is captured, found by the names the caller's input has, not by
    the last model's. A redacted record's float32 values are written in their shortest form."""
    step = {"kind": "transform", "inputs": [{"name": "raw", "datatype": "FP32", "shape": [-1, 4], "feature_names": ["ssn", "b", "cc", "d"]}], "ops": [{"op": "rename", "input": "raw", "output": "input"}]}
    policy = {"kind": "sequence", "steps": [{"name": "prep", "target": step}, {"name": "model", "target": {"kind": "single", "model": "iris", "version": 1}}]}
    demo.deployments.create(acme, "seq", policy, capture={"sample_percent": 100, "redact": ["ssn", "cc"]})
    r = client.post("/api/v1/predictions", json={"deployment": "seq", "features": {"ssn": 123456789.0, "b": 3.1, "cc": 4111111.0, "d": 1.8}}, headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    assert demo.capture is not None and demo.capture.drain()
    (line,) = [line for f in (settings.home_path / "capture").rglob("*.jsonl") for line in f.read_text().splitlines()]
    assert "123456789" not in line and "4111111" not in line
    record = json.loads(line)
    assert record["inputs"]["raw"]["data"] == [None, 3.1, None, 1.8] and record["redacted"] == ["ssn", "cc"]


@pytest.mark.parametrize("route", ["/v2/models/seq/versions/1/infer", "/api/v1/predictions"])
def test_a_request_pinning_a_version_writes_no_value_a_redacted_name_may_be(
    demo: Container, client: TestClient, acme: Principal, keys: dict[str, str], settings: Any, route: str
) -> None:
    """Pinning a version skips the transform whose features the setting names: the model's own
    input has other names (or none), and the redacted feature was written in clear."""
    step = {"kind": "transform", "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 4], "feature_names": ["ssn", "b", "cc", "d"]}], "ops": [{"op": "clip", "input": "input", "min": -1e9, "max": 1e9}]}
    policy = {"kind": "sequence", "steps": [{"name": "prep", "target": step}, {"name": "model", "target": {"kind": "single", "model": "iris", "version": 1}}]}
    demo.deployments.create(acme, "seq", policy, capture={"sample_percent": 100, "redact": ["ssn"]})
    row = [123456789.0, 3.1, 4.2, 1.8]
    body = (
        {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": row}]} if route.startswith("/v2")
        else {"deployment": "seq", "inputs": [row], "version": 1}
    )  # fmt: skip
    r = client.post(route, json=body, headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    assert demo.capture is not None and demo.capture.drain()
    (line,) = [line for f in (settings.home_path / "capture").rglob("*.jsonl") for line in f.read_text().splitlines()]
    assert "123456789" not in line and "1.23456789e" not in line.lower()
    record = json.loads(line)
    assert "data" not in record["inputs"]["input"] and record["redacted"] == ["input"]


def test_redacted_features_are_not_written_through_an_exposed_step_output(demo: Container, client: TestClient, acme: Principal, keys: dict[str, str], settings: Any) -> None:
    """A sequence that exposes its transform's output (`prep.input`: the caller's `raw`,
    renamed), and one more that renames that output again after the sequence: with features
    to redact, neither is written, nor is a baseline taken from them; the model's answer is."""
    step = {"kind": "transform", "inputs": [{"name": "raw", "datatype": "FP32", "shape": [-1, 4], "feature_names": ["ssn", "b", "cc", "d"]}], "ops": [{"op": "rename", "input": "raw", "output": "input"}]}
    inner = {"kind": "sequence", "steps": [{"name": "prep", "target": step}, {"name": "model", "target": {"kind": "single", "model": "iris", "version": 1}}], "expose": ["prep.input"]}
    outer = {"kind": "sequence", "steps": [{"name": "inner", "target": inner}, {"name": "post", "target": {"kind": "transform", "ops": [{"op": "rename", "input": "prep.input", "output": "copy"}]}}]}
    capture = {"sample_percent": 100, "redact": ["ssn", "cc"]}
    demo.deployments.create(acme, "seq", inner, capture=capture)
    demo.deployments.create(acme, "wrapped", outer, capture=capture)
    for name in ("seq", "wrapped"):
        r = client.post("/api/v1/predictions", json={"deployment": name, "features": {"ssn": 123456789.0, "b": 3.1, "cc": 4111111.0, "d": 1.8}}, headers=auth(keys["acme"]))
        assert r.status_code == 200, r.text
    assert demo.capture is not None and demo.capture.drain()
    text = "".join(f.read_text() for f in (settings.home_path / "capture").rglob("*.jsonl"))
    assert "123456789" not in text and "4111111" not in text
    records = {r["deployment"]: r for r in map(json.loads, text.splitlines())}
    assert sorted(records["seq"]["outputs"]) == ["output_label", "output_probability"]
    assert "copy" not in records["wrapped"]["outputs"]
    r = client.put("/api/v1/deployments/seq/baseline", json={"capture": {"since": "1h"}}, headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    assert not [c for c in r.json()["columns"] if c.startswith("prep.input")]
    # Without features to redact, an exposed output is captured as the answer holds it.
    demo.deployments.update(acme, "seq", None, capture={"sample_percent": 100})
    client.post("/api/v1/predictions", json={"deployment": "seq", "features": {"ssn": 1.0, "b": 3.1, "cc": 2.0, "d": 1.8}}, headers=auth(keys["acme"]))
    assert demo.capture.drain()
    last = [json.loads(x) for f in (settings.home_path / "capture").rglob("*.jsonl") for x in f.read_text().splitlines()]
    assert any("prep.input" in r["outputs"] for r in last if r["deployment"] == "seq")
