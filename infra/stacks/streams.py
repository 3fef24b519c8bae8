"""Streaming inference: per configured stream, a `StreamPipeline` (its source, function, event
source mapping, dead-letter queue and destination). Alarms live in the observability stack
(iterator age or oldest message, dead-letter depth, error rate), from `watched`.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Stack
from constructs import Construct

from infra.config import StreamConfig
from infra.constructs.api_functions import Mirror
from infra.constructs.capture import CaptureTarget
from infra.constructs.functions import FunctionPlatform
from infra.constructs.imported import ImportedStorage
from infra.constructs.stream_pipeline import StreamPipeline, StreamWatch
from infra.naming import ResourceNames


class StreamsStack(Stack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        names: ResourceNames,
        platform: FunctionPlatform,
        streams: Sequence[StreamConfig],
        endpoint_names: Sequence[str],
        **kwargs,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        # aiohttp too, for deployments on the `triton` runtime (scored as the API scores them).
        layers = [platform.core_layer(self), platform.triton_layer(self)]
        storage = ImportedStorage(self, names)
        # The API stack's shadow function and delivery stream, by name.
        mirror = Mirror.named(self, names.function("shadow"))
        capture = CaptureTarget.named(self, names.capture_stream)
        self.pipelines = [
            StreamPipeline(
                self,
                f"Stream-{stream.name}",
                stream=stream,
                function_name=names.stream_function(stream.name),
                source_queue_name=names.stream_source_queue(stream),
                dead_letter_queue_name=names.stream_dead_letter_queue(stream),
                platform=platform,
                layers=layers,
                table=storage.table,
                artifacts=storage.artifacts,
                batch_bucket=storage.batch,
                endpoint_names=endpoint_names,
                mirror=mirror,
                capture=capture,
            )
            for stream in streams
        ]

    @property
    def watched(self) -> list[StreamWatch]:
        return [pipeline.watch for pipeline in self.pipelines]
