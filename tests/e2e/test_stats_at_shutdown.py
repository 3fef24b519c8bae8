"""`sluice serve` (one worker, served on a thread of the command) stopped by SIGTERM writes the
statistics it still held: N requests answered, N counted. The timer is set far off, so only the
shutdown flush can write them. With several worker processes, tests/integration/test_drain.py
checks the same under a steady flow and a drain."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sluice.registry.sqlite import SqliteRegistry
from tests.conftest import REPO
from tests.e2e.conftest import sigterm_after, start_sluice
from tests.support import http

if TYPE_CHECKING:
    from pathlib import Path

SETOSA = {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}
N = 40


def test_the_counts_of_every_answered_request_are_written_at_sigterm(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {
        **os.environ,
        "SLUICE_STATS_FLUSH_S": "3600",
        "PYTHONPATH": os.pathsep.join([str(REPO / "functions"), os.environ.get("PYTHONPATH", "")]),
    }
    log = tmp_path / "serve.log"
    proc, port = start_sluice(home, env, ["serve", "--demo", "--workers", "1"], log=log)
    with sigterm_after(proc, log):
        url = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {(home / 'admin-key').read_text().strip()}"}
        for _ in range(N):
            r = http("POST", f"{url}/api/v1/predictions", json={"deployment": "iris", "features": SETOSA}, headers=headers, timeout=30)
            assert r.status_code == 200, r.text
    stats = SqliteRegistry(home / "registry.db").read_stats("default", "iris", 1)
    assert stats["deployment"]["requests"] == N, log.read_text()
