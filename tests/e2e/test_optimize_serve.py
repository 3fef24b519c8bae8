"""An optimize job on a real `sluice serve --demo` with two workers (the one the e2e tests
share): whichever worker a poll reaches answers for the job, while it runs and once it is done."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from tests.integration.test_optimize import iris_rows
from tests.support import http

if TYPE_CHECKING:
    from pathlib import Path

QUICK = {"candidates": ["graph"], "seconds": 0.02, "tune": False, "calibration_rows": 50, "evaluation_rows": 50}


def test_every_worker_answers_for_an_optimize_job(demo_serve: tuple[int, str, Path]) -> None:
    port, key, home = demo_serve
    imports = home / "imports" / "default"
    imports.mkdir(parents=True, exist_ok=True)
    data = iris_rows(imports / "rows.csv", 120)
    base, mine = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {key}"}
    # The demo's iris, by number: the server is shared, and another test pushes a later version.
    started = http("POST", f"{base}/api/v1/models/iris/versions/1/optimize", json={"data_uri": data.as_uri(), **QUICK}, headers=mine, timeout=30)
    assert started.status_code == 202, started.text
    url = f"{base}/api/v1/optimize-jobs/{started.json()['id']}"
    # A fresh connection per poll: the kernel hands them to both workers.
    answers = []
    deadline = time.monotonic() + 120
    while len(answers) < 20 or answers[-1].json()["status"] == "RUNNING":
        assert time.monotonic() < deadline, "the optimize job did not finish"
        answers.append(http("GET", url, headers=mine, timeout=30))
        assert answers[-1].status_code == 200, f"poll {len(answers)}: {answers[-1].text}"
        time.sleep(0.05)
    done = answers[-1].json()
    assert done["status"] == "SUCCEEDED", done
    assert [r["candidate"] for r in done["report"]["candidates"]] == ["original", "graph"]
    finished = [a.json() for a in answers if a.json()["status"] != "RUNNING"]
    assert all(body == done for body in finished)  # every worker gives the same body
    missing = http("GET", f"{base}/api/v1/optimize-jobs/opt-0000000000000000", headers=mine)
    assert missing.status_code == 404 and missing.json()["field"] == "job_id"
