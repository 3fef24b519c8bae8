"""A sluice Lambda function: the shared code asset, the layers it imports, and its own role.

Every function runs code from one asset, `functions/` (the `sluice` package), with its
third-party packages in layers. Each has a role of its own that starts empty: logs to its
own log group and X-Ray traces, and nothing else until a stack grants it what it needs.
"""

from __future__ import annotations

import functools
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import (
    Annotations,
    AssetHashType,
    BundlingOptions,
    Duration,
    FileSystem,
    ILocalBundling,
    Stack,
)
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.constructs.bytecode import compile_tree, find_interpreter
from infra.constructs.logs import LogRetention
from infra.constructs.python_layer import (
    PythonLayer,
    check_unzipped_size,
    directory_size,
    staged_path,
)
from infra.constructs.queues import encrypted_queue
from infra.nag import acknowledge

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS_DIR = REPO_ROOT / "functions"
LAYERS_DIR = REPO_ROOT / "layers"
CODE_EXCLUDES = [
    "**/__pycache__",
    "**/*.pyc",
    "**/tests",
    "**/.pytest_cache",
    "**/.ruff_cache",
    "**/*.egg-info",
]

# The alias API Gateway and the other callers invoke on SnapStart functions.
LIVE_ALIAS = "live"
# The runtimes Apache DataSketches publishes wheels for (the monitor layer): 3.13, the
# default, and 3.12. None for 3.14 yet (5.2.0: cp39-cp313, no abi3).
MONITOR_PYTHONS = ("3.12", "3.13")
# The warning a synthesis gives where the runtime is not one of them.
MONITOR_WARNING = "sluice:monitor-without-sketches"


def _python_version(runtime: lambda_.Runtime) -> tuple[int, int] | None:
    match = re.fullmatch(r"python(\d+)\.(\d+)", runtime.name)
    return (int(match[1]), int(match[2])) if match else None


def newest_python_runtime() -> lambda_.Runtime:
    """The newest Python runtime this aws-cdk-lib knows: the one cdk-nag's latest-runtime
    rules (AwsSolutions-L1, Serverless-LambdaLatestVersion) want every Python function on."""
    versions = {
        version: runtime
        for runtime in lambda_.Runtime.ALL
        if (version := _python_version(runtime)) is not None
    }
    return versions[max(versions)]


@dataclass(frozen=True)
class FunctionPlatform:
    """What all functions of a deployment share: where they run and what they all read."""

    python: str
    architecture_name: str
    log_retention_days: int
    retain_logs: bool
    environment: Mapping[str, str]

    @property
    def runtime(self) -> lambda_.Runtime:
        return {
            "3.12": lambda_.Runtime.PYTHON_3_12,
            "3.13": lambda_.Runtime.PYTHON_3_13,
            "3.14": lambda_.Runtime.PYTHON_3_14,
        }[self.python]

    def older_runtime_reason(self) -> str | None:
        """Why the functions may run a Python older than the newest aws-cdk-lib knows (the
        config offers several Lambda-supported ones); None when they run the newest."""
        newest = newest_python_runtime().name
        if self.runtime.name == newest:
            return None
        return (
            f"functions.python chose {self.runtime.name}, a runtime Lambda supports and the "
            f"layers are built for; {newest} is newer. The config offers the older "
            "supported runtimes on purpose, for a deployment that a dependency (or its own "
            "code) holds back: the default is the newest Python Apache DataSketches publishes "
            "wheels for (model monitoring's drift); moving up is a change of functions.python."
        )

    @property
    def logs(self) -> LogRetention:
        return LogRetention(days=self.log_retention_days, retain=self.retain_logs)

    @property
    def architecture(self) -> lambda_.Architecture:
        return (
            lambda_.Architecture.ARM_64
            if self.architecture_name == "arm64"
            else lambda_.Architecture.X86_64
        )

    def layer(
        self, scope: Construct, id: str, *, name: str, description: str, bytecode: bool = True
    ) -> PythonLayer:
        return PythonLayer(
            scope,
            id,
            requirements_dir=LAYERS_DIR / name,
            runtime=self.runtime,
            architecture=self.architecture,
            python=self.python,
            description=description,
            bytecode=bytecode,
        )

    def core_layer(self, scope: Construct, *, bytecode: bool = True) -> PythonLayer:
        """The API and runtime packages, which every function imports."""
        return self.layer(
            scope, "CoreLayer", name="core", description="sluice core dependencies", bytecode=bytecode
        )

    def triton_layer(self, scope: Construct) -> PythonLayer:
        """aiohttp, for the `triton` runtime: on the functions that predict (API, shadow,
        WebSocket, streams), not in the core layer the batch functions get."""
        return self.layer(
            scope, "TritonLayer", name="triton", description="sluice triton runtime dependencies"
        )

    def registry_layer(self, scope: Construct) -> PythonLayer:
        """PyYAML (its pure Python loader), for the registry event function alone: it reads
        followed MLflow versions' MLmodel files. Under 1 MB; no other function carries it."""
        return self.layer(
            scope, "RegistryLayer", name="registry", description="sluice registry event dependencies"
        )

    def batch_layer(self, scope: Construct) -> PythonLayer:
        """pyarrow, for the batch functions; sources only, as their core layer (batch.py)."""
        return self.layer(
            scope,
            "BatchLayer",
            name="batch",
            description="sluice batch dependencies",
            bytecode=False,
        )

    def monitor_layer(self, scope: Construct) -> PythonLayer | None:
        """Apache DataSketches, for model monitoring (profiles and their checks), where the
        runtime has its wheels (3.13, the default, and 3.12); None on 3.14, which it publishes
        none for: those functions profile nothing and the scheduled check reports quality
        alone, and the synthesis warns (once per stack that asks)."""
        if self.python not in MONITOR_PYTHONS:
            Annotations.of(scope).add_warning_v2(
                MONITOR_WARNING,
                f"Python {self.python}: Apache DataSketches publishes no wheel for it, so these "
                "functions profile no traffic and the hourly monitoring check reports model "
                "quality without drift or data quality. Set `functions.python: \"3.13\"` (the "
                "default) in the config for drift (docs/monitoring.md).",
            )
            return None
        return self.layer(
            scope, "MonitorLayer", name="monitor", description="sluice monitoring dependencies"
        )

    def code(self) -> lambda_.Code:
        """The `functions/` asset, with bytecode compiled by the runtime's Python."""
        compiler = f"bytecode-{self.python}" if find_interpreter(self.python) else "no-compiler"
        fingerprint = FileSystem.fingerprint(str(FUNCTIONS_DIR), exclude=CODE_EXCLUDES)
        return lambda_.Code.from_asset(
            str(FUNCTIONS_DIR),
            exclude=CODE_EXCLUDES,
            asset_hash_type=AssetHashType.CUSTOM,
            asset_hash=f"{fingerprint}-{compiler}",
            bundling=BundlingOptions(
                # Never started: the local bundler copies and compiles, or raises.
                image=self.runtime.bundling_image,
                local=_compiled_code(self.python),
            ),
        )


@functools.cache
def _compiled_code(python: str) -> CompiledCode:
    # One bundler per version: the same bundling options let CDK stage the code once per
    # synthesis instead of once per function.
    return CompiledCode(python=python)


@jsii.implements(ILocalBundling)
class CompiledCode:
    """The local bundler of the function asset: `functions/` as it is, plus `__pycache__`."""

    def __init__(self, *, python: str) -> None:
        self.python = python

    def try_bundle(self, output_dir: str, *_options: Any, **_keywords: Any) -> bool:
        target = Path(output_dir)
        # CODE_EXCLUDES, as names: what the asset leaves out at any depth.
        skipped = ("__pycache__", "*.pyc", "tests", ".pytest_cache", ".ruff_cache", "*.egg-info")
        ignore = shutil.ignore_patterns(*skipped)
        for child in FUNCTIONS_DIR.iterdir():
            if ignore(str(FUNCTIONS_DIR), [child.name]):
                continue
            if child.is_dir():
                shutil.copytree(child, target / child.name, ignore=ignore, dirs_exist_ok=True)
            else:
                shutil.copy2(child, target / child.name)
        compile_tree(target, version=self.python, label="function code")
        return True


class SluiceFunction(Construct):
    """One Lambda entry point (`sluice.handlers.<module>.<function>`).

    `reserved_concurrency` (from the config's `concurrency` section) both guarantees and caps
    the function's concurrent executions. `snap_start` publishes a version per deployment
    with Lambda SnapStart on it and an alias `live` (`invocable`) that callers must use.
    `invoked_async` functions (S3 events, the shadow mirror) get a dead-letter queue; the
    others are called synchronously, where the caller sees the error and a DLQ has nothing
    to hold.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        function_name: str,
        handler: str,
        description: str,
        platform: FunctionPlatform,
        layers: Sequence[PythonLayer],
        memory_mb: int,
        timeout: Duration,
        environment: Mapping[str, str] | None = None,
        invoked_async: bool = False,
        reserved_concurrency: int | None = None,
        snap_start: bool = False,
    ) -> None:
        super().__init__(scope, id)
        # The physical name, a plain string: other stacks (the dashboard, the alarms) name the
        # function by it rather than by a reference across stacks.
        self.function_name = function_name
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Runs {handler}",
        )
        self.log_group = platform.logs.group(self, "Logs")
        self.dead_letters: sqs.Queue | None = None
        if invoked_async:
            # Lambda sends to it with the function's role.
            self.dead_letters = encrypted_queue(
                self, "DeadLetters", retention_period=Duration.days(14)
            )
            acknowledge(
                self.dead_letters,
                "Serverless-SQSRedrivePolicy",
                "This queue is the function's dead-letter queue: events land here after Lambda's "
                "own retries, for inspection and redrive; a DLQ behind it would only move them.",
            )
        self.function = lambda_.Function(
            self,
            "Function",
            function_name=function_name,
            description=description,
            runtime=platform.runtime,
            architecture=platform.architecture,
            handler=handler,
            code=platform.code(),
            layers=[layer.layer for layer in layers],
            memory_size=memory_mb,
            timeout=timeout,
            reserved_concurrent_executions=reserved_concurrency,
            role=self.role,
            log_group=self.log_group,
            tracing=lambda_.Tracing.ACTIVE,
            dead_letter_queue=self.dead_letters,
            environment={**platform.environment, **(environment or {})},
            # SnapStart: Lambda runs the init (and the before-snapshot hook of
            # sluice.handlers.snapstart) once per published version and starts every cold
            # start from that snapshot. It needs no provisioned concurrency and at most 512 MB
            # of ephemeral storage, which these functions keep (Lambda's default, 512 MB).
            snap_start=lambda_.SnapStartConf.ON_PUBLISHED_VERSIONS if snap_start else None,
        )
        self.log_group.grant_write(self.role)
        # What callers invoke: with SnapStart the `live` alias of the version published from
        # this synthesis (the unpublished $LATEST never runs from a snapshot), else the function.
        self.alias: lambda_.Alias | None = None
        self.invocable: lambda_.IFunction = self.function
        if snap_start:
            self.alias = lambda_.Alias(
                self, "Live", alias_name=LIVE_ALIAS, version=self.function.current_version
            )
            self.invocable = self.alias
            Annotations.of(self.function).acknowledge_warning(
                "@aws-cdk/aws-lambda:snapStartRequirePublish",
                "Published: current_version, behind the `live` alias every caller invokes.",
            )

        acknowledge(
            self,
            "AwsSolutions-IAM5[Resource::*]",
            "X-Ray's PutTraceSegments and PutTelemetryRecords have no resource-level "
            "permissions; CDK grants exactly these two for active tracing.",
        )
        older_runtime = platform.older_runtime_reason()
        if older_runtime:
            for rule_id in ("AwsSolutions-L1", "Serverless-LambdaLatestVersion"):
                acknowledge(self.function, rule_id, older_runtime)
        if not invoked_async:
            acknowledge(
                self.function,
                "Serverless-LambdaDLQ",
                "Invoked synchronously (API Gateway or a Step Functions task): the caller "
                "receives the error and retries or catches it; a dead-letter queue only "
                "applies to asynchronous invocations.",
            )
        self._check_size(layers)

    def _check_size(self, layers: Sequence[PythonLayer]) -> None:
        sizes = {layer.name: layer.unzipped_bytes for layer in layers}
        if not Stack.of(self).bundling_required or None in sizes.values():
            return
        check_unzipped_size(
            self.function.node.path,
            code_bytes=directory_size(staged_path(self.function)),
            layers={name: size or 0 for name, size in sizes.items()},
        )


@dataclass(frozen=True)
class FunctionGroup:
    """Functions that run alike: on `platform`, importing `layers`, with `environment` added to
    the platform's, SnapStart on or off."""

    platform: FunctionPlatform
    layers: Sequence[PythonLayer]
    environment: Mapping[str, str] = field(default_factory=dict)
    snap_start: bool = False

    def function(
        self,
        scope: Construct,
        id: str,
        *,
        function_name: str,
        handler: str,
        description: str,
        memory_mb: int,
        timeout_s: int,
        reserved_concurrency: int | None = None,
        invoked_async: bool = False,
        environment: Mapping[str, str] | None = None,
    ) -> SluiceFunction:
        """One function of the group, its own `environment` added to the group's."""
        return SluiceFunction(
            scope,
            id,
            function_name=function_name,
            handler=handler,
            description=description,
            platform=self.platform,
            layers=self.layers,
            memory_mb=memory_mb,
            timeout=Duration.seconds(timeout_s),
            environment={**self.environment, **(environment or {})},
            invoked_async=invoked_async,
            reserved_concurrency=reserved_concurrency,
            snap_start=self.snap_start,
        )


def functions_of(scope: Construct) -> list[SluiceFunction]:
    """Every sluice function under `scope` (a stack), in the order they were made."""
    return [c for c in scope.node.find_all() if isinstance(c, SluiceFunction)]
