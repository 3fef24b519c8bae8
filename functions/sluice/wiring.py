"""The one place adapters are chosen from settings and built: once per process
(once per Lambda cold start). Tests build a Container with their own parts instead."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from sluice.observability import Telemetry
from sluice.services.deployments import DeploymentService
from sluice.services.keys import KeyService
from sluice.services.models import ModelService
from sluice.services.predictions import PredictionService
from sluice.services.shadow import ShadowRunner
from sluice.settings import Settings, get_settings

if TYPE_CHECKING:
    from sluice.registry import Registry
    from sluice.runtimes import Runtime
    from sluice.shadow.mirror import Mirror
    from sluice.storage import ArtifactStore


def build_registry(settings: Settings) -> Registry:
    url = settings.registry_url
    if url.startswith("sqlite:///"):
        from sluice.registry.sqlite import SqliteRegistry

        return SqliteRegistry.from_url(url)
    if url.startswith("dynamodb://"):
        from sluice.registry.dynamodb import DynamoRegistry

        return DynamoRegistry.from_url(url, region=settings.region)
    raise ValueError(f"SLUICE_REGISTRY must be sqlite:///PATH or dynamodb://TABLE, not {url!r}")


def build_store(settings: Settings) -> ArtifactStore:
    url = settings.store_url
    if url.startswith("file://"):
        from sluice.storage.folder import FolderStore

        return FolderStore.from_url(url)
    if url.startswith("s3://"):
        from sluice.storage.s3 import S3Store

        return S3Store.from_url(url, region=settings.region)
    raise ValueError(f"SLUICE_STORE must be file:///PATH or s3://BUCKET[/PREFIX], not {url!r}")


def build_runtimes(settings: Settings, store: ArtifactStore) -> dict[str, Runtime]:
    from sluice.runtimes.onnx import OnnxRuntime

    return {"onnx": OnnxRuntime(store, settings)}


def build_mirror(settings: Settings, store: ArtifactStore, runner: ShadowRunner) -> Mirror:
    url = settings.mirror
    if url in ("", "local"):
        from sluice.shadow.mirror import LocalMirror

        return LocalMirror(runner)
    if url.startswith("lambda://"):
        from sluice.shadow.mirror import LambdaMirror

        return LambdaMirror.from_url(url, store, region=settings.region)
    raise ValueError(f"SLUICE_MIRROR must be local or lambda://FUNCTION, not {url!r}")


@dataclass
class Container:
    settings: Settings
    registry: Registry
    store: ArtifactStore
    runtimes: dict[str, Runtime]
    telemetry: Telemetry = field(default_factory=Telemetry)
    mirror: Mirror | None = None

    def __post_init__(self) -> None:
        self.predictions = PredictionService(self.registry, self.runtimes, self.settings, self.telemetry)
        self.models = ModelService(self.registry, self.store, import_prefixes=self.settings.import_prefixes_for)
        self.deployments = DeploymentService(
            self.registry, on_change=self.predictions.forget, recorder=self.predictions.stats
        )
        self.shadows = ShadowRunner(self.predictions)
        if self.mirror is None:
            self.mirror = build_mirror(self.settings, self.store, self.shadows)
        self.keys = KeyService(self.registry, cache_ttl_s=self.settings.auth_cache_ttl_s)

    @classmethod
    def from_settings(cls, settings: Settings) -> Container:
        store = build_store(settings)
        return cls(settings, build_registry(settings), store, build_runtimes(settings, store))


@lru_cache(maxsize=1)
def get_container() -> Container:
    return Container.from_settings(get_settings())
