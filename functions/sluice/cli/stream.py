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

import os
import select
import sys
import time
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
    from sluice.services.loop import run
    from sluice.stream.core import StreamScorer
    from sluice.stream.records import StreamRecord
    from sluice.stream.run import process
    from sluice.stream.sinks import FileSink

    container = get_container()
    settings = container.settings
    lines_per_batch = args.batch_lines or settings.stream_batch_rows
    wait_s = (settings.stream_max_wait_ms if args.max_wait_ms is None else args.max_wait_ms) / 1000
    scorer = StreamScorer(container.stream_predictions, args.tenant, args.deployment, batch_rows=lines_per_batch)
    out = FileSink(sys.stdout.buffer)
    seen = errors = gave_up = 0
    for batch in read_batches(sys.stdin.fileno(), lines_per_batch, wait_s):
        # A trailing \r (CRLF files) is JSON whitespace: the line is parsed as it is.
        records = [StreamRecord(line, "stdin", n, {"line": n}) for n, line in enumerate(batch, seen + 1)]
        seen += len(batch)
        for pause in (*RETRIES, None):
            outcomes = run(process(scorer, records, out))
            errors += sum(1 for o in outcomes if o.retry is None and o.failed)
            retry = [(r, o.retry) for r, o in zip(records, outcomes, strict=True) if o.retry is not None]
            if not retry or pause is None:
                break
            time.sleep(pause)
            records = [r for r, _ in retry]
        if retry:
            gave_up += len(retry)
            out.write(records, [(n, _gave_up(r, why)) for n, (r, why) in enumerate(retry)])
    container.mirror.drain()  # type: ignore[union-attr]
    container.predictions.stats.flush()
    if not args.quiet:
        print(f"{seen} lines: {seen - errors - gave_up} predictions, {errors + gave_up} errors", file=sys.stderr)
    return 1 if gave_up else 0


def _gave_up(record: Any, why: str | None) -> dict[str, Any]:
    from sluice.stream.core import record_id

    return {"id": record_id(record.body), "source": record.position, "error": why, "code": "unavailable", "retryable": True}


def add_stream_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    stream = sub.add_parser("stream", help="score JSON Lines from stdin to stdout, micro-batched")
    stream.add_argument("--deployment", required=True, help="the deployment that scores every line")
    stream.add_argument("--batch-lines", type=count, default=0, help="lines per micro-batch at most (default: SLUICE_STREAM_BATCH_ROWS)")
    stream.add_argument("--max-wait-ms", type=float, help="flush a partial batch after this long (default: SLUICE_STREAM_MAX_WAIT_MS)")
    stream.add_argument("--quiet", action="store_true", help="no summary on stderr")
    stream.set_defaults(func=cmd_stream)
