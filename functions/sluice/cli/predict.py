"""`sluice predict DEPLOYMENT`: one prediction, in this process."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from sluice.cli.common import get_container, load_json_arg, operator, print_json
from sluice.domain.errors import SluiceError

if TYPE_CHECKING:
    import argparse


def cmd_predict(args: argparse.Namespace) -> int:
    from sluice.codecs.plain import arrays_from_request, present_rows

    given = {k: load_json_arg(v, k) for k in ("inputs", "features", "batch") if (v := getattr(args, k))}
    if len(given) != 1:
        raise SluiceError("give exactly one of --inputs, --features or --batch", field="inputs")
    container = get_container()
    service = container.predictions
    resolved = service.resolve(operator(args), args.deployment, version=args.version)
    arrays = service.check(resolved, arrays_from_request(resolved.version.signature, **given))
    async def run() -> Any:
        prediction = await service.infer(
            resolved, arrays, routing=lambda _: args.routing_key, variant=args.variant
        )
        for job in prediction.mirrors:
            await container.mirror.submit(job)  # type: ignore[union-attr]
        return prediction

    prediction = asyncio.run(run())
    container.mirror.drain()  # type: ignore[union-attr]  # a short-lived process: let mirrors finish
    service.stats.flush()
    answer = prediction.answer
    rows = present_rows(answer.signature, answer.result)
    out: dict[str, Any] = {
        "deployment": resolved.deployment.name,
        "model": answer.version.model,
        "version": answer.version.version,
        "latency_ms": prediction.latency_ms,
    }
    if answer.variant:
        out["variant"] = answer.variant
    if answer.members:
        out["members"] = answer.members
    if "batch" in given or len(rows) != 1:
        out["predictions"] = rows
    else:
        out.update(rows[0])
    print_json(out)
    return 0


def add_predict_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    predict = sub.add_parser("predict", help="predict with a deployment, in this process")
    predict.add_argument("deployment")
    predict.add_argument("--features", help='one row as JSON: {"name": value, ...}')
    predict.add_argument("--inputs", help="rows as JSON: [[...], ...] or {input: rows}")
    predict.add_argument("--batch", help="several rows as JSON, or @file.json")
    predict.add_argument("--version", type=int)
    predict.add_argument("--routing-key", help="sticky routing key for splits (e.g. a user id)")
    predict.add_argument("--variant", help="ask for a split's variant by name")
    predict.set_defaults(func=cmd_predict)
