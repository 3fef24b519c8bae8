"""`sluice batch schedule create | list | show | pause | resume | delete`.

The CLI acts as the operator of its machine: locally a schedule's input may be any path (a
template of the scheduled time, e.g. `~/lake/dt={date}/events.parquet`); against AWS it must
lie in the tenant's inbox, as every run of the state machine checks. Locally, `sluice serve`
runs the schedules that are due; on AWS, EventBridge Scheduler does.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sluice.cli import pieces
from sluice.cli.common import operator, print_json, publish_of, publish_options, table
from sluice.domain.errors import BadRequest
from sluice.domain.jobs import FORMATS

if TYPE_CHECKING:
    from sluice.domain.schedules import Schedule


def _when(moment: float | None) -> str:
    return "-" if moment is None else datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _line(schedule: Schedule) -> dict[str, Any]:
    return {
        "name": schedule.name, "state": schedule.state, "expression": schedule.expression,
        "timezone": schedule.timezone, "deployment": schedule.deployment, "overlap": schedule.overlap,
        "skipped": schedule.skipped, "input": schedule.input_uri,
    }  # fmt: skip


def cmd_create(args: argparse.Namespace) -> int:
    if bool(args.cron) == bool(args.rate):
        raise BadRequest("give one of --cron or --rate", field="expression")
    # The bare fields (`--cron '0 2 * * ? *'`), or the whole expression as the API and the docs
    # write it (`--cron 'cron(0 2 * * ? *)'`): wrapped once, never twice.
    kind, given = ("cron", args.cron) if args.cron else ("rate", args.rate)
    given = given.strip()
    expression = given if given.startswith(f"{kind}(") and given.endswith(")") else f"{kind}({given})"
    catalog = None
    if args.catalog:
        database, _, table_name = args.catalog.partition(".")
        catalog = {"database": database, "table": table_name}
    schedule = pieces.schedules().create(
        operator(args), name=args.name, deployment=args.deployment, input_uri=args.input,
        expression=expression, timezone=args.timezone, overlap=args.overlap, format=args.input_format,
        output_format=args.format, key_columns=args.key or (), operator=True,
        state="PAUSED" if args.paused else "ENABLED", catalog=catalog, publish=publish_of(args),
    )  # fmt: skip
    print(f"schedule {schedule.name}: {schedule.expression} ({schedule.timezone}) -> {schedule.deployment}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    schedules = pieces.schedules().list(operator(args))
    table([_line(s) for s in schedules], ["name", "state", "expression", "timezone", "deployment", "overlap", "skipped", "input"])
    for schedule in schedules:
        if schedule.invalid is not None:
            print(f"schedule {schedule.name} never runs: {schedule.invalid}", file=sys.stderr)
        elif schedule.refused:
            print(f"schedule {schedule.name}: {_refusals(schedule)}", file=sys.stderr)
    return 0


def _refusals(schedule: Schedule) -> str:
    runs = "run" if schedule.refused == 1 else "runs"
    return f"{schedule.refused} {runs} refused in a row, the latest for {_when(schedule.last_refused_at)}: {schedule.last_error}"


def cmd_show(args: argparse.Namespace) -> int:
    view = pieces.schedules().show(operator(args), args.name)
    shown = _line(view.schedule) | {"next_run": _when(view.next_run_at), "last_fire": _when(view.schedule.last_fire)}
    if view.schedule.invalid is not None:  # stored before a bound held: it never runs
        shown["invalid"] = view.schedule.invalid
    if view.schedule.refused:  # its runs refused (no job made for them), counted here
        shown["refused"] = _refusals(view.schedule)
    print_json(shown)
    if not view.runs:
        print("no runs yet")
        return 0
    runs = [
        {"scheduled_for": _when(j.scheduled_for), "job": j.id, "status": j.status,
         "rows_in": j.rows_in, "rows_failed": j.rows_failed, "error": (j.error or "")[:60]}
        for j in view.runs
    ]  # fmt: skip
    table(runs, ["scheduled_for", "job", "status", "rows_in", "rows_failed", "error"])
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    print(f"schedule {pieces.schedules().pause(operator(args), args.name).name}: paused")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    print(f"schedule {pieces.schedules().resume(operator(args), args.name).name}: resumed")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    pieces.schedules().delete(operator(args), args.name)
    print(f"schedule {args.name}: deleted (its jobs stay)")
    return 0


def add_schedule_commands(batch: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    schedule = batch.add_parser("schedule", help="run batch jobs on a cron or rate schedule").add_subparsers(
        dest="schedule_action", required=True
    )
    create = schedule.add_parser("create", help="create a schedule")
    create.add_argument("name")
    create.add_argument("--deployment", required=True, help="the deployment that scores each run")
    create.add_argument("--input", required=True, help="each run's input: a template of the scheduled time ({date}, {hour}, …)")
    create.add_argument("--cron", help="five cron fields: minute hour day-of-month month day-of-week")
    create.add_argument("--rate", help="e.g. '1 hour', '15 minutes', '1 day'")
    create.add_argument("--timezone", default="UTC", help="IANA time zone of the expression and the template (default: UTC)")
    create.add_argument("--overlap", choices=("skip", "queue"), default="skip", help="a run due while the last still runs: skip it, or queue one")
    create.add_argument("--format", choices=FORMATS, help="output format (default: the input's)")
    create.add_argument("--input-format", choices=FORMATS, help="input format (default: from the file name)")
    create.add_argument("--key", action="append", metavar="COLUMN", help="input column copied beside each prediction (repeatable)")
    create.add_argument("--paused", action="store_true", help="create it paused")
    create.add_argument("--catalog", metavar="DATABASE.TABLE", help="publish each successful run as a partition of this Glue table (AWS)")
    publish_options(create)
    create.set_defaults(func=cmd_create)
    listing = schedule.add_parser("list", help="the tenant's schedules")
    listing.set_defaults(func=cmd_list)
    for name, func, text in (
        ("show", cmd_show, "a schedule, its next run and its recent runs with their outcomes"),
        ("pause", cmd_pause, "pause a schedule"),
        ("resume", cmd_resume, "resume a schedule (runs it missed are not made up)"),
        ("delete", cmd_delete, "delete a schedule (its jobs stay)"),
    ):
        p = schedule.add_parser(name, help=text)
        p.add_argument("name")
        p.set_defaults(func=func)
