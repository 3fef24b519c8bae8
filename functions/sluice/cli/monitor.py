"""`sluice monitor baseline | status | history | labels`: a deployment's baseline from a file
of its training data, its traffic checked against it, each closed window's kept result, and
ground truth from a file of labels by request id (docs/monitoring.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.cli import pieces
from sluice.cli.common import count, operator, positive, print_json, table

if TYPE_CHECKING:
    import argparse

    from sluice.batch.sample import RowsRead

STATUS_COLUMNS = ["column", "role", "rows", "verdict", "drift", "js", "ks", "tv", "missing_rate", "missing_change", "out_of_range", "unseen"]
DEFAULT_LIMIT = 1_000_000


def cmd_monitor_baseline(args: argparse.Namespace) -> int:
    import asyncio

    from sluice.batch.sample import read_file
    from sluice.inference.baselines import baseline_profile

    principal = operator(args)
    predictions, monitor = pieces.predictions(), pieces.monitor()
    read = None
    if args.from_capture:  # the rows and the answers they got, as captured
        out = monitor.baseline_from_capture(principal, args.name, since=args.since, until=args.until, outputs=not args.inputs_only)
    else:
        resolved = asyncio.run(predictions.resolve(principal, args.name))
        signature = resolved.version.signature
        if args.from_job:
            job, arrays = pieces.batch().input_rows(principal, args.from_job, signature, limit=args.limit)
            source = f"job {job.id} ({job.input_uri})"
        else:
            read = read_file(args.data, signature, limit=args.limit, field="data")
            arrays, source = read.arrays, str(args.data)
        max_columns = pieces.settings().monitor.monitor_max_columns
        profile = asyncio.run(baseline_profile(predictions, principal, args.name, arrays, max_columns=max_columns, outputs=not args.inputs_only))
        out = monitor.put_baseline(principal, args.name, profile, source=source)
    if args.json:
        print_json(out if read is None else {**out, "file_rows": read.summary()})
        return 0
    print(f"baseline of {args.name} (revision {out['revision']}): {out['rows']} rows from {out['source']}")
    if read is not None:
        _print_unused(read, args.limit)
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
    source = "capture" if args.from_capture else "profiles"
    status = pieces.monitor().status(operator(args), args.name, variant=args.variant, windows=args.windows, source=source)
    if args.json:
        print_json(status)
        return 0
    base = status["baseline"]
    said = f"baseline of revision {base['revision']} ({base['rows']} rows from {base['source']})" if base else "no baseline"
    print(f"deployment {status['deployment']} (revision {status['revision']}), {said}")
    _print_quality(status["quality"])
    if base is None:
        return 0
    if not status["windows"]:
        print("no traffic captured at this revision in these windows" if args.from_capture else "no traffic profiled at this revision yet")
        return 0
    for window in status["windows"]:
        worst = ", ".join(window["worst"]) or "none"
        print(f"window from {window['window_start']} ({window['rows']} rows): {window['verdict']}; drift {_short(window['drift'])}; worst: {worst}")
        rows = [{"column": name, **{k: _short(c.get(k)) for k in STATUS_COLUMNS[1:]}} for name, c in window["columns"].items()]
        table(rows, STATUS_COLUMNS)
    return 0


ALL_VARIANTS = "(all)"  # every variant together: parentheses are in no variant's name
QUALITY_COLUMNS = ["window_start", "variant", "rows", "accuracy", "precision", "recall", "auc", "mae", "rmse"]


def _print_quality(windows: list[dict[str, Any]]) -> None:
    if not windows:
        print("no labels for this revision's predictions yet")
        return
    print("model quality from labels, per window and variant:")
    rows = [
        {"window_start": w["window_start"], "variant": variant, **{k: _short(found.get(k)) for k in QUALITY_COLUMNS[2:]}}
        for w in windows for variant, found in ((ALL_VARIANTS, w), *w["variants"].items())
    ]  # fmt: skip
    table(rows, QUALITY_COLUMNS)


NO_LABEL = "no label to post"
HISTORY_COLUMNS = ["window_start", "rows", "verdict", "drift", "worst", "labelled", "accuracy", "mae"]


def cmd_monitor_history(args: argparse.Namespace) -> int:
    import time

    from sluice.domain.errors import Unavailable
    from sluice.domain.values import isoformat
    from sluice.services.monitor_results import MonitorResults, parse_when

    batch, at = pieces.batch(), time.time()
    since, until = parse_when(args.since, field="since", now=at), parse_when(args.until, field="until", now=at)
    if batch.files is None:
        raise Unavailable("no batch store here: the monitoring history is kept there", field="monitor")
    results = MonitorResults(pieces.monitor(), batch.files, batch.paths.root)
    out = results.history(operator(args), args.name, since=since, until=until, before=args.before, limit=args.limit)
    if args.json:
        print_json(out)
        return 0
    if not out["windows"]:
        print(f"no closed window of {args.name} kept in that time")
        return 0
    rows = []
    for w in out["windows"]:
        checked, quality = w.get("check") or {}, w.get("quality") or {}
        rows.append({
            "window_start": isoformat(w["window_start"]), "rows": checked.get("rows", "-"), "verdict": checked.get("verdict", "-"),
            "drift": _short(checked.get("drift")), "worst": ", ".join(checked.get("worst", [])[:3]) or "-",
            "labelled": quality.get("rows", 0), "accuracy": _short(quality.get("accuracy")), "mae": _short(quality.get("mae")),
        })  # fmt: skip
    table(rows, HISTORY_COLUMNS)
    if out["next"] is not None:
        print(f"more: sluice monitor history {args.name} --before {out['next']}")
    return 0


def cmd_monitor_labels(args: argparse.Namespace) -> int:
    """Every row of the file is accounted for: posted (then matched, unmatched or duplicate),
    skipped with why (a missing request id or label, a row that does not parse), or not read
    past `--limit`. A label its prediction cannot be compared with refuses the whole file,
    naming its row, before any part of it is posted. Skipped rows are said, not failed on
    (exit 0), as a batch job counts the rows it refused; a file with no label left to post is an error (exit 2), naming why."""
    from pathlib import Path

    from sluice.batch.sample import as_stored, read_file
    from sluice.domain.signature import Signature, TensorSpec
    from sluice.types.monitoring import MAX_LABELS, label_problem, request_id_problem

    principal, monitor = operator(args), pieces.monitor()
    wanted = Signature(inputs=(TensorSpec("request_id", "BYTES", (-1,)), TensorSpec("label", "BYTES", (-1,))), outputs=())
    read = read_file(args.file, wanted, limit=args.limit, field="file", nothing=NO_LABEL)
    # Each label as the JSON value the API would get for it: a number column's 1.0 is the
    # number 1.0 (class 1, as the API's 1.0 is), text is text ("1.10" is not "1.1").
    values = as_stored(args.file, "label", read)
    labels, rows = [], []
    for row, rid, label in zip(read.rows.tolist(), read.arrays["request_id"].tolist(), values, strict=True):
        rid = str(rid)
        problem = request_id_problem(rid) or ("no label (NaN or infinite)" if label is None else label_problem(label))  # empty text is the class "", as the API's
        if problem is not None:
            read.skip(row, problem)
            continue
        labels.append((rid, 0, label))
        rows.append(row)
    if not labels:
        raise read.none_left(Path(args.file).name, what=NO_LABEL, field="file")
    parts = [(labels[at : at + MAX_LABELS], lambda i, at=at: f"file row {rows[at + i]}") for at in range(0, len(labels), MAX_LABELS)]
    # Every part is checked before the first is posted: a label refused in a late part would
    # otherwise leave the earlier parts counted, and the file could not simply be posted again.
    # Each part's predictions are read once: its check is what its post then counts.
    checked = [monitor.check_labels(principal, args.name, part, named=named) for part, named in parts]
    total = {"received": 0, "matched": 0, "unmatched": 0, "duplicate": 0, "not_comparable": 0}
    for (part, named), joined in zip(parts, checked, strict=True):
        out = monitor.add_labels(principal, args.name, part, named=named, checked=joined)
        total = {k: total[k] + out[k] for k in total}
    if args.json:
        print_json({"deployment": args.name, **total, "rows": read.summary()})
        return 0
    print(f"{total['received']} labels for {args.name}: {total['matched']} matched, {total['unmatched']} unmatched, {total['duplicate']} duplicate")
    if total["not_comparable"]:
        print(f"  not comparable: {total['not_comparable']} matched predictions were not a finite number (in no figure)")
    _print_unused(read, args.limit)
    return 0


def _print_unused(read: RowsRead, limit: int) -> None:
    """The file's rows a command did not use: skipped, by reason, and not read past `limit`."""
    for reason, skips in read.skipped.items():
        more = ", ..." if skips.count > len(skips.first) else ""
        print(f"  skipped {skips.count}: {reason} (row {', '.join(map(str, skips.first))}{more})")
    if read.unread:
        print(f"  not read: {read.unread} rows past --limit {limit}")


def add_monitor_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    mon = sub.add_parser("monitor", help="drift and data quality against a baseline; model quality from labels").add_subparsers(dest="action", required=True)
    baseline = mon.add_parser("baseline", help="profile the deployment's training data (a file, a batch job's input or captured traffic) as its baseline")
    baseline.add_argument("name", help="the deployment")
    whence = baseline.add_mutually_exclusive_group(required=True)
    whence.add_argument("--data", help="a Parquet, CSV or JSON Lines file (columns as a batch job reads them)")
    whence.add_argument("--from-job", metavar="JOB", help="a batch job's input (a file, prefix or manifest), read as the job reads it")
    whence.add_argument("--from-capture", action="store_true", help="the deployment's captured requests from --since to --until, with their answers")
    baseline.add_argument("--since", default="24h", help="with --from-capture: a time or a duration ago (default 24h)")
    baseline.add_argument("--until", help="with --from-capture: a time or a duration ago (default now)")
    baseline.add_argument("--limit", type=positive, default=DEFAULT_LIMIT, help=f"read at most this many rows of a file or job (default {DEFAULT_LIMIT})")
    baseline.add_argument("--inputs-only", action="store_true", help="no output columns in the baseline (the rows are not scored)")
    baseline.add_argument("--json", action="store_true", help="print JSON instead of a table")
    baseline.set_defaults(func=cmd_monitor_baseline)
    status = mon.add_parser("status", help="each column's drift and quality verdict in the latest windows")
    status.add_argument("name", help="the deployment")
    status.add_argument("--variant", help="one variant's traffic (a split's); all of it by default")
    status.add_argument("--windows", type=positive, default=1, help="how many of the latest windows (default 1)")
    status.add_argument("--from-capture", action="store_true", help="recompute the latest windows from captured requests, every row sketched")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.set_defaults(func=cmd_monitor_status)
    history = mon.add_parser("history", help="each closed window's kept result, newest first, with its quality from the labels so far")
    history.add_argument("name", help="the deployment")
    history.add_argument("--since", help="windows that started at or after this time, or a duration ago (24h)")
    history.add_argument("--until", help="windows that started before this time, or a duration ago")
    history.add_argument("--before", type=count, help="the next page: windows that started before this one (as the last page said)")
    history.add_argument("--limit", type=positive, default=24, help="windows to show (default 24, at most 168)")
    history.add_argument("--json", action="store_true", help="print JSON instead of a table")
    history.set_defaults(func=cmd_monitor_history)
    labels = mon.add_parser("labels", help="post ground truth by request id from a file, joined to the predictions kept for it")
    labels.add_argument("name", help="the deployment")
    labels.add_argument("--file", required=True, help="a Parquet, CSV or JSON Lines file with columns request_id and label")
    labels.add_argument("--limit", type=positive, default=DEFAULT_LIMIT, help=f"read at most this many label rows, the file's first (default {DEFAULT_LIMIT}); the rows past them are counted, not read")
    labels.add_argument("--json", action="store_true", help="print JSON instead of a sentence")
    labels.set_defaults(func=cmd_monitor_labels)
