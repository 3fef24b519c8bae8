"""`sluice replay DEPLOYMENT --since … [--until …] --against MODEL:VERSION|DEPLOYMENT`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.cli import pieces
from sluice.cli.common import operator, print_json

if TYPE_CHECKING:
    import argparse


def cmd_replay(args: argparse.Namespace) -> int:
    out = pieces.replays().replay(operator(args), args.name, since=args.since, until=args.until, against=args.against)
    if args.json:
        print_json(out)
        return 0
    v = out["verdict"]
    print(f"replay of {out['deployment']} ({out['since']} to {out['until']}) against {out['against']}")
    print(f"records {out['records']}, rows {out['rows']}: scored {out['scored_rows']}, failed {out['failed_rows']}")
    for reason, n in out["failures"].items():
        print(f"  failed {n}: {reason}")
    if v["agreement"] is not None:
        lo, hi = v["agreement_ci95"]
        print(f"agreement {v['agreement']:.4f} [{lo:.4f}, {hi:.4f}] over {out['scored_rows']} rows")
    if v["mean_abs_diff"] is not None:
        print(f"mean abs diff {v['mean_abs_diff']:.4g} (max {v['max_abs_diff']:.4g})")
    lat = out["latency"]
    rate = f"{out['rows_per_s']:,.0f} rows/s" if out["rows_per_s"] else "-"
    p50, p99 = ("-" if lat[k] is None else f"{lat[k]} ms" for k in ("captured_p50_ms", "captured_p99_ms"))  # every row failed: none
    print(f"captured latency p50 {p50}, p99 {p99}; replay {rate}")
    return 0


def add_replay_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("replay", help="run a deployment's captured requests against a candidate and compare")
    p.add_argument("name", help="the deployment whose captured requests to replay")
    p.add_argument("--since", required=True, help="RFC 3339 (UTC unless it names a zone), or a duration ago: 2h, 30m")
    p.add_argument("--until", default=None, help="the same forms; default now")
    p.add_argument("--against", required=True, metavar="TARGET", help="MODEL:VERSION or a deployment name")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_replay)
