"""The stream Lambda: SQS (standard and FIFO), Kinesis Data Streams, Amazon MSK and
self-managed Kafka event source mappings, with partial batch responses
(`ReportBatchItemFailures`).

Each source is bound in `SLUICE_STREAMS` to one tenant, one deployment and one destination
(`sluice.stream.bindings`). The records of an invocation are scored micro-batched
(`sluice.stream.core`); predictions and error records go to the destination; records that
should be retried are reported back through powertools' batch processor, which shapes the
`batchItemFailures` answer for each source (Kafka: topic-partition and offset).
"""

from __future__ import annotations

from sluice.startup import pause_in_lambda, started

pause_in_lambda()  # in Lambda, the collector off until this module has loaded (`sluice.startup`)

from collections import defaultdict
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.batch.sqs_fifo_partial_processor import SqsFifoPartialProcessor

from sluice.domain.errors import SluiceError
from sluice.inference.loop import run
from sluice.observability import get_logger, get_metrics
from sluice.stream.bindings import binding_for, parse_bindings
from sluice.stream.core import Outcome, StreamScorer
from sluice.stream.records import KAFKA, KINESIS, SQS, read_event
from sluice.stream.run import gc_paused, process

if TYPE_CHECKING:
    from sluice.stream.bindings import Binding
    from sluice.stream.records import StreamRecord
    from sluice.stream.sinks import Sink
    from sluice.wiring import Container

logger = get_logger()
metrics = get_metrics()
_container: Container | None = None
_sinks: dict[Any, Sink] = {}
_parsed: tuple[dict[str, Any], dict[str, Binding]] | None = None
EVENT_TYPES = {SQS: EventType.SQS, KINESIS: EventType.KinesisDataStreams, KAFKA: EventType.Kafka}
_source = attrgetter("source")
_failed = attrgetter("failed")


class RetryRecord(Exception):
    """A record Lambda should deliver again (and in the end to the dead-letter destination)."""


def container() -> Container:
    global _container
    if _container is None:
        from sluice.wiring import get_container

        _container = get_container()
    return _container


def sink_for(binding: Binding) -> Sink:
    found = _sinks.get(binding.destination)
    if found is None:
        from sluice.handlers.adapters import stream_sink

        found = _sinks[binding.destination] = stream_sink(container().settings, binding.destination)
    return found


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    with gc_paused():
        return _handle(event, context)


def _handle(event: dict[str, Any], context: Any) -> dict[str, Any]:
    c = container()
    kind, records = read_event(event)
    bindings = _bindings(c.settings.stream.streams)
    sources = set(map(_source, records))
    if len(sources) == 1:  # one queue or stream an invocation (Kafka: one topic or more)
        outcomes = _score(c, bindings, sources.pop(), records)
    else:
        outcomes = _score_sources(c, bindings, records)
    _settle_mirrors(c, context)
    c.stream_predictions.flush_stats_if_due()
    retry = {_ident(kind, records[i].ident): o.retry for i, o in enumerate(outcomes) if o.retry is not None}
    _count(outcomes, len(retry))
    if not retry:
        return {"batchItemFailures": []}  # what the batch processor answers when nothing failed

    def record_handler(record: Any) -> None:
        reason = retry.get(_ident(kind, record))
        if reason is not None:
            raise RetryRecord(reason)

    fifo = kind == SQS and any("group" in r.position for r in records)
    processor = SqsFifoPartialProcessor(skip_group_on_error=True) if fifo else BatchProcessor(EVENT_TYPES[kind])
    processor.raise_on_entire_batch_failure = False  # every failure is an item failure, retried one by one
    return dict(process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context))


MIRROR_MARGIN_S = 2.0  # of the invocation's time, left for counting and answering after the mirrors


def _settle_mirrors(c: Any, context: Any) -> None:
    """The shadow mirrors this invocation handed work to, ended before it returns: a stream's
    function runs them itself (`SLUICE_MIRROR=local`: the shared shadow function trusts the
    tenant its job names, which a function IAM binds to one tenant may not name), and Lambda
    freezes the process once the handler returns. Waited for within the invocation's time
    left (less a margin), at most a request's budget; one still running then is left to end
    in a later invocation of this environment, if there is one."""
    from sluice.inference.mirror import LocalMirror

    if not isinstance(c.mirror, LocalMirror):
        return
    left = c.settings.predictions.request_timeout_s
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is not None:
        left = min(left, remaining() / 1000 - MIRROR_MARGIN_S)
    c.mirror.drain(max(left, 0.0))


def _ident(kind: str, record: Any) -> Any:
    """One key per record, from our records (`ident`) or from powertools' data classes."""
    if isinstance(record, (str, dict)):
        return (record["topic"], int(record["partition"]), int(record["offset"])) if isinstance(record, dict) else record
    if kind == SQS:
        return record.message_id
    if kind == KINESIS:
        return record.kinesis.sequence_number
    return (record.topic, int(record.partition), int(record.offset))


def _bindings(data: dict[str, Any]) -> dict[str, Binding]:
    """Parsed once per container (the settings do not change under it)."""
    global _parsed
    if _parsed is None or _parsed[0] is not data:
        _parsed = (data, parse_bindings(data))
    return _parsed[1]


def _score(c: Container, bindings: dict[str, Binding], source: str, records: list[StreamRecord]) -> list[Outcome]:
    """The records of one source, scored for the tenant and deployment it is bound to."""
    try:
        binding = binding_for(bindings, source)
    except SluiceError as exc:  # unbound: retried, then dead-lettered, never scored for a guessed tenant
        return [Outcome(retry=exc.message) for _ in records]
    return _score_bound(c, binding, records)


def _score_bound(c: Container, binding: Binding, records: list[StreamRecord]) -> list[Outcome]:
    scorer = StreamScorer(c.stream_predictions, binding.tenant, binding.deployment, batch_rows=c.settings.stream.stream_batch_rows)
    return run(process(scorer, records, sink_for(binding)))


def _score_sources(c: Container, bindings: dict[str, Binding], records: list[StreamRecord]) -> list[Outcome]:
    """Records of several sources (Kafka topics): those bound alike are scored together."""
    outcomes: list[Outcome] = [None] * len(records)  # type: ignore[list-item]  # each set below
    by_source: dict[str, list[int]] = defaultdict(list)
    for index, record in enumerate(records):
        by_source[record.source].append(index)
    by_binding: dict[Binding, list[int]] = defaultdict(list)
    for source, indexes in by_source.items():
        try:
            by_binding[binding_for(bindings, source)].extend(indexes)
        except SluiceError as exc:  # unbound: retried, then dead-lettered, never scored for a guessed tenant
            for index in indexes:
                outcomes[index] = Outcome(retry=exc.message)
    for binding, indexes in by_binding.items():
        for index, outcome in zip(indexes, _score_bound(c, binding, [records[i] for i in indexes]), strict=True):
            outcomes[index] = outcome
    return outcomes


def _count(outcomes: list[Outcome], retries: int) -> None:
    """EMF metrics only when something went wrong: a clean batch is counted by Lambda's own
    metrics, and one log line per invocation would cost more than the scoring of ten records."""
    errors = sum(map(_failed, outcomes))  # a retry holds no output: never `failed` too
    if not (errors or retries):
        return
    from aws_lambda_powertools.metrics import MetricUnit

    metrics.add_metric(name="StreamRecordErrors", unit=MetricUnit.Count, value=errors)
    metrics.add_metric(name="StreamRecordRetries", unit=MetricUnit.Count, value=retries)
    metrics.flush_metrics()
    logger.info("stream batch", extra={"records": len(outcomes), "errors": errors, "retries": retries})


started()  # the function's start-up is over: the collector back on (`sluice.startup`)
