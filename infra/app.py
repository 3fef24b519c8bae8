"""The CDK app: `npx cdk synth --all` / `cdk deploy --all` run this (see cdk.json).

Five stacks, each a deployable component: storage, batch, endpoints, api, observability, and
streams where the config lists any. The app alone reads the config: each stack gets the
sections and fields it uses, and hands its constructs what they use in turn. Stacks refer to
each other by physical names (see naming.py), ordered by explicit dependencies. cdk-nag
checks every synthesis through CDK's policy validation.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TypeVar

from aws_cdk import App, Environment, Stack, Tags

from infra.aspects import apply_defaults
from infra.config import DEFAULT_CONFIG, FunctionsConfig, SluiceConfig, load_config
from infra.constructs.functions import FunctionPlatform, functions_of
from infra.constructs.grants import FunctionSteps, LookupSources
from infra.nag import register_checks
from infra.naming import ARTIFACTS_PREFIX, ResourceNames, inference_component
from infra.stacks.api import ApiStack
from infra.stacks.batch import BatchStack
from infra.stacks.endpoints import EndpointsStack
from infra.stacks.observability import ObservabilityStack
from infra.stacks.storage import StorageStack
from infra.stacks.streams import StreamsStack

CONTEXT_KEYS = ("sluice:config", "sluice:architecture", "sluice:python")
S = TypeVar("S", bound=Stack)


def runtime_environment(log_level: str, names: ResourceNames) -> dict[str, str]:
    """What every function reads through `sluice.settings` (and powertools)."""
    return {
        "SLUICE_MODE": "aws",
        "SLUICE_REGISTRY": f"dynamodb://{names.table}",
        "SLUICE_STORE": f"s3://{names.artifacts_bucket}/{ARTIFACTS_PREFIX}",
        "SLUICE_LOG_LEVEL": log_level,
        "LOG_LEVEL": log_level,
        "POWERTOOLS_SERVICE_NAME": "sluice",
        "POWERTOOLS_METRICS_NAMESPACE": "sluice",
    }


def preload_environment(functions: FunctionsConfig) -> dict[str, str]:
    """What the SnapStart functions load before their snapshot (sluice.handlers.snapstart)."""
    if not (functions.snap_start and functions.preload):
        return {}
    return {
        "SLUICE_PRELOAD": json.dumps(functions.preload),
        "SLUICE_PRELOAD_MAX_BYTES": str(functions.preload_max_mb * 1024 * 1024),
    }


def build_app(
    *,
    config: SluiceConfig | None = None,
    context: dict[str, Any] | None = None,
    outdir: str | None = None,
    env: Environment | None = None,
) -> App:
    app = App(context=context, outdir=outdir)
    if config is None:
        path = app.node.try_get_context("sluice:config") or DEFAULT_CONFIG
        config = load_config(
            Path(path), context={k: app.node.try_get_context(k) for k in CONTEXT_KEYS}
        )
    name = config.name
    names = ResourceNames(name)
    platform = FunctionPlatform(
        python=config.functions.python,
        architecture_name=config.functions.architecture,
        log_retention_days=config.log_retention_days,
        retain_logs=config.storage.retain_data,
        environment=runtime_environment(config.functions.log_level, names),
    )
    # What every stack is given, and what the stacks of functions are given besides.
    common: dict[str, Any] = {"env": env, "names": names}
    functions: dict[str, Any] = {
        **common,
        "platform": platform,
        "endpoint_names": [names.endpoint(e.name) for e in config.endpoints],
        "function_steps": FunctionSteps(config.graphs.allowlist, LookupSources(config.graphs.lookup_sources)),
    }
    components: dict[str, Stack] = {}

    def component(kind: type[S], label: str, description: str, **props: Any) -> S:
        """The stack of one component: `<name>-<label>`, tagged `sluice:component=<label>`."""
        stack = kind(app, f"{name}-{label}", description=f"sluice: {description}", **props)
        components[label] = stack
        return stack

    storage = component(
        StorageStack, "storage", "artifacts and batch buckets, registry table",
        storage=config.storage, **common,
    )  # fmt: skip
    batch = component(
        BatchStack, "batch", "batch inference (S3 inbox, Step Functions, scoring functions)",
        batch=config.batch, concurrency=config.concurrency, **functions,
    )  # fmt: skip
    endpoints = component(
        EndpointsStack, "endpoints", "SageMaker Triton endpoints", endpoints=config.endpoints,
        logs=platform.logs, **common,
    )  # fmt: skip
    api = component(
        ApiStack, "api", "API Gateway, API-key authorizer, API and shadow functions",
        api=config.api,
        websocket=config.websocket if config.websocket.enabled else None,
        concurrency=config.concurrency,
        snap_start=config.functions.snap_start,
        preload=preload_environment(config.functions),
        reserved_components=[
            inference_component(names.endpoint(e.name), v.name)
            for e in config.endpoints if e.inference_components is not None for v in e.variants
        ],
        **functions,
    )  # fmt: skip
    streams = None
    if config.streams:  # a stack only where streams are configured: none is deployed empty
        streams = component(
            StreamsStack, "streams", "streaming inference (SQS, Kinesis, Kafka event sources)",
            streams=config.streams, **functions,
        )  # fmt: skip
    # Every function the stacks made gets its alarms and its lines on the dashboard.
    function_names = [
        fn.function_name
        for stack in (api, batch, *([streams] if streams is not None else []))
        for fn in functions_of(stack)
    ]
    observability = component(
        ObservabilityStack, "observability", "dashboard and alarms",
        alarms=config.alarms,
        api_stage=config.api.stage_name,
        function_names=function_names,
        streams=streams.watched if streams is not None else [],
        lookups=bool(config.graphs.lookups),
        **common,
    )  # fmt: skip

    batch.add_stack_dependency(storage)
    endpoints.add_stack_dependency(storage)
    api.add_stack_dependency(storage)
    api.add_stack_dependency(batch)  # the API starts batch executions by state machine name
    observability.add_stack_dependency(api)
    observability.add_stack_dependency(batch)
    if streams is not None:
        streams.add_stack_dependency(storage)
        streams.add_stack_dependency(api)  # the shadow function its mirror invokes
        observability.add_stack_dependency(streams)
    for label, stack in components.items():
        Tags.of(stack).add("sluice:component", label)

    apply_defaults(app, name=name, tags=config.tags, log_retention_days=config.log_retention_days)
    register_checks(app)
    return app


def main() -> None:
    env = Environment(
        account=os.environ.get("CDK_DEFAULT_ACCOUNT"), region=os.environ.get("CDK_DEFAULT_REGION")
    )
    build_app(env=env).synth()


if __name__ == "__main__":
    main()
