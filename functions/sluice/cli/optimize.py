"""`sluice optimize MODEL:VERSION --data FILE`: candidates, a table, a verdict, tuned sessions."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sluice.cli import pieces
from sluice.cli.common import count, number_between, operator, print_json, table
from sluice.domain.errors import SluiceError
from sluice.domain.values import parse_model_ref

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def _ref(text: str) -> tuple[str, int | str]:
    try:
        return parse_model_ref(text, field="ref")
    except SluiceError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


_NON_NEGATIVE = number_between(0, refusal="must be 0 or more")


def _rows(name: str) -> Callable[[str], int]:
    """A row count within the bounds the API puts on `name` (`POST /api/v1/optimize`), read
    from its model when an argument is given: one rule for both, and no pydantic for `--help`."""

    def rows(text: str) -> int:
        from sluice.types.management import OptimizeCreate

        bounds = OptimizeCreate.model_fields[name].metadata
        low, high = next(b.ge for b in bounds if hasattr(b, "ge")), next(b.le for b in bounds if hasattr(b, "le"))
        value = count(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is not between {low} and {high}")
        return value

    return rows


def cmd_optimize(args: argparse.Namespace) -> int:
    import dataclasses

    from sluice.batch.sample import read_rows
    from sluice.optimize.measure import Timing
    from sluice.optimize.report import Budget
    from sluice.optimize.service import OptimizeRequest

    service = pieces.optimizer()
    principal = operator(args)
    name, version = args.ref
    register = tuple(n.strip() for n in args.register.split(",")) if args.register else ()
    request = OptimizeRequest(
        name, version,
        budget=Budget(args.min_agreement, args.max_abs_diff),
        kinds=tuple(k.strip() for k in args.candidates.split(",")),
        calibration_rows=args.calibration_rows, evaluation_rows=args.evaluation_rows,
        timing=Timing(budget_s=args.seconds), tune=not args.no_tune,
        register=register, shadow=args.shadow,
    )  # fmt: skip
    source = service.check(principal, request)  # what would be refused after writing anything, refused first, as the API does
    rows = read_rows(args.data, source.signature, limit=args.calibration_rows + args.evaluation_rows)
    report = service.run(principal, dataclasses.replace(request, version=source.version), rows)
    if args.json:
        print_json(report)
        return 0
    _print(report)
    return 0


def _print(report: dict[str, Any]) -> None:
    from sluice.optimize.report import COLUMNS, table_rows

    rows = report["rows"]
    print(f"{report['model']}:{report['version']}: {rows['evaluation']} evaluation rows"
          f"{' (held out from calibration)' if rows['held_out'] else ' (the calibration rows too)'}, "
          f"{rows['calibration']} calibration rows; session options {report['session_options']}")  # fmt: skip
    table(table_rows(report["candidates"]), list(COLUMNS))
    verdict = report["recommendation"]
    print(f"\nrecommended: {verdict['candidate']} ({verdict['why']})")
    for setting, advice in report["triton"].items():
        print(f"triton {setting}: {'yes' if advice['use'] else 'no'} ({advice['why']})")
    if "tuning" in report:
        print("\nsession options per Lambda size (recorded on the version; the ONNX runtime loads with them):")
        table(report["tuning"], ["vcpus", "memory_mb", "intra_op_threads", "inter_op_threads", "execution_mode", "p50_ms", "measured_on_cores"])
    for done in report.get("registered", []):
        print(f"registered {done['candidate']} as {done['model']} version {done['version']} (derived from {report['model']}:{report['version']})")
    if "shadow" in report:
        shadow = report["shadow"]
        if shadow["mirror"] is None:
            print(f"deployment {shadow['deployment']} unchanged: {shadow['why']}")
        else:
            print(f"deployment {shadow['deployment']} revision {shadow['revision']}: mirror '{shadow['mirror']}' -> version {shadow['version']}")


def add_optimize_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    cmd = sub.add_parser("optimize", help="build cheaper variants of an ONNX version, measure them, and say which to take")
    cmd.add_argument("ref", type=_ref, metavar="MODEL[:VERSION]")
    cmd.add_argument("--data", required=True, help="rows the model takes (.parquet, .csv, .jsonl): calibration, then evaluation")
    cmd.add_argument("--min-agreement", type=number_between(0, 1, refusal="an agreement is between 0 and 1"), default=0.99, help="label (or top-1) agreement a candidate must keep (default 0.99)")
    cmd.add_argument("--max-abs-diff", type=_NON_NEGATIVE, help="largest absolute difference allowed on any output value (default: not checked)")
    cmd.add_argument("--candidates", default="graph,int8-dynamic,int8-static,fp16", help="which to build (default: all)")
    cmd.add_argument("--calibration-rows", type=_rows("calibration_rows"), default=200, help="rows to calibrate int8-static on (default 200)")
    cmd.add_argument("--evaluation-rows", type=_rows("evaluation_rows"), default=1000, help="rows to compare candidates on (default 1000)")
    cmd.add_argument("--seconds", type=_NON_NEGATIVE, default=1.0, help="time spent measuring each latency (default 1)")
    cmd.add_argument("--no-tune", action="store_true", help="skip the session options sweep")
    cmd.add_argument("--register", nargs="?", const="recommended", help="push candidates as new versions: 'recommended' (the default) or names, comma-separated")
    cmd.add_argument("--shadow", metavar="DEPLOYMENT", help="mirror the best registered candidate from this deployment")
    cmd.add_argument("--json", action="store_true", help="print the whole report as JSON")
    cmd.set_defaults(func=cmd_optimize)
