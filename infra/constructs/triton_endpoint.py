"""A SageMaker real-time endpoint running NVIDIA Triton, with target-tracking auto scaling.

One SageMaker model per production variant (a Triton model repository archived as
`model.tar.gz` in S3, with `SAGEMAKER_TRITON_DEFAULT_MODEL_NAME` naming the model that
`/invocations` serves), one endpoint config holding the variants with their weights, the
endpoint, and per variant an Application Auto Scaling target that tracks
`SageMakerVariantInvocationsPerInstance`. The execution role may read exactly the model
archives, pull exactly the Triton repository, and write the endpoint's own log group.

An asynchronous endpoint (`asynchronous`) queues requests whose inputs sluice wrote to S3 and
writes answers and errors under the tenant's results prefix in the artifacts bucket (the
only place sluice reads them from), telling two encrypted SNS topics of each; its one variant
scales on `ApproximateBacklogSizePerInstance` and may go down to zero instances, with the
step-scaling policy AWS documents (`HasBacklogWithoutCapacity`) to start one again when
requests wait.

An endpoint of inference components (`inference_components`) runs its one model as a component
on instances SageMaker manages (ManagedInstanceScaling, down to `min_instances`, 0 by default):
the component's copies track `SageMakerInferenceComponentInvocationsPerCopy` down to zero, and
an alarm on `NoCapacityInvocationFailures` adds a copy when a request finds none. Versions that
use it name the component (`inference_component`) and may answer in process meanwhile
(`"fallback": "in_process"`).
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from constructs import Construct

from infra.config import AsyncInference, EndpointVariant, InferenceComponents
from infra.constructs.triton_image import triton_image
from infra.nag import acknowledge, wildcard_resource
from sluice.endpoints.scaling import (
    ALARM_COMPARISON,
    ALARM_MISSING_DATA,
    ALARM_THRESHOLD,
    BACKLOG,
    COPIES,
    INSTANCES,
    INVOCATIONS_PER_COPY,
    INVOCATIONS_PER_INSTANCE,
    METRICS_NAMESPACE,
    ROUTING_STRATEGY,
    Scalable,
    StartFromZero,
    component_resource,
    variant_resource,
)

AUTOSCALING_ROLE = (
    "aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
    "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
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


class TritonEndpoint(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        endpoint_name: str,
        triton_version: str,
        variants: Sequence[EndpointVariant],
        model_bucket: s3.IBucket,
        asynchronous: AsyncInference | None = None,
        results_prefix: str | None = None,
        uploads_prefix: str | None = None,
        inference_components: InferenceComponents | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.endpoint_name = endpoint_name
        self.success_topic: sns.Topic | None = None
        self.error_topic: sns.Topic | None = None
        stack = Stack.of(self)
        self.role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description=f"Runs the Triton container of SageMaker endpoint {endpoint_name}",
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[model_bucket.arn_for_objects(v.model_data_key) for v in variants],
            )
        )
        # Pulling from ECR needs an authorization token, which has no resource to scope to.
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"])
        )
        log_group_arn = stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name=f"/aws/sagemaker/Endpoints/{endpoint_name}:*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=[
                    "logs:CreateLogGroup",
                    "logs:CreateLogStream",
                    "logs:PutLogEvents",
                    "logs:DescribeLogStreams",
                ],
                resources=[log_group_arn],
            )
        )
        acknowledge(
            self,
            "AwsSolutions-IAM5[Resource::*]",
            "ecr:GetAuthorizationToken has no resource-level permissions; image pulls "
            "themselves are limited to the Triton repository.",
        )
        acknowledge(
            self,
            wildcard_resource(self, log_group_arn),
            "The log streams SageMaker creates in this endpoint's own log group; their names "
            "are chosen by SageMaker per instance.",
        )

        production_variants = []
        repositories: list[str] = []
        self.models: dict[str, sagemaker.CfnModel] = {}
        self.inference_components: list[sagemaker.CfnInferenceComponent] = []
        for variant in variants:
            image, repository_arn = triton_image(
                self, version=triton_version, instance_type=variant.instance_type
            )
            repositories.append(repository_arn)
            model = sagemaker.CfnModel(
                self,
                f"Model-{variant.name}",
                execution_role_arn=self.role.role_arn,
                # Triton needs no network: SageMaker fetches the model data and image for it.
                enable_network_isolation=True,
                primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
                    image=image,
                    mode="SingleModel",
                    model_data_url=f"s3://{model_bucket.bucket_name}/{variant.model_data_key}",
                    environment={
                        **variant.environment,
                        "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": variant.model_name,
                    },
                ),
            )
            # SageMaker checks the role's access when the model is created.
            model.node.add_dependency(self.role)
            self.models[variant.name] = model
            if inference_components is not None:
                # The instances are SageMaker's to manage; the model comes in as a component.
                production_variants.append(
                    sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                        variant_name=variant.name,
                        instance_type=variant.instance_type,
                        initial_instance_count=variant.initial_instance_count,
                        managed_instance_scaling=sagemaker.CfnEndpointConfig.ManagedInstanceScalingProperty(
                            status="ENABLED",
                            min_instance_count=inference_components.min_instances,
                            max_instance_count=inference_components.max_instances,
                        ),
                        routing_config=sagemaker.CfnEndpointConfig.RoutingConfigProperty(
                            routing_strategy=ROUTING_STRATEGY
                        ),
                    )
                )
                continue
            production_variants.append(
                sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                    variant_name=variant.name,
                    model_name=model.attr_model_name,
                    instance_type=variant.instance_type,
                    initial_instance_count=variant.initial_instance_count,
                    initial_variant_weight=variant.weight,
                )
            )
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=[
                    "ecr:BatchGetImage",
                    "ecr:GetDownloadUrlForLayer",
                    "ecr:BatchCheckLayerAvailability",
                ],
                resources=sorted(set(repositories)),
            )
        )

        async_config = None
        if asynchronous is not None:
            if not results_prefix:
                raise ValueError("an asynchronous endpoint needs the tenant's results prefix")
            async_config = self._asynchronous(asynchronous, model_bucket, results_prefix, uploads_prefix)
        config = sagemaker.CfnEndpointConfig(
            self,
            "Config",
            production_variants=production_variants,
            async_inference_config=async_config,
            # An endpoint of inference components needs the role in its config.
            execution_role_arn=self.role.role_arn if inference_components is not None else None,
        )
        self.endpoint = sagemaker.CfnEndpoint(
            self,
            "Endpoint",
            endpoint_name=endpoint_name,
            endpoint_config_name=config.attr_endpoint_config_name,
        )

        autoscaling_role = iam.Role.from_role_arn(
            self,
            "AutoScalingRole",
            stack.format_arn(
                service="iam", region="", resource="role", resource_name=AUTOSCALING_ROLE
            ),
            mutable=False,
        )
        for variant in variants:
            if asynchronous is not None:
                self._scale_on_backlog(variant, asynchronous, autoscaling_role)
                continue
            if inference_components is not None:
                self._component(variant, inference_components, autoscaling_role)
                continue
            self._scale_variant(
                variant, INSTANCES, autoscaling_role, "InvocationsPerInstance", variant.target_invocations_per_instance
            )

    def _asynchronous(
        self, spec: AsyncInference, bucket: s3.IBucket, prefix: str, uploads: str | None
    ) -> sagemaker.CfnEndpointConfig.AsyncInferenceConfigProperty:
        """Where answers and errors go, who is told, and what the role may do for it."""
        objects = bucket.arn_for_objects(f"{prefix}*")
        if uploads:
            # Bodies clients uploaded (sluice.storage.uploads) are handed over as they lie:
            # SageMaker reads them as the request's InputLocation, and writes nothing there.
            uploaded = bucket.arn_for_objects(f"{uploads}*")
            self.role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[uploaded]))
            acknowledge(
                self,
                wildcard_resource(self, uploaded),
                "Request bodies tenants uploaded, one object per upload named at run time; read "
                "only, and only under this tenant's uploads prefix.",
            )
        # Inputs are written by sluice under the same prefix (<id>/input); answers and errors
        # are written by SageMaker, as this role, under sagemaker/ and sagemaker-errors/.
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["s3:GetObject", "s3:PutObject"], resources=[objects])
        )
        acknowledge(
            self,
            wildcard_resource(self, objects),
            "Asynchronous requests' inputs and answers: one object per request, named by "
            "sluice and SageMaker at run time, all under this tenant's results prefix.",
        )
        notification = None
        if spec.notifications:
            key = kms.Alias.from_alias_name(self, "TopicKey", "alias/aws/sns")
            self.success_topic = sns.Topic(self, "Succeeded", master_key=key, enforce_ssl=True)
            self.error_topic = sns.Topic(self, "Failed", master_key=key, enforce_ssl=True)
            self.role.add_to_policy(
                iam.PolicyStatement(
                    actions=["sns:Publish"],
                    resources=[self.success_topic.topic_arn, self.error_topic.topic_arn],
                )
            )
            notification = sagemaker.CfnEndpointConfig.AsyncInferenceNotificationConfigProperty(
                success_topic=self.success_topic.topic_arn,
                error_topic=self.error_topic.topic_arn,
            )
        where = f"s3://{bucket.bucket_name}/{prefix}"
        return sagemaker.CfnEndpointConfig.AsyncInferenceConfigProperty(
            client_config=sagemaker.CfnEndpointConfig.AsyncInferenceClientConfigProperty(
                max_concurrent_invocations_per_instance=spec.max_concurrent_invocations_per_instance
            ),
            output_config=sagemaker.CfnEndpointConfig.AsyncInferenceOutputConfigProperty(
                s3_output_path=f"{where}sagemaker",
                s3_failure_path=f"{where}sagemaker-errors",
                notification_config=notification,
            ),
        )

    def _component(self, variant: EndpointVariant, spec: InferenceComponents, role: iam.IRole) -> None:
        """The variant's model as an inference component, its copies scaling to zero and back."""
        name = f"{self.endpoint_name}-{variant.name}"[:63]
        component = sagemaker.CfnInferenceComponent(
            self,
            f"Component-{variant.name}",
            inference_component_name=name,
            endpoint_name=self.endpoint_name,
            variant_name=variant.name,
            specification=sagemaker.CfnInferenceComponent.InferenceComponentSpecificationProperty(
                model_name=self.models[variant.name].attr_model_name,
                compute_resource_requirements=sagemaker.CfnInferenceComponent.InferenceComponentComputeResourceRequirementsProperty(
                    min_memory_required_in_mb=spec.memory_mb,
                    number_of_accelerator_devices_required=spec.accelerators or None,
                ),
            ),
            runtime_config=sagemaker.CfnInferenceComponent.InferenceComponentRuntimeConfigProperty(
                copy_count=spec.copies
            ),
        )
        component.add_dependency(self.endpoint)
        self.inference_components.append(component)
        target = appscaling.ScalableTarget(
            self,
            f"Scaling-{variant.name}",
            service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
            resource_id=component_resource(name),
            scalable_dimension=COPIES.dimension,
            min_capacity=spec.min_copies,
            max_capacity=spec.max_copies,
            role=role,
        )
        target.node.add_dependency(component)
        self._track(target, "InvocationsPerCopy", COPIES, spec.target_invocations_per_copy)
        if spec.min_copies > 0:
            return
        assert COPIES.from_zero is not None
        self._start_from_zero(
            target, "NoCapacity", COPIES.from_zero, name, description=f"A request found no copy of {name}"
        )

    def _scale_on_backlog(
        self, variant: EndpointVariant, spec: AsyncInference, role: iam.IRole
    ) -> None:
        """Target tracking on the queue per instance, down to min_instances (0 allowed), and
        the step policy that starts an instance when requests wait and none is running."""
        target = self._scale_variant(variant, BACKLOG, role, "BacklogPerInstance", spec.backlog_per_instance)
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

    def _scale_variant(
        self, variant: EndpointVariant, kind: Scalable, role: iam.IRole, id: str, target_value: float
    ) -> appscaling.ScalableTarget:
        """The variant's instance count between its bounds (once the endpoint is there), tracked
        as `kind` asks."""
        target = appscaling.ScalableTarget(
            self,
            f"Scaling-{variant.name}",
            service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
            resource_id=variant_resource(self.endpoint_name, variant.name),
            scalable_dimension=kind.dimension,
            min_capacity=variant.min_instances,
            max_capacity=variant.max_instances,
            role=role,
        )
        target.node.add_dependency(self.endpoint)
        self._track(target, id, kind, target_value)
        return target

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
        an alarm on the metric that says requests found none (target tracking cannot). The
        shapes are `sluice.endpoints.scaling`'s, which `sluice endpoints deploy` sends too."""
        from_zero = appscaling.StepScalingAction(
            self,
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
            self,
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

    @property
    def endpoint_arn(self) -> str:
        return Stack.of(self).format_arn(
            service="sagemaker", resource="endpoint", resource_name=self.endpoint_name.lower()
        )
