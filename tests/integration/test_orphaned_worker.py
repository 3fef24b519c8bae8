"""An HTTP worker of `sluice serve --workers N` whose `sluice serve` is killed (SIGKILL) while
the worker still starts up drains and exits as if told to stop, rather than keep the port from
a restart: its parent is the process that spawned it, not whatever adopted it by the time it
asked. (tests/integration/batch/test_batch_liveness.py kills a whole `sluice serve`.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from typing import TYPE_CHECKING

import pytest

from tests.conftest import REPO

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX signals and parent processes")

SUPERVISOR = """
import asyncio, multiprocessing, os, signal, sys, time


def worker(drained: str) -> None:
    # As uvicorn spawns `sluice serve`'s workers; the supervisor is gone before this one's
    # lifespan starts watching it.
    signal.signal(signal.SIGTERM, lambda *_: (open(drained, "w").close(), os._exit(0)))  # uvicorn's drain, here a mark
    from sluice.cli.serve import _end_with_parent

    while os.getppid() == multiprocessing.parent_process().pid:
        time.sleep(0.01)
    asyncio.run(_end_with_parent())


if __name__ == "__main__":
    child = multiprocessing.get_context("spawn").Process(target=worker, args=(sys.argv[1],))
    child.start()
    print(child.pid, flush=True)
    os._exit(0)  # as SIGKILL would: nothing stops the worker
"""


def test_a_worker_whose_server_died_while_it_started_drains_and_exits(tmp_path: Path) -> None:
    script = tmp_path / "supervisor.py"
    script.write_text(SUPERVISOR)
    drained = tmp_path / "drained"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "functions"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(script), str(drained)], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    worker = int(done.stdout)
    try:
        deadline = time.monotonic() + 60
        while not drained.exists():
            assert time.monotonic() < deadline, "the orphaned worker never saw its server gone"
            time.sleep(0.05)
    finally:
        with suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)
