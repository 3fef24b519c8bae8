"""The batch runner a container builds (Plan, Score and Finalize), imported by the first job a
process runs or finds dead: listing and looking at jobs imports none of it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sluice.batch.runner import BatchRunner
    from sluice.wiring.container import Container


def build_batch_runner(container: Container) -> BatchRunner:
    """Scoring runs through its own PredictionService (the same runtimes, run inline, so loaded
    models are shared) whose calls stay out of live statistics. The API's graph steps and
    precomputed answers are shared, not the API's prediction service: a batch run (`sluice
    batch run`, a Score task) builds no mirror, capture, cache or profiles it would never use."""
    from sluice.batch.runner import BatchRunner, BatchTelemetry, OfflineStats
    from sluice.inference.predictions import PredictionService

    settings = container.settings
    observability = settings.observability
    predictions = PredictionService(
        container.registry, container.inline_runtimes(), settings.predictions,
        BatchTelemetry(
            namespace=observability.metrics_namespace, service=observability.service_name,
            sink=container.telemetry.sink if container.telemetry is not None else None,
        ),
        stats=OfflineStats(container.registry), functions=container.functions, lookup_steps=container.lookup_steps,
        precomputed=container.precomputed_reader,
    )  # fmt: skip
    return BatchRunner(container.registry, predictions, container.batch_files(), settings.batch, container.batch_paths, container.precomputed)
