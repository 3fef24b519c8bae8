"""Application Auto Scaling of one Triton endpoint: its variants' instances or its
components' copies, tracked as `sluice.endpoints.scaling` declares (the shapes `sluice
endpoints deploy` sends too), and the step policy and alarm that leave zero capacity.

Built into the endpoint's construct (`scope`), beside its models and config.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass

from aws_cdk import Duration
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from infra.config import AsyncInference, EndpointVariant, InferenceComponents
from sluice.endpoints.scaling import (
    ALARM_COMPARISON,
    ALARM_MISSING_DATA,
    ALARM_THRESHOLD,
    BACKLOG,
    COPIES,
    INVOCATIONS_PER_COPY,
    INVOCATIONS_PER_INSTANCE,
    METRICS_NAMESPACE,
    Scalable,
    StartFromZero,
    component_resource,
    variant_resource,
)

# The shapes shared with `sluice endpoints deploy` (sluice.endpoints.scaling), as CDK's enums.
PREDEFINED = {
    INVOCATIONS_PER_INSTANCE: appscaling.PredefinedMetric.SAGEMAKER_VARIANT_INVOCATIONS_PER_INSTANCE,
    INVOCATIONS_PER_COPY: appscaling.PredefinedMetric.SAGEMAKER_INFERENCE_COMPONENT_INVOCATIONS_PER_COPY,
}
COMPARISONS = {
    "GreaterThanOrEqualToThreshold": cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
}
MISSING_DATA = {"missing": cloudwatch.TreatMissingData.MISSING}


@dataclass(frozen=True)
class EndpointScaling:
    """What the scaling of one endpoint is built from: the endpoint's construct (`scope`), the
    endpoint (by name, and as the resource its scalable targets wait for), and the role
    Application Auto Scaling acts as."""

    scope: Construct
    _: KW_ONLY
    endpoint_name: str
    endpoint: sagemaker.CfnEndpoint
    role: iam.IRole

    def instances(
        self, variant: EndpointVariant, kind: Scalable, id: str, target_value: float
    ) -> appscaling.ScalableTarget:
        """The variant's instance count between its bounds (once the endpoint is there),
        tracked as `kind` asks."""
        target = appscaling.ScalableTarget(
            self.scope,
            f"Scaling-{variant.name}",
            service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
            resource_id=variant_resource(self.endpoint_name, variant.name),
            scalable_dimension=kind.dimension,
            min_capacity=variant.min_instances,
            max_capacity=variant.max_instances,
            role=self.role,
        )
        target.node.add_dependency(self.endpoint)
        self._track(target, id, kind, target_value)
        return target

    def backlog(self, variant: EndpointVariant, spec: AsyncInference) -> None:
        """Target tracking on the queue per instance, down to min_instances (0 allowed), and
        the step policy that starts an instance when requests wait and none is running."""
        target = self.instances(variant, BACKLOG, "BacklogPerInstance", spec.backlog_per_instance)
        if variant.min_instances > 0:
            return
        assert BACKLOG.from_zero is not None
        self._start_from_zero(
            target,
            "HasBacklogWithoutCapacity",
            BACKLOG.from_zero,
            self.endpoint_name,
            description=f"Requests wait at {self.endpoint_name} and no instance runs",
        )

    def copies(
        self,
        variant_name: str,
        component_name: str,
        component: sagemaker.CfnInferenceComponent,
        spec: InferenceComponents,
    ) -> None:
        """The component's copy count between its bounds, tracked on invocations per copy,
        and a copy started when a request finds none."""
        target = appscaling.ScalableTarget(
            self.scope,
            f"Scaling-{variant_name}",
            service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
            resource_id=component_resource(component_name),
            scalable_dimension=COPIES.dimension,
            min_capacity=spec.min_copies,
            max_capacity=spec.max_copies,
            role=self.role,
        )
        target.node.add_dependency(component)
        self._track(target, "InvocationsPerCopy", COPIES, spec.target_invocations_per_copy)
        if spec.min_copies > 0:
            return
        assert COPIES.from_zero is not None
        self._start_from_zero(
            target,
            "NoCapacity",
            COPIES.from_zero,
            component_name,
            description=f"A request found no copy of {component_name}",
        )

    def _track(
        self, target: appscaling.ScalableTarget, id: str, kind: Scalable, target_value: float
    ) -> None:
        """The target-tracking policy of `kind` (sluice.endpoints.scaling) on `target`."""
        tracking = kind.tracking
        metric: dict[str, object]
        if tracking.predefined is not None:
            metric = {"predefined_metric": PREDEFINED[tracking.predefined]}
        else:
            assert tracking.metric is not None and tracking.dimension is not None
            metric = {
                "custom_metric": cloudwatch.Metric(
                    namespace=METRICS_NAMESPACE,
                    metric_name=tracking.metric,
                    dimensions_map={tracking.dimension: self.endpoint_name},
                    statistic=tracking.statistic,
                )
            }
        target.scale_to_track_metric(
            id,
            target_value=target_value,
            scale_in_cooldown=Duration.seconds(tracking.scale_in_cooldown_s),
            scale_out_cooldown=Duration.seconds(tracking.scale_out_cooldown_s),
            **metric,  # type: ignore[arg-type]
        )

    def _start_from_zero(
        self,
        target: appscaling.ScalableTarget,
        policy: str,
        spec: StartFromZero,
        owner: str,
        *,
        description: str,
    ) -> None:
        """What SageMaker needs to leave zero capacity: a step policy adding one, started by
        an alarm on the metric that says requests found none (target tracking cannot)."""
        from_zero = appscaling.StepScalingAction(
            self.scope,
            f"{policy}-ScalingPolicy",
            scaling_target=target,
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            metric_aggregation_type=appscaling.MetricAggregationType[spec.aggregation.upper()],
            cooldown=Duration.seconds(spec.cooldown_s),
        )
        (step,) = spec.step_configuration()["StepAdjustments"]
        from_zero.add_adjustment(
            adjustment=step["ScalingAdjustment"], lower_bound=step["MetricIntervalLowerBound"]
        )
        alarm = cloudwatch.Alarm(
            self.scope,
            spec.alarm,
            alarm_description=description,
            metric=cloudwatch.Metric(
                namespace=METRICS_NAMESPACE,
                metric_name=spec.metric,
                dimensions_map={spec.dimension: owner},
                statistic=spec.statistic,
                period=Duration.seconds(spec.period_s),
            ),
            threshold=ALARM_THRESHOLD,
            evaluation_periods=spec.periods,
            datapoints_to_alarm=spec.periods,
            comparison_operator=COMPARISONS[ALARM_COMPARISON],
            treat_missing_data=MISSING_DATA[ALARM_MISSING_DATA],
        )
        alarm.add_alarm_action(cloudwatch_actions.ApplicationScalingAction(from_zero))
