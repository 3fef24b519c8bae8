"""Work a process can do before its first request: import the runtimes, and load (and run once,
on zeros) the model versions that named deployments answer with (SnapStart runs this before
the snapshot).

Loading is bounded by artifact bytes: the versions are taken in the order the deployments are
named, each deployment's graph walked depth first (a split's variants, a shadow's primary and
mirrors, an ensemble's members, references), and a version that would pass the bound is left
for its first request.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sluice.domain.errors import SluiceError
from sluice.domain.policy import Ref, Single
from sluice.observability import get_logger
from sluice.registry.scope import use_tenant

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice.domain.objects import ModelVersion
    from sluice.domain.policy import Node
    from sluice.inference.predictions import PredictionService
    from sluice.runtimes.base import Runtime

# How deep a preload follows references (the request path refuses deeper ones anyway).
_MAX_REFS = 16


@dataclass
class Warmed:
    """What a warm-up did; `ms` by step, for the log line and the benchmark."""

    imported: list[str] = field(default_factory=list)
    loaded: list[str] = field(default_factory=list)  # tenant/model:version
    skipped: list[str] = field(default_factory=list)  # over the byte bound, or not loadable here
    failed: list[str] = field(default_factory=list)  # deployments that could not be read
    ran: list[str] = field(default_factory=list)  # answered one input of zeros: the session's first run is behind it
    loaded_bytes: int = 0
    ms: dict[str, float] = field(default_factory=dict)


def import_runtimes() -> list[str]:
    """Imports what the first ONNX request would: ONNX Runtime and NumPy."""
    import numpy  # noqa: F401
    import onnxruntime  # noqa: F401

    return ["numpy", "onnxruntime"]


def parse_preload(entries: Sequence[str]) -> list[tuple[str, str]]:
    """`tenant/name` pairs; anything else is a configuration error worth stopping on."""
    pairs = []
    for entry in entries:
        tenant, slash, name = entry.strip().partition("/")
        if not slash or not tenant or not name or "/" in name:
            raise ValueError(f"SLUICE_PRELOAD entries are tenant/deployment, not {entry!r}")
        pairs.append((tenant, name))
    return pairs


async def _versions(
    predictions: PredictionService, tenant: str, node: Node, depth: int = 0
) -> list[ModelVersion]:
    if isinstance(node, Single):
        return [await predictions.version_of(tenant, node.model, node.version)]
    if isinstance(node, Ref):
        if depth >= _MAX_REFS:
            return []
        return await _versions(
            predictions, tenant, await predictions.node_of(tenant, node.deployment), depth + 1
        )
    found: list[ModelVersion] = []
    for child in node.children():
        found.extend(await _versions(predictions, tenant, child, depth))
    return found


async def _first_run(runtime: Runtime, version: ModelVersion) -> bool:
    """One inference on zeros shaped by the signature (dynamic dimensions 1): a session's
    first run allocates what later runs reuse. A model that refuses zeros is only loaded."""
    import numpy as np

    from sluice.codecs.datatypes import V2_TO_NUMPY

    arrays = {}
    for spec in version.signature.inputs:
        dtype = V2_TO_NUMPY.get(spec.datatype)
        if dtype is None or np.dtype(dtype).kind in "OSU":
            return False
        arrays[spec.name] = np.zeros(tuple(1 if d < 0 else d for d in spec.shape), dtype=dtype)
    try:
        await runtime.infer(version, arrays)
    except Exception:  # any refusal only means no first run; the model stays loaded
        return False
    return True


async def preload(
    predictions: PredictionService, entries: Sequence[str], *, max_bytes: int, load: bool = True
) -> Warmed:
    """Imports the runtimes and loads the versions the `entries` deployments answer with.

    `load=False` only reads the deployments and their versions into the service's caches
    (after a restore: no model load may lengthen it; a new version loads on first use).
    """
    warmed = Warmed()
    started = time.perf_counter()
    warmed.imported = import_runtimes()
    warmed.ms["import"] = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    seen: set[str] = set()
    for tenant, name in parse_preload(entries):
        # Outside any request, as the tenant the entry names: where the registry acts through
        # the tenant's own role (AWS), a read bound to no tenant is refused, and the snapshot
        # hook failed the version's publication.
        with use_tenant(tenant):
            await _preload_one(predictions, warmed, seen, tenant, name, max_bytes=max_bytes, load=load)
    warmed.ms["load"] = (time.perf_counter() - started) * 1000
    get_logger().info(
        "preloaded",
        extra={
            "loaded": warmed.loaded,
            "ran": warmed.ran,
            "skipped": warmed.skipped,
            "failed": warmed.failed,
            "loaded_bytes": warmed.loaded_bytes,
            "ms": {k: round(v, 1) for k, v in warmed.ms.items()},
        },
    )
    return warmed


async def _preload_one(
    predictions: PredictionService, warmed: Warmed, seen: set[str], tenant: str, name: str, *, max_bytes: int, load: bool
) -> None:
    try:
        node = await predictions.node_of(tenant, name)
        versions = await _versions(predictions, tenant, node)
    except SluiceError as exc:
        warmed.failed.append(f"{tenant}/{name}: {exc}")
        return
    for version in versions:
        label = f"{tenant}/{version.ref}"
        if version.sha256 in seen:
            continue
        seen.add(version.sha256)
        runtime = predictions.runtimes.get(version.runtime)
        # Only in-process runtimes hold anything worth a snapshot; remote ones (Triton,
        # SageMaker) would only open connections that a restore must not reuse.
        if not load:
            continue
        if runtime is None or version.runtime != "onnx":
            warmed.skipped.append(f"{label} ({version.runtime}: nothing to load in process)")
            continue
        if warmed.loaded_bytes + version.size_bytes > max_bytes:
            warmed.skipped.append(f"{label} ({version.size_bytes} bytes over the preload bound)")
            continue
        await runtime.load(version)
        warmed.loaded.append(label)
        warmed.loaded_bytes += version.size_bytes
        if await _first_run(runtime, version):
            warmed.ran.append(label)
