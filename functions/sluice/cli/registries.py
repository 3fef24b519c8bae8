"""`sluice models push NAME models:/…` (or `runs:/…`, or a SageMaker model package ARN): a model
pushed from where it lives, its source recorded on the version (docs/registries.md)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.cli import pieces
from sluice.cli.common import feature_names, load_json_arg, operator
from sluice.domain.errors import BadRequest

if TYPE_CHECKING:
    import argparse


def is_registry_uri(text: str) -> bool:
    from sluice.convert.mlflow_models import is_mlflow_uri

    return is_mlflow_uri(text) or text.startswith("arn:")


def push_from_registry(args: argparse.Namespace) -> int:
    from sluice.convert.registry_pull import Check, from_mlflow, from_package

    if args.format not in (None, "auto"):
        raise BadRequest("--format is for a file; a registry says what its model holds", field="format")
    check = Check(
        sample=Path(args.sample) if args.sample else None, tolerance=args.tolerance,
        n_features=args.n_features, feature_names=feature_names(args.feature_names),
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="sluice-registry-") as tmp:
        if args.file.startswith("arn:"):
            from sluice.clients import AwsClients

            pulled = from_package(args.file, AwsClients(), Path(tmp), check, allow_unapproved=args.allow_unapproved)
        else:
            pulled = from_mlflow(args.file, args.tracking_uri, Path(tmp), check)
    version = pieces.models().push(
        operator(args), args.name, pulled.data, runtime=args.runtime,
        config=load_json_arg(args.config, "config") if args.config else None,
        feature_names=pulled.feature_names, description=args.description, source=pulled.source,
    )  # fmt: skip
    print(f"{pulled.note}pushed {version.model} version {version.version} (sha256 {version.sha256[:12]}, {version.size_bytes} bytes) from {args.file}")
    return 0
