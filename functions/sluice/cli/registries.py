"""`sluice models push NAME models:/…` (or `runs:/…`): a model pushed from where it lives, its
source recorded on the version (docs/registries.md)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.cli import pieces
from sluice.cli.common import feature_names, load_json_arg, operator
from sluice.domain.errors import BadRequest

if TYPE_CHECKING:
    import argparse


def is_registry_uri(text: str) -> bool:
    from sluice.convert.mlflow_models import is_mlflow_uri

    return is_mlflow_uri(text) or text.startswith("arn:")


def push_from_registry(args: argparse.Namespace) -> int:
    if args.format not in (None, "auto"):
        raise BadRequest("--format is for a file; a registry says what its model holds", field="format")
    with tempfile.TemporaryDirectory(prefix="sluice-registry-") as tmp:
        pushed = _from_package if args.file.startswith("arn:") else _from_mlflow
        data, names, note, source = pushed(args, Path(tmp))
    version = pieces.models().push(
        operator(args), args.name, data, runtime=args.runtime,
        config=load_json_arg(args.config, "config") if args.config else None,
        feature_names=names, description=args.description, source=source,
    )  # fmt: skip
    print(f"{note}pushed {version.model} version {version.version} (sha256 {version.sha256[:12]}, {version.size_bytes} bytes) from {args.file}")
    return 0


def _from_package(args: argparse.Namespace, tmp: Path) -> tuple[bytes, list[str] | None, str, dict[str, Any]]:
    from sluice.clients import AwsClients
    from sluice.convert import sagemaker_packages as sm
    from sluice.convert.frameworks import SUFFIXES

    clients = AwsClients()
    package = sm.describe(args.file, clients, allow_unapproved=args.allow_unapproved)
    path = sm.model_file(package, sm.download(package, clients, tmp), tmp)
    names = feature_names(args.feature_names)
    said = f"{package.group} version {package.version} ({package.approval_status})"
    if SUFFIXES.get(path.suffix.lower(), "onnx") == "onnx":
        if args.sample or args.tolerance is not None:
            raise BadRequest("--sample and --tolerance check a conversion; an ONNX model is pushed as it is", field="sample")
        return path.read_bytes(), names, f"took the ONNX model of {said} as it is\n", package.source
    from sluice.convert.check import convert

    converted = convert(
        path, sample=Path(args.sample) if args.sample else None,
        tolerance=1e-4 if args.tolerance is None else args.tolerance, n_features=args.n_features, feature_names=names,
    )  # fmt: skip
    note = f"converted {said}'s {converted.format} model, checked on {converted.sample}: max abs diff {converted.max_abs_diff:.3g}\n"
    return converted.onnx, converted.feature_names, note, package.source


def _from_mlflow(args: argparse.Namespace, tmp: Path) -> tuple[bytes, list[str] | None, str, dict[str, Any]]:
    from sluice.convert import mlflow_models as mm

    fetched = mm.fetch(args.file, args.tracking_uri, tmp)
    flavor = mm.flavor_of(fetched)
    hinted, width = mm.signature_hint(fetched)
    names = feature_names(args.feature_names) or hinted
    source = {**fetched.source, "flavor": flavor}
    if flavor == "onnx":
        if args.sample or args.tolerance is not None:
            raise BadRequest("--sample and --tolerance check a conversion; an ONNX flavor is pushed as it is", field="sample")
        return mm.onnx_bytes(fetched), names, f"took {args.file}'s onnx flavor as it is\n", source
    from sluice.convert.check import convert_loaded

    converted = convert_loaded(
        mm.load(fetched, flavor), sample=Path(args.sample) if args.sample else None,
        example=None if args.sample else mm.example_rows(fetched, names),
        tolerance=1e-4 if args.tolerance is None else args.tolerance,
        n_features=args.n_features or width, feature_names=names,
    )  # fmt: skip
    agreement = f", labels agree on {converted.label_agreement:.2%}" if converted.label_agreement is not None else ""
    note = (
        f"converted {args.file}'s {flavor} flavor, checked on {converted.sample}: "
        f"max abs diff {converted.max_abs_diff:.3g}{agreement}\n"
    )
    return converted.onnx, converted.feature_names, note, source
