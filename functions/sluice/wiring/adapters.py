"""Each port's adapter, chosen from settings: the local twin (embedded defaults under
`SLUICE_HOME`) or the AWS service its URL names. Each is imported only when chosen, so a
process never pays for an SDK it does not use."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.batch.eventbridge import EventBridgeSchedules
    from sluice.batch.orchestrators import Orchestrator
    from sluice.batch.runner import BatchRunner
    from sluice.capture.capturer import Capturer
    from sluice.capture.reader import CaptureReader
    from sluice.capture.sinks import Sink
    from sluice.domain.locations import Layout
    from sluice.endpoints.control import EndpointControl
    from sluice.inference.mirror import Mirror
    from sluice.inference.prediction_cache import PredictionCache
    from sluice.inference.shadow_runner import ShadowRunner
    from sluice.metrics import PrometheusMetrics
    from sluice.monitor.kept import PredictionKeeper
    from sluice.monitor.profiler import ProfileRecorder
    from sluice.observability import Telemetry
    from sluice.registry import Registry
    from sluice.registry.precomputed import PrecomputedStore
    from sluice.runtimes.functions import FunctionSteps
    from sluice.runtimes.lookups import LookupSteps
    from sluice.services.keys import RevocationSignal
    from sluice.settings import Settings
    from sluice.storage import ArtifactStore


def build_registry(settings: Settings) -> Registry:
    url = settings.registry_url
    if url.startswith("sqlite:///"):
        from sluice.registry.sqlite import SqliteRegistry

        return SqliteRegistry.from_url(url)
    if url.startswith("dynamodb://"):
        from sluice.registry.dynamodb import DynamoRegistry

        adapters = settings.adapters
        return DynamoRegistry.from_url(url, region=adapters.region, tenant_role_arn=adapters.tenant_role_arn)
    raise ValueError(f"SLUICE_REGISTRY must be sqlite:///PATH or dynamodb://TABLE, not {url!r}")


def build_revocation_signal(settings: Settings) -> RevocationSignal | None:
    """Processes that share a SQLite registry share a machine: a marker file beside it tells
    each of them at once that a key was revoked. DynamoDB has no such signal: the cache's
    time to live bounds revocation there."""
    if settings.registry_url.startswith("sqlite:///"):
        from pathlib import Path

        from sluice.services.keys import MarkerFile

        return MarkerFile(Path(settings.registry_url.removeprefix("sqlite:///")).expanduser().with_suffix(".revoked"))
    return None


def build_store(settings: Settings) -> ArtifactStore:
    url = settings.store_url
    if url.startswith("file://"):
        from sluice.storage.folder import FolderStore

        return FolderStore.from_url(url)
    if url.startswith("s3://"):
        from sluice.storage.s3 import S3Store

        return S3Store.from_url(url, region=settings.adapters.region)
    raise ValueError(f"SLUICE_STORE must be file:///PATH or s3://BUCKET[/PREFIX], not {url!r}")


def build_endpoint_control(settings: Settings, store: ArtifactStore) -> EndpointControl:
    """SageMaker, or the local twin (a local Triton per variant), as SLUICE_ENDPOINTS says."""
    if settings.endpoints_kind == "sagemaker":
        from sluice.clients import aws_for
        from sluice.endpoints.sagemaker import SageMakerEndpoints

        endpoints = settings.endpoint_control
        return SageMakerEndpoints(
            store,
            **aws_for(settings.adapters.region),
            role_arn=endpoints.sagemaker_execution_role_arn,
            triton_version=endpoints.sagemaker_triton_version,
            triton_image=endpoints.sagemaker_triton_image,
        )
    from sluice.endpoints.local_endpoints import LocalEndpoints

    return LocalEndpoints(store, settings.home_path)


def build_mirror(settings: Settings, store: ArtifactStore, runner: ShadowRunner) -> Mirror:
    url = settings.adapters.mirror
    if url in ("", "local"):
        from sluice.inference.mirror import LocalMirror

        return LocalMirror(runner)
    if url.startswith("lambda://"):
        from sluice.inference.mirror import LambdaMirror

        return LambdaMirror.from_url(url, store, region=settings.adapters.region)
    raise ValueError(f"SLUICE_MIRROR must be local or lambda://FUNCTION, not {url!r}")


def build_profiles(settings: Settings, registry: Registry) -> ProfileRecorder | None:
    """The monitoring profiles of the traffic this process serves; None where they are off
    (SLUICE_MONITOR_PROFILES) or Apache DataSketches is not installed (said once)."""
    monitor = settings.monitor
    if not monitor.monitor_profiles:
        return None
    import importlib.util

    if importlib.util.find_spec("datasketches") is None:
        from sluice.observability import get_logger

        get_logger().info("monitoring profiles are off: Apache DataSketches is not installed (sluice[monitor])")
        return None
    from sluice.monitor.profiler import ProfileRecorder

    return ProfileRecorder(
        registry, window_s=monitor.monitor_window_s, flush_every_s=monitor.monitor_flush_s, max_columns=monitor.monitor_max_columns
    )


def build_keeper(settings: Settings, registry: Registry) -> PredictionKeeper | None:
    """The predictions this process keeps by request id for ground truth; None where off
    (SLUICE_MONITOR_KEEP_PREDICTIONS)."""
    monitor = settings.monitor
    if monitor.monitor_keep_predictions == "off":
        return None
    from sluice.monitor.kept import PredictionKeeper

    return PredictionKeeper(
        registry, mode=monitor.monitor_keep_predictions, window_s=monitor.monitor_window_s, flush_every_s=monitor.monitor_flush_s,
        ttl_s=monitor.monitor_keep_ttl_s, max_rows=monitor.monitor_keep_rows,
    )  # fmt: skip


def build_capture(settings: Settings, telemetry: Telemetry) -> Capturer | None:
    """Data capture's sink, as SLUICE_CAPTURE says; None: off (a deployment's capture
    setting then keeps nothing here)."""
    url = settings.data_capture.capture
    if url == "off" or (url == "" and settings.mode != "local"):
        return None
    from sluice.capture.capturer import Capturer

    if url == "":
        from sluice.capture.sinks import FolderSink

        sink: Sink = FolderSink(settings.home_path / "capture")
    elif url.startswith("file://"):
        from sluice.capture.sinks import FolderSink
        from sluice.storage.folder import path_of_file_url

        sink = FolderSink(path_of_file_url(url))
    elif url.startswith("firehose://"):
        from sluice.capture.sinks import FirehoseSink

        sink = FirehoseSink.from_url(url, region=settings.adapters.region)
    else:
        raise ValueError(f"SLUICE_CAPTURE must be file:///PATH, firehose://STREAM or off, not {url!r}")
    observability = settings.observability
    return Capturer(
        sink, max_queue=settings.data_capture.capture_queue, emit_metrics=telemetry.emit_metrics,
        namespace=observability.metrics_namespace, service=observability.service_name,
    )  # fmt: skip


def build_capture_reader(settings: Settings) -> CaptureReader | None:
    """Where replay reads captured records: where SLUICE_CAPTURE writes them (a Firehose
    stream writes under `capture/` in the batch bucket)."""
    url = settings.data_capture.capture
    if url == "off" or (url == "" and settings.mode != "local"):
        return None
    if url.startswith("firehose://"):
        from sluice.capture.reader import S3Capture

        bucket = settings.jobs.batch_bucket
        if not bucket:
            return None
        return S3Capture(bucket, "capture/", region=settings.adapters.region)
    from sluice.capture.reader import FolderCapture

    if url.startswith("file://"):
        from sluice.storage.folder import path_of_file_url

        return FolderCapture(path_of_file_url(url))
    return FolderCapture(settings.home_path / "capture")


def build_orchestrator(settings: Settings, runner: BatchRunner | Callable[[], BatchRunner]) -> Orchestrator | None:
    """Step Functions, the local thread pool, or (on AWS without a state machine) none."""
    url = settings.jobs.orchestrator
    if url.startswith("stepfunctions://"):
        from sluice.batch.orchestrators import StepFunctionsOrchestrator

        return StepFunctionsOrchestrator.from_url(url, region=settings.adapters.region)
    if url == "local" or (url == "" and settings.mode == "local"):
        from sluice.batch.orchestrators import LocalOrchestrator

        return LocalOrchestrator(runner, concurrency=settings.batch.batch_concurrency or os.cpu_count() or 1)
    if url == "":
        return None
    raise ValueError(f"SLUICE_ORCHESTRATOR must be local or stepfunctions://ARN, not {url!r}")


def build_prediction_cache(settings: Settings, registry: Registry) -> PredictionCache:
    """The per-container tier always (a deployment still has to turn caching on); the shared
    tier, the registry's own store of answers, where SLUICE_PREDICTION_CACHE_SHARED says."""
    from sluice.inference.prediction_cache import PredictionCache

    cache = settings.prediction_cache
    return PredictionCache(
        registry if cache.prediction_cache_shared else None,
        max_entry_bytes=cache.prediction_cache_max_entry_bytes,
        max_bytes=cache.prediction_cache_max_bytes,
    )


def build_precomputed(settings: Settings, registry: Registry) -> PrecomputedStore | None:
    """Tables of precomputed answers (`SLUICE_PRECOMPUTED_TABLE`): a DynamoDB table, reached
    in the API as the request's tenant where the registry is (the tenant role covers both
    tables' `T#<tenant>` keys); or SQLite, by default beside a SQLite registry."""
    url = settings.precomputed.precomputed_table
    if url.startswith("dynamodb://"):
        from sluice.registry.precomputed.dynamodb import DynamoPrecomputed

        region = settings.adapters.region
        if settings.adapters.tenant_role_arn and getattr(registry, "table", None) is not None:
            return DynamoPrecomputed.from_url(url, client=registry.table.client, region=region)  # type: ignore[attr-defined]
        return DynamoPrecomputed.from_url(url, region=region)
    from sluice.registry.precomputed.sqlite import SqlitePrecomputed

    if url:
        from sluice.registry.sqlite.connection import path_of_url

        return SqlitePrecomputed(path_of_url(url))
    if settings.registry_url.startswith("sqlite:///"):
        return SqlitePrecomputed.beside(settings.registry_url)
    return None


def build_functions(settings: Settings) -> FunctionSteps:
    """The function steps of graphs: Lambda functions by the tenants' allowlists, module
    callables from the operator's folder (local mode); boto3 is built on the first invoke."""
    from sluice.clients import aws_for
    from sluice.runtimes.functions import FunctionSteps

    return FunctionSteps(settings.functions, mode=settings.mode, **aws_for(settings.adapters.region))


def build_lookup_steps(settings: Settings) -> LookupSteps:
    """The lookup steps of graphs: the stores each tenant may read; boto3 is built on the first call."""
    from sluice.clients import aws_for
    from sluice.runtimes.lookups import LookupSteps
    from sluice.settings import in_lambda

    emf = in_lambda() or os.environ.get("SLUICE_EMF") == "1"  # as `Telemetry` decides
    namespace = settings.observability.metrics_namespace if emf else None
    return LookupSteps(settings.lookups, mode=settings.mode, metrics_namespace=namespace, **aws_for(settings.adapters.region))


def metrics_sink() -> PrometheusMetrics | None:
    """Prometheus series, only where `sluice serve` turned them on (`prometheus_client` is
    imported nowhere else, and never in Lambda)."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return None
    from sluice.metrics import from_environment

    return from_environment()


def build_layout(settings: Settings, store: ArtifactStore) -> Layout:
    """Where each tenant's roots lie (`sluice.domain.locations`): every location a tenant
    names is confined to them, and every location a response names is said relative to them."""
    from sluice.domain.locations import Layout

    try:
        batch = settings.batch_root_url
    except ValueError:  # on AWS without a batch bucket: no batch roots
        batch = ""
    local = settings.mode == "local"
    home = str(settings.home_path) if local else ""
    imports = tuple(prefix.replace("{home}", str(settings.home_path)) for prefix in settings.sources.import_prefixes)
    return Layout(batch=batch, store=store.tenant_root("{tenant}"), imports=imports, home=home)


def build_schedule_timer(settings: Settings) -> EventBridgeSchedules | None:
    """Where batch schedules are kept: EventBridge Scheduler where SLUICE_SCHEDULE_GROUP is set
    (with the state machine of SLUICE_ORCHESTRATOR as the target); None: by `sluice serve`."""
    jobs = settings.jobs
    if not jobs.schedule_group:
        return None
    from sluice.batch.eventbridge import EventBridgeSchedules
    from sluice.clients import aws_for

    if not jobs.orchestrator.startswith("stepfunctions://") or not jobs.scheduler_role_arn:
        raise ValueError("SLUICE_SCHEDULE_GROUP needs SLUICE_ORCHESTRATOR=stepfunctions://ARN and SLUICE_SCHEDULER_ROLE_ARN")
    return EventBridgeSchedules(
        group=jobs.schedule_group, role_arn=jobs.scheduler_role_arn,
        state_machine_arn=jobs.orchestrator.removeprefix("stepfunctions://"),
        **aws_for(settings.adapters.region),
    )  # fmt: skip
