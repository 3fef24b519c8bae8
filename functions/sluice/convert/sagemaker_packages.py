"""A model package version of SageMaker Model Registry
(`sluice models push NAME arn:aws:sagemaker:REGION:ACCOUNT:model-package/GROUP/VERSION`):
DescribeModelPackage gives its approval status and inference specification; the first
container's model data (an S3 object, often a `model.tar.gz`) holds the model.

An ONNX model in it is pushed as it is: a lone `.onnx` file, or the `model.onnx` of a Triton
model repository (`NAME/config.pbtxt`, `NAME/1/model.onnx`); `--runtime sagemaker` then serves
it from a Triton endpoint as any pushed version. A scikit-learn, XGBoost or LightGBM file goes
through the converters. By default only an Approved package is pushed.
"""

from __future__ import annotations

import re
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import (
    BadRequest,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    SluiceError,
    Unprocessable,
)
from sluice.domain.follows import PACKAGE_ARN

if TYPE_CHECKING:
    from sluice.clients import AwsClients

APPROVED = "Approved"
MAX_BYTES = 2 * 1024**3


class NotApproved(SluiceError):
    status, code = 409, "package_not_approved"


def is_package_arn(text: str) -> bool:
    return text.startswith("arn:")


@dataclass(slots=True)
class Package:
    arn: str
    region: str
    group: str
    version: int
    approval_status: str
    framework: str | None
    model_data_url: str
    compressed: bool

    @property
    def source(self) -> dict[str, Any]:
        return {
            "registry": "sagemaker", "arn": self.arn, "group": self.group, "version": self.version,
            "approval_status": self.approval_status, "framework": self.framework, "model_data_url": self.model_data_url,
        }  # fmt: skip


def parse_arn(arn: str) -> re.Match[str]:
    found = PACKAGE_ARN.match(arn)
    if found is None:
        raise BadRequest(
            f"{arn!r} is not a model package version's ARN: arn:aws:sagemaker:REGION:ACCOUNT:model-package/GROUP/VERSION",
            field="file",
        )
    return found


def _error(exc: Any) -> tuple[str, str]:
    error = getattr(exc, "response", {}).get("Error", {})
    return str(error.get("Code", type(exc).__name__)), str(error.get("Message", exc))


def describe(arn: str, clients: AwsClients, *, allow_unapproved: bool = False) -> Package:
    """The package, or a clear refusal: unknown, not readable, not Approved (unless allowed),
    or without model data in S3."""
    from botocore.exceptions import BotoCoreError, ClientError

    found = parse_arn(arn)
    try:
        described = clients.client("sagemaker", region=found["region"]).describe_model_package(ModelPackageName=arn)
    except ClientError as exc:
        code, message = _error(exc)
        if code in ("AccessDeniedException", "AccessDenied", "UnrecognizedClientException"):
            raise Forbidden(f"SageMaker refused to describe {arn}: {message}", field="file") from None
        raise NotFound(f"no model package {arn} in SageMaker Model Registry: {message}", field="file") from None
    except BotoCoreError as exc:  # no credentials, no connection
        raise BadRequest(f"cannot reach SageMaker Model Registry for {arn}: {exc}", field="file") from None
    status = str(described.get("ModelApprovalStatus") or "PendingManualApproval")
    if status != APPROVED and not allow_unapproved:
        raise NotApproved(
            f"{arn} is {status} in SageMaker Model Registry; only an Approved package is pushed "
            f"(approve it, or give --allow-unapproved)",
            field="file", approval_status=status,
        )  # fmt: skip
    containers = (described.get("InferenceSpecification") or {}).get("Containers") or []
    if not containers:
        raise Unprocessable(f"{arn} has no inference specification containers", field="file")
    container = containers[0]
    s3 = (container.get("ModelDataSource") or {}).get("S3DataSource") or {}
    url = container.get("ModelDataUrl") or s3.get("S3Uri")
    if not url or not str(url).startswith("s3://"):
        raise Unprocessable(f"{arn}'s first container has no model data in S3 (ModelDataUrl)", field="file")
    if s3.get("S3DataType") == "S3Prefix" and not container.get("ModelDataUrl"):
        raise Unprocessable(f"{arn}'s model data is an S3 prefix ({url}); sluice reads one object", field="file")
    compressed = s3.get("CompressionType") == "Gzip" or str(url).endswith((".tar.gz", ".tgz"))
    return Package(arn, found["region"], found["group"], int(found["version"]), status,
                   container.get("Framework"), str(url), compressed)  # fmt: skip


def download(package: Package, clients: AwsClients, into: Path) -> Path:
    """The model data as a local file."""
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, _, key = package.model_data_url.removeprefix("s3://").partition("/")
    target = into / (PurePosixPath(key).name or "model")
    try:
        s3 = clients.client("s3", region=package.region)
        size = int(s3.head_object(Bucket=bucket, Key=key)["ContentLength"])
        if size > MAX_BYTES:
            raise PayloadTooLarge(f"{package.model_data_url} is {size} bytes; above 2 GiB is not supported", field="file")
        s3.download_file(bucket, key, str(target))
    except ClientError as exc:
        code, message = _error(exc)
        raise NotFound(f"cannot read {package.arn}'s model data {package.model_data_url}: {code} {message}", field="file") from None
    except BotoCoreError as exc:
        raise BadRequest(f"cannot read {package.model_data_url}: {exc}", field="file") from None
    return target


def model_file(package: Package, data: Path, into: Path) -> Path:
    """The one model file in the model data: the object itself, or the ONNX model (else the one
    file a converter takes) inside its tarball, read without extracting anything else."""
    from sluice.convert.frameworks import SUFFIXES

    if not package.compressed and not tarfile.is_tarfile(data):
        return data
    try:
        with tarfile.open(data, "r:*") as tar:
            files = [m for m in tar.getmembers() if m.isfile() and not PurePosixPath(m.name).name.startswith(".")]
            onnx = [m for m in files if m.name.endswith(".onnx")]
            # `.json` and `.txt` say too little to be taken for an XGBoost or LightGBM model here.
            convertible = [m for m in files if PurePosixPath(m.name).suffix.lower() in set(SUFFIXES) - {".onnx", ".json", ".txt"}]
            chosen = onnx if onnx else convertible
            if len(chosen) != 1:
                names = ", ".join(m.name for m in files[:10]) or "no files"
                what = "several ONNX models" if len(onnx) > 1 else "no single model file sluice reads"
                raise Unprocessable(
                    f"{package.model_data_url} ({package.framework or 'no framework given'}) holds {what}: {names}; "
                    f"sluice takes one .onnx file (or a Triton repository of one ONNX model), or one scikit-learn, "
                    f"XGBoost or LightGBM file",
                    field="file",
                )
            member = chosen[0]
            source = tar.extractfile(member)
            if source is None:  # pragma: no cover - regular files always have a reader
                raise Unprocessable(f"cannot read {member.name} in {package.model_data_url}", field="file")
            target = into / f"model{PurePosixPath(member.name).suffix}"
            with source, target.open("wb") as out:
                while chunk := source.read(1 << 20):
                    out.write(chunk)
            return target
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise Unprocessable(f"{package.model_data_url} is not a readable tarball: {exc}", field="file") from None
