"""Model monitoring's scheduled function in AWS form: the handler fed the schedule's event
(events/monitor_schedule.json) over a DynamoDB registry (moto), finding the deployments with a
baseline by its scan and writing one EMF line per deployment for the window that closed."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from sluice.monitor.quality import CLASS, Outcomes
from sluice.monitor.sketches import Profile
from sluice.wiring import Container
from tests.conftest import EVENTS, MODELS
from tests.support import LambdaContext

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sluice.domain import Principal

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


@pytest.fixture
def cloud(on_dynamodb: Container, acme: Principal, globex: Principal) -> Iterator[Container]:
    from sluice.handlers import monitor

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


def test_a_baseline_left_by_a_deleted_deployment_is_skipped(cloud: Container, acme: Principal, capsys: pytest.CaptureFixture[str]) -> None:
    from sluice.handlers.monitor import handler

    rng = np.random.default_rng(8)
    cloud.registry.put_baseline("acme", "gone", {"deployment": "gone", "revision": 1, **_profile(rng)})
    assert cloud.registry.monitored() == [("acme", "gone")]
    capsys.readouterr()
    answer = handler(EVENT, LambdaContext(function_name="sluice-monitor"))
    assert answer["deployments"] == 0 and answer["failed"] == 0
    assert _lines(capsys.readouterr().out) == {}
