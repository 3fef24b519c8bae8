"""The container: the adapters chosen from settings at once, every service built on first
use, each given the group of settings it reads. A process builds (and imports) only what it
asks for: an authorizer or `sluice keys` the key service, `sluice models` the model service,
never the prediction service (NumPy, the policy schema, the runtimes' code); whatever serves
predictions asks for it before its first request (`Container.serving`). Tests build a
Container with their own parts instead."""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from sluice.observability import Telemetry
from sluice.wiring.adapters import (
    build_capture,
    build_capture_reader,
    build_endpoint_control,
    build_functions,
    build_keeper,
    build_layout,
    build_lookup_steps,
    build_mirror,
    build_orchestrator,
    build_precomputed,
    build_prediction_cache,
    build_profiles,
    build_registry,
    build_revocation_signal,
    build_schedule_timer,
    build_store,
    metrics_sink,
)
from sluice.wiring.runtimes import build_runtimes, inline_runtimes

if TYPE_CHECKING:
    from sluice.batch.catalog import GlueCatalog
    from sluice.batch.files import Files
    from sluice.batch.orchestrators import Orchestrator
    from sluice.batch.paths import BatchPaths
    from sluice.batch.runner import BatchRunner
    from sluice.batch.schedules import ScheduleService
    from sluice.batch.service import BatchService
    from sluice.capture.capturer import Capturer
    from sluice.convert.follow import Follower
    from sluice.cost.service import CostService
    from sluice.domain.locations import Layout
    from sluice.endpoints.control import EndpointControl
    from sluice.inference.mirror import Mirror
    from sluice.inference.precomputed import PrecomputedReader
    from sluice.inference.predictions import PredictionService
    from sluice.inference.results import ResultService
    from sluice.inference.shadow_runner import ShadowRunner
    from sluice.inference.uploads import UploadService
    from sluice.optimize.jobs import OptimizeJobs
    from sluice.optimize.service import OptimizeService
    from sluice.registry import Registry
    from sluice.registry.precomputed import PrecomputedStore
    from sluice.replay import ReplayService
    from sluice.runtimes import Runtime
    from sluice.runtimes.functions import FunctionSteps
    from sluice.runtimes.lookups import LookupSteps
    from sluice.services.admission import Admission
    from sluice.services.deployments import DeploymentService
    from sluice.services.endpoints import EndpointService
    from sluice.services.follows import FollowService
    from sluice.services.keys import KeyService
    from sluice.services.models import ModelService
    from sluice.services.monitoring import MonitorService
    from sluice.services.ratelimit import RateLimit
    from sluice.services.rollouts import RolloutService
    from sluice.settings import Settings
    from sluice.storage import ArtifactStore


SETTLE_S = 5.0  # what a stopping server gives its shadow jobs and captured requests


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
    functions: FunctionSteps | None = None  # function steps of graphs; built with the prediction service when not given
    lookup_steps: LookupSteps | None = None  # lookup steps of graphs; built with the prediction service when not given
    precomputed: PrecomputedStore | None = None  # tables of precomputed answers; built from settings when not given

    def __post_init__(self) -> None:
        if self.precomputed is None:
            self.precomputed = build_precomputed(self.settings, self.registry)
        if self.telemetry is None:
            self.telemetry = Telemetry(
                namespace=self.settings.observability.metrics_namespace,
                service=self.settings.observability.service_name,
                sink=metrics_sink(),
            )

    def serving(self) -> Container:
        """The prediction path built now (and the services every request may use), so that a
        server's first requests do not wait for it (nor its first burst, behind them)."""
        _ = self.predictions, self.deployments, self.keys, self.layout
        return self

    @cached_property
    def predictions(self) -> PredictionService:
        """The prediction service, with the shadow mirror and the capture it hands work to."""
        from sluice.inference.predictions import PredictionService
        from sluice.inference.shadow_runner import ShadowRunner

        self._graph_steps()
        predictions = PredictionService(
            self.registry, self.runtimes, self.settings.predictions, self.telemetry,  # type: ignore[arg-type]
            cache=build_prediction_cache(self.settings, self.registry), functions=self.functions, lookup_steps=self.lookup_steps,
            precomputed=self.precomputed_reader,
        )  # fmt: skip
        shadows = ShadowRunner(predictions)
        if self.mirror is None:
            self.mirror = build_mirror(self.settings, self.store, shadows)
        predictions.mirror = self.mirror  # the core hands shadow jobs to it
        capture = build_capture(self.settings, self.telemetry)  # type: ignore[arg-type]  # set in __post_init__
        predictions.capture = capture  # and sampled requests of deployments that capture
        predictions.profiles = build_profiles(self.settings, self.registry)  # and monitoring profiles
        predictions.kept = build_keeper(self.settings, self.registry)  # and predictions kept for their labels
        predictions.uploads = lambda: self.uploads  # and inputs that are uploads, found on first use
        predictions.batcher.max_queue = self.settings.admission.batching_max_queue
        self.__dict__.update(shadows=shadows, capture=capture)  # built with it: see below
        return predictions

    def _graph_steps(self) -> None:
        """The function and lookup steps of graphs, built once for every prediction service."""
        if self.functions is None:
            self.functions = build_functions(self.settings)
        if self.lookup_steps is None:
            self.lookup_steps = build_lookup_steps(self.settings)

    @cached_property
    def precomputed_reader(self) -> PrecomputedReader | None:
        """Precomputed answers as every prediction service of this process reads them (one
        reader, shared: the API's, the stream's and the batch runner's)."""
        if self.precomputed is None:
            return None
        from sluice.inference.precomputed import PrecomputedReader

        settings = self.settings.precomputed
        return PrecomputedReader(
            self.precomputed,
            publication_ttl_s=settings.precomputed_publication_ttl_s,
            answers_kept=settings.precomputed_answers_kept,
            answers_kept_bytes=settings.precomputed_answers_kept_bytes,
        )

    @cached_property
    def shadows(self) -> ShadowRunner:
        """Shadow jobs run against the prediction service (built with it)."""
        _ = self.predictions
        return self.__dict__["shadows"]  # type: ignore[no-any-return]

    @cached_property
    def capture(self) -> Capturer | None:
        """Where sampled requests are captured (built with the prediction service)."""
        _ = self.predictions
        return self.__dict__["capture"]  # type: ignore[no-any-return]

    @cached_property
    def layout(self) -> Layout:
        return build_layout(self.settings, self.store)

    @cached_property
    def models(self) -> ModelService:
        from sluice.services.models import ModelService

        return ModelService(self.registry, self.store, roots=self.layout.roots, triton_servers=self.settings.sources.triton_allowlist)

    @cached_property
    def deployments(self) -> DeploymentService:
        """Deployments: a change is told to the prediction service, whose statistics they read."""
        from sluice.services.deployments import DeploymentService

        predictions = self.predictions
        return DeploymentService(
            self.registry,
            on_change=predictions.forget,
            before_delete=lambda tenant, name: self.endpoints.check_none(tenant, name),
            recorder=predictions.stats,
            before_stats=self.mirror.drain,  # type: ignore[union-attr]
            functions=self.functions,
            lookup_steps=self.lookup_steps,
            precomputed=self.precomputed,
        )

    @cached_property
    def keys(self) -> KeyService:
        from sluice.services.keys import KeyService

        return KeyService(self.registry, cache_ttl_s=self.settings.auth.auth_cache_ttl_s, signal=build_revocation_signal(self.settings))

    @cached_property
    def rate_limit(self) -> RateLimit | None:
        """The per-key request rate (`SLUICE_RATE_LIMIT`; None: off) every door of this process
        counts against, the HTTP edge and the gRPC service alike: one count a key, whichever
        door it uses."""
        from sluice.services.ratelimit import RateLimit

        return RateLimit.from_settings(self.settings.admission, self.telemetry)

    @cached_property
    def admission(self) -> Admission | None:
        """What this process admits (`sluice.services.admission`): each key's requests in flight
        and the process's predictions in flight, with each tenant's share; one count for every
        transport the process serves. None when all is off (in Lambda)."""
        from sluice.services.admission import Admission

        return Admission.from_settings(self.settings.admission, self.telemetry)

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

        return RolloutService(self.registry, self.deployments, endpoints=self.endpoint_plane, monitor=lambda: self.monitor)

    @cached_property
    def monitor(self) -> MonitorService:
        """Model monitoring's baselines and checks; built on first use. A read first writes
        the profiles and kept predictions this process holds; capture is read as replay does."""
        from sluice.services.monitoring import MonitorService

        return MonitorService(self.registry, self.settings.monitor, before_read=self._flush_held, capture=build_capture_reader(self.settings))

    def _flush_held(self) -> None:
        """The profiles and kept predictions this process holds, written out; a process that
        built no prediction service (`sluice serve`'s supervisor, a CLI command) holds none."""
        if "predictions" not in self.__dict__:
            return
        for held in (self.predictions.profiles, self.predictions.kept):
            if held is not None:
                held.flush()

    @cached_property
    def follows(self) -> FollowService:
        """Follow bindings: made, shown, removed, and what became of each version recorded."""
        from sluice.services.follows import FollowService

        settings = self.settings.follows
        return FollowService(
            self.registry, self.rollouts, tracking_servers=settings.mlflow_allowlist, reads=settings.reads,
            operator_trusted=self.settings.mode != "aws", lease_s=settings.follow_lease_s,
        )  # fmt: skip

    @cached_property
    def follower(self) -> Follower:
        """What pushes and rolls out the versions bindings follow (MLflow polls, SageMaker
        events); built on first use. A tenant's MLflow binding is read over MLflow's REST API
        from the admitted servers alone, with no credentials of this process (MLflow's
        environment is the operator's); the operator's own bindings with MLflow's client."""
        from sluice.convert.follow import Follower, MlflowClientSource
        from sluice.convert.mlflow_rest import MlflowRest

        tenants = MlflowRest(allowed=self.settings.follows.mlflow_allowlist, credentials=lambda tenant: None, reads=self.follows.may_read)
        return Follower(self.follows, self.models, mlflow=tenants, operator_mlflow=MlflowClientSource())

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
        """Plan, Score and Finalize (`sluice.wiring.batch`): a prediction service of its own
        whose calls stay out of live statistics, on the same runtimes and graph steps."""
        from sluice.wiring.batch import build_batch_runner

        self._graph_steps()
        return build_batch_runner(self)

    def batch_files(self) -> Files:
        """Batch inputs and outputs, a store per URI scheme, each built on first use (a local
        run never imports boto3)."""
        if self.files is None:
            from sluice.batch.files import Files
            from sluice.clients import aws_for

            self.files = Files(**aws_for(self.settings.adapters.region))
        return self.files

    @cached_property
    def batch_paths(self) -> BatchPaths:
        from sluice.batch.paths import BatchPaths

        return BatchPaths(self.settings.batch_root_url)

    def inline_runtimes(self) -> dict[str, Runtime]:
        """These runtimes with ONNX run inline, on the very sessions the API has loaded (see
        `sluice.wiring.runtimes.inline_runtimes`)."""
        return inline_runtimes(self.runtimes, self.store, self.settings.onnx)

    @cached_property
    def stream_predictions(self) -> PredictionService:
        """The prediction service of stream records (`sluice.wiring.batch`)."""
        from sluice.wiring.batch import build_stream_predictions

        return build_stream_predictions(self)

    @cached_property
    def batch(self) -> BatchService:
        from sluice.batch.service import BatchService

        # The runner (and the prediction service it scores through) is built by the first job
        # this process runs or finds dead: listing and looking at jobs builds none.
        def runner() -> BatchRunner:
            return self.batch_runner

        if self.orchestrator is None:
            self.orchestrator = build_orchestrator(self.settings, runner)
        return BatchService(self.registry, self.orchestrator, self.batch_paths, self.batch_files(), runner, self.precomputed)

    @cached_property
    def catalog(self) -> GlueCatalog:
        """Where a successful job's output is published as a partition (`sluice.wiring.batch`)."""
        from sluice.wiring.batch import build_catalog

        return build_catalog(self)

    @cached_property
    def schedules(self) -> ScheduleService:
        """Batch schedules: kept by EventBridge Scheduler where SLUICE_SCHEDULE_GROUP is set
        (with the state machine of SLUICE_ORCHESTRATOR as the target), else by `sluice serve`."""
        from sluice.batch.schedules import ScheduleService

        return ScheduleService(self.registry, self.batch, build_schedule_timer(self.settings))

    def settle(self, timeout_s: float = SETTLE_S) -> None:
        """Before the process ends: the shadow jobs handed over finished (they record
        statistics), the captured requests written, the statistics flushed. The first two
        wait `timeout_s` at most, together."""
        if "predictions" not in self.__dict__:
            return  # no prediction service built: none of them either
        deadline = time.monotonic() + timeout_s
        self.mirror.drain(timeout_s)  # type: ignore[union-attr]
        if self.capture is not None:
            self.capture.drain(max(0.0, deadline - time.monotonic()))
        self.predictions.stats.close()  # what the registry still refuses: counted as dropped
        for held in (self.predictions.profiles, self.predictions.kept):
            if held is not None:
                held.close()

    @classmethod
    def from_settings(cls, settings: Settings) -> Container:
        store = build_store(settings)
        return cls(settings, build_registry(settings), store, build_runtimes(settings, store))
