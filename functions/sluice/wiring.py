"""The one place adapters are chosen from settings and built: once per process
(once per Lambda cold start). Tests build a Container with their own parts instead."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any

from sluice.inference.prediction_cache import PredictionCache
from sluice.inference.predictions import PredictionService
from sluice.inference.shadow_runner import ShadowRunner
from sluice.observability import Telemetry
from sluice.services.deployments import DeploymentService
from sluice.services.keys import KeyService
from sluice.services.models import ModelService
from sluice.settings import Settings, get_settings

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.batch.catalog import GlueCatalog
    from sluice.batch.files import Files
    from sluice.batch.orchestrators import Orchestrator
    from sluice.batch.runner import BatchRunner
    from sluice.batch.schedules import ScheduleService
    from sluice.batch.service import BatchService
    from sluice.capture.capturer import Capturer
    from sluice.capture.reader import CaptureReader
    from sluice.capture.sinks import Sink
    from sluice.cost.service import CostService
    from sluice.domain.locations import Layout
    from sluice.endpoints.control import EndpointControl
    from sluice.inference.mirror import Mirror
    from sluice.inference.results import ResultService
    from sluice.inference.uploads import UploadService
    from sluice.metrics import PrometheusMetrics
    from sluice.optimize.jobs import OptimizeJobs
    from sluice.optimize.service import OptimizeService
    from sluice.registry import Registry
    from sluice.replay import ReplayService
    from sluice.runtimes import Runtime
    from sluice.services.admission import InFlight
    from sluice.services.endpoints import EndpointService
    from sluice.services.keys import RevocationSignal
    from sluice.services.rollouts import RolloutService
    from sluice.settings import OnnxSettings
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
        from sluice.clients import default_clients
        from sluice.endpoints.sagemaker import SageMakerEndpoints

        region, endpoints = settings.adapters.region, settings.endpoints
        return SageMakerEndpoints(
            store,
            default_clients(region),
            region=region,
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


def build_capture(settings: Settings, telemetry: Telemetry) -> Capturer | None:
    """Data capture's sink, as SLUICE_CAPTURE says; None: off (a deployment's capture
    setting then keeps nothing here)."""
    url = settings.capture.capture
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
        sink, max_queue=settings.capture.capture_queue, emit_metrics=telemetry.emit_metrics,
        namespace=observability.metrics_namespace, service=observability.service_name,
    )  # fmt: skip


def build_capture_reader(settings: Settings) -> CaptureReader | None:
    """Where replay reads captured records: where SLUICE_CAPTURE writes them (a Firehose
    stream writes under `capture/` in the batch bucket)."""
    url = settings.capture.capture
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


def build_orchestrator(settings: Settings, runner: BatchRunner) -> Orchestrator | None:
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
    cache = settings.prediction_cache
    return PredictionCache(
        registry if cache.prediction_cache_shared else None,
        max_entry_bytes=cache.prediction_cache_max_entry_bytes,
        max_bytes=cache.prediction_cache_max_bytes,
    )


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


class Runtimes(dict):  # type: ignore[type-arg]
    """The runtimes by kind, each built the first time a version needs it (a Lambda that only
    serves ONNX never imports the Triton or SageMaker clients)."""

    def __init__(self, factories: dict[str, Callable[[], Runtime]], **ready: Runtime) -> None:
        super().__init__(ready)
        self._factories = factories

    def __missing__(self, kind: str) -> Runtime:
        factory = self._factories.get(kind)
        if factory is None:
            raise KeyError(kind)
        runtime = self[kind] = factory()
        return runtime

    def get(self, kind: str, default: Any = None) -> Any:  # type: ignore[override]
        try:
            return self[kind]
        except KeyError:
            return default

    def __contains__(self, kind: object) -> bool:
        return dict.__contains__(self, kind) or kind in self._factories

    def replacing(self, kind: str, runtime: Runtime) -> Runtimes:
        """These runtimes with one kind replaced; the others still built once, here."""
        delegates = {k: (lambda k=k: self[k]) for k in self._factories if k != kind}
        return Runtimes(delegates, **{**{k: v for k, v in self.items() if k != kind}, kind: runtime})


def build_runtimes(settings: Settings, store: ArtifactStore) -> dict[str, Runtime]:
    from sluice.runtimes.onnx import OnnxRuntime

    timeout_s = settings.predictions.request_timeout_s

    def triton() -> Runtime:
        from sluice.runtimes.triton import TritonRuntime

        return TritonRuntime(timeout_s=timeout_s, allowed=settings.sources.triton_allowlist)

    def sagemaker() -> Runtime:
        from sluice.clients import default_clients
        from sluice.runtimes.sagemaker import SageMakerRuntime
        from sluice.storage.results import results_for

        region = settings.adapters.region
        return SageMakerRuntime(
            clients=default_clients(region),
            region=region,
            endpoint_url=settings.endpoints.sagemaker_endpoint_url,
            local_servers=settings.sources.triton_url_prefixes,
            started_servers=_started_servers(settings) if settings.endpoints_kind == "local" else None,
            timeout_s=timeout_s,
            results=results_for(store),  # asynchronous inference: inputs, records, answers
            fallback=lambda: runtimes["onnx"],  # inference components scaled to zero
        )

    runtimes = Runtimes({"triton": triton, "sagemaker": sagemaker}, onnx=OnnxRuntime(store, settings.onnx))
    return runtimes


def _started_servers(settings: Settings) -> Callable[[], list[str]]:
    """The local endpoints twin's running servers under this home (see `sagemaker`'s `client_for`)."""

    def servers() -> list[str]:
        from sluice.endpoints.local_endpoints import started_servers

        return started_servers(settings.home_path)

    return servers


def inline_runtimes(runtimes: dict[str, Runtime], store: ArtifactStore, onnx: OnnxSettings) -> dict[str, Runtime]:
    """These runtimes with ONNX run inline, on the very sessions `runtimes` has loaded: for
    callers off any request loop (batch scoring threads, stream invocations), where a hop
    to yet another thread per call costs more than it frees."""
    from sluice.runtimes.onnx import OnnxRuntime

    online = runtimes.get("onnx")
    if not isinstance(online, OnnxRuntime):
        return runtimes
    inline = OnnxRuntime(store, onnx.model_copy(update={"inline_infer_elements": 2**62}))
    inline.cache = online.cache
    if isinstance(runtimes, Runtimes):
        return runtimes.replacing("onnx", inline)
    return {**runtimes, "onnx": inline}


@dataclass
class Container:
    settings: Settings
    registry: Registry
    store: ArtifactStore
    runtimes: dict[str, Runtime]
    telemetry: Telemetry | None = None
    mirror: Mirror | None = None
    orchestrator: Orchestrator | None = None  # built on first use of `batch` when not given
    files: Files | None = None  # batch inputs and outputs, by URI scheme; built on first use when not given
    endpoint_control: EndpointControl | None = None  # built on first use of `endpoints` when not given

    def __post_init__(self) -> None:
        if self.telemetry is None:
            onnx = self.runtimes.get("onnx")
            cache = getattr(onnx, "cache", None)
            self.telemetry = Telemetry(
                namespace=self.settings.observability.metrics_namespace,
                service=self.settings.observability.service_name,
                cache_stats=cache.stats if cache is not None else None,
                sink=metrics_sink(),
            )
        self.predictions = PredictionService(
            self.registry, self.runtimes, self.settings.predictions, self.telemetry,
            cache=build_prediction_cache(self.settings, self.registry),
        )  # fmt: skip
        self.layout = build_layout(self.settings, self.store)
        self.models = ModelService(
            self.registry, self.store, roots=self.layout.roots, triton_servers=self.settings.sources.triton_allowlist
        )
        self.shadows = ShadowRunner(self.predictions)
        if self.mirror is None:
            self.mirror = build_mirror(self.settings, self.store, self.shadows)
        self.predictions.mirror = self.mirror  # the core hands shadow jobs to it
        self.capture = build_capture(self.settings, self.telemetry)
        self.predictions.capture = self.capture  # and sampled requests of deployments that capture
        self.predictions.uploads = lambda: self.uploads  # and inputs that are uploads, found on first use
        self.deployments = DeploymentService(
            self.registry,
            on_change=self.predictions.forget,
            recorder=self.predictions.stats,
            before_stats=self.mirror.drain,
        )
        self.keys = KeyService(
            self.registry, cache_ttl_s=self.settings.auth.auth_cache_ttl_s, signal=build_revocation_signal(self.settings)
        )

    @cached_property
    def in_flight(self) -> InFlight | None:
        """Requests in flight per key in this process, capped (`SLUICE_MAX_IN_FLIGHT_PER_KEY`):
        one count for every transport the process serves; None when off (in Lambda)."""
        from sluice.services.admission import InFlight

        limit = self.settings.admission.max_in_flight_per_key
        return InFlight(limit) if limit else None

    @cached_property
    def endpoints(self) -> EndpointService:
        """Endpoints of deployments, on SageMaker or the local twin; built on first use."""
        from sluice.services.endpoints import EndpointService
        from sluice.storage.results import results_for

        if self.endpoint_control is None:
            self.endpoint_control = build_endpoint_control(self.settings, self.store)
        # An asynchronous endpoint writes its answers under the tenant's results.
        return EndpointService(self.registry, self.deployments, self.endpoint_control, results_for(self.store))

    @cached_property
    def results(self) -> ResultService:
        """Results of asynchronous predictions, in the store beside the artifacts."""
        from sluice.inference.results import ResultService
        from sluice.storage.results import results_for

        return ResultService(results_for(self.store), max_response_bytes=self.settings.limits.max_response_bytes)

    @cached_property
    def uploads(self) -> UploadService:
        """Uploads (`POST /api/v1/uploads`), in the store beside the artifacts."""
        from sluice.inference.uploads import UploadService
        from sluice.storage.uploads import uploads_for

        uploads = self.settings.uploads
        store = uploads_for(self.store, signer_role_arn=uploads.upload_signer_role_arn, region=self.settings.adapters.region)
        return UploadService(self.registry, store, uploads)

    @cached_property
    def cost(self) -> CostService:
        """`sluice cost` and its route: deployments priced per runtime; built on first use."""
        from sluice.cost.service import CostService

        return CostService(self.registry, self.deployments)

    @cached_property
    def rollouts(self) -> RolloutService:
        """Progressive rollouts and their controller; built on first use. Alarms are checked
        where the controller runs on AWS (`sluice.handlers.rollouts`), not here. Deployments
        bound to an endpoint have its variant weights moved through `endpoints`' control
        plane, built only when such a rollout is looked at."""
        from sluice.services.rollouts import RolloutService

        return RolloutService(self.registry, self.deployments, endpoints=self.endpoint_plane)

    def endpoint_plane(self) -> EndpointControl:
        """The endpoint control plane (SageMaker or the local twin), built on first use."""
        return self.endpoints.control

    @cached_property
    def replay(self) -> ReplayService:
        """`sluice replay` and its route: captured requests against a candidate, scored
        offline through the batch runner's prediction service; built on first use."""
        from sluice.replay import ReplayService

        return ReplayService(self.batch_runner.predictions, build_capture_reader(self.settings))

    @cached_property
    def optimizer(self) -> OptimizeService:
        """`sluice optimize` and its API route; built on first use."""
        from sluice.optimize.service import OptimizeService

        return OptimizeService(self.models, self.deployments, self.store, self.settings.onnx)

    @cached_property
    def optimize_jobs(self) -> OptimizeJobs:
        """Optimize runs as jobs in the registry, which every worker reads."""
        from sluice.optimize.jobs import OptimizeJobs

        return OptimizeJobs(self.registry)

    @cached_property
    def batch_runner(self) -> BatchRunner:
        """Plan, Score and Finalize. Scoring runs through its own PredictionService (the same
        runtimes, so loaded models are shared) whose calls stay out of live statistics."""
        from sluice.batch.files import Files
        from sluice.batch.runner import BatchPaths, BatchRunner, BatchTelemetry, OfflineStats

        if self.files is None:
            from sluice.clients import default_clients

            # A store per URI scheme, each built on first use (a local run never imports boto3).
            self.files = Files(clients=default_clients(self.settings.adapters.region))
        runtimes = self.inline_runtimes()
        observability = self.settings.observability
        predictions = PredictionService(
            self.registry, runtimes, self.settings.predictions,
            BatchTelemetry(
                namespace=observability.metrics_namespace, service=observability.service_name,
                sink=self.telemetry.sink if self.telemetry is not None else None,
            ),
            stats=OfflineStats(self.registry),
        )
        return BatchRunner(self.registry, predictions, self.files, self.settings.batch, BatchPaths(self.settings.batch_root_url))

    def inline_runtimes(self) -> dict[str, Runtime]:
        """These runtimes with ONNX run inline, on the very sessions the API has loaded (see
        `sluice.wiring.runtimes.inline_runtimes`)."""
        return inline_runtimes(self.runtimes, self.store, self.settings.onnx)

    @cached_property
    def stream_predictions(self) -> PredictionService:
        """The prediction service of stream records (the Lambda and `sluice stream`): live
        traffic, so the same statistics and mirror as the API's, with ONNX run inline (one
        invocation at a time holds the loop; nothing else waits on it)."""
        service = PredictionService(
            self.registry, self.inline_runtimes(), self.settings.predictions, self.telemetry,  # type: ignore[arg-type]
            stats=self.predictions.stats, mirror=self.mirror,
        )  # fmt: skip
        service.capture = self.capture
        return service

    @cached_property
    def batch(self) -> BatchService:
        from sluice.batch.service import BatchService

        runner = self.batch_runner
        if self.orchestrator is None:
            self.orchestrator = build_orchestrator(self.settings, runner)
        return BatchService(self.registry, self.orchestrator, runner.paths, runner.files, runner)

    @cached_property
    def catalog(self) -> GlueCatalog:
        """Where a successful job's output is published as a partition (AWS Glue)."""
        from sluice.batch.catalog import GlueCatalog
        from sluice.clients import default_clients

        runner = self.batch_runner  # builds the files
        return GlueCatalog(
            runner.files, batch_root=self.settings.batch_root_url, database=self.settings.jobs.catalog_database or None,  # type: ignore[arg-type]
            clients=default_clients(self.settings.adapters.region),
        )  # fmt: skip

    @cached_property
    def schedules(self) -> ScheduleService:
        """Batch schedules: kept by EventBridge Scheduler where SLUICE_SCHEDULE_GROUP is set
        (with the state machine of SLUICE_ORCHESTRATOR as the target), else by `sluice serve`."""
        from sluice.batch.schedules import ScheduleService

        timer = None
        jobs = self.settings.jobs
        if jobs.schedule_group:
            from sluice.batch.eventbridge import EventBridgeSchedules
            from sluice.clients import default_clients

            if not jobs.orchestrator.startswith("stepfunctions://") or not jobs.scheduler_role_arn:
                raise ValueError(
                    "SLUICE_SCHEDULE_GROUP needs SLUICE_ORCHESTRATOR=stepfunctions://ARN and SLUICE_SCHEDULER_ROLE_ARN"
                )
            timer = EventBridgeSchedules(
                group=jobs.schedule_group, role_arn=jobs.scheduler_role_arn,
                state_machine_arn=jobs.orchestrator.removeprefix("stepfunctions://"),
                clients=default_clients(self.settings.adapters.region),
            )  # fmt: skip
        return ScheduleService(self.registry, self.batch, timer)

    @classmethod
    def from_settings(cls, settings: Settings) -> Container:
        store = build_store(settings)
        return cls(settings, build_registry(settings), store, build_runtimes(settings, store))


@lru_cache(maxsize=1)
def get_container() -> Container:
    return Container.from_settings(get_settings())
