"""Whole records only: a JSON Lines append that fails partway (a real short write at a file
size limit, as at a full disk) leaves the file at its last whole line, so the next record
never continues a broken one and every record written reads back. Capture's folder sink and
the batch error files, in a process of their own under RLIMIT_FSIZE."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from sluice.capture.reader import FolderCapture
from tests.conftest import REPO

if TYPE_CHECKING:
    from pathlib import Path

# Writes batches of records until one fails at the size limit, lifts the limit, writes more;
# says which batches were written.
WRITER = r"""
import json, resource, signal, sys, time
from pathlib import Path
from sluice.batch.writers import ErrorWriter
from sluice.capture.sinks import FolderSink

root, limit = Path(sys.argv[1]), int(sys.argv[2])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
sink, errors = FolderSink(root / "capture"), ErrorWriter(root / "errors.jsonl")
stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())

def batch(n):
    return [{"tenant": "acme", "deployment": "iris", "time": stamp, "request_id": f"r{n}-{i}", "pad": "x" * 97} for i in range(7)]

written, failed, n = [], [], 0
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
while not failed:
    for write in (sink.write, errors.write):
        try:
            write(batch(n))
            written.append((write.__self__.__class__.__name__, n))
        except OSError:
            failed.append((write.__self__.__class__.__name__, n))
    n += 1
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
for m in range(n, n + 3):
    sink.write(batch(m))
    errors.write(batch(m))
    written += [("FolderSink", m), ("ErrorWriter", m)]
errors.close()
print(json.dumps({"written": written, "failed": failed}))
"""


def test_a_write_that_fails_partway_leaves_only_whole_lines(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(tmp_path), str(10_000)],  # ~1 KiB a batch: not a multiple of it
        env={**os.environ, "PYTHONPATH": str(REPO / "functions")}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["failed"], "no write met the limit"

    for kind, lines in (
        ("FolderSink", [json.dumps(r) for r in FolderCapture(tmp_path / "capture").records("acme", "iris", time.time() - 3600, time.time() + 60)]),
        ("ErrorWriter", (tmp_path / "errors.jsonl").read_text().splitlines()),
    ):
        records = [json.loads(line) for line in lines]  # every line whole JSON
        assert not [r for r in records if "unreadable" in r]
        batches = sorted({n for k, n in said["written"] if k == kind})
        assert [r["request_id"] for r in records] == [f"r{n}-{i}" for n in batches for i in range(7)], kind
