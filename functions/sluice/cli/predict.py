"""`sluice predict DEPLOYMENT`: one prediction, in this process, or through a sluice API
(`--api URL`, or `SLUICE_API_URL`), where a body too large to send in line goes through an
upload by itself (see `sluice.cli.remote`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from sluice.cli import pieces
from sluice.cli.common import (
    count,
    load_json_arg,
    number_between,
    operator,
    print_json,
    version_number,
)
from sluice.domain.errors import SluiceError

if TYPE_CHECKING:
    import argparse


def cmd_predict(args: argparse.Namespace) -> int:
    import asyncio
    from pathlib import Path

    from sluice.api.present import plain_body, v2_body
    from sluice.cli.remote import UPLOAD_ABOVE, api_from, predict_remote
    from sluice.codecs.binary import json_tensors
    from sluice.domain.requests import (
        ROW_FIELDS,
        PredictionRequest,
        RowInputs,
        TensorInputs,
        routing_key_of,
    )

    given = {k: load_json_arg(v, k) for k in ROW_FIELDS if (v := getattr(args, k))}
    path = Path(args.file) if args.file else None
    if len(given) + (path is not None) != 1:
        raise SluiceError("give exactly one of --inputs, --features, --batch or --file", field="inputs")
    if args.v2 and path is None:
        raise SluiceError("--v2 reads an Open Inference Protocol request from --file", field="file")
    # What the flags ask (--version, --variant, --routing-key, --param), over what a --file says:
    # the same request in this process and through an API (`with_flags`).
    flags = Flags(args.version, args.variant, args.routing_key, _parameters(args.param or []))
    api = api_from(args)
    if api is not None:
        upload_above = UPLOAD_ABOVE if args.upload_above is None else args.upload_above
        answer = predict_remote(api, args.deployment, path=path, given=given, v2=args.v2, upload_above=upload_above, wait_s=args.wait_s, flags=flags)
        print_json(answer)
        return 0
    body = flags.applied(load_json_arg(f"@{path}", "file") if path is not None else dict(given), args.deployment, v2=args.v2)
    predictions = pieces.predictions()
    if args.v2:
        from sluice.codecs.classification import asked
        from sluice.types.v2 import InferenceRequest

        parsed = _checked(InferenceRequest, body)  # a --file's (--v2 reads one)
        params = parsed.parameters or {}
        if params.get("upload_id") is not None:
            raise SluiceError("--file names an upload (parameters.upload_id), which only an API reads: give its inputs, or --api", field="file.parameters.upload_id")
        # The outputs asked for, and their classification, as the API reads them (`sluice.api.predict.infer`)
        wanted = tuple(out.name for out in parsed.outputs) if parsed.outputs else None
        classify = asked((out.name, out.parameters) for out in parsed.outputs) if parsed.outputs else None
        request = PredictionRequest(
            deployment=args.deployment,
            inputs=TensorInputs(json_tensors(parsed.inputs)),
            version=args.version, outputs=wanted, classify=classify, variant=params.get("variant"),
            routing_key=routing_key_of(params), parameters=params or None,
        )  # fmt: skip
    else:
        from sluice.types.api import PredictionRequest as Body

        plain = _checked(Body, body, next(iter(given), None))
        if plain.upload_id is not None:
            raise SluiceError("--file names an upload (upload_id), which only an API reads: give its rows, or --api", field="file.upload_id")
        rows = {k: v for k in ROW_FIELDS if (v := getattr(plain, k)) is not None}
        if len(rows) != 1:
            raise SluiceError("--file holds a prediction body with exactly one of inputs, features or batch", field="file")
        request = PredictionRequest(
            deployment=args.deployment, inputs=RowInputs(**rows), version=plain.version, variant=plain.variant,
            routing_key=plain.routing_key, parameters=plain.parameters or None,
        )  # fmt: skip
    prediction = asyncio.run(predictions.predict(operator(args), request))
    pieces.settle()  # a short-lived process: let mirrors finish, captured requests be written
    if args.v2:
        print_json(v2_body(prediction, request_id=parsed.id, wanted=wanted, classify=classify))
    else:
        print_json(plain_body(prediction, several=prediction.batch, return_probabilities=plain.options.return_probabilities))
    return 0


class Flags(NamedTuple):
    """What `sluice predict`'s flags ask of the request, whichever way it goes."""

    version: int | None
    variant: str | None
    routing_key: str | None
    parameters: dict[str, Any]

    def applied(self, body: Any, deployment: str, *, v2: bool) -> dict[str, Any]:
        """`body` (a --file's request, or the rows given) with the flags over it: a simple-JSON
        request's own fields, an Open Inference Protocol request's `parameters` (its version is
        in its route)."""
        if not isinstance(body, dict):
            raise SluiceError(f"--file holds JSON {type(body).__name__}: a request is an object", field="file")
        held = body.get("parameters") or {}
        if not isinstance(held, dict):
            raise SluiceError(f"--file's parameters are an object of names and values, not {type(held).__name__}", field="file.parameters")
        parameters = {**held, **self.parameters}
        if v2:
            parameters.update({k: v for k, v in (("variant", self.variant), ("routing_key", self.routing_key)) if v is not None})
            return {**body, "parameters": parameters} if parameters else body
        asked = {k: v for k, v in (("version", self.version), ("variant", self.variant), ("routing_key", self.routing_key)) if v is not None}
        return {**body, "deployment": deployment, **asked, **({"parameters": parameters} if parameters else {})}


def _checked(model: Any, body: dict[str, Any], flag: str | None = None) -> Any:
    """`body` read as the API reads it (`model`), its first problem named under `file`, or under
    the flag that gave the rows (`--features`, `--batch`, `--inputs`)."""
    from pydantic import ValidationError

    try:
        return model.model_validate(body)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        if flag is not None and (where == flag or where.startswith(f"{flag}.")):
            rest = where[len(flag) + 1 :]
            raise SluiceError(f"--{flag}: {rest + ': ' if rest else ''}{first['msg']}", field=where) from None
        raise SluiceError(f"--file: {where}: {first['msg']}", field=f"file.{where}" if where else "file") from None


def _parameters(given: list[str]) -> dict[str, Any]:
    """`--param NAME=VALUE`s as a request's parameters: a number or true/false as such (JSON),
    anything else as text; held to the API's rules for them (at most 32, strings, numbers and
    booleans), so this process and a remote API take the same."""
    from pydantic import ValidationError

    from sluice.codecs.json_text import NestedTooDeep, loads_as_python
    from sluice.types.api import PredictionRequest as Body

    parameters: dict[str, Any] = {}
    for item in given:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise SluiceError(f"--param takes NAME=VALUE, not {item!r}", field="param")
        try:
            value = loads_as_python(text)
        except (ValueError, NestedTooDeep):
            value = text
        parameters[name] = value if isinstance(value, bool | int | float) else text
    try:
        Body.model_validate({"deployment": "-", "parameters": parameters})
    except ValidationError as e:
        first = e.errors()[0]
        raise SluiceError(f"--param: {first['msg']}", field=".".join(str(p) for p in first["loc"])) from None
    return parameters


def add_predict_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    predict = sub.add_parser("predict", help="predict with a deployment, in this process or through an API (--api)")
    predict.add_argument("deployment")
    predict.add_argument("--features", help='one row as JSON: {"name": value, ...}')
    predict.add_argument("--inputs", help="rows as JSON: [[...], ...] or {input: rows}")
    predict.add_argument("--batch", help="several rows as JSON, or @file.json")
    predict.add_argument("--version", type=version_number)
    predict.add_argument("--routing-key", help="sticky routing key for splits (e.g. a user id)")
    predict.add_argument("--variant", help="ask for a split's variant by name")
    predict.add_argument(
        "--param", action="append", metavar="NAME=VALUE", help="a request parameter a switch may read (repeatable; numbers and true/false as such)"
    )
    predict.add_argument("--file", help="a prediction body in a file: {inputs|features|batch: ...}, or with --v2 a v2 inference request")
    predict.add_argument("--v2", action="store_true", help="--file is an Open Inference Protocol request (JSON)")
    predict.add_argument("--api", help="a sluice API to call instead of predicting in this process (or SLUICE_API_URL)")
    predict.add_argument("--api-key", help="its API key (or SLUICE_API_KEY)")
    predict.add_argument(
        "--upload-above", type=count, help=f"with --api: send a --file larger than this many bytes through an upload (default {4 * 1024 * 1024})"
    )
    predict.add_argument(
        "--wait-s",
        type=number_between(0, 24 * 3600, refusal="--wait-s is seconds, from 0 to 86400 (a day)"),
        default=900.0,
        help="with --api: how long to wait for an asynchronous result",
    )
    predict.set_defaults(func=cmd_predict)
