"""Reading a SageMaker endpoint back: SageMaker's and Application Auto Scaling's answers,
and sluice's tags on the endpoint, as one `EndpointState`."""

from __future__ import annotations

from typing import Any

from sluice.endpoints.control import Autoscaling, EndpointState, ScalingState, VariantState
from sluice.endpoints.names import resource_id
from sluice.endpoints.sagemaker_support import (
    NAMESPACE,
    SCALABLE_DIMENSION,
    SCALING_POLICY,
    TAG_AUTOSCALING,
    TAG_DEPLOYMENT,
    TAG_TENANT,
    TAG_VARIANT,
    aws_error,
    integer,
    is_missing,
    number,
    timestamp,
    variant_tag,
)


class EndpointReader:
    """The describe and list calls of one look at an endpoint."""

    def __init__(self, sagemaker: Any, autoscaling: Any) -> None:
        self.sagemaker = sagemaker
        self.autoscaling = autoscaling

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
            model, version, max_batch, label = variant_tag(tags.get(TAG_VARIANT + vname), vname)
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
                    desired_weight=number(now.get("DesiredWeight", planned.get("InitialVariantWeight"))),
                    current_weight=number(now.get("CurrentWeight")),
                    desired_instances=integer(now.get("DesiredInstanceCount", planned.get("InitialInstanceCount"))),
                    current_instances=integer(now.get("CurrentInstanceCount")),
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
            created_at=timestamp(endpoint.get("CreationTime")),
            updated_at=timestamp(endpoint.get("LastModifiedTime")),
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
