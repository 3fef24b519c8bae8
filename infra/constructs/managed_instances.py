"""The API function on Lambda Managed Instances (`api.managed_instances`): a capacity provider in
the deployment's subnets, and the function attached to it.

What changes for the function:

- Lambda runs it on EC2 instances of the provider, several requests at once per execution
  environment; the Python runtime gives each request in flight a process of its own (so sluice's
  per-process state, the event loop, caches and ONNX sessions, is never shared by two requests),
  all processes sharing the environment's memory. Each process's caches are therefore bounded by
  its share (`SLUICE_MODEL_CACHE_BYTES`, `SLUICE_PREDICTION_CACHE_MAX_BYTES`), and tuned
  sessions are picked for its share of the vCPUs (`SLUICE_ORT_VCPUS`).
- No SnapStart (its snapshots are of on-demand microVMs): environments start ahead of traffic
  instead. CloudFormation publishes `$LATEST.PUBLISHED`, which an unqualified invoke (API
  Gateway's) runs.
- No reserved concurrency: the environments (`min_environments`/`max_environments`) and the
  provider's `max_vcpus` bound it.

The operator role is the one CDK makes: Lambda assumes it to launch and manage the instances,
with the AWS managed policy AWS documents for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Annotations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra.nag import acknowledge

if TYPE_CHECKING:
    from infra.config import ManagedInstancesConfig
    from infra.constructs.functions import SluiceFunction

OPERATOR_POLICY = "AWSLambdaManagedEC2ResourceOperator"
MiB = 1024 * 1024
CONCURRENCY_REASON = (
    "On Lambda Managed Instances the function's concurrency is bounded by its execution "
    "environments (min/max_environments), each answering per_environment_concurrency requests, "
    "and by the capacity provider's max_vcpus, not by reserved concurrency."
)
# The settings' defaults for one on-demand process (sluice.settings): a process on managed
# instances keeps the same share of its own memory, and never more than these.
MODEL_CACHE_SHARE, MODEL_CACHE_DEFAULT = 1 / 2, 1024 * MiB
PREDICTION_CACHE_SHARE, PREDICTION_CACHE_DEFAULT = 1 / 16, 128 * MiB
PRECOMPUTED_KEPT_SHARE, PRECOMPUTED_KEPT_DEFAULT = 1 / 32, 32 * MiB  # precomputed answers kept once read


class ManagedInstances(Construct):
    """A capacity provider (`provider`) for functions of one architecture."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: ManagedInstancesConfig,
        architecture: lambda_.Architecture,
        name: str,
    ) -> None:
        super().__init__(scope, id)
        self.config = config
        subnets = [ec2.Subnet.from_subnet_id(self, f"Subnet{i}", s) for i, s in enumerate(config.subnet_ids)]
        for subnet in subnets:
            Annotations.of(subnet).acknowledge_warning(
                "@aws-cdk/aws-ec2:noSubnetRouteTableId",
                "Only the subnet ids are handed to the capacity provider; nothing reads their route tables.",
            )
        groups = [
            ec2.SecurityGroup.from_security_group_id(self, f"SecurityGroup{i}", g, mutable=False)
            for i, g in enumerate(config.security_group_ids)
        ]
        allowed = [ec2.InstanceType(kind) for kind in config.instance_types]
        self.provider = lambda_.CapacityProvider(
            self,
            "Provider",
            capacity_provider_name=name,
            subnets=subnets,
            security_groups=groups,
            architectures=[architecture],
            instance_type_filter=lambda_.InstanceTypeFilter.allow(allowed) if allowed else None,
            max_v_cpu_count=config.max_vcpus,
        )
        acknowledge(
            self.provider,
            f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{OPERATOR_POLICY}]",
            f"The capacity provider's operator role, assumed by Lambda alone to launch, patch and "
            f"stop the instances in these subnets: {OPERATOR_POLICY} is the policy AWS documents "
            "for it and keeps current as the service's needs change.",
        )

    def attach(self, fn: SluiceFunction, memory_mb: int) -> None:
        """Runs `fn` (built without SnapStart or reserved concurrency) on the provider."""
        config = self.config
        scaling = None
        if config.min_environments is not None or config.max_environments is not None:
            scaling = lambda_.LatestPublishedScalingConfig(
                min_execution_environments=config.min_environments,
                max_execution_environments=config.max_environments,
            )
        self.provider.add_function(
            fn.function,
            per_execution_environment_max_concurrency=config.per_environment_concurrency,
            execution_environment_memory_gib_per_v_cpu=config.memory_gib_per_vcpu,
            publish_to_latest_published=True,
            latest_published_scaling_config=scaling,
        )
        for variable, value in process_environment(config, memory_mb).items():
            fn.function.add_environment(variable, value)
        # checkov's CKV_AWS_115 (reserved concurrency), acknowledged on this function alone and
        # only here: every other sluice function keeps its reserved concurrency.
        fn.function.node.default_child.add_metadata(  # type: ignore[union-attr]
            "checkov",
            {"skip": [{"id": "CKV_AWS_115", "comment": CONCURRENCY_REASON}]},
        )


def process_environment(config: ManagedInstancesConfig, memory_mb: int) -> dict[str, str]:
    """What one process of an execution environment may use: its share of the memory for its
    caches, its share of the vCPUs (at least one) for tuned sessions."""
    share = config.process_mb(memory_mb) * MiB
    vcpus = config.vcpus(memory_mb) / config.per_environment_concurrency
    return {
        "SLUICE_MODEL_CACHE_BYTES": str(int(min(MODEL_CACHE_DEFAULT, share * MODEL_CACHE_SHARE))),
        "SLUICE_PREDICTION_CACHE_MAX_BYTES": str(int(min(PREDICTION_CACHE_DEFAULT, share * PREDICTION_CACHE_SHARE))),
        "SLUICE_PRECOMPUTED_ANSWERS_KEPT_BYTES": str(int(min(PRECOMPUTED_KEPT_DEFAULT, share * PRECOMPUTED_KEPT_SHARE))),
        "SLUICE_ORT_VCPUS": str(max(1, int(vcpus))),
    }
