"""Model monitoring's scheduled function in AWS form: the handler fed the schedule's event
(events/monitor_schedule.json) over a DynamoDB registry (moto), finding the deployments with a
baseline by its scan and writing one EMF line per deployment for the window that closed, and
its result as one JSON object per deployment and window in the batch bucket (moto's S3)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import boto3
import numpy as np
import pytest

from sluice.monitor.quality import CLASS, Outcomes
from sluice.monitor.sketches import Profile
from sluice.wiring import Container
from tests.conftest import EVENTS, MODELS
from tests.integration.aws.conftest import REGION
from tests.support import LambdaContext

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.settings import Settings

pytest.importorskip("datasketches")
EVENT = json.loads((EVENTS / "monitor_schedule.json").read_text())
AT = int(datetime.fromisoformat(EVENT["time"].replace("Z", "+00:00")).timestamp())
CLOSED = (AT // 3600 - 1) * 3600  # the window the schedule's time closes


def _profile(rng: np.random.Generator, shift: float = 0.0, rows: int = 2000) -> dict[str, Any]:
    profile = Profile()
    features = {"petal_length": rng.normal(4 + shift, 1, rows), "sepal_width": rng.normal(3, 0.5, rows)}
    profile.add("input", iter(features.items()))
    profile.rows = rows
    return profile.to_dict()


BUCKET = "sluice-batch"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """The suite's settings, with the batch bucket each window's result is written to."""
    from sluice.settings import Settings

    return Settings(mode="local", home=tmp_path / "home", registry="", store="", deployment_cache_ttl_s=0, batch_bucket=BUCKET)


@pytest.fixture
def cloud(on_dynamodb: Container, acme: Principal, globex: Principal) -> Iterator[Container]:
    from sluice.handlers import monitor

    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    rule = {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}  # as the storage stack's bucket
    s3.put_bucket_encryption(Bucket=BUCKET, ServerSideEncryptionConfiguration={"Rules": [rule]})
    container = on_dynamodb
    for who in (acme, globex):
        container.models.push(who, "iris", (MODELS / "iris.onnx").read_bytes())
        container.deployments.create(who, "iris", {"kind": "single", "model": "iris", "version": 1})
    container.deployments.create(acme, "plain", {"kind": "single", "model": "iris", "version": 1})  # no baseline
    monitor.service.cache_clear()
    yield container
    monitor.service.cache_clear()


def _lines(out: str) -> dict[str, dict[str, Any]]:
    """The EMF lines printed, by their `deployment` dimension's tenant/deployment."""
    found = {}
    for line in out.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            doc = json.loads(line)
            assert doc["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "sluice"
            # powertools writes each metric's values as a list: one value a line here.
            found[f"{doc['tenant']}/{doc['deployment']}"] = {k: v[0] if isinstance(v, list) and k not in ("worst",) else v for k, v in doc.items()}
    return found


def test_the_scheduled_check_writes_drift_alerts_and_quality_per_deployment(
    cloud: Container, acme: Principal, globex: Principal, capsys: pytest.CaptureFixture[str]
) -> None:
    from sluice.handlers.monitor import handler

    rng = np.random.default_rng(7)
    registry = cloud.registry
    for who in ("acme", "globex"):
        registry.put_baseline(who, "iris", {"deployment": "iris", "revision": 1, **_profile(rng, rows=20000)})
    # acme's iris drifted by one standard deviation in the closed window, in two containers'
    # flushes; the window still open (after the schedule's time) holds a larger shift that
    # must not be counted. globex's traffic is the training distribution.
    registry.add_profile("acme", "iris", 1, "", CLOSED, _profile(rng, shift=1.0))
    registry.add_profile("acme", "iris", 1, "", CLOSED, _profile(rng, shift=1.0))
    registry.add_profile("acme", "iris", 1, "", CLOSED + 3600, _profile(rng, shift=5.0))
    registry.add_profile("globex", "iris", 1, "", CLOSED, _profile(rng))
    labelled = Outcomes(CLASS)
    for actual, said in [("setosa", "setosa")] * 3 + [("virginica", "setosa")]:
        labelled.add_class(actual, said)
    registry.add_outcomes("acme", "iris", 1, CLOSED, {"": labelled.to_dict()})
    capsys.readouterr()

    answer = handler(EVENT, LambdaContext(function_name="sluice-monitor"))

    assert answer == {"window_start": CLOSED, "sketches": True, "deployments": 2, "checked": 2, "alerts": 1, "labelled": 1, "failed": 0}
    lines = _lines(capsys.readouterr().out)
    assert set(lines) == {"acme/iris", "globex/iris"}  # acme/plain has no baseline
    drifted, steady = lines["acme/iris"], lines["globex/iris"]
    assert drifted["MonitorDrift"] > 0.2 and drifted["MonitorAlerts"] == 1 and drifted["MonitorRows"] == 4000
    assert drifted["worst"] == ["petal_length"] and drifted["verdict"] == "alert" and drifted["window_start"] == CLOSED
    assert drifted["ModelAccuracy"] == 0.75 and drifted["LabelledRows"] == 4
    assert steady["MonitorDrift"] < 0.1 and steady["MonitorAlerts"] == 0 and "ModelAccuracy" not in steady
    # The alarms' metric, by the dimensions they name.
    dims = drifted["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]
    assert sorted(dims) == ["deployment", "service", "tenant"]
    assert {m["Name"] for m in drifted["_aws"]["CloudWatchMetrics"][0]["Metrics"]} >= {"MonitorAlerts", "MonitorDrift"}
    # The history: one object per deployment and window, under the tenant's prefix, encrypted
    # as the bucket is; a repeated delivery writes the same object again.
    s3 = boto3.client("s3", region_name=REGION)
    stamp = datetime.fromtimestamp(CLOSED, UTC).strftime("%Y-%m-%dT%H%M%SZ")
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="monitor/")["Contents"])
    assert keys == [f"monitor/acme/iris/{stamp}.json", f"monitor/globex/iris/{stamp}.json"]
    got = s3.get_object(Bucket=BUCKET, Key=keys[0])
    assert got["ServerSideEncryption"] == "AES256" and got["ContentType"] == "application/json"
    doc = json.loads(got["Body"].read())
    assert (doc["tenant"], doc["deployment"], doc["revision"], doc["window_start"], doc["window_end"]) == ("acme", "iris", 1, CLOSED, CLOSED + 3600)
    assert doc["check"]["verdict"] == "alert" and doc["check"]["worst"] == ["petal_length"] and doc["quality"]["accuracy"] == 0.75
    assert handler(EVENT, LambdaContext(function_name="sluice-monitor"))["deployments"] == 2
    assert len(s3.list_objects_v2(Bucket=BUCKET, Prefix="monitor/")["Contents"]) == 2


def test_a_baseline_left_by_a_deleted_deployment_is_skipped(cloud: Container, acme: Principal, capsys: pytest.CaptureFixture[str]) -> None:
    from sluice.handlers.monitor import handler

    rng = np.random.default_rng(8)
    cloud.registry.put_baseline("acme", "gone", {"deployment": "gone", "revision": 1, **_profile(rng)})
    assert cloud.registry.monitored() == [("acme", "gone")]
    capsys.readouterr()
    answer = handler(EVENT, LambdaContext(function_name="sluice-monitor"))
    assert answer["deployments"] == 0 and answer["failed"] == 0
    assert _lines(capsys.readouterr().out) == {}
