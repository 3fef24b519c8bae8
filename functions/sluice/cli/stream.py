"""`sluice stream --deployment D`: JSON Lines in on stdin, predictions out on stdout, the local
twin of the stream Lambda (the same core: `sluice.stream`).

Lines are read in blocks of about a mebibyte, handed on once that large or when the first line
of a block has waited `--max-wait-ms` (so a slow producer still gets answers promptly, and a
fast pipe is scored in large calls), and scored `--batch-lines` at a time. Every line read gives
exactly one output line: a prediction, or `{"error": …}` for a line that can never succeed. A
transient failure is retried a few times; a line that still fails is written as an error with
`"retryable": true` and the exit status is 1.

SIGTERM or SIGINT stops the reading: every line already read is still answered (in every
worker), the summary goes to stderr and the exit status is 128 + the signal's number. A second
signal exits at once, and the summary says how many lines read were left unaccounted for.
"""

from __future__ import annotations

import io
import os
import queue
import select
import signal
import sys
import threading
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from sluice.cli import pieces
from sluice.cli.common import count, worker_processes
from sluice.codecs.lines import lines_of

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterable, Iterator, Sequence
    from concurrent.futures import Future

    from sluice.stream.pipe import PipeReader
    from sluice.stream.records import StreamRecord

RETRIES = (0.2, 1.0, 3.0)  # seconds before each new try of a transient failure
STOPPED = "the stream stopped before the end of this line was read"
LOST = "the worker process scoring this line ended before answering"
WATCH_S = 0.25  # how often a wait for a worker's answer looks for a dead worker

Scored = tuple[bytes, int, int, int]  # a block's output lines; its lines, errors and lines given up on


def cmd_stream(args: argparse.Namespace) -> int:
    from sluice.settings import get_settings
    from sluice.stream.pipe import PipeReader

    settings = get_settings().stream
    lines_per_batch = args.batch_lines or settings.stream_batch_rows
    wait_s = (settings.stream_max_wait_ms if args.max_wait_ms is None else args.max_wait_ms) / 1000
    workers = args.workers or os.cpu_count() or 1
    tally = Tally(fd=sys.stdout.fileno())
    signals = Signals(lambda signum: _exit_at_once(signum, reader, tally, signals.workers))
    reader = PipeReader(sys.stdin.fileno(), wait_s, stop_fd=signals.fd)
    signals.install()
    job = (args.tenant, args.deployment, lines_per_batch)
    with _scorers(job, workers, signals) as score:
        for data, _, failed, dropped in score(reader):
            tally.write(data, failed + dropped, dropped)
    if reader.cut:  # the last line read, answered last
        tally.write(_error_lines(reader.lines, [reader.cut], STOPPED), 1, 1)
    if signals.first is not None or not args.quiet:
        print(tally.summary(reader.lines, signals.first), file=sys.stderr, flush=True)
    code = 1 if tally.gave_up else 0
    if signals.first is not None:
        code = 128 + signals.first
    if signals.lost:  # every line is accounted for; the pool's own threads may never end (`Workers`)
        sys.stdout.flush()
        os._exit(code)
    return code


@dataclass(slots=True)
class Tally:
    """What went to stdout: lines, error lines among them, and lines given up on among those."""

    written: int = 0  # whole lines on stdout, counted as they go (a second signal may cut a block)
    errors: int = 0
    gave_up: int = 0
    fd: int = 1

    def write(self, data: bytes, errors: int, gave_up: int) -> None:
        """A block's output lines, however many calls it takes: a write to a pipe that a signal
        interrupts returns what it wrote so far (a buffered writer's does too, and drops the rest)."""
        at = 0
        while at < len(data):
            wrote = os.write(self.fd, memoryview(data)[at:])
            self.written += data.count(b"\n", at, at + wrote)
            at += wrote
        self.errors, self.gave_up = self.errors + errors, self.gave_up + gave_up

    def summary(self, read: int, signum: int | None = None, *, at_once: bool = False) -> str:
        answers = f"{self.written - self.errors} predictions, {self.errors} errors"
        if signum is None:
            return f"{read} lines: {answers}"
        name = signal.Signals(signum).name
        if not at_once:
            return f"stopped by {name}: {read} lines read, {self.written} written ({answers})"
        return f"stopped at once by a second {name}: {read} lines read, {self.written} written, {read - self.written} unaccounted for"


class Signals:
    """The first SIGTERM or SIGINT makes `fd` readable for good: the reader stops, and so do the
    pauses between retries. A second calls `at_once`. Handlers only set state and write to a
    pipe: they may run while this thread holds any lock."""

    def __init__(self, at_once: Callable[[int], None]) -> None:
        self.first: int | None = None
        self.workers: list[int] = []  # the worker processes' ids: a second signal ends them
        self.lost = False  # a worker died: the process ends without waiting for the pool's threads
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._pid = os.getpid()
        self._at_once = at_once

    @property
    def fd(self) -> int:
        return self._read

    def install(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handle)

    def stop(self) -> None:
        """Stop reading, with or without a signal (the workers are gone)."""
        with suppress(BlockingIOError):
            os.write(self._write, b"\0")

    def _handle(self, signum: int, frame: object) -> None:
        if os.getpid() != self._pid:  # a forked worker, before it ignores signals
            return
        if self.first is None:
            self.first = signum
            self.stop()
            return
        self._at_once(signum)


def _exit_at_once(signum: int, reader: PipeReader, tally: Tally, workers: list[int]) -> None:
    os.write(2, (tally.summary(reader.lines, signum, at_once=True) + "\n").encode())
    _kill(workers)
    os._exit(128 + signum)


def _kill(workers: list[int]) -> None:
    """End worker processes now (they ignore SIGTERM)."""
    for pid in workers:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@contextmanager
def _scorers(job: tuple[str, str, int], workers: int, signals: Signals) -> Iterator[Callable[[Iterable[tuple[int, bytes]]], Iterator[Scored]]]:
    """A function from numbered blocks to their answers in input order: this process alone
    with one worker; with several, worker processes that each hold a container and score
    whole blocks, while this one only reads the pipe and writes the answers in order."""
    if workers <= 1:
        scorer = BatchScorer(*job, stop_fd=signals.fd)
        try:
            yield lambda numbered: (scorer(first, block) for first, block in numbered)
        finally:
            scorer.finish()
        return
    pool = Workers(job, workers, signals)
    try:
        yield pool.score
    except BaseException:
        pool.kill()
        raise
    pool.close()


class Workers:
    """Worker processes that score blocks, answered in input order. They ignore SIGTERM and
    SIGINT (a Ctrl-C reaches the whole process group): this process decides when they stop,
    once every block handed to them is answered. A worker that dies fails the lines it held,
    and every line after them, as retryable errors: nothing read goes unanswered.

    A worker killed while it sends an answer (an answer is a block's output, a mebibyte or so)
    leaves half a message in the pool's result pipe: the executor's thread then waits for the
    rest for ever, fails no future and would hold the process at exit. So a dead worker is
    watched for beside each answer (`_answer`), and a process that lost one ends with
    `os._exit` once every line is written (`cmd_stream`)."""

    def __init__(self, job: tuple[str, str, int], workers: int, signals: Signals) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # Forked before this process builds a container, opens a database or starts a thread, so
        # each worker starts from a clean interpreter with sluice already imported; elsewhere spawned.
        fork = sys.platform == "linux"
        context = multiprocessing.get_context("fork" if fork else "spawn")
        stop_fd = signals.fd if fork else None
        self.pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker, initargs=(*job, stop_fd))
        self.signals = signals
        try:
            self.pool.submit(int).result()  # every worker is forked on the first call, before any thread
        except BaseException:
            signals.workers = [p.pid for p in multiprocessing.active_children() if p.pid is not None]
            self.kill()
            raise
        children = multiprocessing.active_children()
        signals.workers = [p.pid for p in children if p.pid is not None]
        self.processes = children  # held: a worker's sentinel is readable once it has ended
        self.in_flight = 2 * workers  # a fast pipe is not read ahead into memory

    def score(self, numbered: Iterable[tuple[int, bytes]]) -> Iterator[Scored]:
        from concurrent.futures import Future
        from concurrent.futures.process import BrokenProcessPool

        entries: queue.Queue[tuple[int, bytes, Future[Scored]] | BaseException | None] = queue.Queue()
        slots = threading.BoundedSemaphore(self.in_flight)

        def feed() -> None:  # reads the pipe on a thread of its own while answers are written
            try:
                for first, block in numbered:
                    slots.acquire()
                    try:
                        future = self.pool.submit(_score_in_worker, (first, block))
                    except (BrokenProcessPool, RuntimeError) as exc:  # broken, or shut down as it broke
                        future = Future()
                        future.set_exception(BrokenProcessPool(str(exc)))
                    entries.put((first, block, future))
            except BaseException as exc:
                entries.put(exc)
            else:
                entries.put(None)

        threading.Thread(target=feed, name="sluice-stream-reader", daemon=True).start()
        while (entry := entries.get()) is not None:
            if isinstance(entry, BaseException):
                raise entry
            first, block, future = entry
            scored = None if self.signals.lost else self._answer(future)
            if scored is None:  # the worker scoring it died, or one before it did
                self.signals.lost = True
                self.signals.stop()  # nothing is left to score what would be read next
                lines = lines_of(block)
                scored = (_error_lines(first, lines, LOST), len(lines), 0, len(lines))
            slots.release()
            yield scored

    def _answer(self, future: Future[Scored]) -> Scored | None:
        """A block's answer; None once any worker has died. The pool fails what it held, but
        not always: a block handed over as the pool broke is never answered nor failed (the
        executor clears its pending work while a submit it races adds to it), nor is anything
        once its thread waits on half an answer. So a dead worker is watched for here too."""
        from concurrent.futures.process import BrokenProcessPool
        from multiprocessing.connection import wait

        while True:
            try:
                return future.result(timeout=WATCH_S)
            except TimeoutError:
                if wait([p.sentinel for p in self.processes], timeout=0):
                    return None
            except BrokenProcessPool:
                return None

    def close(self) -> None:
        if self.signals.lost:
            self.kill()  # the pool's own clean-up would wait for workers that ignore SIGTERM
        self.pool.shutdown(wait=not self.signals.lost)  # each worker drains its mirror and flushes its statistics as it exits

    def kill(self) -> None:
        _kill(self.signals.workers)
        self.pool.shutdown(wait=False, cancel_futures=True)


def _error_lines(first: int, lines: list[bytes], why: str) -> bytes:
    """Lines that were read but will not be scored: retryable errors, in order."""
    from sluice.stream.records import StreamRecord
    from sluice.stream.sinks import json_lines

    return json_lines([(n, _gave_up(StreamRecord(line, "stdin", n, {"line": n}), why)) for n, line in enumerate(lines, first)])


class BatchScorer:
    """One process's share: its prediction service, the stream core, and the retries of a batch."""

    def __init__(self, tenant: str, deployment: str, batch_rows: int, *, stop_fd: int | None = None) -> None:
        from sluice.stream.core import StreamScorer

        predictions = pieces.stream_predictions()
        self.batch_rows = batch_rows
        self.stop_fd = stop_fd  # readable once the stream is stopping: retry no more
        self.scorer = StreamScorer(predictions, tenant, deployment, batch_rows=batch_rows)

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
        from sluice.stream.sinks import json_lines

        out = _Held()
        # A trailing \r (CRLF files) is JSON whitespace: the line is parsed as it is.
        with gc_paused():
            records = [StreamRecord(line, "stdin", n, {"line": n}) for n, line in enumerate(lines, first)]
        errors = 0
        for pause in (*RETRIES, None):
            outcomes = run(process(self.scorer, records, out, last=pause is None))  # the last try: every answer stands (counted now)
            errors += sum(1 for o in outcomes if o.retry is None and o.failed)
            retry = [(r, o.retry) for r, o in zip(records, outcomes, strict=True) if o.retry is not None]
            if not retry or pause is None or not self._pause(pause):
                break
            records = [r for r, _ in retry]
        if retry:
            out.outputs.extend((r.ident, _gave_up(r, why)) for r, why in retry)
        if retry or out.writes > 1:  # a line retried is written in its place, not after the lines that followed it
            out.outputs.sort(key=itemgetter(0))
        buffer.write(json_lines(out.outputs))
        return errors, len(retry)

    def _pause(self, seconds: float) -> bool:
        """Wait before a retry; False when the stream is stopping (give up at once instead)."""
        if self.stop_fd is None:
            time.sleep(seconds)
            return True
        stop = select.poll()  # not select(): descriptors past a thousand are out of its range
        stop.register(self.stop_fd, select.POLLIN)
        return not stop.poll(seconds * 1000)

    def finish(self) -> None:
        pieces.settle()


class _Held:
    """A sink that keeps each try's outputs, by line number, for `_batch` to write in line order."""

    def __init__(self) -> None:
        self.outputs: list[tuple[int, dict[str, Any]]] = []
        self.writes = 0

    def write(self, records: Sequence[StreamRecord], outputs: Sequence[tuple[int, dict[str, Any]]]) -> set[int]:
        self.outputs.extend((records[index].ident, output) for index, output in outputs)
        self.writes += 1
        return set()


_worker: BatchScorer | Exception | None = None


def _start_worker(tenant: str, deployment: str, batch_rows: int, stop_fd: int | None) -> None:
    from multiprocessing.util import Finalize

    global _worker
    for signum in (signal.SIGTERM, signal.SIGINT):  # the first process stops the workers, in order
        signal.signal(signum, signal.SIG_IGN)
    try:
        _worker = BatchScorer(tenant, deployment, batch_rows, stop_fd=stop_fd)
    except Exception as exc:  # a failed initializer would be restarted forever: keep it for the first batch
        _worker = exc
        return
    Finalize(_worker, _worker.finish, exitpriority=10)  # run as the worker exits after the pool shuts down


def _score_in_worker(item: tuple[int, bytes]) -> Scored:
    if not isinstance(_worker, BatchScorer):
        raise _worker or RuntimeError("the worker has no scorer")
    return _worker(*item)


def _gave_up(record: Any, why: str | None) -> dict[str, Any]:
    from sluice.stream.reading import record_id

    return {"id": record_id(record.body), "source": record.position, "error": why, "code": "unavailable", "retryable": True}


def add_stream_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    stream = sub.add_parser("stream", help="score JSON Lines from stdin to stdout, micro-batched")
    stream.add_argument("--deployment", required=True, help="the deployment that scores every line")
    stream.add_argument("--batch-lines", type=count, default=0, help="lines per micro-batch at most (default: SLUICE_STREAM_BATCH_ROWS)")
    stream.add_argument("--max-wait-ms", type=float, help="flush a partial batch after this long (default: SLUICE_STREAM_MAX_WAIT_MS)")
    stream.add_argument("--workers", type=worker_processes, default=0, help="processes that score batches at once (default: one per core)")
    stream.add_argument("--quiet", action="store_true", help="no summary on stderr")
    stream.set_defaults(func=cmd_stream)
