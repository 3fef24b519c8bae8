"""`sluice models push | register-triton | list | show`."""

from __future__ import annotations

import argparse
from pathlib import Path

from sluice.cli import pieces
from sluice.cli.common import (
    existing_file,
    feature_names,
    load_json_arg,
    number_between,
    operator,
    positive,
    print_json,
    table,
)
from sluice.convert.frameworks import FORMATS
from sluice.domain.errors import SluiceError


def cmd_models_push(args: argparse.Namespace) -> int:
    from sluice.cli.registries import is_registry_uri, push_from_registry

    if is_registry_uri(args.file):
        return push_from_registry(args)
    path = existing_file(args.file, "file")
    names = feature_names(args.feature_names)
    config = load_json_arg(args.config, "config") if args.config else None
    data, note = path.read_bytes(), ""
    if _is_onnx(path, args.format):
        if args.sample or args.tolerance is not None:
            raise SluiceError("--sample and --tolerance check a conversion; an ONNX file is pushed as it is", field="sample")
    else:
        # Converted here, on the user's machine: the service only ever takes ONNX.
        from sluice.convert.check import checked, convert

        converted = convert(
            path, fmt=args.format, sample=Path(args.sample) if args.sample else None,
            tolerance=1e-4 if args.tolerance is None else args.tolerance,
            n_features=args.n_features, feature_names=names,
        )  # fmt: skip
        data, names = converted.onnx, converted.feature_names
        note = f"converted from {converted.format}, checked on {converted.sample}: {checked(converted)}\n"
    version = pieces.models().push(
        operator(args),
        args.name,
        data,
        runtime=args.runtime,
        config=config,
        feature_names=names,
        description=args.description,
    )
    print(f"{note}pushed {version.model} version {version.version} (sha256 {version.sha256[:12]}, {version.size_bytes} bytes)")
    return 0


def _is_onnx(path: Path, fmt: str | None) -> bool:
    """A file is converted when --format or its name says another framework; else it is ONNX."""
    from sluice.convert.frameworks import SUFFIXES

    if fmt and fmt != "auto":
        return fmt == "onnx"
    return SUFFIXES.get(path.suffix.lower(), "onnx") == "onnx"


def cmd_models_register_triton(args: argparse.Namespace) -> int:
    import asyncio

    version = asyncio.run(
        pieces.models().register_triton(
            operator(args), args.name, args.url, model_name=args.model_name, model_version=args.model_version or "",
            protocol=args.protocol,
            feature_names=feature_names(args.feature_names),
        )
    )  # fmt: skip
    print(f"registered {version.model} version {version.version} -> {args.url} model {version.config.get('model_name')}")
    return 0


def cmd_models_list(args: argparse.Namespace) -> int:
    service, registry = pieces.models(), pieces.registry()
    rows = []
    for model in service.list_models(operator(args)):
        versions = registry.list_versions(args.tenant, model.name)
        rows.append({"name": model.name, "versions": len(versions), "latest": versions[-1].version if versions else "-", "description": model.description})
    table(rows, ["name", "versions", "latest", "description"])
    return 0


def cmd_models_show(args: argparse.Namespace) -> int:
    from sluice.api.presenters import version_out

    service = pieces.models()
    principal = operator(args)
    if ":" in args.name:  # MODEL:VERSION, as the other commands take it
        from sluice.domain.errors import BadRequest
        from sluice.domain.values import parse_model_ref

        args.name, version = parse_model_ref(args.name, field="name")
        if args.version and args.version != str(version):
            raise BadRequest(f"MODEL:{version} and --version {args.version} name two versions: give one", field="version")
        args.version = str(version)
    if args.version:
        print_json(version_out(service.get_version(principal, args.name, args.version)))
    else:
        versions = service.list_versions(principal, args.name)
        lineage = [
            {"version": v.version, "derived_from": v.derived_from, "candidate": (v.optimization or {}).get("candidate"),
             "tool": (v.optimization or {}).get("tool")}
            if v.derived_from else {"version": v.version, "source": v.source}
            for v in versions if v.derived_from or v.source
        ]  # fmt: skip
        print_json({"name": args.name, "versions": [version_out(v) for v in versions], "lineage": lineage})
    return 0


def add_model_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    models = sub.add_parser("models", help="push and inspect models").add_subparsers(dest="action", required=True)
    push = models.add_parser(
        "push",
        help="push a model as its next version: an ONNX file, or a scikit-learn, XGBoost, LightGBM or PyTorch model converted to ONNX here",
    )
    push.add_argument("name")
    push.add_argument(
        "file",
        help=".onnx; .joblib/.pkl (scikit-learn); .json/.ubj (XGBoost); .txt/.lgb (LightGBM); .pt (TorchScript); .pt2 (torch.export); "
        "or a registry's model: models:/NAME/VERSION, models:/NAME@ALIAS, runs:/RUN_ID/PATH (MLflow), "
        "arn:aws:sagemaker:…:model-package/GROUP/VERSION (SageMaker Model Registry); see docs/registries.md",
    )
    push.add_argument("--tracking-uri", help="the MLflow tracking server or store for models:/ and runs:/ (default: MLFLOW_TRACKING_URI)")
    push.add_argument("--allow-unapproved", action="store_true", help="push a SageMaker model package that is not Approved")
    push.add_argument("--format", choices=["auto", *FORMATS], default="auto", help="what FILE holds (default: from its name)")
    push.add_argument("--sample", help="rows to check the conversion on (.parquet, .csv, .jsonl; default: generated rows)")
    push.add_argument("--tolerance", type=number_between(0, refusal="a tolerance is 0 or more"), help="largest difference allowed, times max(1, |value|) (default 1e-4)")
    push.add_argument("--n-features", type=positive, help="features per row, when the model file does not say (TorchScript)")
    push.add_argument("--feature-names", help="comma-separated names of the input's columns")
    push.add_argument("--description", default="")
    push.add_argument("--runtime", default="onnx", choices=["onnx", "sagemaker"], help="where the version runs")
    push.add_argument("--config", help='runtime config as JSON (sagemaker: {"endpoint_name": ...}), or @file.json')
    push.set_defaults(func=cmd_models_push)
    triton = models.add_parser("register-triton", help="register a model a Triton server serves (signature read from it)")
    triton.add_argument("name")
    triton.add_argument("--url", required=True, help="the server's HTTP address, e.g. http://127.0.0.1:8000")
    triton.add_argument("--model-name", help="its name on the server (default: NAME)")
    triton.add_argument("--model-version", help="a version on the server (default: latest)")
    triton.add_argument("--feature-names")
    triton.add_argument("--protocol", default="http", choices=["http", "grpc"], help="how sluice calls it (grpc: --url http://host:8001)")
    triton.set_defaults(func=cmd_models_register_triton)
    models.add_parser("list", help="list models").set_defaults(func=cmd_models_list)
    show = models.add_parser("show", help="show a model's versions, or one version")
    show.add_argument("name", metavar="MODEL[:VERSION]")
    show.add_argument("--version", help="a number or 'latest'")
    show.set_defaults(func=cmd_models_show)
