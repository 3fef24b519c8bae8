"""SnapStart's hooks on a simulated snapshot and restore: the before-snapshot hook loads the
preloaded deployments, and two containers restored from one snapshot draw different split
choices, build new clients, and read the deployment graph again."""

from __future__ import annotations

import gc
import json
import random
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from sluice import clients
from sluice.demo import install_demo
from sluice.domain import Principal
from sluice.domain.requests import ArrayInputs, PredictionRequest
from sluice.handlers import snapstart
from sluice.inference.loop import run
from sluice.settings import get_settings
from sluice.wiring import Container, get_container
from tests.conftest import MODELS

if TYPE_CHECKING:
    from collections.abc import Iterator

ACME = Principal("acme", frozenset({"admin", "predict"}), "test-acme")
ROWS = np.ones((1, 4), dtype=np.float32)
SPLIT = {
    "kind": "split",
    "variants": [
        {"name": "a", "weight": 1, "target": {"kind": "single", "model": "iris", "version": 1}},
        {"name": "b", "weight": 1, "target": {"kind": "single", "model": "iris", "version": 2}},
    ],
}


@pytest.fixture
def process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Container]:
    """This process as a Lambda sees it at init: settings from the environment, a registry
    with the demo models, iris v2 (a forest), and a 50/50 split between iris v1 and v2."""
    monkeypatch.setenv("SLUICE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SLUICE_PRELOAD", json.dumps(["acme/ab", "acme/diabetes"]))
    monkeypatch.setenv("SLUICE_DEPLOYMENT_CACHE_TTL_S", "60")
    for name in ("SLUICE_REGISTRY", "SLUICE_STORE", "SLUICE_MODE", "SLUICE_PRELOAD_MAX_BYTES"):
        monkeypatch.delenv(name, raising=False)
    get_settings.cache_clear()
    get_container.cache_clear()
    monkeypatch.setattr(snapstart, "state", snapstart.SnapState())
    setup = Container.from_settings(get_settings())
    install_demo(setup, ACME, MODELS)
    setup.models.push(ACME, "iris", (MODELS / "iris_forest.onnx").read_bytes())
    setup.deployments.create(ACME, "ab", SPLIT)
    yield snapstart.current()
    gc.unfreeze()  # before_snapshot froze this test process's objects
    get_settings.cache_clear()
    get_container.cache_clear()


def _variants(container: Container, n: int = 48) -> list[str]:
    request = PredictionRequest("ab", ArrayInputs({"input": ROWS}))
    return [run(container.predictions.predict(ACME, request)).answer.variant for _ in range(n)]


def test_before_snapshot_loads_every_version_the_preloaded_deployments_answer_with(
    process: Container,
) -> None:
    prepared: list[str] = []
    snapstart.state.prepare.append(lambda: prepared.append("routes"))
    warmed = snapstart.before_snapshot()
    assert prepared == ["routes"]  # a handler's own lazy parts, built before the snapshot
    assert warmed.loaded == ["acme/iris:1", "acme/iris:2", "acme/diabetes:1"]
    assert warmed.imported == ["numpy", "onnxruntime"] and not warmed.failed
    assert warmed.ran == warmed.loaded  # each session answered zeros once
    cache = process.runtimes["onnx"].cache
    assert len(cache) == 3 and cache.bytes_used == warmed.loaded_bytes
    assert snapstart.state.ms["before_snapshot"] > 0
    # Answering needs no load: every version was loaded before the snapshot.
    _variants(process, 4)
    assert cache.misses == 3


def test_preload_stops_at_its_byte_bound_and_reports_bad_entries(
    process: Container, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sluice.inference.warmup import preload

    sizes = {v.version: v.size_bytes for v in process.registry.list_versions("acme", "iris")}
    bound = sizes[1] + sizes[2] - 1  # v1 fits, v2 would pass the bound
    warmed = run(preload(process.predictions, ["acme/ab", "acme/nope"], max_bytes=bound))
    assert warmed.loaded == ["acme/iris:1"]
    assert warmed.skipped == [f"acme/iris:2 ({sizes[2]} bytes over the preload bound)"]
    assert len(warmed.failed) == 1 and warmed.failed[0].startswith("acme/nope: ")
    with pytest.raises(ValueError, match="tenant/deployment, not 'ab'"):
        run(preload(process.predictions, ["ab"], max_bytes=bound))


def test_restored_containers_draw_their_own_split_choices(process: Container) -> None:
    snapstart.before_snapshot()
    # The snapshot: every pseudo-random state as Lambda would freeze it.
    frozen = random.getstate(), np.random.get_state()

    def restore(*, hooks: bool) -> tuple[list[str], np.ndarray]:
        random.setstate(frozen[0])
        np.random.set_state(frozen[1])
        container = snapstart.after_restore() if hooks else snapstart.current()
        return _variants(container), np.random.random(4)

    # Without the after-restore hook, two containers would repeat each other's draws (NumPy's
    # global generator shows it: the module's, which splits draw from, is also drawn from by any
    # other thread of this test process, e.g. a retry's jitter, so its repeats are not asserted)...
    plain = [restore(hooks=False) for _ in range(2)]
    assert (plain[0][1] == plain[1][1]).all()
    # ...with it, each draws its own (48 fair coin flips agree with odds 2**-48).
    first, second = restore(hooks=True), restore(hooks=True)
    assert first[0] != second[0] and not (first[1] == second[1]).all()
    assert set(first[0]) == {"a", "b"}
    assert snapstart.state.restores == 2


def test_restore_rebuilds_clients_and_rereads_the_deployment_graph(process: Container) -> None:
    snapstart.before_snapshot()
    old_clients = clients.default_clients("us-east-1")
    old_cache = process.runtimes["onnx"].cache
    # Deployed after the snapshot was taken: `ab` now sends everything to iris v2.
    process.deployments.update(
        ACME, "ab", {"kind": "single", "model": "iris", "version": 2}
    )
    seen: list[Container] = []
    snapstart.state.on_restore.append(seen.append)

    restored = snapstart.after_restore()

    assert restored is not process and seen == [restored]
    assert snapstart.current() is restored and get_container() is restored
    assert restored.registry is not process.registry and restored.store is not process.store
    # Read again through the new registry: the new policy is in the new cache already.
    assert restored.predictions._deployments.get(("acme", "ab"))[0].revision == 2
    assert clients.default_clients("us-east-1") is not old_clients
    # The loaded sessions came along (no connection in them), in a new cache.
    cache = restored.runtimes["onnx"].cache
    assert cache is not old_cache and len(cache) == 3
    assert {_variants(restored, 1)[0]} == {None}  # a single now: no variant, v2 answers
    answer = run(
        restored.predictions.predict(ACME, PredictionRequest("ab", ArrayInputs({"input": ROWS})))
    )
    assert answer.resolved.version.version == 2
    assert cache.misses == 0 and "after_restore" in snapstart.state.ms


def test_install_registers_nothing_outside_lambda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    assert snapstart.install() is False


def test_install_registers_both_hooks_with_the_runtimes_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hooks = pytest.importorskip("snapshot_restore_py")
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "sluice-api")
    monkeypatch.setattr(hooks, "_before_snapshot_registry", [])
    monkeypatch.setattr(hooks, "_after_restore_registry", [])
    monkeypatch.delattr(snapstart.install, "_registered", raising=False)
    assert snapstart.install() is True
    assert hooks._before_snapshot_registry[0][1] == (snapstart.before_snapshot,)
    assert hooks._after_restore_registry[0][1] == (snapstart.after_restore,)
    assert snapstart.install() is True and len(hooks._after_restore_registry) == 1


def test_the_api_handler_builds_its_routes_before_the_snapshot() -> None:
    from sluice.api import predict
    from sluice.handlers import api

    predict.hot_routes.cache_clear()
    api.app._routed = False
    api.app.prepare()
    assert api.app._routed and predict.hot_routes.cache_info().currsize == 1
