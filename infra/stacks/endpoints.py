"""GPU endpoints: one TritonEndpoint per entry under `endpoints:` in the config file.

With the default empty list this stack holds no resources, so `cdk deploy --all` needs no
GPU quota. The API, shadow and batch Score functions may invoke these and the endpoints the
API deploys at run time (`sluice-*`; see `grant_invoke_endpoints`).
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from infra.config import EndpointConfig
from infra.constructs.imported import ImportedStorage
from infra.constructs.logs import LogRetention
from infra.constructs.triton_endpoint import TritonEndpoint
from infra.nag import acknowledge
from infra.naming import ResourceNames


class EndpointsStack(Stack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        names: ResourceNames,
        endpoints: Sequence[EndpointConfig],
        logs: LogRetention | None = None,
        **kwargs,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        artifacts = ImportedStorage(self, names).artifacts
        self.endpoints: list[TritonEndpoint] = []
        for endpoint in endpoints:
            triton = TritonEndpoint(
                self,
                f"Endpoint-{endpoint.name}",
                endpoint_name=names.endpoint(endpoint.name),
                triton_version=endpoint.triton_version,
                variants=endpoint.variants,
                model_bucket=artifacts,
                asynchronous=endpoint.asynchronous,
                inference_components=endpoint.inference_components,
                logs=logs,
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
