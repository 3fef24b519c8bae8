"""What a command uses, one function per piece of the process's container: a command names the
services it calls (`deployments().create(…)`) and reaches for nothing else.

Each is asked for where the command first needs it, so `sluice --help` builds (and imports)
nothing, a command that fails on its arguments fails before the registry is opened, and a
service built on first use (batch, endpoints, …) is built only by the commands that use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.cli.common import local_home

if TYPE_CHECKING:
    from sluice.batch.runner import BatchRunner
    from sluice.batch.schedules import ScheduleService
    from sluice.batch.service import BatchService
    from sluice.convert.follow import Follower
    from sluice.cost.service import CostService
    from sluice.inference.predictions import PredictionService
    from sluice.optimize.service import OptimizeService
    from sluice.registry import Registry
    from sluice.replay import ReplayService
    from sluice.services.deployments import DeploymentService
    from sluice.services.endpoints import EndpointService
    from sluice.services.follows import FollowService
    from sluice.services.keys import KeyService
    from sluice.services.models import ModelService
    from sluice.services.monitoring import MonitorService
    from sluice.services.rollouts import RolloutService
    from sluice.settings import Settings
    from sluice.storage import ArtifactStore
    from sluice.wiring import Container


def container() -> Container:
    """The process's container, built once (under a home made owner-only first). Commands ask
    for its pieces below; only one that hands the whole to another entry point takes it."""
    # Imported here: `sluice --help` should not build (or import) the adapters.
    from sluice import wiring

    local_home()
    return wiring.get_container()


def settings() -> Settings:
    return container().settings


def registry() -> Registry:
    return container().registry


def store() -> ArtifactStore:
    return container().store


def models() -> ModelService:
    return container().models


def deployments() -> DeploymentService:
    return container().deployments


def keys() -> KeyService:
    return container().keys


def predictions() -> PredictionService:
    return container().predictions


def stream_predictions() -> PredictionService:
    return container().stream_predictions


def batch() -> BatchService:
    return container().batch


def batch_runner() -> BatchRunner:
    return container().batch_runner


def schedules() -> ScheduleService:
    return container().schedules


def rollouts() -> RolloutService:
    return container().rollouts


def follows() -> FollowService:
    return container().follows


def follower() -> Follower:
    return container().follower


def replays() -> ReplayService:
    return container().replay


def endpoints() -> EndpointService:
    return container().endpoints


def optimizer() -> OptimizeService:
    return container().optimizer


def cost() -> CostService:
    return container().cost


def settle() -> None:
    """Before a short-lived process ends: its shadow jobs finished, its captured requests
    written, its statistics flushed."""
    container().settle(10.0)


def monitor() -> MonitorService:
    return container().monitor
