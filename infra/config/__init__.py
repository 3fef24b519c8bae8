"""What a deployment of sluice looks like, read from one YAML file (`infra/sluice.yaml`).

Every knob a platform engineer turns without writing CDK lives here: throttling and quotas,
batch concurrency, retention, alarms, and the GPU endpoints. A few settings can also be
given on the command line as CDK context (`cdk synth -c sluice:architecture=arm64`):
`sluice:config` (another file), `sluice:architecture` and `sluice:python`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import Field, field_validator, model_validator

from infra.config.base import Section, names_unique
from infra.config.concurrency import UNRESERVED_MINIMUM, ConcurrencyConfig
from infra.config.endpoints import (
    AsyncInference,
    EndpointConfig,
    EndpointVariant,
    InferenceComponents,
)
from infra.config.managed import ManagedInstancesConfig
from infra.config.sections import (
    AlarmsConfig,
    ApiConfig,
    BatchConfig,
    FunctionsConfig,
    GraphsConfig,
    PlanLimits,
    StorageConfig,
    TenantPlan,
    WebSocketConfig,
)
from infra.config.streams import StreamConfig, StreamDestination, StreamSource

__all__ = [
    "DEFAULT_CONFIG",
    "LOG_RETENTION",
    "UNRESERVED_MINIMUM",
    "AlarmsConfig",
    "ApiConfig",
    "AsyncInference",
    "BatchConfig",
    "ConcurrencyConfig",
    "EndpointConfig",
    "EndpointVariant",
    "FunctionsConfig",
    "GraphsConfig",
    "InferenceComponents",
    "ManagedInstancesConfig",
    "PlanLimits",
    "SluiceConfig",
    "StorageConfig",
    "StreamConfig",
    "StreamDestination",
    "StreamSource",
    "TenantPlan",
    "WebSocketConfig",
    "load_config",
]

DEFAULT_CONFIG = Path(__file__).parents[1] / "sluice.yaml"

# The values CloudWatch Logs accepts for a log group's retention, with the name CDK gives each
# (`aws_logs.RetentionDays`; infra.constructs.logs reads it).
LOG_RETENTION = {
    1: "ONE_DAY",
    3: "THREE_DAYS",
    5: "FIVE_DAYS",
    7: "ONE_WEEK",
    14: "TWO_WEEKS",
    30: "ONE_MONTH",
    60: "TWO_MONTHS",
    90: "THREE_MONTHS",
    120: "FOUR_MONTHS",
    150: "FIVE_MONTHS",
    180: "SIX_MONTHS",
    365: "ONE_YEAR",
    400: "THIRTEEN_MONTHS",
    545: "EIGHTEEN_MONTHS",
    731: "TWO_YEARS",
    1096: "THREE_YEARS",
    1827: "FIVE_YEARS",
    2192: "SIX_YEARS",
    2557: "SEVEN_YEARS",
    2922: "EIGHT_YEARS",
    3288: "NINE_YEARS",
    3653: "TEN_YEARS",
}


class SluiceConfig(Section):
    name: str = Field(
        "sluice",
        pattern=r"^[a-z][a-z0-9-]{0,15}$",
        description="Prefix of stack and resource names.",
    )
    tags: dict[str, str] = Field(default_factory=dict)
    log_retention_days: int = 30
    functions: FunctionsConfig = FunctionsConfig()
    storage: StorageConfig = StorageConfig()
    api: ApiConfig = ApiConfig()
    websocket: WebSocketConfig = WebSocketConfig()
    batch: BatchConfig = BatchConfig()
    alarms: AlarmsConfig = AlarmsConfig()
    graphs: GraphsConfig = GraphsConfig()
    concurrency: ConcurrencyConfig = ConcurrencyConfig()
    endpoints: Annotated[
        tuple[EndpointConfig, ...], names_unique("endpoint names must be unique")
    ] = ()
    streams: Annotated[tuple[StreamConfig, ...], names_unique("stream names must be unique")] = Field(
        (), description="Event sources scored as they arrive (see docs/streaming.md)."
    )

    @model_validator(mode="after")
    def _reservations_fit(self) -> SluiceConfig:
        """Every function's reservation counts against the one account: the `concurrency`
        section's, the websocket function's and each stream's, added together."""
        parts = {"concurrency": self.concurrency.total}
        if self.websocket.enabled and self.websocket.reserved_concurrency:
            parts["websocket.reserved_concurrency"] = self.websocket.reserved_concurrency
        streams = sum(stream.reserved_concurrency or 0 for stream in self.streams)
        if streams:
            parts["streams' reserved_concurrency"] = streams
        reserved = sum(parts.values())
        room = self.concurrency.account_limit - UNRESERVED_MINIMUM
        if reserved > room:
            shares = ", ".join(f"{name} {n}" for name, n in parts.items())
            raise ValueError(
                f"reserved concurrency adds up to {reserved} ({shares}), but Lambda keeps "
                f"{UNRESERVED_MINIMUM} of the account's {self.concurrency.account_limit} "
                f"unreserved: at most {room} may be reserved"
            )
        return self

    @model_validator(mode="after")
    def _endpoint_names(self) -> SluiceConfig:
        """Each endpoint's name (`<name>-<endpoint>`, `ResourceNames.endpoint`) within SageMaker's
        63 characters, and no two inference components named alike (`a-b`/`c` and `a`/`b-c`):
        each failed in CloudFormation, naming a resource rather than the key."""
        from infra.naming import ResourceNames, inference_component

        names, seen = ResourceNames(self.name), {}
        for endpoint in self.endpoints:
            full = names.endpoint(endpoint.name)
            if len(full) > 63:
                raise ValueError(f"endpoints: {endpoint.name!r} makes the endpoint name {full!r}, {len(full)} characters: SageMaker takes 63")
            if endpoint.inference_components is None:
                continue
            for variant in endpoint.variants:
                component = inference_component(full, variant.name)
                if component in seen:
                    raise ValueError(
                        f"endpoints: {seen[component]!r} and {endpoint.name!r}/{variant.name!r} both make the inference component {component!r}"
                    )
                seen[component] = f"{endpoint.name}/{variant.name}"
        return self

    @model_validator(mode="after")
    def _one_stream_a_queue(self) -> SluiceConfig:
        """Two mappings on one SQS queue would each take a share of its messages (a message goes
        to one consumer): each stream's destination would get only part of them, at random. (A
        Kinesis stream or a Kafka topic gives every mapping all of its records.)"""
        seen: dict[str, str] = {}
        for stream in self.streams:
            arn = stream.source.arn
            if stream.source.kind != "sqs" or arn is None:
                continue
            if arn in seen:
                raise ValueError(f"streams {seen[arn]!r} and {stream.name!r} read the same queue ({arn}): one stream a queue")
            seen[arn] = stream.name
        return self

    @model_validator(mode="after")
    def _managed_instances(self) -> SluiceConfig:
        if self.api.managed_instances is not None:
            self.api.managed_instances.check(self.functions, self.api.memory_mb)
        return self

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, days: int) -> int:
        if days not in LOG_RETENTION:
            raise ValueError(f"log_retention_days must be one of {tuple(LOG_RETENTION)}")
        return days

    @model_validator(mode="after")
    def _score_capacity(self) -> SluiceConfig:
        score = self.concurrency.batch_score
        if score is not None and self.batch.max_concurrency > score:
            raise ValueError(
                f"batch.max_concurrency ({self.batch.max_concurrency}) exceeds "
                f"concurrency.batch_score ({score}): the extra chunks would only be throttled"
            )
        return self

    def with_overrides(self, **sections: Any) -> SluiceConfig:
        """A copy with some fields replaced, validated like the file."""
        return SluiceConfig.model_validate(self.model_dump() | sections)


def load_config(
    path: Path | str = DEFAULT_CONFIG, *, context: dict[str, Any] | None = None
) -> SluiceConfig:
    """Read the config file, then apply the `sluice:*` context overrides."""
    raw = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    context = context or {}
    functions = dict(raw.get("functions") or {})
    if context.get("sluice:architecture"):
        functions["architecture"] = str(context["sluice:architecture"])
    if context.get("sluice:python"):
        functions["python"] = str(context["sluice:python"])
    return SluiceConfig.model_validate(raw | {"functions": functions})
