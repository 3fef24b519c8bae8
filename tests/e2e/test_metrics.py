"""`/metrics` on a real `sluice serve` with two workers (the one the e2e tests share): each
worker writes its own series (its tallies, within `FLUSH_S`), a scrape answered by either sums
them all, and a tenant sees its own deployments only."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

from sluice.demo import install_demo
from sluice.domain import Principal
from sluice.metrics_tally import FLUSH_S
from sluice.settings import Settings
from sluice.wiring import Container
from tests.conftest import MODELS
from tests.support import http

if TYPE_CHECKING:
    from pathlib import Path

SETOSA = {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}


def value(text: str, name: str, **labels: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and set(labels.items()) <= set(s.labels.items())
    )


def scraped(base: str, headers: dict[str, str], name: str, want: float, **labels: str) -> str:
    """A scrape whose `name` reads `want`: every worker's tallies are in the files within
    `FLUSH_S` of the last prediction (the worker answering adds its own at once)."""
    deadline = time.monotonic() + FLUSH_S * 10
    while True:
        r = http("GET", f"{base}/metrics", headers=headers)
        assert r.status_code == 200, r.text
        if value(r.text, name, **labels) == want or time.monotonic() > deadline:
            return r.text
        time.sleep(FLUSH_S / 10)


def workers_writing(home: Path) -> set[str]:
    """The pids whose series files are in the multiprocess folder."""
    return {f.stem.rsplit("_", 1)[1] for f in (home / "metrics").glob("*.db")}


def workers_counting(home: Path, deployment: str) -> set[str]:
    """The pids whose series files count requests to `deployment` (each worker writes its own)."""
    from prometheus_client.mmap_dict import MmapedDict

    found = set()
    for series in (home / "metrics").glob("counter_*.db"):
        for entry in MmapedDict.read_all_values_from_file(str(series)):
            key, count = entry[0], entry[1]
            if count and json.loads(key)[2].get("deployment") == deployment:
                found.add(series.stem.rsplit("_", 1)[1])
    return found


def test_metrics_sum_the_workers_and_show_the_callers_tenant_only(demo_serve: tuple[int, str, Path]) -> None:
    port, key, home = demo_serve  # its home had an earlier run's series (`demo_serve`)
    base = f"http://127.0.0.1:{port}"
    mine = {"Authorization": f"Bearer {key}"}
    # The server is shared: the counts are those of a deployment of this test's own.
    made = http("POST", f"{base}/api/v1/deployments", json={"name": "iris-metered", "policy": {"kind": "single", "model": "iris", "version": 1}}, headers=mine)
    assert made.status_code == 201, made.text
    # Another tenant, with a deployment of its own, straight in the shared registry.
    other = Container.from_settings(Settings(mode="local", home=home))
    globex = Principal("globex", frozenset({"admin", "predict"}), "test")
    install_demo(other, globex, MODELS)
    other.deployments.create(globex, "globex-secret", {"kind": "single", "model": "iris", "version": 1})
    _, globex_key = other.keys.create("globex", ["admin", "predict"])
    theirs = {"Authorization": f"Bearer {globex_key}"}
    predict_only = http("POST", f"{base}/api/v1/keys", json={"name": "predict only", "scopes": ["predict"]}, headers=mine)
    assert predict_only.status_code == 201, predict_only.text

    # A fresh connection per call: the kernel hands them to both workers.
    sent = 0
    while sent < 20 or len(workers_counting(home, "iris-metered")) < 2:
        r = http("POST", f"{base}/api/v1/predictions", json={"deployment": "iris-metered", "features": SETOSA}, headers=mine)
        assert r.status_code == 200, r.text
        sent += 1
        assert sent < 400, "one worker answered every connection"
        if sent >= 20:  # the workers' tallies reach their files within FLUSH_S
            time.sleep(FLUSH_S / 20)
    for _ in range(3):
        r = http("POST", f"{base}/api/v1/predictions", json={"deployment": "globex-secret", "features": SETOSA}, headers=theirs)
        assert r.status_code == 200, r.text
    assert "1" not in workers_writing(home)

    scraped(base, mine, "ml_inference_requests_total", sent, tenant="default", deployment="iris-metered")
    for _ in range(6):  # whichever worker answers the scrape, the sums are the same
        r = http("GET", f"{base}/metrics", headers=mine)
        assert r.status_code == 200, r.text
        text = r.text
        assert value(text, "ml_inference_requests_total", tenant="default", deployment="iris-metered") == sent
        assert value(text, "ml_inference_latency_ms_count", tenant="default", deployment="iris-metered", model="iris") == sent
        assert value(text, "ml_inference_latency_ms_bucket", tenant="default", deployment="iris-metered", le="+Inf") == sent
        assert value(text, "ml_inference_rows_scored_total", tenant="default", deployment="iris-metered") == sent
        assert "globex" not in text

    seen = scraped(base, theirs, "ml_inference_requests_total", 3, tenant="globex", deployment="globex-secret")
    assert value(seen, "ml_inference_requests_total", tenant="globex", deployment="globex-secret") == 3
    assert 'tenant="default"' not in seen and 'deployment="iris' not in seen

    assert http("GET", f"{base}/metrics").status_code == 401
    refused = http("GET", f"{base}/metrics", headers={"Authorization": f"Bearer {predict_only.json()['key']}"})
    assert refused.status_code == 403
