"""What a container builds for offline work: the batch runner (Plan, Score and Finalize),
imported by the first job a process runs or finds dead (listing and looking at jobs imports
none of it), the Glue catalog it publishes partitions into, and the prediction service of
stream records."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sluice.batch.catalog import GlueCatalog
    from sluice.batch.runner import BatchRunner
    from sluice.inference.predictions import PredictionService
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


def build_catalog(container: Container) -> GlueCatalog:
    """Where a successful job's output is published as a partition (AWS Glue)."""
    from sluice.batch.catalog import GlueCatalog
    from sluice.clients import aws_for

    settings = container.settings
    runner = container.batch_runner  # builds the files
    return GlueCatalog(
        runner.files, batch_root=settings.batch_root_url, database=settings.jobs.catalog_database or None,  # type: ignore[arg-type]
        **aws_for(settings.adapters.region),
    )  # fmt: skip


def build_stream_predictions(container: Container) -> PredictionService:
    """The prediction service of stream records (the Lambda and `sluice stream`): live
    traffic, so the same statistics and mirror as the API's, with ONNX run inline (one
    invocation at a time holds the loop; nothing else waits on it)."""
    from sluice.inference.predictions import PredictionService

    online = container.predictions  # its statistics, mirror, graph steps and precomputed answers are shared
    service = PredictionService(
        container.registry, container.inline_runtimes(), container.settings.predictions, container.telemetry,  # type: ignore[arg-type]
        stats=online.stats, mirror=container.mirror, functions=container.functions, lookup_steps=container.lookup_steps,
        precomputed=container.precomputed_reader,
    )  # fmt: skip
    service.capture = container.capture
    service.profiles = online.profiles
    return service
