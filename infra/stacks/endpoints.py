"""GPU endpoints: one TritonEndpoint per entry under `endpoints:` in the config file.

With the default empty list this stack holds no resources, so `cdk deploy --all` needs no
GPU quota. The API, shadow and batch Score functions may invoke these and the endpoints the
API deploys at run time (`sluice-*`; see `grant_invoke_endpoints`).
"""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.config import SluiceConfig
from infra.constructs.triton_endpoint import TritonEndpoint
from infra.nag import acknowledge
from infra.naming import ResourceNames
from infra.stacks.storage import ARTIFACTS_PREFIX, RESULTS_PREFIX, UPLOADS_PREFIX


class EndpointsStack(Stack):
    def __init__(
        self, scope: Construct, id: str, *, config: SluiceConfig, names: ResourceNames, **kwargs
    ) -> None:
        super().__init__(scope, id, **kwargs)
        artifacts = s3.Bucket.from_bucket_name(self, "ArtifactsBucket", names.artifacts_bucket)
        self.endpoints: list[TritonEndpoint] = []
        for endpoint in config.endpoints:
            triton = TritonEndpoint(
                self,
                f"Endpoint-{endpoint.name}",
                endpoint_name=names.endpoint(endpoint.name),
                triton_version=endpoint.triton_version,
                variants=endpoint.variants,
                model_bucket=artifacts,
                asynchronous=endpoint.asynchronous,
                results_prefix=(
                    f"{ARTIFACTS_PREFIX}/{RESULTS_PREFIX}tenants/{endpoint.asynchronous.tenant}/"
                    if endpoint.asynchronous is not None
                    else None
                ),
                uploads_prefix=(
                    f"{ARTIFACTS_PREFIX}/{UPLOADS_PREFIX}tenants/{endpoint.asynchronous.tenant}/"
                    if endpoint.asynchronous is not None
                    else None
                ),
                inference_components=endpoint.inference_components,
            )
            CfnOutput(
                self,
                f"EndpointName-{endpoint.name}",
                value=triton.endpoint_name,
                description=f"SageMaker endpoint for '{endpoint.name}': use it as the "
                "endpoint of a model version with runtime 'sagemaker'",
            )
            self.endpoints.append(triton)
        if not self.endpoints:
            acknowledge(
                self,
                "CloudFormation-Validate::F0001",
                "No endpoints are configured: the CDK CLI skips a stack without resources (and "
                "deletes it once all endpoints are removed), which is how the default config "
                "deploys without GPUs.",
            )
