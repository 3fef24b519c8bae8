"""What `sluice serve`'s supervising process imports: with several workers it parses the
arguments, reads the settings, claims the ports, runs the background work (inbox, schedules,
rollouts) and watches the workers, and each worker imports the app it serves. The supervisor
importing the app, FastAPI or the HTTP protocol too paid for them once more per start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

from tests.conftest import REPO

if TYPE_CHECKING:
    from pathlib import Path

# What serves HTTP, imported in the workers alone.
SERVING = ("fastapi", "starlette", "sluice.api.app", "sluice.cli.protocol", "uvicorn.protocols.http.httptools_impl", "aiohttp")

# `sluice serve --workers 2` up to where it would start its workers: the supervisor's run is
# replaced by a look at what the process has imported, then the command stops as on a signal.
PROBE = f"""
import json, sys
from sluice.cli import drain, main
drain.Supervisor.run = lambda self: print(json.dumps([m for m in {SERVING!r} if m in sys.modules]))
sys.exit(main(["serve", "--workers", "2", "--port", "0", "--grpc-port", "0"]))
"""


def test_the_supervisor_of_several_workers_imports_nothing_that_serves_http(tmp_path: Path) -> None:
    env = {**os.environ, "SLUICE_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO / "functions")}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [], done.stdout
