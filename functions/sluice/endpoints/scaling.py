"""How SageMaker endpoints scale, in one place: what `sluice endpoints deploy` registers at
run time (`sluice.endpoints.sagemaker`) and what the CDK app declares
(`infra/constructs/triton_endpoint.py`) are built from these shapes, so the two cannot drift.

Three kinds of capacity scale:

- a real-time variant's instances (`sagemaker:variant:DesiredInstanceCount`), tracking
  `SageMakerVariantInvocationsPerInstance`, never below 1;
- an asynchronous endpoint's instances (the same dimension), tracking
  `ApproximateBacklogSizePerInstance`; at a minimum of 0 a step policy on an alarm on
  `HasBacklogWithoutCapacity` starts the first instance again when requests wait;
- an inference component's copies (`sagemaker:inference-component:DesiredCopyCount`),
  tracking `SageMakerInferenceComponentInvocationsPerCopy`; at a minimum of 0 a step policy
  on an alarm on `NoCapacityInvocationFailures` adds a copy when a request finds none.

Target tracking cannot leave zero (at zero there is nothing to track), which is why the
scale-from-zero step policy and its alarm exist: both AWS pages ("Autoscale an asynchronous
endpoint", "Scale an endpoint to zero instances") prescribe them. The values are the request
fields of `PutScalingPolicy` and `PutMetricAlarm` (botocore's service models), standard
library only, so the CDK app imports this module without the rest of sluice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NAMESPACE = "sagemaker"  # Application Auto Scaling's service namespace
METRICS_NAMESPACE = "AWS/SageMaker"  # CloudWatch's
VARIANT_DIMENSION = "sagemaker:variant:DesiredInstanceCount"
COPY_DIMENSION = "sagemaker:inference-component:DesiredCopyCount"
INVOCATIONS_PER_INSTANCE = "SageMakerVariantInvocationsPerInstance"
INVOCATIONS_PER_COPY = "SageMakerInferenceComponentInvocationsPerCopy"
BACKLOG_PER_INSTANCE = "ApproximateBacklogSizePerInstance"
ALARM_THRESHOLD = 1.0
ALARM_COMPARISON = "GreaterThanOrEqualToThreshold"
ALARM_MISSING_DATA = "missing"
ROUTING_STRATEGY = "LEAST_OUTSTANDING_REQUESTS"  # an endpoint of inference components


@dataclass(frozen=True, slots=True)
class Tracking:
    """A target-tracking policy: a predefined metric, or one of `AWS/SageMaker` by dimension."""

    policy: str  # the policy's name
    predefined: str | None = None
    metric: str | None = None
    dimension: str | None = None  # the metric's dimension, valued by the endpoint or component
    statistic: str = "Average"
    scale_in_cooldown_s: int = 300
    scale_out_cooldown_s: int = 60

    def configuration(self, target: float, value: str | None = None) -> dict[str, Any]:
        """`TargetTrackingScalingPolicyConfiguration`; `value`: the dimension's (the
        endpoint's name), for a customized metric."""
        if self.predefined is not None:
            metric: dict[str, Any] = {"PredefinedMetricSpecification": {"PredefinedMetricType": self.predefined}}
        else:
            metric = {
                "CustomizedMetricSpecification": {
                    "MetricName": self.metric,
                    "Namespace": METRICS_NAMESPACE,
                    "Dimensions": [{"Name": self.dimension, "Value": value}],
                    "Statistic": self.statistic,
                }
            }
        return {
            "TargetValue": float(target),
            **metric,
            "ScaleInCooldown": self.scale_in_cooldown_s,
            "ScaleOutCooldown": self.scale_out_cooldown_s,
        }


@dataclass(frozen=True, slots=True)
class StartFromZero:
    """The step policy that adds one (instance or copy) and the alarm that sets it off."""

    policy: str  # the step policy's name
    alarm: str  # the alarm's name after its endpoint's or component's: `<name>-<alarm>`
    metric: str
    dimension: str
    statistic: str
    period_s: int
    periods: int  # evaluation periods, all of which must breach
    aggregation: str  # the step policy's MetricAggregationType
    cooldown_s: int

    def step_configuration(self) -> dict[str, Any]:
        """`StepScalingPolicyConfiguration`: +1 whenever the alarm is at or above 1."""
        return {
            "AdjustmentType": "ChangeInCapacity",
            "StepAdjustments": [{"MetricIntervalLowerBound": 0.0, "ScalingAdjustment": 1}],
            "Cooldown": self.cooldown_s,
            "MetricAggregationType": self.aggregation,
        }

    def alarm_name(self, owner: str) -> str:
        return f"{owner}-{self.alarm}"

    def alarm_request(self, owner: str, policy_arn: str, description: str) -> dict[str, Any]:
        """`PutMetricAlarm`'s parameters for the endpoint or component named `owner`."""
        return {
            "AlarmName": self.alarm_name(owner),
            "AlarmDescription": description,
            "AlarmActions": [policy_arn],
            "MetricName": self.metric,
            "Namespace": METRICS_NAMESPACE,
            "Statistic": self.statistic,
            "Dimensions": [{"Name": self.dimension, "Value": owner}],
            "Period": self.period_s,
            "EvaluationPeriods": self.periods,
            "DatapointsToAlarm": self.periods,
            "Threshold": ALARM_THRESHOLD,
            "ComparisonOperator": ALARM_COMPARISON,
            "TreatMissingData": ALARM_MISSING_DATA,
        }


@dataclass(frozen=True, slots=True)
class Scalable:
    """One kind of capacity: its dimension, its tracking policy, and how it leaves zero."""

    dimension: str
    tracking: Tracking
    from_zero: StartFromZero | None
    lowest: int  # the smallest minimum SageMaker allows
    measure: str  # what the tracked target counts, in sluice's reports

    @property
    def policies(self) -> tuple[str, ...]:
        """The names of the policies sluice puts on it."""
        return (self.tracking.policy,) + ((self.from_zero.policy,) if self.from_zero else ())


INSTANCES = Scalable(
    dimension=VARIANT_DIMENSION,
    tracking=Tracking("sluice-invocations-per-instance", predefined=INVOCATIONS_PER_INSTANCE),
    from_zero=None,
    lowest=1,
    measure="invocations_per_instance",
)
BACKLOG = Scalable(
    dimension=VARIANT_DIMENSION,
    tracking=Tracking(
        "sluice-backlog-per-instance",
        metric=BACKLOG_PER_INSTANCE,
        dimension="EndpointName",
        scale_in_cooldown_s=600,
        scale_out_cooldown_s=300,
    ),
    from_zero=StartFromZero(
        policy="sluice-has-backlog-without-capacity",
        alarm="HasBacklogWithoutCapacity",
        metric="HasBacklogWithoutCapacity",
        dimension="EndpointName",
        statistic="Average",
        period_s=60,
        periods=2,
        aggregation="Average",
        cooldown_s=300,
    ),
    lowest=0,
    measure="backlog_per_instance",
)
COPIES = Scalable(
    dimension=COPY_DIMENSION,
    tracking=Tracking("sluice-invocations-per-copy", predefined=INVOCATIONS_PER_COPY),
    from_zero=StartFromZero(
        policy="sluice-no-capacity",
        alarm="NoCapacityInvocationFailures",
        metric="NoCapacityInvocationFailures",
        dimension="InferenceComponentName",
        statistic="Sum",
        period_s=60,
        periods=1,
        aggregation="Maximum",
        cooldown_s=60,
    ),
    lowest=0,
    measure="invocations_per_copy",
)


def variant_resource(endpoint: str, variant: str) -> str:
    """Application Auto Scaling's name for a variant's instance count."""
    return f"endpoint/{endpoint}/variant/{variant}"


def component_resource(component: str) -> str:
    """Application Auto Scaling's name for an inference component's copy count."""
    return f"inference-component/{component}"
