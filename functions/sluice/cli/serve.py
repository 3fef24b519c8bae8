"""`sluice serve`: the API on this machine, with a local admin key, the batch inbox and the
batch schedules that are due."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sluice import owner_only
from sluice.cli.common import count, get_container, local_home, operator

if TYPE_CHECKING:
    import argparse
    from multiprocessing.process import BaseProcess
    from pathlib import Path

    from sluice.settings import Settings

ADMIN_KEY_FILE = "admin-key"
METRICS_DIR = "metrics"


def cmd_serve(args: argparse.Namespace) -> int:
    from sluice.settings import get_settings

    settings = get_settings()
    home = owner_only.folder(local_home())
    _fresh_metrics_folder(home)
    container = get_container()
    principal = operator(args)
    key_file = home / ADMIN_KEY_FILE
    if not key_file.exists():
        _, plain = container.keys.create(args.tenant, ["admin", "predict"], name="local admin")
        # Created owner-only: never readable by others, not even for a moment before a chmod.
        with os.fdopen(os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as fh:
            fh.write(plain + "\n")
        print(f"Local admin key for tenant '{args.tenant}' (saved to {key_file}):\n\n    {plain}\n", flush=True)
    else:
        print(f"Local admin key: {key_file}", flush=True)
    if args.demo:
        from sluice.demo import install_demo

        added = install_demo(container, principal)
        names = ", ".join(d.name for d in container.deployments.list(principal))
        print(f"Demo deployments: {names}" + (f" (added {', '.join(added)})" if added else ""), flush=True)
    stopped = container.batch.liveness.reap_stopped()  # jobs an earlier process of this home left running
    if stopped:
        print(f"Batch jobs whose process had stopped, now FAILED: {', '.join(j.id for j in stopped)}", flush=True)
    from sluice.batch.inbox import InboxWatcher

    inbox = settings.batch_inbox_path
    InboxWatcher(container.batch, inbox, args.tenant, interval_s=settings.batch_inbox_poll_s).start()
    print(f"Batch inbox: {inbox}/<deployment>/<file> (results under {container.batch.paths.root}outbox/)", flush=True)
    from sluice.services.rollouts import RolloutWatcher

    RolloutWatcher(container.rollouts).start()  # progressive rollouts move on this thread
    if not settings.schedule_group:  # else EventBridge Scheduler keeps the time
        from sluice.batch.schedules import LocalScheduler

        LocalScheduler(container.schedules, interval_s=settings.batch_schedule_poll_s).start()
        print(f"Batch schedules: due runs start here (looked for every {settings.batch_schedule_poll_s:g}s)", flush=True)
    workers = args.workers or max(1, os.cpu_count() or 1)
    print(f"Serving on http://{args.host}:{args.port} (docs: /docs), {workers} worker(s)", flush=True)
    from sluice.cli.protocol import GuardedHttpToolsProtocol

    grpc = _start_grpc(args.host, args.grpc_port if args.grpc_port is not None else settings.grpc_port)
    try:
        _run_http(args, settings, workers, GuardedHttpToolsProtocol)
    finally:
        if grpc is not None:
            grpc.terminate()
            grpc.join(5)
    return 0


def _start_grpc(host: str, port: int) -> BaseProcess | None:
    """The gRPC server, in a process of its own beside uvicorn's workers (none when port is 0)."""
    if not port:
        return None
    if port > 65535:
        raise SystemExit(f"--grpc-port {port} is not a port (1-65535)")
    from sluice.grpc_service.server import start_process

    return start_process(host, port)


def _run_http(args: argparse.Namespace, settings: Settings, workers: int, protocol: type) -> None:
    import uvicorn

    uvicorn.run(
        "sluice.api.app:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=workers,
        http=protocol,  # header timeout and size bound (workers import it by name)
        timeout_keep_alive=settings.keepalive_timeout_s,  # type: ignore[arg-type]
        # A WebSocket message over the limit is answered with an error message, not cut off:
        # the server's own frame limit stays above it.
        ws_max_size=max(16 * 1024 * 1024, 2 * settings.websocket_max_message_bytes),
        access_log=False,
        log_level="warning",
    )


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
    serve.add_argument("--port", type=count, default=8000)
    serve.add_argument("--workers", type=count, default=0, help="uvicorn worker processes (default: one per core)")
    serve.add_argument(
        "--grpc-port", type=count, default=None, help="also serve the Open Inference Protocol over gRPC on this port (default: SLUICE_GRPC_PORT, 0: off)"
    )
    serve.add_argument("--demo", action="store_true", help="register the demo models and deployments")
    serve.set_defaults(func=cmd_serve)
