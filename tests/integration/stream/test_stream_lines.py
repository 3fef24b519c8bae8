"""A line is a record, for `sluice stream` and a batch job alike (`sluice.codecs.lines`): the
same bytes give the same lines, the same scored lines and the same failed ones, through the
real pipe and through a real batch job. A byte order mark opens the input without being part
of line 1; whatever follows the last newline is a line, blank or not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import REPO
from tests.integration.batch.jobs import read_errors, run_job
from tests.integration.stream.conftest import SETOSA

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.settings import Settings
    from sluice.wiring import Container

BOM = b"\xef\xbb\xbf"  # UTF-8's byte order mark
GOOD = object()  # a line each reader scores: its own shape of the same flower
STREAM_GOOD = json.dumps({"id": "ok", "features": SETOSA}).encode()
BATCH_GOOD = json.dumps({"id": "ok", **SETOSA}).encode()

# (the input, with GOOD where a good line goes; the lines; which of them (1-based) fail)
CASES: dict[str, tuple[list[Any], int, list[int]]] = {
    "a BOM before line 1": ([BOM, GOOD, b"\n", GOOD, b"\n"], 2, []),
    "a BOM and a bad line": ([BOM, GOOD, b"\n{broken\n", GOOD, b"\n"], 3, [2]),
    "a BOM anywhere else is a byte": ([GOOD, b"\n", BOM, GOOD, b"\n"], 2, [2]),
    "a BOM alone": ([BOM], 0, []),
    "a blank fragment after the last newline": ([GOOD, b"\n", GOOD, b"\n   "], 3, [3]),
    "a carriage return after the last newline": ([GOOD, b"\n", GOOD, b"\n\r"], 3, [3]),
    "a blank line inside": ([GOOD, b"\n\n", GOOD, b"\n"], 3, [2]),
    "a last line without its newline": ([GOOD, b"\n", GOOD], 2, []),
    "CRLF lines": ([GOOD, b"\r\n", GOOD, b"\r\n"], 2, []),
}


def _bytes(parts: list[Any], good: bytes) -> bytes:
    return b"".join(good if p is GOOD else p for p in parts)


def _streamed(env: dict[str, str], data: bytes) -> tuple[int, int, list[int]]:
    done = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "--tenant", "acme", "stream", "--deployment", "iris", "--workers", "1"],
        input=data, capture_output=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    outputs = [json.loads(line) for line in done.stdout.splitlines()]
    assert [o["source"]["line"] for o in outputs] == list(range(1, len(outputs) + 1))
    failed = [o["source"]["line"] for o in outputs if "error" in o]
    assert f"{len(outputs)} lines: {len(outputs) - len(failed)} predictions, {len(failed)} errors" in done.stderr.decode()
    return len(outputs), len(outputs) - len(failed), failed


def _batched(container: Container, acme: Principal, path: Path) -> tuple[int, int, list[int]]:
    job = run_job(container, acme, path, deployment="iris", key_columns=["id"])
    failed = sorted(e["row"] + 1 for e in read_errors(job)) if job.rows_failed else []
    assert job.rows_in == job.rows_out + job.rows_failed
    return job.rows_in, job.rows_out, failed


@pytest.mark.parametrize("case", list(CASES))
def test_stream_and_batch_count_the_same_lines_and_fail_the_same_ones(
    case: str, demo: Container, settings: Settings, acme: Principal, tmp_path: Path
) -> None:
    parts, lines, failing = CASES[case]
    env = {
        **os.environ,
        "SLUICE_HOME": str(settings.home_path),
        "PYTHONPATH": os.pathsep.join([str(REPO / "functions"), os.environ.get("PYTHONPATH", "")]),
    }
    path = tmp_path / "input.jsonl"
    path.write_bytes(_bytes(parts, BATCH_GOOD))

    streamed = _streamed(env, _bytes(parts, STREAM_GOOD))
    batched = _batched(demo, acme, path)

    assert streamed == batched == (lines, lines - len(failing), failing)
