"""`sluice monitor baseline | status`: a deployment's baseline from a file of its training
data, and its traffic checked against it (docs/monitoring.md)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from sluice.cli import pieces
from sluice.cli.common import count, operator, print_json, table

if TYPE_CHECKING:
    import argparse

STATUS_COLUMNS = ["column", "role", "rows", "verdict", "drift", "js", "ks", "tv", "missing_rate", "missing_change", "out_of_range", "unseen"]
DEFAULT_LIMIT = 1_000_000


def cmd_monitor_baseline(args: argparse.Namespace) -> int:
    from sluice.batch.sample import read_rows
    from sluice.inference.baselines import baseline_profile

    principal = operator(args)
    predictions, monitor = pieces.predictions(), pieces.monitor()
    resolved = asyncio.run(predictions.resolve(principal, args.name))
    arrays = read_rows(args.data, resolved.version.signature, limit=args.limit, field="data")
    profile = asyncio.run(
        baseline_profile(predictions, principal, args.name, arrays, max_columns=pieces.settings().monitor.monitor_max_columns, outputs=not args.inputs_only)
    )
    out = monitor.put_baseline(principal, args.name, profile, source=str(args.data))
    if args.json:
        print_json(out)
        return 0
    print(f"baseline of {args.name} (revision {out['revision']}): {out['rows']} rows from {args.data}")
    rows = [_baseline_row(name, c) for name, c in out["columns"].items()]
    table(rows, ["column", "role", "kind", "count", "missing_rate", "min", "p50", "max", "top"])
    return 0


def _baseline_row(name: str, c: dict[str, Any]) -> dict[str, Any]:
    q = c.get("quantiles") or {}
    top = ", ".join(f"{t['value']} {t['share']:.2f}" for t in c.get("top", [])[:3])
    return {"column": name, "role": c["role"], "kind": c["kind"], "count": c["count"], "missing_rate": c["missing_rate"],
            "min": _short(c.get("min")), "p50": _short(q.get("p50")), "max": _short(c.get("max")), "top": top or "-"}  # fmt: skip


def _short(value: Any) -> Any:
    return "-" if value is None else (round(value, 4) if isinstance(value, float) else value)


def cmd_monitor_status(args: argparse.Namespace) -> int:
    status = pieces.monitor().status(operator(args), args.name, variant=args.variant, windows=args.windows)
    if args.json:
        print_json(status)
        return 0
    base = status["baseline"]
    print(f"deployment {status['deployment']} (revision {status['revision']}), baseline of revision {base['revision']} ({base['rows']} rows from {base['source']})")
    if not status["windows"]:
        print("no traffic profiled at this revision yet")
        return 0
    for window in status["windows"]:
        worst = ", ".join(window["worst"]) or "none"
        print(f"window from {window['window_start']} ({window['rows']} rows): {window['verdict']}; drift {window['drift']}; worst: {worst}")
        rows = [{"column": name, **{k: _short(c.get(k)) for k in STATUS_COLUMNS[1:]}} for name, c in window["columns"].items()]
        table(rows, STATUS_COLUMNS)
    return 0


def add_monitor_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    mon = sub.add_parser("monitor", help="drift and data quality against a baseline").add_subparsers(dest="action", required=True)
    baseline = mon.add_parser("baseline", help="profile a file of the deployment's training data as its baseline")
    baseline.add_argument("name", help="the deployment")
    baseline.add_argument("--data", required=True, help="a Parquet, CSV or JSON Lines file (columns as a batch job reads them)")
    baseline.add_argument("--limit", type=count, default=DEFAULT_LIMIT, help=f"read at most this many rows (default {DEFAULT_LIMIT})")
    baseline.add_argument("--inputs-only", action="store_true", help="do not score the rows: no output columns in the baseline")
    baseline.add_argument("--json", action="store_true", help="print JSON instead of a table")
    baseline.set_defaults(func=cmd_monitor_baseline)
    status = mon.add_parser("status", help="each column's drift and quality verdict in the latest windows")
    status.add_argument("name", help="the deployment")
    status.add_argument("--variant", help="one variant's traffic (a split's); all of it by default")
    status.add_argument("--windows", type=count, default=1, help="how many of the latest windows (default 1)")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.set_defaults(func=cmd_monitor_status)
