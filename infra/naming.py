"""Physical names of what one stack makes and another uses.

Stacks refer to each other's resources by these names rather than through CloudFormation
exports: an export cannot change while another stack imports it, which would pin a bucket,
a table or an endpoint in place. The app orders the stacks with explicit dependencies.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Aws

# What the API names the SageMaker endpoints, endpoint configs and models it deploys at run
# time (`sluice.endpoints.sagemaker.endpoint_name`: `sluice-<tenant>-<deployment>-<digest>`,
# then `-<digest>` or `-<variant>-<digest>`), whatever the app's `name`. Grants on run-time
# endpoints are scoped to it.
RUNTIME_ENDPOINT_PREFIX = "sluice-"


@dataclass(frozen=True)
class ResourceNames:
    prefix: str

    def _bucket(self, purpose: str) -> str:
        # Bucket names are global: the account and region keep them unique.
        return f"{self.prefix}-{purpose}-{Aws.ACCOUNT_ID}-{Aws.REGION}"

    @property
    def artifacts_bucket(self) -> str:
        return self._bucket("artifacts")

    @property
    def batch_bucket(self) -> str:
        return self._bucket("batch")

    @property
    def access_logs_bucket(self) -> str:
        return self._bucket("access-logs")

    @property
    def table(self) -> str:
        return f"{self.prefix}-registry"

    @property
    def state_machine(self) -> str:
        return f"{self.prefix}-batch"

    @property
    def schedule_group(self) -> str:
        """The EventBridge Scheduler group the API creates batch schedules in."""
        return f"{self.prefix}-batch"

    @property
    def scheduler_role(self) -> str:
        """The role EventBridge Scheduler assumes to start the batch state machine."""
        return f"{self.prefix}-batch-scheduler"

    @property
    def rest_api(self) -> str:
        return f"{self.prefix}-api"

    @property
    def capture_stream(self) -> str:
        return f"{self.prefix}-capture"

    def function(self, purpose: str) -> str:
        return f"{self.prefix}-{purpose}"

    def endpoint(self, name: str) -> str:
        return f"{self.prefix}-{name}"
