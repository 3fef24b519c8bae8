"""The local twin of SageMaker endpoints: each variant of a deployment's endpoint is a local
Triton (CPU, python backend) with the SageMaker port on, serving the `local` flavour
repository of its version.

Deploying builds each variant's repository and starts its server, and returns once every
server is ready (so an endpoint is InService as soon as it exists); a server that fails to
start takes the others down with it. The `sagemaker` runtime reaches a variant at the URL the
endpoint reports for it (the bound versions carry it as `endpoint_url`). Instance counts,
autoscaling and weights are recorded as asked and reported back: one server per variant runs
here whatever the count, and the deployment's split, not the endpoint, divides traffic.
A rollout's candidate gets a variant of its own the same way (`add_variant`: its repository
built and its server started, at weight 0). Undeploying stops the servers and removes the
endpoint's folder.

Everything lives under `<home>/endpoints/<endpoint>/`: `endpoint.json` (what was asked),
and per variant `<variant>/repository/` and `<variant>/triton/` (the server's state and log).
"""

from __future__ import annotations

import functools
import json
import logging
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sluice import owner_only
from sluice.domain.errors import Conflict, NotFound
from sluice.endpoints import local_triton
from sluice.endpoints.control import (
    Autoscaling,
    DeploySpec,
    DeployTarget,
    EndpointState,
    EndpointWeights,
    ScalingState,
    VariantChanges,
    VariantState,
    build_variant_repository,
)

if TYPE_CHECKING:
    from sluice.endpoints.repository import BuiltModel
    from sluice.endpoints.triton_env import TritonEnv
    from sluice.storage import ArtifactStore

log = logging.getLogger(__name__)

RECORD = "endpoint.json"
NOTES = (
    "local endpoint: one Triton server (CPU) per variant on this machine, at the variant's url",
    "instance counts and autoscaling are recorded as asked, not applied: each variant runs one server here",
    "weights are applied by the deployment's split, which sluice routes; the servers do not divide traffic",
)


class LocalEndpoints:
    """Endpoints as local Triton servers, one per variant, under `<home>/endpoints/`."""

    kind: Literal["sagemaker", "local"] = "local"

    def __init__(
        self,
        store: ArtifactStore,
        home: Path,
        *,
        env: TritonEnv | None = None,
        env_path: Path | str | None = None,
        ready_timeout_s: float = 90.0,
    ) -> None:
        self.store = store
        self.root = Path(home).expanduser() / "endpoints"
        self.env_path = env_path
        self.ready_timeout_s = ready_timeout_s
        if env is not None:
            self.env = env

    @functools.cached_property
    def env(self) -> TritonEnv:
        """The Triton environment given, else the one found at `env_path`, on first use."""
        from sluice.endpoints.triton_env import find_env

        return find_env(self.env_path)

    def folder(self, endpoint: str) -> Path:
        return self.root / endpoint

    # deploy ----------------------------------------------------------------------------------
    def deploy(self, spec: DeploySpec) -> None:
        env = self.env  # no environment: say so before anything is written
        folder = self.folder(spec.endpoint)
        try:
            owner_only.folder(folder, exist_ok=False)
        except FileExistsError:
            raise Conflict(f"endpoint {spec.endpoint} is being deployed or removed; look again shortly", field="endpoint") from None
        now = round(time.time(), 3)
        record: dict[str, Any] = {
            "tenant": spec.tenant,
            "deployment": spec.deployment,
            "instance_type": spec.instance_type,
            "created_at": now,
            "updated_at": now,
            "variants": [],
        }
        try:
            for target in spec.targets:
                built = build_variant_repository(
                    folder / target.variant / "repository",
                    target.version,
                    self.store,
                    flavour="local",
                    max_batch_size=spec.max_batch_size,
                    gpu=False,  # the local Triton runs on the CPU whatever the instance type
                )
                autoscaling = spec.autoscaling.to_dict() if spec.autoscaling else None
                record["variants"].append(_variant_record(target, built, spec.instance_count, autoscaling))
            _write(folder, record)
            for variant in record["variants"]:
                local_triton.start(
                    folder / variant["name"] / "repository",
                    home=folder / variant["name"],
                    port=local_triton.free_base_port(),
                    default_model=variant["triton_model"],
                    env=env,
                    ready_timeout_s=self.ready_timeout_s,
                )
        except BaseException:
            self._remove(folder, record.get("variants", []))
            raise
        log.info("local endpoint started", extra={"endpoint": spec.endpoint, "variants": len(spec.targets)})

    # read ------------------------------------------------------------------------------------
    def describe(self, endpoint: str) -> EndpointState | None:
        folder = self.folder(endpoint)
        record = _read(folder)
        if record is None:
            return None
        variants = []
        problems = []
        for item in record["variants"]:
            server = local_triton.read_state(folder / item["name"])
            running = server is not None and local_triton.is_running(server.pid)
            ready = running and server is not None and local_triton.is_ready(server)
            if not running:
                where = f" Its log ends:\n{local_triton.log_tail(server.log, 10)}" if server else ""
                problems.append(("Failed", f"the local Triton of variant '{item['label']}' is not running.{where}"))
            elif not ready:
                problems.append(("OutOfService", f"the local Triton of variant '{item['label']}' runs but is not ready"))
            scaling = item.get("autoscaling")
            variants.append(
                VariantState(
                    name=item["name"],
                    label=item["label"],
                    model=item["model"],
                    version=int(item["version"]),
                    max_batch_size=int(item["max_batch_size"]),
                    model_name=item["triton_model"],
                    instance_type=record["instance_type"],
                    desired_weight=float(item["weight"]),
                    current_weight=float(item["weight"]) if ready else None,
                    desired_instances=int(item["instances"]),
                    current_instances=1 if running else 0,
                    autoscaling=ScalingState(
                        scaling["min_instances"], scaling["max_instances"], scaling["target_invocations_per_instance"]
                    )
                    if scaling
                    else None,
                    url=server.sagemaker_url if server is not None and running else None,
                )
            )
        status, reason = ("InService", None) if not problems else (problems[0][0], " ".join(p[1] for p in problems))
        envs = sorted({s.env for s in (local_triton.read_state(folder / v.name) for v in variants) if s is not None})
        return EndpointState(
            name=endpoint,
            arn=f"local:{folder}",
            status=status,
            failure_reason=reason,
            config_name=endpoint,
            tenant=record["tenant"],
            deployment=record["deployment"],
            variants=tuple(variants),
            created_at=record.get("created_at"),
            updated_at=record.get("updated_at"),
            images=tuple(f"local tritonserver ({env})" for env in envs),
            notes=NOTES,
        )

    def settle(self, state: EndpointState) -> EndpointState:
        return state  # autoscaling asked for at deploy was recorded then: nothing waits

    def weights(self, endpoint: str) -> EndpointWeights | None:
        state = self.describe(endpoint)
        if state is None:
            return None
        return EndpointWeights(
            name=endpoint,
            status=state.status,
            weights={v.name: v.desired_weight for v in state.variants},
            failure_reason=state.failure_reason,
        )

    # add a variant -------------------------------------------------------------------------
    def add_variant(self, state: EndpointState, target: DeployTarget, *, like: VariantState) -> VariantState:
        """Build the version's repository and start its server; recorded once it is ready
        (so the endpoint is InService with the variant when this returns)."""
        env = self.env
        folder = self.folder(state.name)
        record = _read(folder)
        if record is None:
            raise NotFound(f"endpoint {state.name} is gone", field="endpoint")
        home = folder / target.variant
        if home.exists():
            raise Conflict(f"endpoint {state.name} already has a folder for variant {target.variant}", field="endpoint")
        try:
            built = build_variant_repository(
                home / "repository", target.version, self.store, flavour="local", max_batch_size=None, gpu=False
            )
            server = local_triton.start(
                home / "repository",
                home=home,
                port=local_triton.free_base_port(),
                default_model=built.name,
                env=env,
                ready_timeout_s=self.ready_timeout_s,
            )
        except BaseException:
            self._remove(home, [])
            raise
        item = _variant_record(target, built, like.desired_instances or 1, None)
        record["variants"].append(item)
        record["updated_at"] = round(time.time(), 3)
        _write(folder, record)
        log.info("local endpoint variant started", extra={"endpoint": state.name, "variant": target.variant})
        return VariantState(
            name=target.variant,
            label=target.label,
            model=target.version.model,
            version=target.version.version,
            max_batch_size=built.max_batch_size,
            model_name=built.name,
            instance_type=record["instance_type"],
            desired_weight=target.weight,
            current_weight=target.weight,
            desired_instances=item["instances"],
            current_instances=1,
            url=server.sagemaker_url,
        )

    # change ----------------------------------------------------------------------------------
    def change(self, endpoint: str, changes: VariantChanges) -> None:
        """Recorded as asked: `describe` reports them, and the notes say what they mean here."""
        folder = self.folder(endpoint)
        record = _read(folder)
        if record is None:
            return
        for item in record["variants"]:
            name = item["name"]
            scaling: Autoscaling | None = changes.autoscaling.get(name)
            if scaling is not None:
                item["autoscaling"] = scaling.to_dict()
            if name in changes.weights:
                item["weight"] = changes.weights[name]
            if name in changes.instances:
                item["instances"] = changes.instances[name]
        record["updated_at"] = round(time.time(), 3)
        _write(folder, record)

    # undeploy --------------------------------------------------------------------------------
    def undeploy(self, endpoint: str, state: EndpointState | None) -> dict[str, Any]:
        folder = self.folder(endpoint)
        record = _read(folder)
        if record is None and not folder.exists():
            return {"endpoint": None, "servers": []}
        stopped = self._remove(folder, (record or {}).get("variants", []))
        return {"endpoint": endpoint, "servers": stopped}

    def _remove(self, folder: Path, variants: list[dict[str, Any]]) -> list[str]:
        """Stop each variant's server, then remove the endpoint's folder; the variants stopped."""
        stopped = []
        for item in variants:
            if local_triton.stop(folder / item["name"]) is not None:
                stopped.append(item["name"])
        shutil.rmtree(folder, ignore_errors=True)
        return stopped


def started_servers(home: Path) -> list[str]:
    """The SageMaker URLs of the variant servers the twin started under `home` that run now:
    the ports the `sagemaker` runtime may call besides the configured servers (they are picked
    free when a variant starts, so no fixed allowlist can name them)."""
    urls = []
    for state in sorted((Path(home).expanduser() / "endpoints").glob("*/*/triton/state.json")):
        server = local_triton.read_state(state.parent.parent)
        if server is not None and local_triton.is_running(server.pid):
            urls.append(server.sagemaker_url)
    return urls


def _variant_record(target: DeployTarget, built: BuiltModel, instances: int, autoscaling: dict[str, Any] | None) -> dict[str, Any]:
    """What the endpoint's record keeps of one variant."""
    return {
        "name": target.variant,
        "label": target.label,
        "model": target.version.model,
        "version": target.version.version,
        "max_batch_size": built.max_batch_size,
        "triton_model": built.name,
        "weight": target.weight,
        "instances": instances,
        "autoscaling": autoscaling,
    }


def _read(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / RECORD).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _write(folder: Path, record: dict[str, Any]) -> None:
    owner_only.write(folder / RECORD, json.dumps(record, indent=2).encode())
