"""A line is a record, for `sluice stream` and a batch job alike (`sluice.codecs.lines`): the
same bytes give the same lines, the same scored lines and the same failed ones, through the
real pipe and through a real batch job. A byte order mark opens the input without being part
of line 1; whatever follows the last newline is a line, blank or not. `sluice stream` runs in
this process, on a real pipe."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import threading
from contextlib import redirect_stderr
from typing import TYPE_CHECKING, Any

import pytest

from tests.integration.batch.jobs import read_errors, run_job
from tests.integration.stream.conftest import SETOSA
from tests.support import cli_environment

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
    "a line nested past orjson's 1,024 levels": ([GOOD, b"\n", b'{"id": "deep", "a": ' + b"[" * 1100 + b"]" * 1100 + b"}\n", GOOD, b"\n"], 3, [2]),
    "a line nested 1,000 levels": ([GOOD, b"\n", b'{"id": "deep", "a": ' + b'{"a": ' * 999 + b"1" + b"}" * 999 + b"}\n", GOOD, b"\n"], 3, [2]),
}


def _bytes(parts: list[Any], good: bytes) -> bytes:
    return b"".join(good if p is GOOD else p for p in parts)


def _streamed(data: bytes, out: Path) -> tuple[int, int, list[int]]:
    """`sluice stream --workers 1` in this process (the `sluice` command's `main`), its stdin a
    real pipe that a thread writes `data` into and closes, its stdout the file `out`."""
    from sluice import cli

    read, write = os.pipe()
    writer = threading.Thread(target=_write_all, args=(write, data))
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}  # the command sets its own
    stderr = io.StringIO()
    saved = sys.stdin, sys.stdout
    with os.fdopen(read, "rb") as stdin, out.open("w+", encoding="utf-8") as stdout, redirect_stderr(stderr):
        sys.stdin, sys.stdout = stdin, stdout  # type: ignore[assignment]
        writer.start()
        try:
            code = cli.main(["--tenant", "acme", "stream", "--deployment", "iris", "--workers", "1"])
        finally:
            sys.stdin, sys.stdout = saved
            writer.join()
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
    assert code == 0, stderr.getvalue()
    outputs = [json.loads(line) for line in out.read_bytes().splitlines()]
    assert [o["source"]["line"] for o in outputs] == list(range(1, len(outputs) + 1))
    failed = [o["source"]["line"] for o in outputs if "error" in o]
    assert f"{len(outputs)} lines: {len(outputs) - len(failed)} predictions, {len(failed)} errors" in stderr.getvalue()
    return len(outputs), len(outputs) - len(failed), failed


def _write_all(fd: int, data: bytes) -> None:
    with os.fdopen(fd, "wb") as pipe:
        pipe.write(data)


def _batched(container: Container, acme: Principal, path: Path) -> tuple[int, int, list[int]]:
    job = run_job(container, acme, path, deployment="iris", key_columns=["id"])
    failed = sorted(e["row"] + 1 for e in read_errors(job)) if job.rows_failed else []
    assert job.rows_in == job.rows_out + job.rows_failed
    return job.rows_in, job.rows_out, failed


@pytest.mark.parametrize("case", list(CASES))
def test_stream_and_batch_count_the_same_lines_and_fail_the_same_ones(
    case: str, demo: Container, settings: Settings, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts, lines, failing = CASES[case]
    path = tmp_path / "input.jsonl"
    path.write_bytes(_bytes(parts, BATCH_GOOD))

    with cli_environment(monkeypatch, settings.home_path, SLUICE_LOG_LEVEL="WARNING"):  # as `main` sets it in a process of its own
        streamed = _streamed(_bytes(parts, STREAM_GOOD), tmp_path / "streamed.jsonl")
    batched = _batched(demo, acme, path)

    assert streamed == batched == (lines, lines - len(failing), failing)
