"""`sluice predict DEPLOYMENT`: one prediction, in this process."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from sluice.cli.common import get_container, load_json_arg, operator, print_json, version_number
from sluice.domain.errors import SluiceError

if TYPE_CHECKING:
    import argparse


def cmd_predict(args: argparse.Namespace) -> int:
    from sluice.api.present import plain_body
    from sluice.domain.requests import PredictionRequest, RowInputs

    given = {k: load_json_arg(v, k) for k in ("inputs", "features", "batch") if (v := getattr(args, k))}
    if len(given) != 1:
        raise SluiceError("give exactly one of --inputs, --features or --batch", field="inputs")
    container = get_container()
    request = PredictionRequest(
        deployment=args.deployment,
        inputs=RowInputs(**given),
        version=args.version,
        variant=args.variant,
        routing_key=args.routing_key,
    )
    prediction = asyncio.run(container.predictions.predict(operator(args), request))
    container.mirror.drain()  # type: ignore[union-attr]  # a short-lived process: let mirrors finish
    if container.capture is not None:
        container.capture.drain()  # and captured requests be written
    container.predictions.stats.flush()
    print_json(plain_body(prediction, several="batch" in given))
    return 0


def add_predict_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    predict = sub.add_parser("predict", help="predict with a deployment, in this process")
    predict.add_argument("deployment")
    predict.add_argument("--features", help='one row as JSON: {"name": value, ...}')
    predict.add_argument("--inputs", help="rows as JSON: [[...], ...] or {input: rows}")
    predict.add_argument("--batch", help="several rows as JSON, or @file.json")
    predict.add_argument("--version", type=version_number)
    predict.add_argument("--routing-key", help="sticky routing key for splits (e.g. a user id)")
    predict.add_argument("--variant", help="ask for a split's variant by name")
    predict.set_defaults(func=cmd_predict)
