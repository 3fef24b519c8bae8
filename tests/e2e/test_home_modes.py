"""The home is its owner's alone: a tour of `sluice serve --demo` on a fresh home, started
under umask 0 (the most open a shell can be), then every folder beneath the home must be 0700
and every file 0600, whichever process wrote it (the server, its two workers, the batch
threads) and whatever wrote it (sluice, SQLite, pyarrow, the metrics client)."""

from __future__ import annotations

import json
import os
import stat
import time
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import MODELS
from tests.e2e.conftest import running_sluice
from tests.support import http

if TYPE_CHECKING:
    from pathlib import Path

SETOSA = {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}
ROWS = "sepal_length,sepal_width,petal_length,petal_width\n5.1,3.5,1.4,0.2\n6.7,3.0,5.2,2.3\n"


def offenders(home: Path) -> list[str]:
    """Every entry beneath the home (the home included) that is not owner-only: folders must
    be 0700, files 0600; anything else (a link, a socket) is named too."""
    found = []
    for entry in [home, *sorted(home.rglob("*"))]:
        info = entry.lstat()
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISDIR(info.st_mode):
            wanted = 0o700
        elif stat.S_ISREG(info.st_mode):
            wanted = 0o600
        else:
            found.append(f"{entry.relative_to(home.parent)}: not a file or folder ({stat.filemode(info.st_mode)})")
            continue
        if mode != wanted:
            found.append(f"{entry.relative_to(home.parent)}: {mode:04o}, not {wanted:04o}")
    return found


def _user_file(path: Path, data: str) -> None:
    """A file the user puts in an inbox: theirs, owner-only, so only what sluice writes is judged."""
    for folder in reversed([p for p in path.parents if not p.exists()]):
        folder.mkdir(mode=0o700)
        folder.chmod(0o700)
    path.write_text(data)
    path.chmod(0o600)


def _until(what: str, check: Any, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    pytest.fail(f"gave up waiting for {what}")


def _jobs_done(base: str, h: dict[str, str], count: int) -> list[dict[str, Any]] | None:
    jobs = http("GET", f"{base}/api/v1/batch-jobs", headers=h).json()
    done = [j for j in jobs if j["status"] in ("SUCCEEDED", "FAILED")]
    return jobs if len(done) >= count and len(jobs) == len(done) else None


def tour(base: str, key: str, home: Path) -> None:
    h = {"Authorization": f"Bearer {key}"}
    # predictions, simple JSON and v2
    r = http("POST", f"{base}/api/v1/predictions", json={"deployment": "iris", "features": SETOSA}, headers=h)
    assert r.status_code == 200, r.text
    v2 = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 10], "data": [0.01] * 10}]}
    assert http("POST", f"{base}/v2/models/diabetes/infer", json=v2, headers=h).status_code == 200
    # a model pushed, a deployment pointed at it with capture on, captured requests
    pushed = http("POST", 
        f"{base}/api/v1/models/iris/versions",
        content=(MODELS / "iris_forest.onnx").read_bytes(),
        headers={**h, "content-type": "application/octet-stream"},
    )
    assert pushed.status_code == 201, pushed.text
    capture = {"model": "iris", "version": pushed.json()["version"], "capture": {"sample_percent": 100}}
    assert http("PUT", f"{base}/api/v1/deployments/iris", json=capture, headers=h).status_code == 200

    def captured() -> list[Path]:
        for _ in range(5):
            http("POST", f"{base}/api/v1/predictions", json={"deployment": "iris", "features": SETOSA}, headers=h)
        return list((home / "capture").rglob("*.jsonl")) if (home / "capture").exists() else []

    _until("captured requests", captured)
    # an upload, its body, a prediction from it whose answer is kept as a result
    body = json.dumps({"batch": [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]]}).encode()
    upload = http("POST", f"{base}/api/v1/uploads", json={"deployment": "iris", "size": len(body)}, headers=h).json()
    posted = http("POST", upload["url"], data=upload["fields"], files={"file": ("body", body, "application/octet-stream")})
    assert posted.status_code == 204, posted.text
    kept = http("POST", f"{base}/api/v1/predictions", json={"deployment": "iris", "upload_id": upload["upload_id"]}, headers=h)
    assert kept.status_code == 303, kept.text
    assert http("GET", f"{base}{kept.headers['location']}", headers=h).status_code == 200
    # a key made and revoked (the revocation marker)
    made = http("POST", f"{base}/api/v1/keys", json={"name": "short-lived"}, headers=h)
    assert made.status_code == 201, made.text
    assert http("DELETE", f"{base}/api/v1/keys/{made.json()['key_id']}", headers=h).status_code == 200
    # a batch job through the watched inbox (the server's own thread) and one through the API
    # (a worker's), Parquet out: pyarrow writes the parts
    _user_file(home / "inbox" / "iris" / "rows.csv", ROWS)
    given = home / "batch" / "inbox" / "default" / "iris" / "rows.csv"
    _user_file(given, ROWS)
    job = http("POST", 
        f"{base}/api/v1/batch-jobs", json={"deployment": "iris", "input_uri": given.as_uri(), "output_format": "parquet"}, headers=h
    )
    assert job.status_code == 202, job.text
    jobs = _until("two batch jobs", lambda: _jobs_done(base, h, 2))
    assert {j["status"] for j in jobs} == {"SUCCEEDED"}, jobs
    # schedules
    for name, expression in (("nightly", "cron(0 2 * * *)"), ("hourly", "rate(1 hours)")):
        schedule = {"name": name, "deployment": "iris", "input_uri": (home / "batch/inbox/default/iris/{date}.csv").as_uri(), "expression": expression}
        made = http("POST", f"{base}/api/v1/batch-schedules", json=schedule, headers=h)
        assert made.status_code == 201, made.text


def test_everything_under_a_fresh_home_is_owner_only(tmp_path: Path) -> None:
    home = tmp_path / "home"  # missing: sluice makes it
    env = {
        **os.environ,
        "SLUICE_MAX_RESPONSE_BYTES": "64",  # a prediction from an upload is kept as a result
        "SLUICE_BATCH_INBOX_POLL_S": "0.2",
    }
    with running_sluice(home, env, "--demo", "--workers", "2", umask=0) as (port, key):
        tour(f"http://127.0.0.1:{port}", key, home)
    for part in ("registry.db", "registry.revoked", "admin-key", "artifacts/tenants", "artifacts/uploads", "artifacts/results", "capture", "batch/outbox", "metrics"):
        assert (home / part).exists(), f"the tour wrote no {part}"
    assert not offenders(home), "\n".join(offenders(home))


def test_a_home_open_to_others_is_made_owner_only_at_start(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o755)  # as an older sluice made it
    with running_sluice(home, dict(os.environ), "--workers", "1"):
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
