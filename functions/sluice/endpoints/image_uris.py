"""The image URI of SageMaker's NVIDIA Triton container for a region, version and instance type.

The source of truth is the SageMaker Python SDK's image URI registry:
`image_uris.retrieve("sagemaker-tritonserver", region=..., version=..., instance_type=...)`,
in `sagemaker.core.image_uris` since SDK v3 (`sagemaker.image_uris` in v2). When the SDK is
installed it answers. It is not a dependency: it brings in a hundred-odd packages and takes
seconds to import, so the API Lambda never has it, and the registry accounts below are
carried instead, taken from the SDK's `image_uri_config/sagemaker-tritonserver.json`
(sagemaker-core 2.27.0, the same file as `infra/constructs/sagemaker-tritonserver.json`).

The tag rules follow the SDK: GPU instance families (g*, p*) get the plain `<version>-py3`
tag, every other family the `-cpu` build; Inferentia and Trainium have no Triton build.
"""

from __future__ import annotations

import importlib.util
import re
from typing import Literal

from sluice.domain.errors import BadRequest

FRAMEWORK = "sagemaker-tritonserver"
REPOSITORY = "sagemaker-tritonserver"
DEFAULT_VERSION = "25.09"
INSTANCE_TYPE = re.compile(r"^ml\.[a-z0-9]+\.[a-z0-9]+\Z")
Processor = Literal["gpu", "cpu"]

# Region -> the ECR registry account of the Triton images (one account per region in every version).
ACCOUNTS = {
    "af-south-1": "626614931356",
    "ap-east-1": "871362719292",
    "ap-east-2": "975050140332",
    "ap-northeast-1": "763104351884",
    "ap-northeast-2": "763104351884",
    "ap-northeast-3": "364406365360",
    "ap-south-1": "763104351884",
    "ap-south-2": "772153158452",
    "ap-southeast-1": "763104351884",
    "ap-southeast-2": "763104351884",
    "ap-southeast-3": "907027046896",
    "ap-southeast-4": "457447274322",
    "ap-southeast-5": "550225433462",
    "ap-southeast-6": "633930458069",
    "ap-southeast-7": "590183813437",
    "ca-central-1": "763104351884",
    "ca-west-1": "204538143572",
    "cn-north-1": "727897471807",
    "cn-northwest-1": "727897471807",
    "eu-central-1": "763104351884",
    "eu-central-2": "380420809688",
    "eu-north-1": "763104351884",
    "eu-south-1": "692866216735",
    "eu-south-2": "503227376785",
    "eu-west-1": "763104351884",
    "eu-west-2": "763104351884",
    "eu-west-3": "763104351884",
    "il-central-1": "780543022126",
    "me-central-1": "914824155844",
    "me-south-1": "217643126080",
    "mx-central-1": "637423239942",
    "sa-east-1": "763104351884",
    "us-east-1": "763104351884",
    "us-east-2": "763104351884",
    "us-west-1": "763104351884",
    "us-west-2": "763104351884",
}
_CHINA = frozenset({"cn-north-1", "cn-northwest-1"})
_SINCE_25_04 = frozenset(
    {
        "ap-east-2",
        "ap-south-2",
        "ap-southeast-4",
        "ap-southeast-5",
        "ap-southeast-7",
        "eu-central-2",
        "eu-south-2",
        "me-central-1",
        "mx-central-1",
    }
)
_FIRST = frozenset(ACCOUNTS) - _SINCE_25_04 - {"ap-southeast-6"}
# Version -> the regions the registry lists for it.
REGIONS: dict[str, frozenset[str]] = {
    **{v: _FIRST for v in ("23.12", "24.01", "24.03", "24.05", "24.09")},
    "25.04": _FIRST | _SINCE_25_04,
    **{v: (_FIRST | _SINCE_25_04 | {"ap-southeast-6"}) - _CHINA for v in ("25.09", "26.05")},
}


def check_instance_type(instance_type: str, *, field: str = "instance_type") -> Processor:
    """`ml.<family>.<size>`, and whether the Triton image for it is the GPU or the CPU build."""
    if not isinstance(instance_type, str) or not INSTANCE_TYPE.match(instance_type):
        raise BadRequest(
            "instance_type must look like ml.<family>.<size>, e.g. ml.g5.xlarge", field=field
        )
    family = instance_type.split(".")[1]
    if family.startswith(("inf", "trn")):
        raise BadRequest(
            f"the Triton image has no build for {instance_type} (Inferentia/Trainium); "
            "use a GPU (ml.g*, ml.p*) or CPU instance type",
            field=field,
        )
    return "gpu" if family[0] in ("g", "p") else "cpu"


def _from_table(region: str, version: str, processor: Processor) -> str:
    regions = REGIONS.get(version)
    if regions is None:
        raise BadRequest(
            f"unknown SageMaker Triton version {version!r}; known: {', '.join(sorted(REGIONS))}",
            field="triton_version",
        )
    if region not in regions:
        raise BadRequest(
            f"SageMaker Triton {version} is not offered in {region}", field="region"
        )
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    tag = f"{version}-py3" if processor == "gpu" else f"{version}-py3-cpu"
    return f"{ACCOUNTS[region]}.dkr.ecr.{region}.{suffix}/{REPOSITORY}:{tag}"


def _from_sdk(region: str, version: str, instance_type: str) -> str | None:
    """The SDK's answer, or None when it is not installed."""
    if importlib.util.find_spec("sagemaker") is None:  # locates the package without importing it
        return None
    try:
        from sagemaker.core import image_uris  # SDK v3
    except ImportError:
        try:
            from sagemaker import image_uris  # type: ignore[no-redef]  # SDK v2
        except ImportError:
            return None
    try:
        return str(
            image_uris.retrieve(FRAMEWORK, region=region, version=version, instance_type=instance_type)
        )
    except ValueError:
        # The SDK refused (an unknown version or region): the table says why in sluice's words,
        # or answers when it knows a region this SDK release does not.
        return _from_table(region, version, check_instance_type(instance_type))


def triton_image_uri(
    region: str, *, instance_type: str, version: str = DEFAULT_VERSION, use_sdk: bool = True
) -> str:
    """The Triton image for `instance_type` in `region`, from the SDK when it is installed."""
    processor = check_instance_type(instance_type)
    if use_sdk:
        found = _from_sdk(region, version, instance_type)
        if found is not None:
            return found
    return _from_table(region, version, processor)
