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
# Model monitoring's history: `monitor/<tenant>/<deployment>/<window start>.json`.
MONITOR_PREFIX = "monitor/"
CAPTURE_ERRORS_PREFIX = "capture-errors/"


def inference_component(endpoint: str, variant: str) -> str:
    """The inference component of one variant of a config-file endpoint (SageMaker's 63
    characters at most)."""
    return f"{endpoint}-{variant}"[:63]


def tenant_prefix(prefix: str, tenant: str) -> str:
    """One tenant's folder under `prefix` (results, uploads)."""
    return f"{prefix}tenants/{tenant}/"


class _Name:
    """A name under the app's prefix, `<prefix>-<suffix>`; a bucket's also ends in the account
    and region, since bucket names are global."""

    def __init__(self, suffix: str, *, bucket: bool = False) -> None:
        self.suffix = suffix
        self.bucket = bucket

    def __get__(self, names: ResourceNames, owner: type[ResourceNames] | None = None) -> str:
        name = f"{names.prefix}-{self.suffix}"
        return f"{name}-{Aws.ACCOUNT_ID}-{Aws.REGION}" if self.bucket else name


@dataclass(frozen=True)
class ResourceNames:
    prefix: str

    artifacts_bucket = _Name("artifacts", bucket=True)
    batch_bucket = _Name("batch", bucket=True)
    access_logs_bucket = _Name("access-logs", bucket=True)
    table = _Name("registry")
    # Tables of precomputed answers that batch jobs publish and `precomputed` nodes read.
    precomputed_table = _Name("precomputed")
    state_machine = _Name("batch")
    # The EventBridge Scheduler group the API creates batch schedules in.
    schedule_group = _Name("batch")
    # The role EventBridge Scheduler assumes to start the batch state machine.
    scheduler_role = _Name("batch-scheduler")
    rest_api = _Name("api")
    websocket_api = _Name("websocket")
    # Usage plans and their API keys are named `<prefix>-<tenant>` (`-_default`).
    usage_plan_prefix = _Name("")
    # The values of the usage plans' API keys, `<this><tenant>`: the authorizer names the
    # caller's plan with one; they only name a plan and are never accepted from clients.
    usage_key_prefix = _Name("api-usage-plan-key-")
    alarm_topic = _Name("alarms")
    dashboard = _Name("overview")
    capture_stream = _Name("capture")

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
