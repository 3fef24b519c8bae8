"""Physical names of what one stack makes and another uses, and where things lie in the buckets.

Stacks refer to each other's resources by these names rather than through CloudFormation
exports: an export cannot change while another stack imports it, which would pin a bucket,
a table or an endpoint in place. The app orders the stacks with explicit dependencies.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Aws

from infra.config import StreamConfig

# What the API names the SageMaker endpoints, endpoint configs and models it deploys at run
# time (`sluice.endpoints.sagemaker.endpoint_name`: `sluice-<tenant>-<deployment>-<digest>`,
# then `-<digest>` or `-<variant>-<digest>`), whatever the app's `name`. Grants on run-time
# endpoints are scoped to it.
RUNTIME_ENDPOINT_PREFIX = "sluice-"

# The artifacts bucket: the artifact store under `artifacts/` (SLUICE_STORE), with asynchronous
# results (sluice.storage.results) and uploaded request bodies (sluice.storage.uploads) in it,
# each per tenant under `tenants/<tenant>/` (`tenant_prefix`).
ARTIFACTS_PREFIX = "artifacts"
STORE_PREFIX = f"{ARTIFACTS_PREFIX}/"
RESULTS_PREFIX = f"{STORE_PREFIX}results/"
UPLOADS_PREFIX = f"{STORE_PREFIX}uploads/"
# Push-by-URI reads model files from `imports/<tenant>/` in the artifacts bucket, and only there
# (SLUICE_IMPORT_PREFIXES); tenants put them there with credentials of their own.
IMPORTS_PREFIX = "imports/"
# The batch bucket: inputs, outputs and work files of batch jobs.
INBOX_PREFIX = "inbox/"
OUTBOX_PREFIX = "outbox/"
WORK_PREFIX = "work/"
# Data capture: the Firehose delivery stream writes `capture/tenant=…/deployment=…/dt=…/hour=…/`
# and what it could not partition under `capture-errors/`.
CAPTURE_PREFIX = "capture/"
CAPTURE_ERRORS_PREFIX = "capture-errors/"


def tenant_prefix(prefix: str, tenant: str) -> str:
    """One tenant's folder under `prefix` (results, uploads)."""
    return f"{prefix}tenants/{tenant}/"


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
    def websocket_api(self) -> str:
        return f"{self.prefix}-websocket"

    @property
    def usage_plan_prefix(self) -> str:
        """Usage plans and their API keys are named `<prefix>-<tenant>` (`-_default`)."""
        return f"{self.prefix}-"

    @property
    def usage_key_prefix(self) -> str:
        """The values of the usage plans' API keys, `<this><tenant>`: the authorizer names the
        caller's plan with one; they only name a plan and are never accepted from clients."""
        return f"{self.prefix}-api-usage-plan-key-"

    @property
    def alarm_topic(self) -> str:
        return f"{self.prefix}-alarms"

    @property
    def dashboard(self) -> str:
        return f"{self.prefix}-overview"

    @property
    def capture_stream(self) -> str:
        return f"{self.prefix}-capture"

    def function(self, purpose: str) -> str:
        return f"{self.prefix}-{purpose}"

    def stream_function(self, stream: str) -> str:
        return self.function(f"stream-{stream}")

    def stream_source_queue(self, stream: StreamConfig) -> str:
        """The SQS source queue's name: the created one's, or the one its ARN names."""
        if stream.source.arn:
            return stream.source.arn.rsplit(":", 1)[-1]
        return self._queue(f"stream-{stream.name}-in", fifo=stream.source.is_fifo)

    def stream_dead_letter_queue(self, stream: StreamConfig) -> str:
        return self._queue(f"stream-{stream.name}-dlq", fifo=stream.source.is_fifo)

    def _queue(self, purpose: str, *, fifo: bool) -> str:
        return self.function(purpose) + (".fifo" if fifo else "")

    def endpoint(self, name: str) -> str:
        return f"{self.prefix}-{name}"
