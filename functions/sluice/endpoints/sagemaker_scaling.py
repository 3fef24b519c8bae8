"""Application Auto Scaling and CloudWatch calls for an endpoint's capacity: register one kind
of capacity (`sluice.endpoints.scaling`: a variant's instances, an asynchronous endpoint's
instances, a component's copies) with its target-tracking policy and, at a minimum of 0, the
step policy and alarm that start it from zero; read it back; remove it again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sluice.endpoints.control import ScalingState
from sluice.endpoints.scaling import NAMESPACE, Scalable


class ScalingCalls:
    """`autoscaling`: an application-autoscaling client; `cloudwatch`: a function giving a
    cloudwatch client (built only where an alarm is made, read or deleted)."""

    def __init__(self, autoscaling: Any, cloudwatch: Callable[[], Any]) -> None:
        self.autoscaling = autoscaling
        self.cloudwatch = cloudwatch

    def register(
        self, kind: Scalable, resource: str, owner: str, *, low: int, high: int, target: float, description: str = ""
    ) -> None:
        """The scalable target, its tracking policy and, at `low` 0, the step policy and the
        alarm that sets it off (`owner`: the endpoint or component the metrics name)."""
        where = {"ServiceNamespace": NAMESPACE, "ResourceId": resource, "ScalableDimension": kind.dimension}
        self.autoscaling.register_scalable_target(**where, MinCapacity=low, MaxCapacity=high)
        self.autoscaling.put_scaling_policy(
            PolicyName=kind.tracking.policy,
            **where,
            PolicyType="TargetTrackingScaling",
            TargetTrackingScalingPolicyConfiguration=kind.tracking.configuration(target, owner),
        )
        if low > 0 or kind.from_zero is None:
            return
        step = self.autoscaling.put_scaling_policy(
            PolicyName=kind.from_zero.policy,
            **where,
            PolicyType="StepScaling",
            StepScalingPolicyConfiguration=kind.from_zero.step_configuration(),
        )
        self.cloudwatch().put_metric_alarm(**kind.from_zero.alarm_request(owner, step["PolicyARN"], description))

    def read(self, kind: Scalable, resources: dict[str, str]) -> dict[str, ScalingState]:
        """The registered scaling of each resource, by the key it was given under."""
        if not resources:
            return {}
        by_id = {rid: key for key, rid in resources.items()}
        found = self.autoscaling.describe_scalable_targets(
            ServiceNamespace=NAMESPACE, ResourceIds=list(by_id), ScalableDimension=kind.dimension
        ).get("ScalableTargets", [])
        out = {}
        for target in found:
            if target["ResourceId"] not in by_id:
                continue
            policies = self.autoscaling.describe_scaling_policies(
                ServiceNamespace=NAMESPACE, ResourceId=target["ResourceId"], ScalableDimension=kind.dimension
            ).get("ScalingPolicies", [])
            names = {p.get("PolicyName") for p in policies}
            tracking = next(
                (p["TargetTrackingScalingPolicyConfiguration"] for p in policies if p.get("PolicyName") == kind.tracking.policy),
                None,
            )
            out[by_id[target["ResourceId"]]] = ScalingState(
                int(target["MinCapacity"]),
                int(target["MaxCapacity"]),
                float(tracking["TargetValue"]) if tracking else None,
                metric=kind.measure,
                from_zero=(kind.from_zero.policy in names) if kind.from_zero else None,
            )
        return out

    def remove(self, dimension: str, resources: list[str]) -> tuple[list[str], list[str]]:
        """Every policy on each resource, then its scalable target; (policies, targets) removed."""
        policies: list[str] = []
        targets: list[str] = []
        for rid in resources:
            where = {"ServiceNamespace": NAMESPACE, "ResourceId": rid, "ScalableDimension": dimension}
            for policy in self.autoscaling.describe_scaling_policies(**where).get("ScalingPolicies", []):
                self.autoscaling.delete_scaling_policy(PolicyName=policy["PolicyName"], **where)
                policies.append(f"{rid}:{policy['PolicyName']}")
            registered = self.autoscaling.describe_scalable_targets(
                ServiceNamespace=NAMESPACE, ResourceIds=[rid], ScalableDimension=dimension
            ).get("ScalableTargets", [])
            if registered:
                self.autoscaling.deregister_scalable_target(**where)
                targets.append(rid)
        return policies, targets

    def remove_alarms(self, names: list[str]) -> list[str]:
        """Those of the alarms named exactly `names` that exist (the scale-from-zero alarms
        sluice made; target tracking's own alarms go with their policies); the names removed.
        Exact names, never a prefix: another tenant's endpoint name can begin with this one's,
        and an operator's own alarm named after the endpoint is not the API's to touch."""
        found: list[str] = []
        for start in range(0, len(names), 100):  # DescribeAlarms and DeleteAlarms take at most 100 names
            token = None
            while True:
                page = self.cloudwatch().describe_alarms(
                    AlarmNames=names[start : start + 100], **({"NextToken": token} if token else {})
                )
                found += [a["AlarmName"] for a in page.get("MetricAlarms", [])]  # asked by exact name: only those
                token = page.get("NextToken")
                if not token:
                    break
        for start in range(0, len(found), 100):
            self.cloudwatch().delete_alarms(AlarmNames=found[start : start + 100])
        return found
