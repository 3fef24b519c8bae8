"""Streaming inference: per configured stream, a `StreamPipeline` (its source, function, event
source mapping, dead-letter queue and destination). Alarms live in the observability stack
(iterator age or oldest message, dead-letter depth, error rate), from `watched`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from constructs import Construct

from infra.config import StreamConfig
from infra.constructs.capture import CaptureTarget
from infra.constructs.precomputed import PrecomputedAnswers
from infra.constructs.stream_pipeline import StreamPipeline, StreamWatch
from infra.stacks.base import FunctionStack


class StreamsStack(FunctionStack):
    def __init__(
        self, scope: Construct, id: str, *, streams: Sequence[StreamConfig], **kwargs: Any
    ) -> None:
        """`kwargs`: FunctionStack's (names, platform, endpoint_names) and Stack's."""
        super().__init__(scope, id, **kwargs)
        names, platform = self.names, self.platform
        # aiohttp too, for deployments on the `triton` runtime (scored as the API scores them).
        layers = [platform.core_layer(self), platform.triton_layer(self)]
        # Apache DataSketches where the runtime has it: stream scoring profiles its traffic.
        layers += [layer for layer in [platform.monitor_layer(self)] if layer is not None]
        # The API stack's delivery stream, by name.
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
                table=self.storage.table,
                artifacts=self.storage.artifacts,
                batch_bucket=self.storage.batch,
                endpoint_names=self.endpoint_names,
                function_steps=self.function_steps,
                capture=capture,
                precomputed=PrecomputedAnswers(self.storage.precomputed),
            )
            for stream in streams
        ]

    @property
    def watched(self) -> list[StreamWatch]:
        return [pipeline.watch for pipeline in self.pipelines]
