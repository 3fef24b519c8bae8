"""`sluice serve`: the API on this machine, with a local admin key, the batch inbox and the
batch schedules that are due.

On SIGTERM or SIGINT it drains (`sluice.cli.drain`): it stops listening at once, so a new
connection is refused; the background work stops starting anything (the inbox, the schedules,
the rollout controller, new local batch jobs and chunks); the requests already accepted are
answered (within `SLUICE_DRAIN_TIMEOUT_S`); the local batch jobs finish the chunks they are
scoring (within `SLUICE_BATCH_STOP_GRACE_S`) and are recorded FAILED, saying the service
stopped; every process writes out its statistics, captured requests and shadow comparisons;
and the command exits 0 within `drain.stop_bound_s`. A second signal cuts the grace short.
Jobs started through the API in a worker process are stopped the same way as that worker
shuts down (`served_app`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol

from sluice import owner_only
from sluice.cli import pieces
from sluice.cli.common import local_home, operator, port, worker_processes

if TYPE_CHECKING:
    import argparse
    import socket
    from collections.abc import AsyncIterator
    from pathlib import Path

    from sluice.batch.orchestrators import LocalOrchestrator, Orchestrator
    from sluice.cli.drain import CutOff, Stopping
    from sluice.settings import Settings
    from sluice.wiring import Container

ADMIN_KEY_FILE = "admin-key"
METRICS_DIR = "metrics"


def _whose(keys: Any, key_file: Path, tenant: str) -> str:
    """What the saved admin key is, where it is not an admin key of the tenant served: the file
    outlives registries and `--tenant` changes, and the operator would sign in as another
    tenant, or not at all."""
    from sluice.domain.errors import SluiceError

    try:  # utf-8-sig: an editor on Windows may have saved it with a byte-order mark
        principal = keys.authenticate(key_file.read_text(encoding="utf-8-sig").strip())
    except (OSError, ValueError, SluiceError):  # ValueError: bytes that are not UTF-8
        return f" (it no longer works: revoked, or made for another registry; make one with `sluice --tenant {tenant} keys create --scopes admin,predict`)"
    if principal.tenant != tenant or "admin" not in principal.scopes:
        return f" (it acts for tenant '{principal.tenant}', not '{tenant}': make one with `sluice --tenant {tenant} keys create --scopes admin,predict`)"
    return ""


def cmd_serve(args: argparse.Namespace) -> int:
    from sluice.settings import get_settings

    settings = get_settings()
    home = owner_only.folder(local_home())
    _fresh_metrics_folder(home)
    keys = pieces.keys()
    principal = operator(args)
    key_file = home / ADMIN_KEY_FILE
    if not key_file.exists():
        _, plain = keys.create(args.tenant, ["admin", "predict"], name="local admin")
        # Created owner-only: never readable by others, not even for a moment before a chmod.
        with os.fdopen(os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as fh:
            fh.write(plain + "\n")
        _show_new_key(args.tenant, plain, key_file)
    else:
        print(f"Local admin key: {key_file}{_whose(keys, key_file, args.tenant)}", flush=True)
    if args.demo:
        from sluice.demo import install_demo

        added = install_demo(pieces.container(), principal)  # it pushes models and creates deployments
        names = ", ".join(d.name for d in pieces.deployments().list(principal))
        print(f"Demo deployments: {names}" + (f" (added {', '.join(added)})" if added else ""), flush=True)
    batch = pieces.batch()
    stopped = batch.liveness.reap_stopped()  # jobs an earlier process of this home left running
    if stopped:
        print(f"Batch jobs whose process had stopped, now FAILED: {', '.join(j.id for j in stopped)}", flush=True)
    from sluice.batch.inbox import InboxWatcher
    from sluice.cli.drain import Stopping, stop_bound_s

    background = Background(batch.orchestrator, grace_s=settings.serve.batch_stop_grace_s)
    stopping = Stopping(background, stop_bound_s(settings.serve))
    inbox = settings.batch_inbox_path
    background.start(InboxWatcher(batch, inbox, args.tenant, interval_s=settings.serve.batch_inbox_poll_s))
    print(f"Batch inbox: {inbox}/<deployment>/<file> (results under {batch.paths.root}outbox/)", flush=True)
    from sluice.services.rollout_watcher import RolloutWatcher

    background.start(RolloutWatcher(_RunningRollouts()))  # type: ignore[arg-type]  # progressive rollouts move on this thread
    from sluice.services.monitor_results import MonitorResults, WindowCloser

    assert batch.files is not None
    background.start(WindowCloser(MonitorResults(pieces.monitor(), batch.files, batch.paths.root)))  # monitoring history
    if settings.follows.follow_poll_s > 0:
        from sluice.convert.follow import FollowPoller

        background.start(FollowPoller(_Followed(), interval_s=settings.follows.follow_poll_s))  # type: ignore[arg-type]
    if not settings.jobs.schedule_group:  # else EventBridge Scheduler keeps the time
        from sluice.batch.schedules import LocalScheduler

        background.start(LocalScheduler(pieces.schedules(), interval_s=settings.serve.batch_schedule_poll_s))
        print(f"Batch schedules: due runs start here (looked for every {settings.serve.batch_schedule_poll_s:g}s)", flush=True)
    workers = args.workers or max(1, os.cpu_count() or 1)
    grpc_port = args.grpc_port if args.grpc_port is not None else settings.serve.grpc_port
    grpc_hold = _claim_grpc(args.host, grpc_port, args.port)  # every worker serves it (sluice.cli.grpc_workers)
    try:
        _run_http(args, settings, workers, stopping)
    finally:
        stopped = stopping.finish()
        if stopped:
            print(f"Stopped {len(stopped)} local batch job(s): {', '.join(stopped)}", flush=True)
        if grpc_hold is not None:
            grpc_hold.close()
        pieces.settle()  # what this process recorded: one worker's requests, the background's
    return 0


def _show_new_key(tenant: str, plain: str, key_file: Path) -> None:
    """The key on a terminal, once; anywhere else (a pipe, a file, a service manager's journal)
    only where it is saved: what captures a server's output keeps it. Never through a logger."""
    if sys.stdout.isatty():
        print(f"Local admin key for tenant '{tenant}' (saved to {key_file}, shown this once):\n\n    {plain}\n", flush=True)
    else:
        print(f"Local admin key for tenant '{tenant}': saved to {key_file}, readable only by you (shown only on a terminal)", flush=True)


# The background's looks at rollouts and follow bindings build their services (which reach the
# deployments' service: the policy schema, NumPy, the prediction path) at the first rollout under
# way or binding made: `sluice serve`'s supervisor of several workers, which serves no request,
# otherwise never builds them.
class _RunningRollouts:
    """`RolloutService.run_once`, for `RolloutWatcher`."""

    def run_once(self) -> dict[tuple[str, str], str]:
        if not pieces.registry().running_rollouts():
            return {}
        return pieces.rollouts().run_once()


class _Followed:
    """`Follower.poll_once`, for `FollowPoller`."""

    def poll_once(self) -> dict[str, str]:
        if not pieces.registry().followers():
            return {}
        return pieces.follower().poll_once()


class Looking(Protocol):
    """A background thread of `sluice serve` (the inbox, the schedules, the rollouts)."""

    def start(self) -> object: ...
    def stop_starting(self) -> None: ...
    def stop(self) -> None: ...


class Background:
    """What `sluice serve` runs beside the HTTP workers, and how it stops: first it starts
    nothing more (`stop_starting`, which sets events: called from the drain's own thread, never
    from a signal handler, since an event's lock is no handler's to take), then
    the looks under way end and the local jobs finish their chunks in flight (`stop`)."""

    def __init__(self, orchestrator: Orchestrator | None, *, grace_s: float) -> None:
        self.jobs = _local_jobs(orchestrator)
        self.grace_s = grace_s
        self.threads: list[Looking] = []

    def start(self, poller: Looking) -> None:
        poller.start()
        self.threads.append(poller)

    def stop_starting(self) -> None:
        for poller in self.threads:
            poller.stop_starting()
        if self.jobs is not None:
            self.jobs.stop_starting()

    def hurry(self) -> None:
        """A second signal: the jobs are recorded without waiting for their chunks."""
        self.stop_starting()
        if self.jobs is not None:
            self.jobs.hurry()

    def stop(self) -> list[str]:
        """Stop everything; returns the ids of the local jobs recorded FAILED as it stopped."""
        self.stop_starting()
        for poller in self.threads:
            poller.stop()
        return self.jobs.shutdown(self.grace_s) if self.jobs is not None else []


def served_alone() -> CutOff:
    """The app as `sluice serve --workers 1` runs it (its jobs are the background's)."""
    import asyncio

    from sluice.api.app import create_app
    from sluice.cli.drain import CutOff
    from sluice.cli.malloc import give_back_after_bursts

    give_back_after_bursts()  # a worker's memory comes back after a burst
    app = create_app()
    app.prepare()  # its routes built before it takes a request (see served_app)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app_: Any) -> AsyncIterator[Any]:
        from sluice.cli.grpc_workers import serving

        async with serving(await asyncio.to_thread(_ready, app)), inner(app_) as state:
            yield state

    app.router.lifespan_context = lifespan
    return CutOff(app)


def served_app() -> CutOff:
    """The app as `sluice serve`'s HTTP worker processes run it: as a worker shuts down, the
    batch jobs it started through the API are stopped as `Background.stop` stops the rest, and
    what it recorded is written out."""
    import asyncio

    from sluice.api.app import create_app
    from sluice.cli.drain import CutOff
    from sluice.cli.malloc import give_back_after_bursts

    give_back_after_bursts()  # a worker's memory comes back after a burst
    app = create_app()
    # Built now, before the worker takes a request: else the first request that is not a
    # prediction (a health check, say) builds forty routes on the event loop, under load too.
    app.prepare()
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app_: Any) -> AsyncIterator[Any]:
        from sluice.cli.grpc_workers import serving

        built = await asyncio.to_thread(_ready, app)
        orphaned = asyncio.create_task(_end_with_parent())
        try:
            async with serving(built), inner(app_) as state:  # its gRPC server beside its HTTP
                yield state
        finally:
            orphaned.cancel()
        container: Container = app.state.container
        jobs = _local_jobs(container.orchestrator)
        if jobs is not None:
            await asyncio.to_thread(jobs.shutdown, container.settings.serve.batch_stop_grace_s)
        await asyncio.to_thread(container.settle)  # its statistics, captured requests, shadow jobs

    app.router.lifespan_context = lifespan
    return CutOff(app)


def _ready(app: Any) -> Container:
    """A worker's services (and their imports: ONNX Runtime, the registry) built before it
    takes a request, and the Triton client's imports where a version runs on Triton: else the
    first requests it takes wait for them (half a second on a small machine, on its event
    loop), a burst's share of them behind. A worker of a home with no such version does not
    import it (a version registered later: its first call does)."""
    from sluice.api.deps import container_of
    from sluice.startup import settled

    container = container_of(app)
    if container.registry.uses_runtime("triton"):
        from sluice.runtimes.triton_http import preload

        preload()
    settled()  # what start-up made, out of the collector's passes from now on
    return container


async def _end_with_parent() -> None:
    """A worker whose `sluice serve` was killed (SIGKILL leaves it no chance to stop them)
    drains and exits as if told to stop, rather than keep the port from a restart. Its parent
    is the process that spawned it, known from its start: one killed while the worker still
    started up is gone too (`os.getppid()` asked then names whatever adopted the worker)."""
    import asyncio
    import multiprocessing

    spawner = multiprocessing.parent_process()
    parent = spawner.pid if spawner is not None and spawner.pid is not None else os.getppid()
    while os.getppid() == parent:
        await asyncio.sleep(1.0)
    signal.raise_signal(signal.SIGTERM)  # uvicorn's handler: the worker's drain


def _local_jobs(orchestrator: Orchestrator | None) -> LocalOrchestrator | None:
    """The orchestrator whose jobs run in this process, if it is one."""
    from sluice.batch.orchestrators import LocalOrchestrator

    return orchestrator if isinstance(orchestrator, LocalOrchestrator) else None


def _claim_grpc(host: str, port: int, http_port: int) -> socket.socket | None:
    """The gRPC port, checked free and held for the workers (none when port is 0)."""
    if not port:
        return None
    from sluice.cli.grpc_workers import claim

    grpc_hold = claim(host, port, http_port=http_port)
    from sluice.grpc_service import address

    print(f"gRPC (Open Inference Protocol) on {address(host, port)}, in every worker", flush=True)
    return grpc_hold


def _run_http(args: argparse.Namespace, settings: Settings, workers: int, stopping: Stopping) -> None:
    """uvicorn on a socket bound here, so that a signal stops it listening at once
    (`sluice.cli.drain`). Several workers are uvicorn's supervisor's, with the drain's signal
    handlers. One worker is served on a thread, so that the signals come here first: the
    background stops starting work at once, then uvicorn is told to exit as its own handlers
    would."""
    import uvicorn

    from sluice.cli.drain import Supervisor

    options: dict[str, Any] = {
        "factory": True,
        "host": args.host,
        "port": args.port,
        "workers": workers,
        "http": "sluice.cli.protocol:GuardedHttpToolsProtocol",  # header timeout and size bound, imported where it serves
        "timeout_keep_alive": settings.serve.keepalive_timeout_s,
        "timeout_graceful_shutdown": settings.serve.drain_timeout_s,  # then what is left is cancelled
        # A WebSocket message over the limit is answered with an error message, not cut off:
        # the server's own frame limit stays above it.
        "ws_max_size": max(16 * 1024 * 1024, 2 * settings.websocket.websocket_max_message_bytes),
        "access_log": False,
        "log_level": "warning",
    }
    # One worker's jobs are the background's; several workers stop their own (`served_app`).
    app = "sluice.cli.serve:served_app" if workers > 1 else "sluice.cli.serve:served_alone"
    config = uvicorn.Config(app, **options)
    sock = config.bind_socket()  # a port in use: uvicorn says so and exits
    print(f"Serving on http://{args.host}:{args.port} (docs: /docs), {workers} worker(s)", flush=True)  # once it is ours
    if workers > 1:
        Supervisor(config, [sock], stopping).run()
        return
    class Server(uvicorn.Server):
        async def shutdown(self, sockets: list[Any] | None = None) -> None:
            await super().shutdown(sockets)
            if self.force_exit:  # hurried (a second signal): the app's lifespan still ends, not cancelled with a traceback
                await self.lifespan.shutdown()

    server = Server(config)
    stopping.sockets.append(sock)

    def on_signal(signum: int, frame: object) -> None:
        if stopping.on_signal(signum):
            server.should_exit = True
        else:
            server.force_exit = True

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    http = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="sluice-http", daemon=True)
    http.start()
    while http.is_alive() and stopping.left_s() > 0:
        http.join(0.5)  # signals are handled between these waits
    if http.is_alive():
        print("The HTTP server was still draining at the stop's bound", flush=True)
    elif not server.started:
        raise SystemExit(f"the HTTP server did not start on {args.host}:{args.port}")


def _fresh_metrics_folder(home: Path) -> None:
    """Prometheus' multiprocess mode: each worker writes its series to files in this folder and
    `/metrics` sums them. Set before any process imports the client (workers inherit it) and
    emptied first: series of an earlier run are not this run's."""
    import importlib.util
    import shutil

    if importlib.util.find_spec("prometheus_client") is None:
        print("Metrics off: /metrics needs prometheus-client (pip install 'sluice[serve]')", flush=True)
        return
    folder = home / METRICS_DIR
    shutil.rmtree(folder, ignore_errors=True)
    owner_only.folder(folder, exist_ok=False)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)


def add_serve_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    serve = sub.add_parser("serve", help="run the API on this machine")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=port, default=8000)
    serve.add_argument("--workers", type=worker_processes, default=0, help="uvicorn worker processes (default: one per core)")
    serve.add_argument(
        "--grpc-port", type=port, default=None, help="also serve the Open Inference Protocol over gRPC on this port (default: SLUICE_GRPC_PORT, 0: off)"
    )
    serve.add_argument("--demo", action="store_true", help="register the demo models and deployments")
    serve.set_defaults(func=cmd_serve)
