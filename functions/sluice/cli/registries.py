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

    return is_mlflow_uri(text)


def push_from_registry(args: argparse.Namespace) -> int:
    if args.format not in (None, "auto"):
        raise BadRequest("--format is for a file; a registry says what its model holds", field="format")
    with tempfile.TemporaryDirectory(prefix="sluice-registry-") as tmp:
        data, names, note, source = _from_mlflow(args, Path(tmp))
    version = pieces.models().push(
        operator(args), args.name, data, runtime=args.runtime,
        config=load_json_arg(args.config, "config") if args.config else None,
        feature_names=names, description=args.description, source=source,
    )  # fmt: skip
    print(f"{note}pushed {version.model} version {version.version} (sha256 {version.sha256[:12]}, {version.size_bytes} bytes) from {args.file}")
    return 0


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
