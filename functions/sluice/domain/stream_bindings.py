"""Which tenant, deployment and destination each source is bound to.

`SLUICE_STREAMS` holds a JSON object keyed by source: a queue or stream ARN, `kafka:<topic>`,
or `*` (any source: one binding per function). A record names neither tenant nor deployment:
the binding does, so a record can never reach another tenant's deployment.

    {"arn:aws:sqs:eu-west-1:123456789012:transactions":
        {"tenant": "acme", "deployment": "fraud",
         "destination": {"kind": "sqs", "target": "https://sqs.eu-west-1.amazonaws.com/123456789012/scores"}}}

Destination kinds: `sqs` (a queue URL), `kinesis` (a stream name or ARN), `firehose` (a
delivery stream name), `s3` (`s3://bucket/prefix`), `stdout` (the local twin).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Destination(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["sqs", "kinesis", "firehose", "s3", "stdout"]
    target: str = ""


class Binding(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant: str = Field(min_length=1)
    deployment: str = Field(min_length=1)
    destination: Destination = Destination(kind="stdout")


def parse_bindings(data: dict[str, Any]) -> dict[str, Binding]:
    return {source: Binding.model_validate(spec) for source, spec in data.items()}
