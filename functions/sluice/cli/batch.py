"""`sluice batch submit | status | list | cancel | run` (and `schedule …`, in cli.schedules).

`run` scores a file (or a folder of files, or a manifest) on this machine, end to end, whatever orchestrator is configured: Plan,
the chunks on a thread pool, Finalize, with a progress bar on stderr and a summary on
stdout. `submit` starts a job through the configured orchestrator (with the local one, the
job runs in this process, so `submit` waits for it as `run` does).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.cli import pieces
from sluice.cli.common import (
    count,
    operator,
    positive,
    print_json,
    publish_of,
    publish_options,
    table,
)
from sluice.domain.errors import SluiceError
from sluice.domain.jobs import FORMATS
from sluice.domain.locations import file_path

INTERRUPTED = "Interrupted"  # the error of a job its `sluice batch run` was interrupted in

if TYPE_CHECKING:
    from sluice.batch.orchestrators import Progress
    from sluice.batch.service import BatchService
    from sluice.domain import Principal
    from sluice.domain.jobs import BatchJob


class ProgressBar:
    """One line on stderr, redrawn in place: share done, chunks, rows and rows per second."""

    def __init__(self, stream: Any = None, width: int = 28) -> None:
        self.stream = stream or sys.stderr
        self.width = width
        self.started = time.monotonic()

    def __call__(self, progress: Progress) -> None:
        total = progress.rows_total or 0
        share = progress.rows_done / total if total else (1.0 if progress.chunks_total == 0 else progress.chunks_done / progress.chunks_total)
        filled = int(share * self.width)
        rate = progress.rows_done / max(time.monotonic() - self.started, 1e-9)
        failed = f"  {progress.failed_chunks} failed" if progress.failed_chunks else ""
        self.stream.write(
            f"\r[{'#' * filled}{'.' * (self.width - filled)}] {share * 100:5.1f}%  "
            f"{progress.chunks_done}/{progress.chunks_total} chunks  "
            f"{progress.rows_done:,}/{total:,} rows  {rate:,.0f} rows/s{failed}"
        )
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


def _job_line(job: BatchJob) -> dict[str, Any]:
    return {
        "id": job.id,
        "status": job.status,
        "deployment": job.deployment,
        "chunks": f"{job.chunks_done}/{job.chunks_total if job.chunks_total is not None else '?'}",
        "rows_in": job.rows_in,
        "rows_failed": job.rows_failed,
        "input": job.input_uri,
    }


def _report(job: BatchJob, seconds: float) -> int:
    from sluice.batch.wire import job_out

    body = job_out(job)
    body["seconds"] = round(seconds, 3)
    if seconds > 0 and job.rows_in:
        body["rows_per_second"] = round(job.rows_in / seconds)
    print_json(body)
    return 0 if job.status == "SUCCEEDED" else 1


def _run_here(batch: BatchService, job: BatchJob, concurrency: int) -> int:
    from sluice.batch.orchestrators import LocalOrchestrator

    concurrency = concurrency or pieces.settings().batch.batch_concurrency or os.cpu_count() or 1
    local = LocalOrchestrator(pieces.batch_runner(), concurrency=concurrency)
    bar = ProgressBar()
    started = time.monotonic()
    interrupted = False
    try:
        local.run(job.tenant, job.id, progress=bar)
    except KeyboardInterrupt:  # Ctrl-C: the chunks in flight have finished (the pool waits for them)
        interrupted = True
    finally:
        bar.close()
    if interrupted:
        done = local.runner.mark_failed(  # a job already finished stays as it finished
            job.tenant, job.id, error=INTERRUPTED, cause="the command was interrupted (SIGINT); the chunks scored are in the output"
        )
        code = _report(batch.get(_principal_of(job), job.id), time.monotonic() - started)
        return code if done.get("status") == "SUCCEEDED" else 128 + signal.SIGINT
    return _report(batch.get(_principal_of(job), job.id), time.monotonic() - started)


def _principal_of(job: BatchJob) -> Principal:
    from sluice.domain import Principal

    return Principal(job.tenant, frozenset({"predict"}), "cli")


def default_out(source: Path) -> Path:
    """`<name>-scored` beside the input, the name less its format suffix only:
    `a.v1.parquet` -> `a.v1-scored`, `2026.11.21.csv` -> `2026.11.21-scored`."""
    name = source.name
    stem = name[: -len(source.suffix)] if source.suffix and len(source.suffix) < len(name) else name
    return source.with_name(f"{stem}-scored")


def cmd_batch_run(args: argparse.Namespace) -> int:
    # A file URL as the path it names (a Path would read `file:///x` as the relative `file:/x`);
    # one that names none here (`file://server/x`) refused naming it.
    from sluice.batch.uris import file_url

    url = file_url(args.file)
    # Absolute from here on: `./file:/x` is a path whose text, made relative, would read as a URL.
    source = Path(file_path(url, field="file")) if url is not None else Path(args.file).expanduser().absolute()
    if not source.is_file() and not source.is_dir():
        what = "not a file or a folder (a device, a pipe or a socket)" if source.exists() else "no such file or folder"
        raise SluiceError(f"{what}: {source}", field="file")
    # A URI as given (`file:///…`, `s3://…`: a Path would read `file:///x` as the relative `file:/x`), a path made absolute.
    out = (args.out if "://" in args.out or file_url(args.out) else Path(args.out).expanduser().absolute()) if args.out else default_out(source)
    batch = pieces.batch()
    job = batch.submit(
        operator(args), deployment=args.deployment, input_uri=str(source), format=args.input_format,
        output_format=args.format, key_columns=args.key or (), output_uri=str(out), operator=True,
        source="cli", start=False, runs_here=True, publish=publish_of(args),
    )  # fmt: skip
    print(f"batch job {job.id}: {source} -> {out}", file=sys.stderr)
    return _run_here(batch, job, args.concurrency)


def cmd_batch_submit(args: argparse.Namespace) -> int:
    local = pieces.settings().jobs.orchestrator in ("", "local")
    batch = pieces.batch()
    job = batch.submit(
        operator(args), deployment=args.deployment, input_uri=args.input, format=args.input_format,
        output_format=args.format, key_columns=args.key or (), output_uri=args.out, operator=True,
        source="cli", start=not local, runs_here=local, publish=publish_of(args),
    )  # fmt: skip
    if local:
        print(f"batch job {job.id} runs here (the orchestrator is local)", file=sys.stderr)
        return _run_here(batch, job, 0)
    print_json(_job_line(job) | {"execution": job.execution})
    return 0


def cmd_batch_status(args: argparse.Namespace) -> int:
    from sluice.batch.wire import job_out

    print_json(job_out(pieces.batch().get(operator(args), args.job_id)))
    return 0


def cmd_batch_list(args: argparse.Namespace) -> int:
    jobs = pieces.batch().list(operator(args), limit=args.limit)
    table([_job_line(j) for j in jobs], ["id", "status", "deployment", "chunks", "rows_in", "rows_failed", "input"])
    return 0


def cmd_batch_cancel(args: argparse.Namespace) -> int:
    job = pieces.batch().cancel(operator(args), args.job_id)
    print(f"cancelled {job.id}")
    return 0


def add_batch_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    batch = sub.add_parser("batch", help="score files: submit, follow and cancel batch jobs").add_subparsers(
        dest="action", required=True
    )

    def job_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--deployment", required=True, help="the deployment that scores each row")
        p.add_argument("--format", choices=FORMATS, help="output format (default: the input's; Parquet for a folder or manifest)")
        p.add_argument("--input-format", choices=FORMATS, help="input format (default: from the file name; a folder or manifest: from its files' names, and this may not be given)")
        p.add_argument("--key", action="append", metavar="COLUMN", help="input column copied beside each prediction (repeatable; default: the row number)")
        publish_options(p)

    run = batch.add_parser(
        "run",
        help="score a local file, folder or manifest here, end to end, with a progress bar",
        description=(
            "Score FILE here, end to end. FILE is one Parquet, CSV or JSON Lines file; a folder "
            "(every such file under it, in name order; names starting with . or _ are skipped, "
            "and all must be of one format); or a manifest, a .json file holding "
            '{"files": [uri, ...]}. Rows are numbered within their file; for a folder or '
            "manifest each result row and error record names its file (`object`)."
        ),
    )
    run.add_argument("file", help="a file, a folder of files, or a .json manifest listing files")
    job_options(run)
    run.add_argument("--out", help="output folder (default: <file>-scored next to the input)")
    run.add_argument("--concurrency", type=count, default=0, help="chunks scored at once (default: one per core)")
    run.set_defaults(func=cmd_batch_run)

    submit = batch.add_parser("submit", help="start a job through the configured orchestrator")
    submit.add_argument("input", help="s3://bucket/key, s3://bucket/prefix/, a .json manifest, file:///path or a path (a file or folder)")
    job_options(submit)
    submit.add_argument("--out", help="output folder or s3:// prefix (default: the tenant's outbox)")
    submit.set_defaults(func=cmd_batch_submit)

    status = batch.add_parser("status", help="a job's status, progress and counts")
    status.add_argument("job_id")
    status.set_defaults(func=cmd_batch_status)

    listing = batch.add_parser("list", help="the tenant's jobs, newest first")
    listing.add_argument("--limit", type=positive, default=20)
    listing.set_defaults(func=cmd_batch_list)

    cancel = batch.add_parser("cancel", help="cancel a job")
    cancel.add_argument("job_id")
    cancel.set_defaults(func=cmd_batch_cancel)

    from sluice.cli.schedules import add_schedule_commands

    add_schedule_commands(batch)
