"""`sluice stream --deployment D`: JSON Lines in on stdin, predictions out on stdout, the local
twin of the stream Lambda (the same core: `sluice.stream`).

Lines are gathered into micro-batches, flushed at `--batch-lines` lines or when the first line
of a batch has waited `--max-wait-ms` (so a slow producer still gets answers promptly, and a
fast pipe is scored in large calls). Every input line gives exactly one output line: a
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


def read_batches(fd: int, lines_per_batch: int, max_wait_s: float) -> Iterator[list[bytes]]:
    """Lines of `fd` in batches of at most `lines_per_batch`, a partial batch flushed once its
    first line has waited `max_wait_s`."""
    rest, pending = b"", []
    deadline = 0.0
    while True:
        if pending:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                yield pending
                pending = []
                continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            if rest.strip():
                pending.append(rest)
            while pending:
                yield pending[:lines_per_batch]
                pending = pending[lines_per_batch:]
            return
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        if lines and not pending:
            deadline = time.monotonic() + max_wait_s
        pending.extend(lines)
        while len(pending) >= lines_per_batch:
            yield pending[:lines_per_batch]
            pending = pending[lines_per_batch:]
            deadline = time.monotonic() + max_wait_s


def cmd_stream(args: argparse.Namespace) -> int:
    from sluice.settings import get_settings

    settings = get_settings()
    lines_per_batch = args.batch_lines or settings.stream_batch_rows
    wait_s = (settings.stream_max_wait_ms if args.max_wait_ms is None else args.max_wait_ms) / 1000
    workers = args.workers or os.cpu_count() or 1
    batches = read_batches(sys.stdin.fileno(), lines_per_batch, wait_s)
    job = (args.tenant, args.deployment, lines_per_batch)
    seen = errors = gave_up = 0
    stdout = sys.stdout.buffer
    with _scorers(job, workers) as score:
        for lines, (data, failed, dropped) in score(_numbered(batches)):
            stdout.write(data)
            stdout.flush()
            seen, errors, gave_up = seen + lines, errors + failed, gave_up + dropped
    if not args.quiet:
        print(f"{seen} lines: {seen - errors - gave_up} predictions, {errors + gave_up} errors", file=sys.stderr)
    return 1 if gave_up else 0


Scored = tuple[bytes, int, int]  # the batch's output lines, its errors, its lines given up on


def _numbered(batches: Iterator[list[bytes]]) -> Iterator[tuple[int, list[bytes]]]:
    first = 1
    for batch in batches:
        yield first, batch
        first += len(batch)


@contextmanager
def _scorers(job: tuple[str, str, int], workers: int) -> Iterator[Any]:
    """A function from numbered batches to (lines, scored) in input order: this process alone
    with one worker; with several, worker processes that each hold a container and score
    whole batches, while this one only reads the pipe and writes the answers in order."""
    if workers <= 1:
        scorer = BatchScorer(*job)
        try:
            yield lambda numbered: ((len(lines), scorer(first, lines)) for first, lines in numbered)
        finally:
            scorer.finish()
        return
    import multiprocessing

    # Forked before this process builds a container, opens a database or starts a thread, so
    # each worker starts from a clean interpreter with sluice already imported; elsewhere spawned.
    context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    in_flight = threading.BoundedSemaphore(2 * workers)  # a fast pipe is not read ahead into memory
    pool = context.Pool(workers, initializer=_start_worker, initargs=job)

    def bounded(numbered: Iterator[tuple[int, list[bytes]]]) -> Iterator[tuple[int, list[bytes]]]:
        for item in numbered:
            in_flight.acquire()
            yield item

    def score(numbered: Iterator[tuple[int, list[bytes]]]) -> Iterator[tuple[int, Scored]]:
        for lines, scored in pool.imap(_score_in_worker, bounded(numbered)):
            in_flight.release()
            yield lines, scored

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
        self.scorer = StreamScorer(self.container.stream_predictions, tenant, deployment, batch_rows=batch_rows)

    def __call__(self, first: int, lines: list[bytes]) -> Scored:
        from sluice.services.loop import run
        from sluice.stream.records import StreamRecord
        from sluice.stream.run import gc_paused, process
        from sluice.stream.sinks import FileSink

        buffer = io.BytesIO()
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
        return buffer.getvalue(), errors, len(retry)

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


def _score_in_worker(item: tuple[int, list[bytes]]) -> tuple[int, Scored]:
    first, lines = item
    if not isinstance(_worker, BatchScorer):
        raise _worker or RuntimeError("the worker has no scorer")
    return len(lines), _worker(first, lines)


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
