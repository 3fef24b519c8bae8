"""SageMaker real-time endpoints running Triton: names, the SageMaker and Application Auto
Scaling calls, and what they answer, as sluice objects.

One endpoint per deployment, named from the tenant and the deployment so that no two tenants
can meet: `sluice-<tenant>-<deployment>` cut to fit, plus a digest of both (SageMaker names
are 63 characters of letters, digits and hyphens). Its endpoint configs and models are named
`<endpoint>-<digest>` and `<endpoint>-<variant>-<digest>`, so undeploying finds all of them
by prefix. Which sluice model version each production variant serves travels as tags on the
endpoint, and so does autoscaling asked for at deploy time, which Application Auto Scaling
accepts only once the endpoint is InService.

Real-time variants scale between 1 and N instances. Scaling to zero is SageMaker's only for
endpoints built from inference components (managed instance scaling with a minimum of 0,
scaling `sagemaker:inference-component:DesiredCopyCount`) and for asynchronous endpoints;
sluice creates neither, so a minimum of 0 is refused with that explanation.
"""

from __future__ import annotations

import hashlib
import logging
import re
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import BackendError, BadRequest, SluiceError, Unavailable

if TYPE_CHECKING:
    from collections.abc import Iterator

log = logging.getLogger(__name__)

MAX_VARIANTS = 10  # production variants per endpoint config
SAGEMAKER_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
DEFAULT_MODEL_ENV = "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"
NAMESPACE = "sagemaker"
SCALABLE_DIMENSION = "sagemaker:variant:DesiredInstanceCount"
SCALING_METRIC = "SageMakerVariantInvocationsPerInstance"
SCALING_POLICY = "sluice-invocations-per-instance"
SCALE_IN_COOLDOWN_S = 300
SCALE_OUT_COOLDOWN_S = 60
TAG_TENANT = "sluice:tenant"
TAG_DEPLOYMENT = "sluice:deployment"
TAG_AUTOSCALING = "sluice:autoscaling"
TAG_VARIANT = "sluice:variant:"
SCALE_TO_ZERO = (
    "real-time endpoint variants keep at least 1 instance; SageMaker scales to zero only "
    "endpoints built from inference components (managed instance scaling, minimum 0) and "
    "asynchronous endpoints, which sluice does not create: undeploy instead, or score "
    "offline with a batch job"
)
_THROTTLED = frozenset({"ThrottlingException", "Throttling", "TooManyRequestsException", "ServiceUnavailable", "InternalFailure", "InternalServerError"})
_MISSING = frozenset({"ValidationException", "ValidationError", "ResourceNotFound", "ObjectNotFoundException"})


# names -------------------------------------------------------------------------------------
def slug(text: str) -> str:
    """Letters and digits joined by single hyphens, lower case."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8]


def _cut(text: str, length: int) -> str:
    return text[:length].rstrip("-")


def endpoint_name(tenant: str, deployment: str) -> str:
    """At most 40 characters: the rest of SageMaker's 63 is for config and model suffixes."""
    return f"{_cut(slug(f'sluice-{tenant}-{deployment}'), 31)}-{digest(tenant, deployment)}"


def variant_name(name: str) -> str:
    variant = _cut(slug(name), 63)
    if not variant or not SAGEMAKER_NAME.match(variant):
        raise BadRequest(f"variant '{name}' has no letters or digits to name a production variant", field="policy")
    return variant


def model_name(endpoint: str, variant: str, fingerprint: str) -> str:
    return f"{endpoint}-{_cut(variant, 13)}-{fingerprint[:8]}"


def config_name(endpoint: str, fingerprint: str) -> str:
    return f"{endpoint}-{fingerprint[:8]}"


def resource_id(endpoint: str, variant: str) -> str:
    return f"endpoint/{endpoint}/variant/{variant}"


# what is asked and what is there ------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Autoscaling:
    """Target tracking of invocations per instance, between min and max instances."""

    min_instances: int
    max_instances: int
    target_invocations_per_instance: float

    def __post_init__(self) -> None:
        check_capacity(self.min_instances, self.max_instances, self.target_invocations_per_instance)

    def to_tag(self) -> str:
        return f"{self.min_instances}:{self.max_instances}:{self.target_invocations_per_instance:g}"

    @classmethod
    def from_tag(cls, value: str) -> Autoscaling | None:
        try:
            low, high, target = value.split(":")
            return cls(int(low), int(high), float(target))
        except (ValueError, SluiceError):
            return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "min_instances": self.min_instances,
            "max_instances": self.max_instances,
            "target_invocations_per_instance": self.target_invocations_per_instance,
        }


@dataclass(frozen=True, slots=True)
class ScalingState:
    """A variant's registered scalable target, as Application Auto Scaling reports it."""

    min_instances: int
    max_instances: int
    target_invocations_per_instance: float | None  # None: no sluice tracking policy on it

    def to_dict(self) -> dict[str, Any]:
        return {
            "min_instances": self.min_instances,
            "max_instances": self.max_instances,
            "target_invocations_per_instance": self.target_invocations_per_instance,
        }


def check_capacity(low: int, high: int, target: float | None = None) -> None:
    if low < 1:
        raise BadRequest(f"min_instances must be at least 1: {SCALE_TO_ZERO}", field="min_instances")
    if high < low:
        raise BadRequest(f"min_instances ({low}) is above max_instances ({high})", field="min_instances")
    if target is not None and not target > 0:
        raise BadRequest("target_invocations_per_instance must be above 0", field="target_invocations_per_instance")


@dataclass(frozen=True, slots=True)
class VariantSpec:
    name: str  # the production variant
    label: str  # the split's variant name in the deployment's policy ("primary" for one version)
    model: str  # the sluice model and version it serves
    version: int
    max_batch_size: int
    model_name: str  # the SageMaker Model
    image: str
    model_data_url: str
    triton_model: str  # SAGEMAKER_TRITON_DEFAULT_MODEL_NAME
    weight: float

    def tag(self) -> dict[str, str]:
        return {"Key": TAG_VARIANT + self.name, "Value": f"{self.model} {self.version} {self.max_batch_size} {self.label}"}


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    name: str
    config_name: str
    tenant: str
    deployment: str
    instance_type: str
    instance_count: int
    role_arn: str
    variants: tuple[VariantSpec, ...]
    autoscaling: Autoscaling | None = None

    def tags(self) -> list[dict[str, str]]:
        return [{"Key": TAG_TENANT, "Value": self.tenant}, {"Key": TAG_DEPLOYMENT, "Value": self.deployment}]


@dataclass(frozen=True, slots=True)
class VariantState:
    name: str
    label: str
    model: str
    version: int
    max_batch_size: int
    model_name: str
    instance_type: str
    desired_weight: float | None
    current_weight: float | None
    desired_instances: int | None
    current_instances: int | None
    autoscaling: ScalingState | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.label,
            "production_variant": self.name,
            "model": self.model,
            "version": self.version,
            "sagemaker_model": self.model_name,
            "instance_type": self.instance_type,
            "weight": self.desired_weight,
            "current_weight": self.current_weight,
            "desired_instances": self.desired_instances,
            "current_instances": self.current_instances,
            "autoscaling": self.autoscaling.to_dict() if self.autoscaling else None,
        }


@dataclass(frozen=True, slots=True)
class EndpointState:
    name: str
    arn: str
    status: str  # Creating, InService, Updating, Failed, Deleting, ...
    failure_reason: str | None
    config_name: str
    tenant: str
    deployment: str
    variants: tuple[VariantState, ...]
    pending_autoscaling: Autoscaling | None = None
    created_at: float | None = None
    updated_at: float | None = None
    images: tuple[str, ...] = field(default=())

    def variant(self, name: str) -> VariantState | None:
        """By the policy's variant name or the production variant's."""
        return next((v for v in self.variants if name in (v.label, v.name)), None)


# errors ------------------------------------------------------------------------------------
def _code(exc: Exception) -> tuple[str, str]:
    error = (getattr(exc, "response", None) or {}).get("Error", {})
    return str(error.get("Code", "")), str(error.get("Message", ""))


def is_missing(exc: Exception) -> bool:
    code, message = _code(exc)
    text = message.lower()
    return code in _MISSING and ("could not find" in text or "not found" in text or "does not exist" in text)


def _already_exists(exc: Exception) -> bool:
    code, message = _code(exc)
    return code in ("ValidationException", "ValidationError", "ResourceInUse") and "already exist" in message.lower()


def aws_error(exc: Exception, what: str) -> SluiceError:
    """A SageMaker or Application Auto Scaling failure in sluice's words; the raw text goes
    to the log only."""
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(exc, SluiceError):
        return exc
    if isinstance(exc, ClientError):
        code, message = _code(exc)
        log.warning("sagemaker: %s failed", what, extra={"code": code, "error": message[:500]})
        if code == "ResourceLimitExceeded" or code == "LimitExceededException":
            return Unavailable(f"the account's SageMaker quota does not allow this ({what}); ask AWS for more or use fewer or smaller instances")
        if code in _THROTTLED:
            return Unavailable(f"SageMaker is busy ({what}); retry shortly")
        if code.startswith("AccessDenied"):
            return BackendError(f"sluice's role may not {what} (AccessDenied)")
        return BackendError(f"SageMaker refused to {what} ({code or 'unknown error'})")
    if isinstance(exc, BotoCoreError):
        log.warning("sagemaker: %s failed", what, extra={"error_type": type(exc).__name__})
        return Unavailable(f"SageMaker is not reachable ({what})")
    log.warning("sagemaker: %s failed", what, extra={"error_type": type(exc).__name__, "error": str(exc)[:500]})
    return BackendError(f"SageMaker failed to {what} ({type(exc).__name__})")


# the calls ---------------------------------------------------------------------------------
class SageMakerEndpoints:
    """The control-plane calls sluice makes; clients are built on first use."""

    def __init__(self, sagemaker: Any | None = None, autoscaling: Any | None = None, *, region: str | None = None) -> None:
        self._sagemaker = sagemaker
        self._autoscaling = autoscaling
        self._region = region

    def _client(self, service: str) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(service, region_name=self._region, config=Config(retries={"mode": "standard"}))

    @property
    def sagemaker(self) -> Any:
        if self._sagemaker is None:
            self._sagemaker = self._client("sagemaker")
        return self._sagemaker

    @property
    def autoscaling(self) -> Any:
        if self._autoscaling is None:
            self._autoscaling = self._client("application-autoscaling")
        return self._autoscaling

    @property
    def region(self) -> str | None:
        if self._region is None:
            try:
                self._region = self.sagemaker.meta.region_name
            except Exception as exc:  # no region configured anywhere: botocore says so when building
                raise Unavailable("no AWS region is configured for SageMaker; set SLUICE_REGION", field="region") from exc
        return self._region

    # create ----------------------------------------------------------------------------------
    def create(self, spec: EndpointSpec) -> None:
        """Models, then the endpoint config, then the endpoint; what this call made is removed
        again when a later step fails."""
        made_models: list[str] = []
        made_config: str | None = None
        try:
            for variant in spec.variants:
                if self._create_model(spec, variant):
                    made_models.append(variant.model_name)
            if self._create_config(spec):
                made_config = spec.config_name
            tags = spec.tags() + [v.tag() for v in spec.variants]
            if spec.autoscaling is not None:
                tags.append({"Key": TAG_AUTOSCALING, "Value": spec.autoscaling.to_tag()})
            self.sagemaker.create_endpoint(EndpointName=spec.name, EndpointConfigName=spec.config_name, Tags=tags)
        except Exception as exc:
            error = aws_error(exc, "create the endpoint")
            if made_config is not None:
                with suppress(Exception):
                    self.sagemaker.delete_endpoint_config(EndpointConfigName=made_config)
            for name in made_models:
                with suppress(Exception):
                    self.sagemaker.delete_model(ModelName=name)
            raise error from None

    def _create_model(self, spec: EndpointSpec, variant: VariantSpec) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.sagemaker.create_model(
                ModelName=variant.model_name,
                ExecutionRoleArn=spec.role_arn,
                PrimaryContainer={
                    "Image": variant.image,
                    "Mode": "SingleModel",
                    "ModelDataUrl": variant.model_data_url,
                    "Environment": {DEFAULT_MODEL_ENV: variant.triton_model},
                },
                Tags=[*spec.tags(), {"Key": "sluice:model", "Value": f"{variant.model}:{variant.version}"}],
            )
        except ClientError as exc:
            if _already_exists(exc):  # the same name is the same content: left by an earlier try
                return False
            raise
        return True

    def _create_config(self, spec: EndpointSpec) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.sagemaker.create_endpoint_config(
                EndpointConfigName=spec.config_name,
                ProductionVariants=[
                    {
                        "VariantName": v.name,
                        "ModelName": v.model_name,
                        "InstanceType": spec.instance_type,
                        "InitialInstanceCount": spec.instance_count,
                        "InitialVariantWeight": v.weight,
                    }
                    for v in spec.variants
                ],
                Tags=spec.tags(),
            )
        except ClientError as exc:
            if _already_exists(exc):
                return False
            raise
        return True

    # read ------------------------------------------------------------------------------------
    def describe(self, name: str) -> EndpointState | None:
        """The endpoint as SageMaker and Application Auto Scaling see it; None when absent."""
        from botocore.exceptions import ClientError

        try:
            endpoint = self.sagemaker.describe_endpoint(EndpointName=name)
        except ClientError as exc:
            if is_missing(exc):
                return None
            raise aws_error(exc, "describe the endpoint") from None
        except Exception as exc:
            raise aws_error(exc, "describe the endpoint") from None
        try:
            tags = {t["Key"]: t["Value"] for t in self._tags(endpoint["EndpointArn"])}
            config = self._config(endpoint["EndpointConfigName"])
            scaling = self._scaling(name, [v["VariantName"] for v in config.get("ProductionVariants", [])])
            images = self._images(config)
        except Exception as exc:
            raise aws_error(exc, "describe the endpoint") from None
        live = {v["VariantName"]: v for v in endpoint.get("ProductionVariants", [])}
        variants = []
        for planned in config.get("ProductionVariants", []):
            vname = planned["VariantName"]
            model, version, max_batch, label = _variant_tag(tags.get(TAG_VARIANT + vname), vname)
            now = live.get(vname, {})
            variants.append(
                VariantState(
                    name=vname,
                    label=label,
                    model=model,
                    version=version,
                    max_batch_size=max_batch,
                    model_name=planned.get("ModelName", ""),
                    instance_type=planned.get("InstanceType", ""),
                    desired_weight=_number(now.get("DesiredWeight", planned.get("InitialVariantWeight"))),
                    current_weight=_number(now.get("CurrentWeight")),
                    desired_instances=_integer(now.get("DesiredInstanceCount", planned.get("InitialInstanceCount"))),
                    current_instances=_integer(now.get("CurrentInstanceCount")),
                    autoscaling=scaling.get(vname),
                )
            )
        pending = tags.get(TAG_AUTOSCALING)
        return EndpointState(
            name=name,
            arn=endpoint["EndpointArn"],
            status=str(endpoint.get("EndpointStatus", "")),
            failure_reason=endpoint.get("FailureReason") or None,
            config_name=endpoint["EndpointConfigName"],
            tenant=tags.get(TAG_TENANT, ""),
            deployment=tags.get(TAG_DEPLOYMENT, ""),
            variants=tuple(variants),
            pending_autoscaling=Autoscaling.from_tag(pending) if pending else None,
            created_at=_timestamp(endpoint.get("CreationTime")),
            updated_at=_timestamp(endpoint.get("LastModifiedTime")),
            images=images,
        )

    def _tags(self, arn: str) -> list[dict[str, str]]:
        out: list[dict[str, str]] = []
        token = None
        while True:
            page = self.sagemaker.list_tags(ResourceArn=arn, **({"NextToken": token} if token else {}))
            out += page.get("Tags", [])
            token = page.get("NextToken")
            if not token:
                return out

    def _config(self, name: str) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        try:
            return self.sagemaker.describe_endpoint_config(EndpointConfigName=name)
        except ClientError as exc:
            if is_missing(exc):  # deleted under the endpoint: report what is left
                return {}
            raise

    def _images(self, config: dict[str, Any]) -> tuple[str, ...]:
        from botocore.exceptions import ClientError

        images = []
        for planned in config.get("ProductionVariants", []):
            try:
                model = self.sagemaker.describe_model(ModelName=planned["ModelName"])
            except ClientError as exc:
                if is_missing(exc):
                    continue
                raise
            image = (model.get("PrimaryContainer") or {}).get("Image")
            if image and image not in images:
                images.append(image)
        return tuple(images)

    def _scaling(self, endpoint: str, variants: list[str]) -> dict[str, ScalingState]:
        if not variants:
            return {}
        ids = [resource_id(endpoint, v) for v in variants]
        found = self.autoscaling.describe_scalable_targets(
            ServiceNamespace=NAMESPACE, ResourceIds=ids, ScalableDimension=SCALABLE_DIMENSION
        ).get("ScalableTargets", [])
        out = {}
        for target in found:
            variant = target["ResourceId"].rsplit("/", 1)[-1]
            policies = self.autoscaling.describe_scaling_policies(
                ServiceNamespace=NAMESPACE, ResourceId=target["ResourceId"], ScalableDimension=SCALABLE_DIMENSION
            ).get("ScalingPolicies", [])
            tracking = next(
                (p["TargetTrackingScalingPolicyConfiguration"] for p in policies if p.get("PolicyName") == SCALING_POLICY),
                None,
            )
            out[variant] = ScalingState(
                int(target["MinCapacity"]), int(target["MaxCapacity"]), float(tracking["TargetValue"]) if tracking else None
            )
        return out

    # change ----------------------------------------------------------------------------------
    def register_autoscaling(self, endpoint: str, variant: str, scaling: Autoscaling) -> None:
        """Register (or update) the variant's scalable target and its target-tracking policy."""
        rid = resource_id(endpoint, variant)
        try:
            self.autoscaling.register_scalable_target(
                ServiceNamespace=NAMESPACE,
                ResourceId=rid,
                ScalableDimension=SCALABLE_DIMENSION,
                MinCapacity=scaling.min_instances,
                MaxCapacity=scaling.max_instances,
            )
            self.autoscaling.put_scaling_policy(
                PolicyName=SCALING_POLICY,
                ServiceNamespace=NAMESPACE,
                ResourceId=rid,
                ScalableDimension=SCALABLE_DIMENSION,
                PolicyType="TargetTrackingScaling",
                TargetTrackingScalingPolicyConfiguration={
                    "TargetValue": scaling.target_invocations_per_instance,
                    "PredefinedMetricSpecification": {"PredefinedMetricType": SCALING_METRIC},
                    "ScaleInCooldown": SCALE_IN_COOLDOWN_S,
                    "ScaleOutCooldown": SCALE_OUT_COOLDOWN_S,
                },
            )
        except Exception as exc:
            raise aws_error(exc, "register autoscaling") from None

    def forget_pending_autoscaling(self, state: EndpointState) -> None:
        try:
            self.sagemaker.delete_tags(ResourceArn=state.arn, TagKeys=[TAG_AUTOSCALING])
        except Exception as exc:
            raise aws_error(exc, "tag the endpoint") from None

    def update_variants(self, endpoint: str, changes: list[dict[str, Any]]) -> None:
        """UpdateEndpointWeightsAndCapacities: `DesiredWeight` and/or `DesiredInstanceCount` per variant."""
        try:
            self.sagemaker.update_endpoint_weights_and_capacities(
                EndpointName=endpoint, DesiredWeightsAndCapacities=changes
            )
        except Exception as exc:
            raise aws_error(exc, "update the endpoint's weights and capacities") from None

    # delete ----------------------------------------------------------------------------------
    def delete(self, name: str, state: EndpointState | None) -> dict[str, Any]:
        """Autoscaling (policies, then targets), the endpoint, its configs, its models: in
        that order, each skipped when already gone."""
        deleted: dict[str, Any] = {"scaling_policies": [], "scalable_targets": [], "endpoint": None, "endpoint_configs": [], "models": []}
        try:
            variants = [v.name for v in state.variants] if state else []
            deleted["scaling_policies"], deleted["scalable_targets"] = self._deregister(name, variants)
            if state is not None and state.status != "Deleting":
                self._quietly(self.sagemaker.delete_endpoint, EndpointName=name)
                deleted["endpoint"] = name
            configs = {state.config_name} if state else set()
            configs |= set(self._owned(name, "list_endpoint_configs", "EndpointConfigs", "EndpointConfigName"))
            for config in sorted(configs):
                if self._quietly(self.sagemaker.delete_endpoint_config, EndpointConfigName=config):
                    deleted["endpoint_configs"].append(config)
            models = {v.model_name for v in state.variants if v.model_name} if state else set()
            models |= set(self._owned(name, "list_models", "Models", "ModelName"))
            for model in sorted(models):
                if self._quietly(self.sagemaker.delete_model, ModelName=model):
                    deleted["models"].append(model)
        except Exception as exc:
            raise aws_error(exc, "delete the endpoint") from None
        return deleted

    def _deregister(self, endpoint: str, variants: list[str]) -> tuple[list[str], list[str]]:
        policies: list[str] = []
        targets: list[str] = []
        for variant in variants:
            rid = resource_id(endpoint, variant)
            found = self.autoscaling.describe_scaling_policies(
                ServiceNamespace=NAMESPACE, ResourceId=rid, ScalableDimension=SCALABLE_DIMENSION
            ).get("ScalingPolicies", [])
            for policy in found:
                self.autoscaling.delete_scaling_policy(
                    PolicyName=policy["PolicyName"], ServiceNamespace=NAMESPACE, ResourceId=rid, ScalableDimension=SCALABLE_DIMENSION
                )
                policies.append(f"{rid}:{policy['PolicyName']}")
            registered = self.autoscaling.describe_scalable_targets(
                ServiceNamespace=NAMESPACE, ResourceIds=[rid], ScalableDimension=SCALABLE_DIMENSION
            ).get("ScalableTargets", [])
            if registered:
                self.autoscaling.deregister_scalable_target(
                    ServiceNamespace=NAMESPACE, ResourceId=rid, ScalableDimension=SCALABLE_DIMENSION
                )
                targets.append(rid)
        return policies, targets

    def _owned(self, endpoint: str, operation: str, key: str, field_name: str) -> Iterator[str]:
        """Names under this endpoint's prefix (the digest in the prefix makes it its own)."""
        prefix = endpoint + "-"
        token = None
        while True:
            page = getattr(self.sagemaker, operation)(NameContains=endpoint, **({"NextToken": token} if token else {}))
            for item in page.get(key, []):
                if item[field_name].startswith(prefix):
                    yield item[field_name]
            token = page.get("NextToken")
            if not token:
                return

    @staticmethod
    def _quietly(call: Any, **params: Any) -> bool:
        """Make a delete call; False when the thing was already gone."""
        from botocore.exceptions import ClientError

        try:
            call(**params)
        except ClientError as exc:
            code, message = _code(exc)
            if is_missing(exc) or code == "MissingModel" or "could not find" in message.lower():
                return False
            raise
        return True


def _variant_tag(value: str | None, variant: str) -> tuple[str, int, int, str]:
    """(model, version, max_batch_size, policy variant) from a `sluice:variant:<name>` tag."""
    try:
        model, version, max_batch, label = (value or "").split(" ")
        return model, int(version), int(max_batch), label
    except ValueError:
        return "", 0, 0, variant


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _integer(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def _timestamp(value: Any) -> float | None:
    stamp = getattr(value, "timestamp", None)
    return round(stamp(), 3) if callable(stamp) else None
