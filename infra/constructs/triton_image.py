"""The image URI of SageMaker's NVIDIA Triton container for a region, resolved at synth time.

The source of truth is the SageMaker Python SDK's image URI registry: the file
`sagemaker-tritonserver.json` that `sagemaker.image_uris.retrieve("sagemaker-tritonserver",
region=…, version=…, instance_type=…)` reads (`sagemaker.core.image_uris` in SDK v3). The
SDK brings in about 130 packages and takes seconds to import, too much for a CDK app's
dependencies, so a copy of that one file sits beside this module; when the SDK is
installed its own copy is read instead. The tag rules follow the SDK: GPU instance families
(g*, p*) get the plain tag, the rest the `-cpu` variant.

With no concrete region at synth time (an environment-agnostic stack), the account comes
from a CloudFormation mapping keyed by region, so the template still deploys anywhere the
registry lists.
"""

from __future__ import annotations

import importlib.util
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from aws_cdk import Aws, CfnMapping, Stack, Token
from constructs import Construct

REGISTRY_FILE = "sagemaker-tritonserver.json"
VENDORED_REGISTRY = Path(__file__).with_name(REGISTRY_FILE)


def _sdk_registry() -> Path | None:
    spec = importlib.util.find_spec("sagemaker")  # locates the package without importing it
    for location in (spec.submodule_search_locations or []) if spec else []:
        for candidate in (
            Path(location) / "core" / "image_uri_config" / REGISTRY_FILE,  # SDK v3
            Path(location) / "image_uri_config" / REGISTRY_FILE,  # SDK v2
        ):
            if candidate.is_file():
                return candidate
    return None


@lru_cache(maxsize=1)
def load_registry() -> dict[str, Any]:
    return json.loads((_sdk_registry() or VENDORED_REGISTRY).read_text())


def processor(instance_type: str) -> str:
    family = instance_type.split(".")[1] if instance_type.count(".") == 2 else ""
    if not family:
        raise ValueError(f"not a SageMaker instance type: {instance_type!r}")
    if family.startswith(("inf", "trn")):
        raise ValueError(f"the Triton image has no build for {instance_type} (Inferentia/Trainium)")
    return "gpu" if family[0] in ("g", "p") else "cpu"


def _version(version: str) -> dict[str, Any]:
    versions = load_registry()["versions"]
    if version not in versions:
        raise ValueError(f"unknown SageMaker Triton version {version!r}; known: {sorted(versions)}")
    return versions[version]


def image_tag(*, version: str, instance_type: str) -> str:
    prefix = _version(version).get("tag_prefix", version)
    return prefix if processor(instance_type) == "gpu" else f"{prefix}-cpu"


def image_account(scope: Construct, *, version: str) -> str:
    """The registry account for the stack's region: a literal, or a mapping lookup."""
    registries: dict[str, str] = _version(version)["registries"]
    stack = Stack.of(scope)
    region = stack.region
    if not Token.is_unresolved(region):
        if region not in registries:
            raise ValueError(
                f"SageMaker Triton {version} is not offered in {region}; regions: {sorted(registries)}"
            )
        return registries[region]
    return _mapped_account(stack, f"TritonImageAccounts{version.replace('.', '')}", registries)


def _mapped_account(stack: Stack, mapping_id: str, accounts: dict[str, str]) -> str:
    """The account of `accounts` (region -> account) in the region the template is deployed
    to, from a CloudFormation mapping made once per stack."""
    mapping = stack.node.try_find_child(mapping_id)
    if not isinstance(mapping, CfnMapping):
        mapping = CfnMapping(
            stack, mapping_id, mapping={r: {"account": a} for r, a in sorted(accounts.items())}
        )
    return mapping.find_in_map(Aws.REGION, "account")


def registry_accounts() -> dict[str, str]:
    """Region -> the account of SageMaker's Triton images, over every version listed (the
    registry keeps one account per region whatever the version)."""
    accounts: dict[str, str] = {}
    for version, entry in sorted(load_registry()["versions"].items()):
        for region, account in entry["registries"].items():
            if accounts.setdefault(region, account) != account:
                raise ValueError(f"SageMaker Triton {version} moved {region} to another account")
    return dict(sorted(accounts.items()))


def repository_arn(scope: Construct) -> str:
    """The ARN of SageMaker's Triton image repository in the stack's region, any version:
    what a role that runs endpoints of several versions may pull from."""
    stack = Stack.of(scope)
    accounts = registry_accounts()
    repository = {entry["repository"] for entry in load_registry()["versions"].values()}
    if len(repository) != 1:
        raise ValueError(
            f"SageMaker Triton images live in several repositories: {sorted(repository)}"
        )
    region = stack.region
    if Token.is_unresolved(region):
        region = Aws.REGION
        account = _mapped_account(stack, "TritonImageRegistryAccounts", accounts)
    elif region in accounts:
        account = accounts[region]
    else:
        raise ValueError(
            f"SageMaker offers no Triton image in {region}; regions: {sorted(accounts)}"
        )
    return f"arn:{Aws.PARTITION}:ecr:{region}:{account}:repository/{repository.pop()}"


def triton_image(scope: Construct, *, version: str, instance_type: str) -> tuple[str, str]:
    """(image URI, ECR repository ARN) of the Triton image for this stack's region."""
    repository = _version(version)["repository"]
    account = image_account(scope, version=version)
    stack = Stack.of(scope)
    region = stack.region
    if Token.is_unresolved(region):
        region, suffix = Aws.REGION, Aws.URL_SUFFIX
    else:
        suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    tag = image_tag(version=version, instance_type=instance_type)
    uri = f"{account}.dkr.ecr.{region}.{suffix}/{repository}:{tag}"
    repository_arn = f"arn:{Aws.PARTITION}:ecr:{region}:{account}:repository/{repository}"
    return uri, repository_arn
