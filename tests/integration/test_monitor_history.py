"""Each closed window's kept result read back through the API, on the demo's iris: newest
first, a page at a time, from a time on; its model quality follows labels that came after the
window was closed; another tenant never lists it; bad input named."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from sluice.domain.values import isoformat
from tests.integration.conftest import auth
from tests.integration.test_ground_truth import HOUR, labels, predicted
from tests.integration.test_monitoring import BASE, iris_rows

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

    from sluice.wiring import Container

HISTORY = f"{BASE}/monitor/history"


def test_closed_windows_are_listed_newest_first_by_page_and_follow_late_labels(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    from sluice.monitor.sketches import Profile
    from sluice.services.monitor_results import MonitorResults

    key = keys["acme"]
    base = Profile(10)
    base.add("input", iter({"petal_length": np.linspace(1, 7, 10)}.items()))  # any baseline: the windows are what is read
    demo.registry.put_baseline("acme", "iris", {"deployment": "iris", "revision": 1, **base.to_dict()})
    kept = demo.predictions.kept
    assert kept is not None
    kept.mode = "all"
    h0 = int(time.time()) // HOUR - 10  # three windows closed some hours ago
    now = [0.0]
    kept.clock = lambda: now[0]
    said = {}
    for h in (h0, h0 + 1, h0 + 2):  # one request in each of three windows
        now[0] = h * HOUR + 5.0
        said[h] = predicted(client, key, iris_rows(20, h), f"h{h}")
    results = MonitorResults(demo.monitor, demo.batch_files(), demo.batch_paths.root)
    for h in said:
        closed = demo.monitor.closed("acme", "iris", at=(h + 1) * HOUR + 300)
        assert closed is not None and closed["quality"] is None  # no labels when it closed
        results.write("acme", closed)

    page = client.get(HISTORY, params={"limit": 2}, headers=auth(key))
    assert page.status_code == 200, page.text
    got = page.json()
    assert [w["window_start"] for w in got["windows"]] == [(h0 + 2) * HOUR, (h0 + 1) * HOUR] and got["next"] == (h0 + 1) * HOUR
    rest = client.get(HISTORY, params={"limit": 2, "before": got["next"]}, headers=auth(key)).json()
    assert [w["window_start"] for w in rest["windows"]] == [h0 * HOUR] and rest["next"] is None
    since = client.get(HISTORY, params={"since": isoformat((h0 + 1) * HOUR)}, headers=auth(key)).json()
    assert [w["window_start"] for w in since["windows"]] == [(h0 + 2) * HOUR, (h0 + 1) * HOUR]

    # Labels for the oldest window come after it was closed: its kept result shows them.
    r = client.post(f"{BASE}/labels", json={"labels": labels(f"h{h0}", said[h0], flip_every=2)}, headers=auth(key))
    assert r.status_code == 200 and r.json()["matched"] == 20, r.text
    (oldest,) = client.get(HISTORY, params={"until": isoformat((h0 + 1) * HOUR)}, headers=auth(key)).json()["windows"]
    assert oldest["window_start"] == h0 * HOUR and oldest["quality_at_close"] is None
    assert oldest["quality"]["rows"] == 20 and oldest["quality"]["accuracy"] == 0.5

    other = client.get(HISTORY, headers=auth(keys["globex"]))  # another tenant's deployment: not found
    assert other.status_code == 404 and "iris" in other.text
    assert client.get(HISTORY, headers=auth(keys["acme_predict"])).status_code == 403  # admin scope, as the status
    bad = client.get(HISTORY, params={"since": "last tuesday"}, headers=auth(key))
    assert 400 <= bad.status_code < 500 and "since" in bad.text
    # A window that ends before it starts is refused, as a capture window is, not an empty page.
    for since, until in (((h0 + 2) * HOUR, h0 * HOUR), ((h0 + 1) * HOUR, (h0 + 1) * HOUR)):
        backwards = client.get(HISTORY, params={"since": isoformat(since), "until": isoformat(until)}, headers=auth(key))
        assert backwards.status_code == 422 and backwards.json()["field"] == "until", backwards.text


def test_a_deployment_made_again_lists_none_of_the_old_ones_windows(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    """Windows are kept under the deployment's name: those closed for a deployment deleted
    before this one was made under it are not this one's history."""
    from sluice.services.monitor_results import MonitorResults

    key = keys["acme"]
    results = MonitorResults(demo.monitor, demo.batch_files(), demo.batch_paths.root)
    h0 = int(time.time()) // HOUR - 10
    made = client.post("/api/v1/deployments", json={"name": "d", "model": "iris", "version": 1}, headers=auth(key)).json()
    for h in (h0, h0 + 1):
        results.write("acme", {"deployment": "d", "revision": made["revision"], "window_start": h * HOUR, "rows": 1, "quality": None})
    assert len(client.get("/api/v1/deployments/d/monitor/history", headers=auth(key)).json()["windows"]) == 2
    assert client.delete("/api/v1/deployments/d", headers=auth(key)).status_code == 204
    again = client.post("/api/v1/deployments", json={"name": "d", "model": "iris", "version": 1}, headers=auth(key)).json()
    assert client.get("/api/v1/deployments/d/monitor/history", headers=auth(key)).json() == {"deployment": "d", "windows": [], "next": None}
    results.write("acme", {"deployment": "d", "revision": again["revision"], "window_start": (h0 + 5) * HOUR, "rows": 1, "quality": None})
    page = client.get("/api/v1/deployments/d/monitor/history", params={"limit": 1}, headers=auth(key)).json()
    assert [w["window_start"] for w in page["windows"]] == [(h0 + 5) * HOUR] and page["next"] is None
