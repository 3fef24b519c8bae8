"""What a role that runs sluice's Triton containers on SageMaker needs, written once for the
config file's endpoints (TritonEndpoint) and those the API deploys (EndpointLifecycle)."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

SAGEMAKER = "sagemaker.amazonaws.com"
# Application Auto Scaling's service-linked role for SageMaker endpoints.
AUTOSCALING_ROLE = (
    "aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
    "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
)
PULL_ACTIONS = (
    "ecr:BatchGetImage",
    "ecr:GetDownloadUrlForLayer",
    "ecr:BatchCheckLayerAvailability",
)
LOG_ACTIONS = (
    "logs:CreateLogGroup",
    "logs:CreateLogStream",
    "logs:PutLogEvents",
    "logs:DescribeLogStreams",
)


def execution_role(scope: Construct, *, description: str) -> iam.Role:
    """`scope`'s role "ExecutionRole", which SageMaker assumes."""
    return iam.Role(
        scope,
        "ExecutionRole",
        assumed_by=iam.ServicePrincipal(SAGEMAKER),
        description=description,
    )


def allow_pulls(role: iam.Role, repositories: Sequence[str]) -> None:
    role.add_to_policy(
        iam.PolicyStatement(actions=list(PULL_ACTIONS), resources=list(repositories))
    )


def allow_authorization_token(role: iam.Role) -> None:
    # Pulling from ECR needs an authorization token, which has no resource to scope to.
    role.add_to_policy(iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]))


def allow_endpoint_logs(role: iam.Role, endpoints: str) -> str:
    """Writing the log groups of the endpoints named `endpoints` (a name or a pattern); the
    ARN granted, for its acknowledgement."""
    log_groups = Stack.of(role).format_arn(
        service="logs",
        resource="log-group",
        resource_name=f"/aws/sagemaker/Endpoints/{endpoints}",
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )
    role.add_to_policy(iam.PolicyStatement(actions=list(LOG_ACTIONS), resources=[log_groups]))
    return log_groups
