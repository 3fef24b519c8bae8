"""Baselines from a batch job's input and from a window of captured requests, and a window
of traffic recomputed from capture with every row sketched, on the demo's iris through the
API and the CLI; another tenant's job is not found, and capture off is said."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

import pytest

from tests.integration.conftest import auth, run_cli
from tests.integration.test_monitoring import BASE, iris_rows, predict

if TYPE_CHECKING:
    from pathlib import Path

    from fastapi.testclient import TestClient

    from sluice.domain import Principal
    from sluice.wiring import Container

HEADER = "sepal_length,sepal_width,petal_length,petal_width\n"


def _csv(path: Path, rows: list[list[float]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


def _sketched(column: dict[str, object]) -> int:
    """How many values a stored KLL sketch took."""
    from datasketches import kll_doubles_sketch, kll_floats_sketch

    kind = kll_doubles_sketch if column.get("numbers") == "f64" else kll_floats_sketch
    return kind.deserialize(base64.b64decode(column["sketch"])).n  # type: ignore[arg-type]


def test_a_baseline_from_a_batch_jobs_input_reads_it_as_the_job_does(client: TestClient, keys: dict[str, str], demo: Container, acme: Principal) -> None:
    inbox = demo.settings.home_path / "batch" / "inbox" / "acme"
    rows = iris_rows(700, 3)
    _csv(inbox / "iris" / "train.csv", [*rows[:350], ["x", 1, 2, 3], *rows[350:]])  # a row the job would refuse
    job = demo.batch.submit(acme, deployment="iris", input_uri=demo.batch_paths.inbox("acme") + "iris/train.csv", start=False)
    r = client.put(f"{BASE}/baseline", json={"job": job.id}, headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["rows"] == 700 and got["source"] == f"job {job.id}"  # the refused row skipped
    assert got["columns"]["petal_length"]["count"] == 700 and "output_label" in got["columns"]
    assert client.put(f"{BASE}/baseline", json={"job": job.id, "limit": 100}, headers=auth(keys["acme"])).json()["rows"] == 100
    # Another tenant's job, or none, is not found; two sources at once are refused.
    r = client.put("/api/v1/deployments/iris/baseline", json={"job": job.id}, headers=auth(keys["globex"]))
    assert r.status_code == 404, r.text
    r = client.put(f"{BASE}/baseline", json={"job": "no-such-job"}, headers=auth(keys["acme"]))
    assert r.status_code == 404, r.text
    r = client.put(f"{BASE}/baseline", json={"job": job.id, "inputs": rows[:5]}, headers=auth(keys["acme"]))
    assert r.status_code == 422 and "one of inputs, batch, job or capture" in r.text


def test_a_baseline_and_windows_from_capture_sketch_every_captured_row(client: TestClient, keys: dict[str, str], demo: Container, acme: Principal) -> None:
    key = keys["acme"]
    r = client.put(f"{BASE}/baseline", json={"capture": {"since": "1h"}}, headers=auth(key))
    assert r.status_code == 400 and r.json()["field"] == "capture", r.text  # nothing captured yet
    demo.deployments.update(acme, "iris", None, capture={"sample_percent": 100, "redact": ["sepal_width"]})  # revision 2
    predict(client, key, iris_rows(1200, 0))
    assert demo.capture is not None and demo.capture.drain()
    r = client.put(f"{BASE}/baseline", json={"capture": {"since": "1h"}}, headers=auth(key))
    assert r.status_code == 200, r.text
    base = r.json()
    assert base["rows"] == 1200 and base["source"].startswith("capture ") and base["capture"]["records"] == 12
    assert "sepal_width" not in base["columns"]  # redacted: not read as missing values
    assert base["columns"]["output_label"]["count"] == 1200  # the answers the requests got

    demo.deployments.update(acme, "iris", None, capture={"sample_percent": 100})  # revision 3
    predict(client, key, iris_rows(3000, 1, shift=1.5))
    assert demo.capture.drain()
    profiled = client.get(f"{BASE}/monitor", headers=auth(key)).json()
    exact = client.get(f"{BASE}/monitor?source=capture", headers=auth(key)).json()
    assert exact["source"] == "capture" and exact["revision"] == 3
    window, sampled = exact["windows"][0], profiled["windows"][0]
    assert window["rows"] == sampled["rows"] == 3000
    assert window["verdict"] == "alert" and window["worst"][0] == "petal_length"
    # Every captured row in the sketches; the request path sketched a sample of its fold.
    stored = demo.registry.read_profiles("acme", "iris", 3)
    assert sum(_sketched(doc["columns"]["petal_length"]) for _, _, doc in stored) == 1024
    profile, counts = demo.monitor._captured("acme", "iris", window["window_start"], window["window_end"], revision=3)
    assert counts == {"records": 30, "rows": 3000, "skipped_rows": 0}
    assert profile.columns["petal_length"].sketch.n == 3000
    assert client.get(f"{BASE}/monitor?source=capture&revision=2", headers=auth(key)).json()["windows"][0]["rows"] == 1200
    assert client.get(f"{BASE}/monitor?source=disk", headers=auth(key)).status_code == 422


def test_the_cli_takes_a_baseline_from_a_job_and_checks_windows_from_capture(cli_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import MODELS

    assert run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0
    assert run_cli(capsys, "deployments", "create", "iris", "--model", "iris")[0] == 0
    data = _csv(tmp_path / "train.csv", iris_rows(600, 5))
    from sluice.cli import pieces
    from sluice.domain import Principal

    operator = Principal("default", frozenset({"admin", "predict"}), "cli")  # as `sluice batch submit` makes it, not started
    job_id = pieces.batch().submit(operator, deployment="iris", input_uri=str(data), operator=True, source="cli", start=False).id
    code, out, err = run_cli(capsys, "monitor", "baseline", "iris", "--from-job", job_id)
    assert code == 0, err
    assert f"600 rows from job {job_id}" in out
    code, out, err = run_cli(capsys, "monitor", "status", "iris", "--from-capture")
    assert code == 0, err
    assert "no traffic captured" in out
    code, _, err = run_cli(capsys, "monitor", "baseline", "iris", "--from-capture", "--since", "2h")
    assert code != 0 and "[capture]" in err

    import time

    from sluice.domain.values import isoformat
    from sluice.services.monitor_results import MonitorResults

    batch, closed = pieces.batch(), pieces.monitor().closed("default", "iris", at=time.time())
    assert closed is not None and batch.files is not None
    MonitorResults(pieces.monitor(), batch.files, batch.paths.root).write("default", closed)  # as `sluice serve` closes it
    code, out, err = run_cli(capsys, "monitor", "history", "iris", "--since", "3h")
    assert code == 0, err
    assert isoformat(closed["window_start"]) in out
    code, _, err = run_cli(capsys, "monitor", "history", "iris", "--since", "yesterday")
    assert code != 0 and "since" in err


def test_the_local_closer_writes_each_ended_windows_result_to_the_batch_folder(demo: Container, acme: Principal) -> None:
    import json
    import time

    import numpy as np

    from sluice.monitor.sketches import Profile
    from sluice.services.monitor_results import MonitorResults, WindowCloser

    rng = np.random.default_rng(4)

    def profile(shift: float, rows: int) -> dict[str, object]:
        made = Profile(rows)
        made.add("input", iter({"petal_length": rng.normal(3.7 + shift, 0.5, rows), "sepal_width": rng.normal(3, 0.5, rows)}.items()))
        return made.to_dict()

    demo.registry.put_baseline("acme", "iris", {"deployment": "iris", "revision": 1, **profile(0.0, 5000)})
    at = time.time()
    closer = WindowCloser(MonitorResults(demo.monitor, demo.batch_files(), demo.batch_paths.root), grace_s=120, clock=lambda: at)
    ended = demo.monitor.window_before(at - 120)
    demo.registry.add_profile("acme", "iris", 1, "", ended, profile(1.0, 1000))
    closer.look()
    folder = demo.settings.home_path / "batch" / "monitor" / "acme" / "iris"
    (written,) = folder.iterdir()
    assert written.name == time.strftime("%Y-%m-%dT%H%M%SZ.json", time.gmtime(ended))
    doc = json.loads(written.read_text())
    assert doc["window_start"] == ended and doc["check"]["rows"] == 1000 and doc["check"]["worst"] == ["petal_length"]
    assert written.stat().st_mode & 0o077 == 0  # owner-only, as everything sluice writes on the machine
    written.unlink()
    assert closer.look() == [] and not any(folder.iterdir())  # that window is written once
