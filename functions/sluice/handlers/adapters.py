"""The adapters only Lambda handlers use, built here from the container's settings and the
process's boto3 clients (`sluice.clients`), as `sluice.wiring` builds the rest: a handler
asks for what it needs and builds no client or adapter itself. Each is imported and built on
first use, so a handler that never writes to a stream or checks an alarm never pays for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.clients import AwsClients
    from sluice.convert.follow import Follower
    from sluice.registry.dynamodb import DynamoRegistry
    from sluice.services.rollouts import RolloutService
    from sluice.settings import Settings
    from sluice.stream.bindings import Destination
    from sluice.stream.sinks import Sink
    from sluice.wiring import Container


def clients(settings: Settings) -> AwsClients:
    """The process's boto3 clients in the settings' region: one session, the same retries."""
    from sluice.clients import default_clients

    return default_clients(settings.adapters.region)


def rollout_controller(container: Container) -> RolloutService:
    """Every tenant's rollouts, looked at with the CloudWatch alarms they name (the container's
    own `rollouts` checks none: its looks run where no alarm is read, in `sluice serve`) and
    with model monitoring's drift and quality for the gates that name them."""
    from sluice.services.rollouts import RolloutService
    from sluice.stats.alarms import CloudWatchAlarms

    settings = container.settings
    alarms = CloudWatchAlarms(clients(settings).client("cloudwatch", region=settings.adapters.region))
    return RolloutService(
        container.registry, container.deployments, alarms=alarms, endpoints=container.endpoint_plane, monitor=lambda: container.monitor
    )


def follower(container: Container) -> Follower:
    """What the registry event handler runs: the container's follow bindings, with the
    process's clients to read model packages and their model data, and MLflow read over its
    REST API (MLflow's client is in no Lambda layer): the servers `mlflow_tracking_servers`
    admits alone, with each tenant's credentials from its Secrets Manager secret."""
    from sluice.convert.follow import Follower
    from sluice.convert.mlflow_credentials import SecretCredentials
    from sluice.convert.mlflow_rest import MlflowRest

    settings = container.settings
    aws = clients(settings)
    region = settings.adapters.region
    mlflow = MlflowRest(
        allowed=settings.follows.mlflow_allowlist,
        credentials=SecretCredentials(settings.follows.mlflow_credentials_secrets, lambda: aws.client("secretsmanager", region=region)),
        s3=lambda: aws.client("s3", region=region), reads=container.follows.may_read,
    )
    return Follower(container.follows, container.models, clients=aws, mlflow=mlflow)


def stream_sink(settings: Settings, destination: Destination) -> Sink:
    """Where a stream binding's outputs and error records go (SQS, Kinesis, Firehose, S3)."""
    from sluice.stream.sinks import build_sink

    return build_sink(destination, clients(settings))


def management_api(clients: AwsClients, domain: str, stage: str) -> Any:
    """The API Gateway Management API client of a WebSocket API's stage, which posts answers
    to its connections."""
    return clients.client(
        "apigatewaymanagementapi",
        endpoint_url=f"https://{domain}/{stage}",
        connect_timeout=2,
        read_timeout=5,
    )


def upload_idempotency(registry: DynamoRegistry, *, key: str, expires_after_s: int) -> tuple[Any, Any]:
    """powertools idempotency's persistence (records in the registry's table under `key`,
    expiring through its `expires_at` time to live) and its configuration, keyed by an
    uploaded object's bucket, key and version."""
    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
    )

    persistence = DynamoDBPersistenceLayer(
        table_name=registry.table_name,
        key_attr="pk",
        sort_key_attr="sk",
        static_pk_value=key,
        expiry_attr="expires_at",
        boto3_client=registry.client,
    )
    config = IdempotencyConfig(event_key_jmespath="[bucket, key, version]", expires_after_seconds=expires_after_s)
    return persistence, config
