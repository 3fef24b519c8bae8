"""A SageMaker real-time endpoint running NVIDIA Triton, with target-tracking auto scaling.

One SageMaker model per production variant (a Triton model repository archived as
`model.tar.gz` in S3, with `SAGEMAKER_TRITON_DEFAULT_MODEL_NAME` naming the model that
`/invocations` serves), one endpoint config holding the variants with their weights, the
endpoint, and per variant an Application Auto Scaling target that tracks
`SageMakerVariantInvocationsPerInstance`. The execution role may read exactly the model
archives, pull exactly the Triton repository, and write the endpoint's own log group.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from infra.config import EndpointVariant
from infra.constructs.triton_image import triton_image
from infra.nag import acknowledge, wildcard_resource

AUTOSCALING_ROLE = (
    "aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
    "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
)


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
    ) -> None:
        super().__init__(scope, id)
        self.endpoint_name = endpoint_name
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

        config = sagemaker.CfnEndpointConfig(
            self, "Config", production_variants=production_variants
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
            target = appscaling.ScalableTarget(
                self,
                f"Scaling-{variant.name}",
                service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
                resource_id=f"endpoint/{endpoint_name}/variant/{variant.name}",
                scalable_dimension="sagemaker:variant:DesiredInstanceCount",
                min_capacity=variant.min_instances,
                max_capacity=variant.max_instances,
                role=autoscaling_role,
            )
            target.node.add_dependency(self.endpoint)
            target.scale_to_track_metric(
                "InvocationsPerInstance",
                predefined_metric=appscaling.PredefinedMetric.SAGEMAKER_VARIANT_INVOCATIONS_PER_INSTANCE,
                target_value=variant.target_invocations_per_instance,
                scale_in_cooldown=Duration.minutes(5),
                scale_out_cooldown=Duration.minutes(1),
            )

    @property
    def endpoint_arn(self) -> str:
        return Stack.of(self).format_arn(
            service="sagemaker", resource="endpoint", resource_name=self.endpoint_name.lower()
        )
