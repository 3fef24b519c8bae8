"""A model taken from the registry that keeps it, as the ONNX bytes a push stores: an MLflow
model version (or run), or a SageMaker Model Registry package. Its ONNX model is taken as it
is; another framework's is converted and checked on the logged input example (or `sample`).
`sluice models push` and the follow bindings (`sluice.convert.follow`) both pull through here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import BadRequest

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.clients import AwsClients

DEFAULT_TOLERANCE = 1e-4


@dataclass(frozen=True, slots=True)
class Check:
    """What the person pushing says about the check of a conversion (all optional)."""

    sample: Path | None = None
    tolerance: float | None = None
    n_features: int | None = None
    feature_names: list[str] | None = None

    def refuse_for_onnx(self, what: str) -> None:
        if self.sample or self.tolerance is not None:
            raise BadRequest(f"--sample and --tolerance check a conversion; {what} is pushed as it is", field="sample")


@dataclass(frozen=True, slots=True)
class Pulled:
    data: bytes  # the ONNX model
    feature_names: list[str] | None
    note: str  # what was done, in words, for the person pushing
    source: dict[str, Any]  # where it came from: `ModelVersion.source`


def from_mlflow(uri: str, tracking_uri: str | None, tmp: Path, check: Check = Check()) -> Pulled:
    from sluice.convert import mlflow_models as mm

    fetched = mm.fetch(uri, tracking_uri, tmp)
    flavor = mm.flavor_of(fetched)
    hinted, width = mm.signature_hint(fetched)
    names = check.feature_names or hinted
    source = {**fetched.source, "flavor": flavor}
    if flavor == "onnx":
        check.refuse_for_onnx("an ONNX flavor")
        return Pulled(mm.onnx_bytes(fetched), names, f"took {uri}'s onnx flavor as it is\n", source)
    from sluice.convert.check import checked, convert_loaded

    converted = convert_loaded(
        mm.load(fetched, flavor), sample=check.sample, example=None if check.sample else mm.example_rows(fetched, names),
        tolerance=DEFAULT_TOLERANCE if check.tolerance is None else check.tolerance,
        n_features=check.n_features or width, feature_names=names,
    )  # fmt: skip
    note = f"converted {uri}'s {flavor} flavor, checked on {converted.sample}: {checked(converted)}\n"
    return Pulled(converted.onnx, converted.feature_names, note, source)


def from_package(
    arn: str, clients: AwsClients, tmp: Path, check: Check = Check(), *, allow_unapproved: bool = False,
    model_data: Callable[[str], str] | None = None,
) -> Pulled:  # fmt: skip
    """The package's model, pulled. `model_data`: the model data URL as it may be read on a
    tenant's behalf (refusing one outside its locations); None: read where the package says."""
    from sluice.convert import sagemaker_packages as sm
    from sluice.convert.frameworks import SUFFIXES

    package = sm.describe(arn, clients, allow_unapproved=allow_unapproved)
    if model_data is not None:
        from dataclasses import replace

        package = replace(package, model_data_url=model_data(package.model_data_url))
    path = sm.model_file(package, sm.download(package, clients, tmp), tmp)
    said = f"{package.group} version {package.version} ({package.approval_status})"
    if SUFFIXES.get(path.suffix.lower(), "onnx") == "onnx":
        check.refuse_for_onnx("an ONNX model")
        return Pulled(path.read_bytes(), check.feature_names, f"took the ONNX model of {said} as it is\n", package.source)
    from sluice.convert.check import checked, convert

    converted = convert(
        path, sample=check.sample, tolerance=DEFAULT_TOLERANCE if check.tolerance is None else check.tolerance,
        n_features=check.n_features, feature_names=check.feature_names,
    )  # fmt: skip
    note = f"converted {said}'s {converted.format} model, checked on {converted.sample}: {checked(converted)}\n"
    return Pulled(converted.onnx, converted.feature_names, note, package.source)
