"""A SageMaker real-time endpoint running NVIDIA Triton, with target-tracking auto scaling.

One SageMaker model per production variant (a Triton model repository archived as
`model.tar.gz` in S3, with `SAGEMAKER_TRITON_DEFAULT_MODEL_NAME` naming the model that
`/invocations` serves), one endpoint config holding the variants with their weights, the
endpoint, and per variant an Application Auto Scaling target that tracks
`SageMakerVariantInvocationsPerInstance` (endpoint_scaling.py). The execution role may read
exactly the model archives, pull exactly the Triton repository, and write the endpoint's own
log group.

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

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from constructs import Construct

from infra.config import AsyncInference, EndpointVariant, InferenceComponents
from infra.constructs.endpoint_scaling import EndpointScaling
from infra.constructs.grants import role_arn
from infra.constructs.logs import LogRetention
from infra.constructs.sagemaker_role import (
    AUTOSCALING_ROLE,
    allow_authorization_token,
    allow_endpoint_logs,
    allow_pulls,
    execution_role,
)
from infra.constructs.triton_image import triton_image
from infra.nag import acknowledge, wildcard_resource
from infra.naming import RESULTS_PREFIX, UPLOADS_PREFIX, inference_component, tenant_prefix
from sluice.endpoints.scaling import INSTANCES, ROUTING_STRATEGY


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
        inference_components: InferenceComponents | None = None,
        logs: LogRetention | None = None,
    ) -> None:
        super().__init__(scope, id)
        if logs is not None:
            # SageMaker would create the endpoint's log group itself as the endpoint starts, keeping
            # its logs forever: made here first, it keeps them as long as every other group.
            logs.group(self, "Logs", name=f"/aws/sagemaker/Endpoints/{endpoint_name}")
        self.endpoint_name = endpoint_name
        self.success_topic: sns.Topic | None = None
        self.error_topic: sns.Topic | None = None
        self.role = execution_role(
            self, description=f"Runs the Triton container of SageMaker endpoint {endpoint_name}"
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[model_bucket.arn_for_objects(v.model_data_key) for v in variants],
            )
        )
        allow_authorization_token(self.role)
        log_group_arn = allow_endpoint_logs(self.role, f"{endpoint_name}:*")
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
            self.models[variant.name] = self._model(variant, image, model_bucket)
            production_variants.append(self._production_variant(variant, inference_components))
        allow_pulls(self.role, sorted(set(repositories)))

        async_config = None
        if asynchronous is not None:
            async_config = self._asynchronous(asynchronous, model_bucket)
        endpoint_config = sagemaker.CfnEndpointConfig(
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
            endpoint_config_name=endpoint_config.attr_endpoint_config_name,
        )

        scaling = EndpointScaling(
            self,
            endpoint_name=endpoint_name,
            endpoint=self.endpoint,
            role=iam.Role.from_role_arn(
                self, "AutoScalingRole", role_arn(self, AUTOSCALING_ROLE), mutable=False
            ),
        )
        for variant in variants:
            if asynchronous is not None:
                scaling.backlog(variant, asynchronous)
            elif inference_components is not None:
                self._component(variant, inference_components, scaling)
            else:
                scaling.instances(
                    variant,
                    INSTANCES,
                    "InvocationsPerInstance",
                    variant.target_invocations_per_instance,
                )

    def _model(
        self, variant: EndpointVariant, image: str, bucket: s3.IBucket
    ) -> sagemaker.CfnModel:
        model = sagemaker.CfnModel(
            self,
            f"Model-{variant.name}",
            execution_role_arn=self.role.role_arn,
            # Triton needs no network: SageMaker fetches the model data and image for it.
            enable_network_isolation=True,
            primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
                image=image,
                mode="SingleModel",
                model_data_url=f"s3://{bucket.bucket_name}/{variant.model_data_key}",
                environment={
                    **variant.environment,
                    "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": variant.model_name,
                },
            ),
        )
        # SageMaker checks the role's access when the model is created.
        model.node.add_dependency(self.role)
        return model

    def _production_variant(
        self, variant: EndpointVariant, components: InferenceComponents | None
    ) -> sagemaker.CfnEndpointConfig.ProductionVariantProperty:
        if components is None:
            return sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                variant_name=variant.name,
                model_name=self.models[variant.name].attr_model_name,
                instance_type=variant.instance_type,
                initial_instance_count=variant.initial_instance_count,
                initial_variant_weight=variant.weight,
            )
        # The instances are SageMaker's to manage; the model comes in as a component.
        return sagemaker.CfnEndpointConfig.ProductionVariantProperty(
            variant_name=variant.name,
            instance_type=variant.instance_type,
            initial_instance_count=variant.initial_instance_count,
            managed_instance_scaling=sagemaker.CfnEndpointConfig.ManagedInstanceScalingProperty(
                status="ENABLED",
                min_instance_count=components.min_instances,
                max_instance_count=components.max_instances,
            ),
            routing_config=sagemaker.CfnEndpointConfig.RoutingConfigProperty(
                routing_strategy=ROUTING_STRATEGY
            ),
        )

    def _asynchronous(
        self, spec: AsyncInference, bucket: s3.IBucket
    ) -> sagemaker.CfnEndpointConfig.AsyncInferenceConfigProperty:
        """Where answers and errors go (the tenant's results), who is told, and what the role
        may do for it."""
        prefix = tenant_prefix(RESULTS_PREFIX, spec.tenant)
        objects = bucket.arn_for_objects(f"{prefix}*")
        # Bodies clients uploaded (sluice.storage.uploads) are handed over as they lie:
        # SageMaker reads them as the request's InputLocation, and writes nothing there.
        uploaded = bucket.arn_for_objects(f"{tenant_prefix(UPLOADS_PREFIX, spec.tenant)}*")
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

    def _component(
        self, variant: EndpointVariant, spec: InferenceComponents, scaling: EndpointScaling
    ) -> None:
        """The variant's model as an inference component, its copies scaling to zero and back."""
        name = inference_component(self.endpoint_name, variant.name)
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
        scaling.copies(variant.name, name, component, spec)

    @property
    def endpoint_arn(self) -> str:
        return Stack.of(self).format_arn(
            service="sagemaker", resource="endpoint", resource_name=self.endpoint_name.lower()
        )
