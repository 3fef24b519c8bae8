"""`sluice stream --deployment D`: JSON Lines in on stdin, predictions out on stdout, the local
twin of the stream Lambda (the same core: `sluice.stream`).

Lines are read in blocks of about a mebibyte, handed on once that large or when the first line
of a block has waited `--max-wait-ms` (so a slow producer still gets answers promptly, and a
fast pipe is scored in large calls), and scored `--batch-lines` at a time. Every input line gives exactly one output line: a
prediction, or `{"error": …}` for a line that can never succeed. A transient failure is
retried a few times; a line that still fails is written as an error with `"retryable": true`
and the exit status is 1.
"""

from __future__ import annotations

import io
import os
import select
import sys
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sluice.cli.common import count, get_container

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator

RETRIES = (0.2, 1.0, 3.0)  # seconds before each new try of a transient failure


BLOCK_BYTES = 1 << 20  # what one read takes, and about what one worker is handed at a time


def read_blocks(fd: int, max_wait_s: float, block_bytes: int = BLOCK_BYTES) -> Iterator[bytes]:
    """Whole lines of `fd` in blocks of about `block_bytes`: a block goes once it is that large,
    or once its first line has waited `max_wait_s` (a slow producer still gets answers). The
    lines stay one `bytes`: splitting them is the scorer's work, in whichever process scores."""
    pending, rest = b"", b""
    deadline = 0.0
    while True:
        if pending:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                yield pending
                pending = b""
                continue
        chunk = os.read(fd, block_bytes)
        if not chunk:
            tail = pending + rest if rest.strip() else pending  # a last line without its newline
            if tail:
                yield tail
            return
        data = rest + chunk
        cut = data.rfind(b"\n") + 1
        rest = data[cut:]
        if not cut:
            continue
        if not pending:
            deadline = time.monotonic() + max_wait_s
        pending += data[:cut]
        if len(pending) >= block_bytes:
            yield pending
            pending = b""


def lines_of(block: bytes) -> list[bytes]:
    lines = block.split(b"\n")
    if lines[-1] == b"":  # the newline that ends the block
        lines.pop()
    return lines


def cmd_stream(args: argparse.Namespace) -> int:
    from sluice.settings import get_settings

    settings = get_settings()
    lines_per_batch = args.batch_lines or settings.stream_batch_rows
    wait_s = (settings.stream_max_wait_ms if args.max_wait_ms is None else args.max_wait_ms) / 1000
    workers = args.workers or os.cpu_count() or 1
    blocks = read_blocks(sys.stdin.fileno(), wait_s)
    job = (args.tenant, args.deployment, lines_per_batch)
    seen = errors = gave_up = 0
    stdout = sys.stdout.buffer
    with _scorers(job, workers) as score:
        for data, lines, failed, dropped in score(_numbered(blocks)):
            stdout.write(data)
            stdout.flush()
            seen, errors, gave_up = seen + lines, errors + failed, gave_up + dropped
    if not args.quiet:
        print(f"{seen} lines: {seen - errors - gave_up} predictions, {errors + gave_up} errors", file=sys.stderr)
    return 1 if gave_up else 0


Scored = tuple[bytes, int, int, int]  # a block's output lines; its lines, errors and lines given up on


def _numbered(blocks: Iterator[bytes]) -> Iterator[tuple[int, bytes]]:
    """Each block with the number of its first line (counted in C: no line is split here)."""
    first = 1
    for block in blocks:
        yield first, block
        first += block.count(b"\n") + (not block.endswith(b"\n"))


@contextmanager
def _scorers(job: tuple[str, str, int], workers: int) -> Iterator[Any]:
    """A function from numbered blocks to their answers in input order: this process alone
    with one worker; with several, worker processes that each hold a container and score
    whole blocks, while this one only reads the pipe and writes the answers in order."""
    if workers <= 1:
        scorer = BatchScorer(*job)
        try:
            yield lambda numbered: (scorer(first, block) for first, block in numbered)
        finally:
            scorer.finish()
        return
    import multiprocessing

    # Forked before this process builds a container, opens a database or starts a thread, so
    # each worker starts from a clean interpreter with sluice already imported; elsewhere spawned.
    context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    in_flight = threading.BoundedSemaphore(2 * workers)  # a fast pipe is not read ahead into memory
    pool = context.Pool(workers, initializer=_start_worker, initargs=job)

    def bounded(numbered: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, bytes]]:
        for item in numbered:
            in_flight.acquire()
            yield item

    def score(numbered: Iterator[tuple[int, bytes]]) -> Iterator[Scored]:
        for scored in pool.imap(_score_in_worker, bounded(numbered)):
            in_flight.release()
            yield scored

    try:
        yield score
        pool.close()  # each worker drains its mirror and flushes its statistics as it exits
        pool.join()
    finally:
        pool.terminate()


class BatchScorer:
    """One process's share: its container, the stream core, and the retries of a batch."""

    def __init__(self, tenant: str, deployment: str, batch_rows: int) -> None:
        from sluice.stream.core import StreamScorer

        self.container = get_container()
        self.batch_rows = batch_rows
        self.scorer = StreamScorer(self.container.stream_predictions, tenant, deployment, batch_rows=batch_rows)

    def __call__(self, first: int, block: bytes) -> Scored:
        """Score a block's lines, `lines_per_batch` at a time: (output, lines, errors, given up)."""
        buffer = io.BytesIO()
        lines = lines_of(block)
        errors = gave_up = 0
        for at in range(0, len(lines), self.batch_rows):
            failed, dropped = self._batch(first + at, lines[at : at + self.batch_rows], buffer)
            errors, gave_up = errors + failed, gave_up + dropped
        return buffer.getvalue(), len(lines), errors, gave_up

    def _batch(self, first: int, lines: list[bytes], buffer: io.BytesIO) -> tuple[int, int]:
        from sluice.inference.loop import run
        from sluice.stream.records import StreamRecord
        from sluice.stream.run import gc_paused, process
        from sluice.stream.sinks import FileSink

        out = FileSink(buffer)
        # A trailing \r (CRLF files) is JSON whitespace: the line is parsed as it is.
        with gc_paused():
            records = [StreamRecord(line, "stdin", n, {"line": n}) for n, line in enumerate(lines, first)]
        errors = 0
        for pause in (*RETRIES, None):
            outcomes = run(process(self.scorer, records, out))
            errors += sum(1 for o in outcomes if o.retry is None and o.failed)
            retry = [(r, o.retry) for r, o in zip(records, outcomes, strict=True) if o.retry is not None]
            if not retry or pause is None:
                break
            time.sleep(pause)
            records = [r for r, _ in retry]
        if retry:
            out.write(records, [(n, _gave_up(r, why)) for n, (r, why) in enumerate(retry)])
        return errors, len(retry)

    def finish(self) -> None:
        self.container.mirror.drain()  # type: ignore[union-attr]
        if self.container.capture is not None:
            self.container.capture.drain()
        self.container.predictions.stats.flush()


_worker: BatchScorer | Exception | None = None


def _start_worker(tenant: str, deployment: str, batch_rows: int) -> None:
    from multiprocessing.util import Finalize

    global _worker
    try:
        _worker = BatchScorer(tenant, deployment, batch_rows)
    except Exception as exc:  # a failed initializer would be restarted forever: keep it for the first batch
        _worker = exc
        return
    Finalize(_worker, _worker.finish, exitpriority=10)  # run as the worker exits after the pool closes


def _score_in_worker(item: tuple[int, bytes]) -> Scored:
    if not isinstance(_worker, BatchScorer):
        raise _worker or RuntimeError("the worker has no scorer")
    return _worker(*item)


def _gave_up(record: Any, why: str | None) -> dict[str, Any]:
    from sluice.stream.core import record_id

    return {"id": record_id(record.body), "source": record.position, "error": why, "code": "unavailable", "retryable": True}


def add_stream_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    stream = sub.add_parser("stream", help="score JSON Lines from stdin to stdout, micro-batched")
    stream.add_argument("--deployment", required=True, help="the deployment that scores every line")
    stream.add_argument("--batch-lines", type=count, default=0, help="lines per micro-batch at most (default: SLUICE_STREAM_BATCH_ROWS)")
    stream.add_argument("--max-wait-ms", type=float, help="flush a partial batch after this long (default: SLUICE_STREAM_MAX_WAIT_MS)")
    stream.add_argument("--workers", type=count, default=0, help="processes that score batches at once (default: one per core)")
    stream.add_argument("--quiet", action="store_true", help="no summary on stderr")
    stream.set_defaults(func=cmd_stream)
