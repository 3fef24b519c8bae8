"""`sluice cost NAME`: $ per million predictions on each runtime, the cheapest meeting `--p99-ms`,
and (`--plot FILE.png`, the `cost` extra) the cost-versus-traffic curves."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.cli import pieces
from sluice.cli.common import operator, print_json, table
from sluice.domain.errors import BadRequest

if TYPE_CHECKING:
    from typing import Any

COLUMNS = ["runtime", "usd_per_million", "p99_ms", "meets", "how"]


def _latency(value: str) -> tuple[str, tuple[float, float]]:
    """`onnx=2.1/9.5` (p50/p99 in ms) or `sagemaker=4.5`."""
    kind, _, numbers = value.partition("=")
    try:
        parts = [float(x) for x in numbers.split("/")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: give RUNTIME=P50[/P99] in ms") from None
    if not kind or len(parts) not in (1, 2):
        raise argparse.ArgumentTypeError(f"{value!r}: give RUNTIME=P50[/P99] in ms")
    return kind, (parts[0], parts[-1])


def cmd_cost(args: argparse.Namespace) -> int:
    from sluice.cost.service import CostRequest

    latencies, sources, instance_rps = dict(args.latency or []), {}, args.instance_rps
    if args.benchmark:
        from sluice.cost.benchmarks import read_benchmark

        found = read_benchmark(args.benchmark)
        if "sagemaker" not in latencies:  # a latency given on the command line wins, and is credited as given
            latencies["sagemaker"] = (found.p50_ms, found.p99_ms)
            sources["sagemaker"] = found.source
        instance_rps = instance_rps or found.instance_rps
    request = CostRequest(
        rps=args.rps, p99_ms=args.p99_ms, region=args.region, instance_type=args.instance_type,
        memory_mb=args.memory_mb, architecture=args.architecture, instance_rps=instance_rps,
        latencies=latencies or None, batch_row_ms=args.batch_row_ms, sources=sources, cpu_ms=args.cpu_ms,
        managed_instance_type=args.managed_instance_type,
    )  # fmt: skip
    service = pieces.cost()
    if args.plot:
        if args.plot.suffix.lower() != ".png":
            raise BadRequest("--plot writes a PNG: name a .png file", field="plot")
        from sluice.cost.plot import draw

        rates, curves, report = service.curves(operator(args), args.name, request, prices_path=args.prices)
        draw(args.plot, rates, curves, report)
    else:
        report = service.estimate(operator(args), args.name, request, prices_path=args.prices)
    if args.json:
        print_json(report)
        return 0
    _print(report, args)
    return 0


def _print(report: dict[str, Any], args: argparse.Namespace) -> None:
    prices = report["prices"]
    print(
        f"deployment {report['deployment']} (revision {report['revision']}) at {report['workload']['rps']:g} req/s; "
        f"{prices['region']} prices as of {prices['as_of']}{'' if prices.get('verified') else ' (not verified: see the file)'}"
    )
    for kind, m in report["latency"].items():
        print(f"  {kind} latency p50 {m['p50_ms']:g} ms, p99 {m['p99_ms']:g} ms ({m['source']})")
    target = report["p99_target_ms"]
    rows = []
    for o in report["options"]:
        meets = "-" if not o["interactive"] else ("yes" if target is None or (o["p99_ms"] is not None and o["p99_ms"] <= target) else "no")
        rows.append({"runtime": o["runtime"], "usd_per_million": f"{o['usd_per_million']:.4f}",
                     "p99_ms": "-" if o["p99_ms"] is None else f"{o['p99_ms']:g}", "meets": meets, "how": o["how"]})  # fmt: skip
    table(rows, COLUMNS)
    best = report["recommendation"]
    print(f"recommended: {best['runtime']} ({report['why']})" if best else f"recommended: none ({report['why']})")
    print("cheapest at a steady rate" + ("" if target is None else f" (p99 at or under {target:g} ms)") + ":")
    for span in report["cheapest_by_rate"]:
        print(f"  {span['from_rps']:.4g} to {span['to_rps']:.4g} req/s: {span['runtime'] or 'none meets the target'}")
    if args.plot:
        print(f"curves: {args.plot}")


def add_cost_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    cost = sub.add_parser("cost", help="price a deployment per million predictions on each runtime")
    cost.add_argument("name", help="the deployment")
    cost.add_argument("--rps", type=float, default=1.0, help="mean traffic, predictions per second (default 1)")
    cost.add_argument("--p99-ms", type=float, help="recommend the cheapest runtime with a p99 at or under this")
    cost.add_argument("--region", default="us-east-1", help="price file's region (default us-east-1)")
    cost.add_argument("--prices", type=Path, help="another price file (JSON, the shape of sluice/cost/prices/*.json)")
    cost.add_argument("--instance-type", default="ml.g5.xlarge", help="SageMaker instance type (default ml.g5.xlarge)")
    cost.add_argument("--instance-rps", type=float, help="one instance's capacity in req/s (default: 4 in flight / p50)")
    cost.add_argument("--memory-mb", type=int, default=2048, help="the API function's memory (default 2048)")
    cost.add_argument("--architecture", default="x86_64", choices=["x86_64", "arm64"])
    cost.add_argument(
        "--latency", type=_latency, action="append", metavar="RUNTIME=P50[/P99]",
        help="a runtime's latency in ms from a benchmark (onnx or sagemaker), instead of the statistics",
    )  # fmt: skip
    cost.add_argument(
        "--benchmark", type=Path,
        help="a GPU benchmark's JSON (benchmarks/gpu/results/): the endpoint's p50/p99 and one server's req/s",
    )  # fmt: skip
    cost.add_argument("--cpu-ms", type=float, help="CPU a request uses, for managed instances (default: the onnx p50, an upper bound)")
    cost.add_argument("--managed-instance-type", help="Lambda Managed Instances' EC2 type (default c7i.xlarge, arm64 c7g.xlarge)")
    cost.add_argument("--batch-row-ms", type=float, help="a batch job's time per row (default: the p50, an upper bound)")
    cost.add_argument("--plot", type=Path, help="draw cost against traffic to this PNG (needs the cost extra)")
    cost.add_argument("--json", action="store_true")
    cost.set_defaults(func=cmd_cost)
