"""The API: API Gateway (REST) -> the API function, behind an API-key authorizer; the shadow
function, the endpoints the API deploys, data capture, the rollout controller, usage plans,
and the WebSocket API where it is on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from constructs import Construct

from infra.config import ApiConfig, ConcurrencyConfig, WebSocketConfig
from infra.constructs.api_functions import (
    ApiFunction,
    AuthorizerFunction,
    BatchControl,
    Mirror,
    Predicting,
    shadow_function,
)
from infra.constructs.capture import CaptureStream
from infra.constructs.endpoint_lifecycle import EndpointLifecycle
from infra.constructs.functions import FunctionGroup
from infra.constructs.grants import grant_invoke_endpoints, grant_objects
from infra.constructs.managed_instances import ManagedInstances
from infra.constructs.monitor_schedule import MonitorSchedule
from infra.constructs.precomputed import PrecomputedAnswers
from infra.constructs.python_layer import PythonLayer
from infra.constructs.registry_access import (
    KEY_ITEMS,
    READ,
    WRITE,
    RegistryWorker,
    TenantRegistryRole,
    grant_registry,
)
from infra.constructs.registry_events import RegistryEvents, follow_environment
from infra.constructs.rest_api import DEFAULT_PLAN, RestApi
from infra.constructs.rollouts import RolloutController
from infra.constructs.websocket_api import WebSocketApi
from infra.naming import RESULTS_PREFIX, STORE_PREFIX, UPLOADS_PREFIX
from infra.stacks.base import FunctionStack


class ApiStack(FunctionStack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        api: ApiConfig,
        websocket: WebSocketConfig | None,
        concurrency: ConcurrencyConfig,
        snap_start: bool,
        preload: Mapping[str, str],
        reserved_components: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        """`websocket`: None without the WebSocket API; `preload`: the environment that tells
        the SnapStart functions what to load before their snapshot; `reserved_components`: the
        inference components of the config file's endpoints; `kwargs`: FunctionStack's
        (names, platform, endpoint_names) and Stack's."""
        super().__init__(scope, id, **kwargs)
        names, platform, storage = self.names, self.platform, self.storage
        core, triton = platform.core_layer(self), platform.triton_layer(self)
        # Apache DataSketches where the runtime has it: the functions that predict profile
        # their traffic, the scheduled check reads the profiles.
        monitor = [layer for layer in [platform.monitor_layer(self)] if layer is not None]

        predicting = Predicting(
            functions=FunctionGroup(
                platform, [core, triton, *monitor], environment=preload, snap_start=snap_start
            ),
            table=storage.table,
            artifacts=storage.artifacts,
            endpoint_names=self.endpoint_names,
            function_steps=self.function_steps,
            precomputed=PrecomputedAnswers(storage.precomputed),
        )
        self.shadow = shadow_function(
            self,
            "Shadow",
            predicting,
            function_name=names.function("shadow"),
            memory_mb=api.shadow_memory_mb,
            timeout_s=api.shadow_timeout_s,
            reserved_concurrency=concurrency.shadow,
        )
        # SageMaker endpoints deployed through the API: their execution role, and the calls.
        self.endpoint_lifecycle = EndpointLifecycle(
            self,
            "Endpoints",
            model_bucket=storage.artifacts,
            store_prefix=STORE_PREFIX,
            results_prefix=RESULTS_PREFIX,
            uploads_prefix=UPLOADS_PREFIX,
            reserved_endpoints=self.endpoint_names,
            reserved_components=reserved_components,
        )
        self.capture = CaptureStream(
            self, stream_name=names.capture_stream, bucket=storage.batch, logs=platform.logs
        ).target
        managed = api.managed_instances
        # On managed instances the API function runs without SnapStart or reserved concurrency
        # (infra/constructs/managed_instances.py); the shadow function keeps both.
        api_predicting = (
            predicting
            if managed is None
            else replace(predicting, functions=replace(predicting.functions, snap_start=False))
        )
        self.api_function = ApiFunction(
            self,
            api_predicting,
            function_name=names.function("api"),
            memory_mb=api.memory_mb,
            timeout_s=api.timeout_s,
            reserved_concurrency=concurrency.api if managed is None else None,
            prediction_cache_shared=api.prediction_cache_shared,
            batch_bucket=storage.batch,
            mirror=Mirror.invoking(self.shadow),
            capture=self.capture,
            endpoints=self.endpoint_lifecycle,
            batch=BatchControl(
                state_machine=names.state_machine,
                schedule_group=names.schedule_group,
                scheduler_role=names.scheduler_role,
            ),
        ).function
        self.managed_instances = None
        if managed is not None:
            self.managed_instances = ManagedInstances(
                self,
                "ManagedInstances",
                config=managed,
                architecture=platform.architecture,
                name=names.function("api"),
            )
            self.managed_instances.attach(self.api_function, api.memory_mb)
        self.authorizer = AuthorizerFunction(
            self,
            "Authorizer",
            function_name=names.function("authorizer"),
            platform=platform,
            layers=[core],
            memory_mb=api.authorizer_memory_mb,
            reserved_concurrency=concurrency.authorizer,
            usage_key_prefix=names.usage_key_prefix,
            tenants_with_plans=[t.tenant for t in api.tenants],
            table=storage.table,
        )
        self.rollouts = RolloutController(
            self, self._worker("rollouts", [core, *monitor], concurrency.rollouts), endpoints=self.endpoint_lifecycle
        ).function
        self.monitor = MonitorSchedule(
            self, self._worker("monitor", [core, *monitor], concurrency.monitor), bucket=storage.batch
        ).function
        self.registry_events = RegistryEvents(
            self,
            self._worker("registry-events", [core, platform.registry_layer(self)], concurrency.registry_events),
            artifacts=storage.artifacts,
            package_groups=api.follow_package_groups,
            model_data=api.model_data_locations,
            poll_every_minutes=api.follow_poll_minutes,
            mlflow_servers=api.mlflow_tracking_servers,
            mlflow_credentials=api.mlflow_credentials,
            mlflow_kms_keys=api.mlflow_credentials_kms_keys,
        )
        # The API checks a new binding's tracking server and package group against the same lists.
        for variable, value in follow_environment(api.mlflow_tracking_servers, api.follow_package_groups).items():
            self.api_function.function.add_environment(variable, value)
        self.rest_api = RestApi(
            self,
            rest_api_name=names.rest_api,
            stage_name=api.stage_name,
            rate_limit=api.rate_limit,
            burst_limit=api.burst_limit,
            execution_log_level=api.execution_log_level,
            logs=platform.logs,
            authorizer=self.authorizer.function,
            handler=self.api_function.invocable,
        )
        self.rest_api.add_usage_plans(
            {DEFAULT_PLAN: api.default_plan, **{t.tenant: t for t in api.tenants}},
            name_prefix=names.usage_plan_prefix,
            key_prefix=names.usage_key_prefix,
        )
        self.websocket = (
            self._websocket(websocket, [core, triton, *monitor])
            if websocket is not None
            else None
        )

    def _worker(self, name: str, layers: list[PythonLayer], reserved_concurrency: int | None) -> RegistryWorker:
        """What the function `name`, run in the background over the registry, is given."""
        functions = FunctionGroup(self.platform, layers)
        return RegistryWorker(self.names.function(name), functions, reserved_concurrency, self.storage.table)

    def _websocket(self, websocket: WebSocketConfig, layers: list[PythonLayer]) -> WebSocketApi:
        """The WebSocket API and its function, which predicts as the API function does: keys
        by id with its own credentials, a tenant's items only through a tenant role."""
        # The shadow function by its unqualified name, even under SnapStart (the API calls
        # its `live` alias).
        mirror = Mirror(
            name=self.shadow.function.function_name, arn=self.shadow.function.function_arn
        )
        ws = WebSocketApi(
            self,
            "WebSocket",
            api_name=self.names.websocket_api,
            function_name=self.names.function("websocket"),
            websocket=websocket,
            platform=self.platform,
            layers=layers,
            authorizer=self.authorizer.function,
            environment={
                **mirror.environment,
                "SLUICE_WEBSOCKET_RATE_LIMIT": websocket.connection_rate_limit,
                **self.capture.environment,
            },
        )
        fn = ws.function
        self.capture.grant_to(fn.role)
        grant_registry(fn.role, self.storage.table, actions=["dynamodb:GetItem"], partitions=[KEY_ITEMS])
        tenant_registry = TenantRegistryRole(
            self,
            "WebSocketTenantRegistry",
            table=self.storage.table,
            caller=fn.role,
            actions=[*READ, *WRITE],
        )
        fn.function.add_environment("SLUICE_TENANT_ROLE_ARN", tenant_registry.role.role_arn)
        precomputed = PrecomputedAnswers(self.storage.precomputed)
        precomputed.grant_tenant_reads(tenant_registry.role)
        precomputed.tell(fn)
        grant_objects(
            fn, self.storage.artifacts, prefix=STORE_PREFIX, purpose="model artifacts"
        )
        grant_invoke_endpoints(fn, self.endpoint_names)
        self.function_steps.grant_to(fn)
        mirror.grant_to(fn.role)
        return ws
