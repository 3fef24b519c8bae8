"""The stream handler on the demo container, with moto for its destinations, and builders of
SQS, Kinesis and Kafka events of any size in the shapes `events/` holds."""

from __future__ import annotations

import base64
import copy
import json
from typing import TYPE_CHECKING, Any

import pytest

from sluice.handlers import stream
from tests.conftest import EVENTS
from tests.integration.aws.conftest import aws  # noqa: F401  (moto for the destinations)
from tests.support import LambdaContext

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from sluice.wiring import Container

SETOSA = {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}
VIRGINICA = {"sepal_length": 6.7, "sepal_width": 3.0, "petal_length": 5.2, "petal_width": 2.3}


def load(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / f"{name}.json").read_text())


def sqs_event(bodies: list[str], *, fifo: bool = False, arn: str | None = None) -> dict[str, Any]:
    template = load("stream_sqs_fifo" if fifo else "stream_sqs")["Records"][0]
    records = []
    for n, body in enumerate(bodies):
        record = copy.deepcopy(template)
        record["messageId"] = f"00000000-0000-4000-8000-{n:012d}"
        record["body"] = body
        if arn:
            record["eventSourceARN"] = arn
        if fifo:
            record["attributes"]["SequenceNumber"] = str(18600000000000000000 + n)
            record["attributes"]["MessageGroupId"] = f"card-{n % 3}"
        records.append(record)
    return {"Records": records}


def kinesis_event(bodies: list[bytes | str], *, partition_keys: list[str] | None = None) -> dict[str, Any]:
    template = load("stream_kinesis")["Records"][0]
    records = []
    for n, body in enumerate(bodies):
        record = copy.deepcopy(template)
        seq = str(49590338271490256608559692538361571095921575989136588898 + n)
        record["kinesis"]["sequenceNumber"] = seq
        record["kinesis"]["partitionKey"] = partition_keys[n] if partition_keys else f"card-{n % 4}"
        raw = body.encode() if isinstance(body, str) else body
        record["kinesis"]["data"] = base64.b64encode(raw).decode()
        record["eventID"] = f"shardId-000000000006:{seq}"
        records.append(record)
    return {"Records": records}


def kafka_event(bodies: list[str], *, self_managed: bool = False) -> dict[str, Any]:
    event = load("stream_kafka_self_managed" if self_managed else "stream_msk")
    template = event["records"]["transactions-0"][0]
    records: dict[str, list[dict[str, Any]]] = {}
    for n, body in enumerate(bodies):
        record = copy.deepcopy(template)
        record["partition"] = n % 2
        record["offset"] = 100 + n
        record["value"] = base64.b64encode(body.encode()).decode()
        records.setdefault(f"transactions-{n % 2}", []).append(record)
    event["records"] = records
    return event


def rows(n: int, *, start: int = 0) -> list[str]:
    return [json.dumps({"id": f"tx-{i}", "features": SETOSA if i % 2 == 0 else VIRGINICA}) for i in range(start, start + n)]


@pytest.fixture
def bind(demo: Container) -> Iterator[Callable[..., Callable[[dict[str, Any]], dict[str, Any]]]]:
    """`bind(destination, source="*", deployment="iris")` -> a function that runs the handler
    on an event and returns its answer."""
    saved = stream._container, demo.settings.stream.streams, demo.settings.stream.stream_batch_rows
    stream._container = demo
    stream._sinks.clear()

    def bind(destination: dict[str, str], *, source: str = "*", deployment: str = "iris", tenant: str = "acme") -> Callable[[dict[str, Any]], dict[str, Any]]:
        demo.settings.stream.streams = {source: {"tenant": tenant, "deployment": deployment, "destination": destination}}
        stream._sinks.clear()
        return lambda event: stream.handler(event, LambdaContext(function_name="sluice-stream"))

    yield bind
    stream._container, demo.settings.stream.streams, demo.settings.stream.stream_batch_rows = saved
    stream._sinks.clear()
