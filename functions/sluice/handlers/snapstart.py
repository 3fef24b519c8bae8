"""Lambda SnapStart hooks of the functions that answer requests (API, shadow).

With SnapStart, Lambda runs a function's init once per published version, snapshots the
memory, and starts every later execution environment from that snapshot. So:

- before the snapshot, do the work a first request would do (`before_snapshot`): build the
  handler's lazy parts (the API's routes), import the runtimes and load the model versions of
  the deployments `SLUICE_PRELOAD` names (bounded by `SLUICE_PRELOAD_MAX_BYTES`); it then
  costs nothing at any cold start.
- after a restore (`after_restore`), undo what must not be shared between the containers made
  from one snapshot: every random source is re-seeded (otherwise each restored container
  would draw the same split choices and shadow samples, in the same order), AWS clients are
  rebuilt (credentials and connections of the snapshot may be expired or closed), and the
  deployment graph is read again (deployments may have changed since the snapshot), keeping
  the loaded ONNX sessions, which hold no connection. A version deployed after the snapshot
  loads on its first request.

`install` registers the hooks with `snapshot_restore_py`, the module Lambda's Python runtime
provides; elsewhere it does not exist and `install` does nothing. The hooks themselves are
plain functions, run by the tests on a simulated snapshot and restore.
"""

from __future__ import annotations

import gc
import random
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.inference.loop import run
from sluice.observability import get_logger
from sluice.settings import in_lambda

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.inference.warmup import Warmed
    from sluice.wiring import Container


@dataclass
class SnapState:
    """The container a handler answers with, and what the hooks did (for logs and benches)."""

    container: Container | None = None
    warmed: Warmed | None = None
    restores: int = 0
    ms: dict[str, float] = field(default_factory=dict)
    on_restore: list[Callable[[Container], None]] = field(default_factory=list)
    prepare: list[Callable[[], None]] = field(default_factory=list)


state = SnapState()


def current() -> Container:
    """The container this process answers with (rebuilt by `after_restore`)."""
    if state.container is None:
        from sluice.wiring import get_container

        state.container = get_container().serving()
    return state.container


def before_snapshot() -> Warmed:
    """Imports the runtimes and loads the preloaded deployments' versions."""
    from sluice.inference.warmup import preload

    started = time.perf_counter()
    for prepare in state.prepare:
        prepare()
    container = current()
    settings = container.settings.snapstart
    warmed = run(preload(container.predictions, settings.preload, max_bytes=settings.preload_max_bytes))
    state.warmed = warmed
    # What init built lives as long as the process: collect its garbage now and move the rest
    # out of the collector's sight, so no full collection lands on the first requests.
    gc.collect()
    gc.freeze()
    state.ms["before_snapshot"] = (time.perf_counter() - started) * 1000
    return warmed


def reseed() -> None:
    """New seeds, from the kernel, for every pseudo-random generator a request may draw from."""
    random.seed()  # the module's generator: weighted splits, shadow sampling, retry jitter
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()  # NumPy's legacy global generator, for models and user code
    # uuid4, secrets, os.urandom and each new random.Random() read the kernel: nothing to do.


def after_restore() -> Container:
    """Re-seeds, rebuilds clients and the container, and re-reads the preloaded deployments."""
    from sluice.clients import forget_default_clients
    from sluice.wiring import get_container

    started = time.perf_counter()
    reseed()
    old = state.container
    forget_default_clients()
    get_container.cache_clear()
    new = get_container().serving()  # new registry, store, mirror and clients; empty deployment caches
    if old is not None:
        kept = old.runtimes.get("onnx")
        fresh = new.runtimes.get("onnx")
        if kept is not None and fresh is not None and hasattr(fresh, "cache"):
            fresh.cache.adopt(kept.cache)
    state.container = new
    state.restores += 1
    for hook in state.on_restore:
        hook(new)
    if new.settings.snapstart.preload:
        # Reads every preloaded deployment again through the new clients, into the new
        # caches. It loads nothing: a version deployed after the snapshot loads on its first
        # request, as it would without SnapStart, and the restore stays short.
        from sluice.inference.warmup import preload

        settings = new.settings.snapstart
        try:
            run(preload(new.predictions, settings.preload, max_bytes=settings.preload_max_bytes, load=False))
        except Exception:  # best effort: a failed read leaves the caches to the first request
            get_logger().exception("re-reading the preloaded deployments after a restore failed")
    state.ms["after_restore"] = (time.perf_counter() - started) * 1000
    get_logger().info("restored from snapshot", extra={"ms": round(state.ms["after_restore"], 1)})
    return new


def install(
    *,
    prepare: Callable[[], None] | None = None,
    on_restore: Callable[[Container], None] | None = None,
) -> bool:
    """Registers the hooks where Lambda runs SnapStart; False (nothing registered) elsewhere.

    `prepare` builds what a handler would build on its first request (before the snapshot);
    `on_restore` lets a handler swap in the rebuilt container it keeps a reference to.
    """
    if prepare is not None:
        state.prepare.append(prepare)
    if on_restore is not None:
        state.on_restore.append(on_restore)
    if not in_lambda():
        return False
    try:
        from snapshot_restore_py import register_after_restore, register_before_snapshot
    except ImportError:  # a runtime without SnapStart hooks (or a local emulator)
        return False
    if getattr(install, "_registered", False):
        return True
    register_before_snapshot(_run_logged, before_snapshot)
    register_after_restore(_run_logged, after_restore)
    install._registered = True  # type: ignore[attr-defined]
    return True


def _run_logged(hook: Callable[[], Any]) -> None:
    # A failing hook fails the version's publication (before) or the restore (after): log why.
    try:
        hook()
    except Exception:
        get_logger().exception("SnapStart hook failed", extra={"hook": hook.__name__})
        raise
