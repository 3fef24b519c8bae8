"""Streams: event sources scored as they arrive (docs/streaming.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from infra.config.base import TENANT, Section


class StreamSource(Section):
    kind: Literal["sqs", "kinesis", "msk", "kafka"] = Field(
        description="sqs (standard or FIFO), kinesis, msk (Amazon MSK) or kafka (self-managed)."
    )
    arn: str | None = Field(
        None,
        pattern=r"^arn:aws[a-z-]*:(sqs|kinesis|kafka):",
        description="The queue, stream or MSK cluster to read; none with create.",
    )
    create: bool = Field(False, description="Create the queue or stream (sqs, kinesis).")
    fifo: bool = Field(False, description="A created queue is FIFO (order per message group).")
    shards: int | None = Field(
        None, ge=1, description="A created stream's shards; none: on-demand capacity."
    )
    topic: str | None = Field(None, description="The Kafka topic (msk, kafka).")
    bootstrap_servers: tuple[str, ...] = Field((), description="Brokers of self-managed Kafka.")
    secret_arn: str | None = Field(
        None, description="Secrets Manager secret with the Kafka SASL/SCRAM credentials."
    )
    starting_position: Literal["LATEST", "TRIM_HORIZON"] = "LATEST"

    @model_validator(mode="after")
    def _one_source(self) -> StreamSource:
        if self.kind in ("sqs", "kinesis") and (self.arn is None) == (not self.create):
            raise ValueError(f"a {self.kind} source needs exactly one of arn or create: true")
        if self.create and self.kind not in ("sqs", "kinesis"):
            raise ValueError("create: true makes an SQS queue or a Kinesis stream only")
        if self.kind in ("msk", "kafka") and not self.topic:
            raise ValueError(f"a {self.kind} source needs a topic")
        if self.kind == "msk" and not self.arn:
            raise ValueError("an msk source needs the cluster's arn")
        if self.kind == "kafka" and (not self.bootstrap_servers or not self.secret_arn):
            raise ValueError("a kafka source needs bootstrap_servers and secret_arn")
        _arn_of(self.kind, self.arn, "source")
        return self

    @property
    def is_fifo(self) -> bool:
        return self.kind == "sqs" and (self.fifo or str(self.arn).endswith(".fifo"))


class StreamDestination(Section):
    kind: Literal["sqs", "kinesis", "firehose", "s3"]
    arn: str | None = Field(
        None,
        description="The queue, stream or delivery stream to write to (sqs, kinesis, firehose).",
    )
    create: bool = Field(False, description="Create the queue or stream (sqs, kinesis).")
    fifo: bool = Field(False, description="A created queue is FIFO.")
    prefix: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9!_.*'()/-]*$",
        description="s3: the key prefix in the batch bucket; default outbox/<tenant>/streams/<name>/.",
    )

    @model_validator(mode="after")
    def _one_target(self) -> StreamDestination:
        if self.kind == "s3":
            if self.arn or self.create:
                raise ValueError(
                    "an s3 destination writes under the batch bucket: give a prefix only"
                )
        elif (self.arn is None) == (not self.create):
            raise ValueError(f"a {self.kind} destination needs exactly one of arn or create: true")
        if self.create and self.kind not in ("sqs", "kinesis"):
            raise ValueError("create: true makes an SQS queue or a Kinesis stream only")
        _arn_of(self.kind, self.arn, "destination")
        return self


# What each kind's ARN names: another kind's (a Kinesis stream's for an sqs source) synthesized,
# then failed in CloudFormation with a message about another property.
ARNS = {
    "sqs": r"arn:aws[a-z-]*:sqs:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,80}(\.fifo)?",
    "kinesis": r"arn:aws[a-z-]*:kinesis:[a-z0-9-]+:\d{12}:stream/[A-Za-z0-9_.-]{1,128}",
    "msk": r"arn:aws[a-z-]*:kafka:[a-z0-9-]+:\d{12}:cluster/.+",
    "firehose": r"arn:aws[a-z-]*:firehose:[a-z0-9-]+:\d{12}:deliverystream/[A-Za-z0-9_.-]{1,64}",
}


def _arn_of(kind: str, arn: str | None, where: str) -> None:
    import re

    if arn is not None and kind in ARNS and not re.fullmatch(ARNS[kind], arn):
        raise ValueError(f"{where}.arn {arn!r} is not the ARN of a {kind} {'cluster' if kind == 'msk' else 'queue' if kind == 'sqs' else 'stream'}")


def _check_outbox_prefix(prefix: str, tenant: str) -> None:
    """A stream's S3 outputs lie in its tenant's outbox, parsed and compared as every location
    a tenant names is (`sluice.domain.locations`): `outbox/acme/../globex/` is refused."""
    from sluice.domain.errors import SluiceError
    from sluice.domain.locations import Root, confine

    bucket = "s3://sluice-batch-bucket/"  # any bucket: only the key is compared
    try:
        confine(bucket + prefix, (Root.of("outbox", f"{bucket}outbox/{tenant}/"),), field="prefix")
    except SluiceError:
        raise ValueError(
            f"an s3 destination's prefix lies in the tenant's outbox: outbox/{tenant}/…"
        ) from None


SQS_MAX_RETRIES = 999  # maxReceiveCount (retries + 1) is 1 to 1,000


class StreamConfig(Section):
    """One source bound to one tenant's deployment, with its own function and mapping."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,23}$")
    tenant: str = Field(pattern=TENANT)
    deployment: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$")  # a deployment's name, as the API takes it
    source: StreamSource
    destination: StreamDestination
    batch_size: int = Field(100, ge=1, le=10000, description="Records per invocation at most.")
    batching_window_s: int = Field(
        1, ge=0, le=300, description="Wait up to this long to fill a batch."
    )
    parallelization_factor: int = Field(
        1, ge=1, le=10, description="Kinesis: concurrent invocations per shard."
    )
    max_record_age_s: int = Field(
        3600, ge=60, le=604800, description="Kinesis and Kafka: older records go to the DLQ."
    )
    retry_attempts: int = Field(
        3, ge=0, le=10000, description="Retries before the DLQ (SQS: deliveries - 1)."
    )
    bisect_on_error: bool = Field(True, description="Kinesis and Kafka: split a failing batch.")
    max_concurrency: int | None = Field(
        None,
        ge=2,
        le=1000,
        description="SQS: invocations the mapping may run at once; default: reserved_concurrency "
        "(more would only be throttled, and a throttled message's receive counts toward the DLQ).",
    )
    memory_mb: int = Field(2048, ge=128, le=10240)
    timeout_s: int = Field(60, ge=1, le=900)
    reserved_concurrency: int | None = Field(10, ge=1)
    iterator_age_alarm_s: int = Field(
        300, ge=1, description="Alarm when the oldest record waited longer (SQS, Kinesis)."
    )
    offset_lag_alarm: int = Field(
        10000, ge=1, description="Kafka: alarm when the consumer lags this many records."
    )

    @model_validator(mode="after")
    def _limits(self) -> StreamConfig:
        source = self.source
        if source.kind == "sqs" and self.retry_attempts > SQS_MAX_RETRIES:
            raise ValueError(
                f"retry_attempts ({self.retry_attempts}) of an SQS source is at most {SQS_MAX_RETRIES}: "
                "its queue's redrive policy counts deliveries, 1 to 1,000"
            )
        if source.is_fifo and (self.batch_size > 10 or self.batching_window_s):
            raise ValueError("a FIFO queue takes batch_size <= 10 and no batching window")
        if source.kind == "sqs" and self.batch_size > 10 and self.batching_window_s < 1:
            raise ValueError("an SQS batch over 10 records needs batching_window_s >= 1")
        if self.parallelization_factor > 1 and source.kind != "kinesis":
            raise ValueError("parallelization_factor applies to Kinesis sources only")
        if self.max_concurrency and source.kind != "sqs":
            raise ValueError("max_concurrency applies to SQS sources only")
        reserved = self.reserved_concurrency
        if reserved is not None and reserved < 2 and source.kind == "sqs":
            raise ValueError(
                f"an SQS source's reserved_concurrency ({reserved}) must be at least 2: its mapping "
                "runs at least 2 invocations at once, and the extra one would only be throttled"
            )
        if reserved is not None and self.max_concurrency and self.max_concurrency > reserved:
            raise ValueError(
                f"max_concurrency ({self.max_concurrency}) exceeds reserved_concurrency ({reserved}): "
                "the extra invocations would only be throttled"
            )
        if reserved is not None and source.kind == "kinesis" and source.shards:
            at_once = source.shards * self.parallelization_factor
            if at_once > reserved:
                raise ValueError(
                    f"{source.shards} shards x parallelization_factor {self.parallelization_factor} "
                    f"invoke {at_once} at once, over reserved_concurrency ({reserved}): the rest "
                    "would only be throttled"
                )
        if self.destination.fifo and not self.destination.kind == "sqs":
            raise ValueError("fifo applies to SQS destinations only")
        if self.destination.kind == "s3" and self.destination.prefix:
            _check_outbox_prefix(self.destination.prefix, self.tenant)
        return self

    @property
    def mapping_concurrency(self) -> int | None:
        """The invocations an SQS mapping may run at once: `max_concurrency`, else the
        function's reserved concurrency (both at least 2, SQS's floor). None for other sources,
        whose concurrency follows their shards or partitions (and the reserved concurrency caps it)."""
        if self.source.kind != "sqs":
            return None
        return self.max_concurrency or self.reserved_concurrency
