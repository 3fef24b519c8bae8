"""`sluice serve` as a real process, for the end-to-end tier."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.support import free_port, http

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


def wait_healthy(url: str, proc: subprocess.Popen[Any], log: Path | None = None, *, exited: int | None = None, within_s: float = 90) -> None:
    """Until `sluice serve` at `url` answers /healthz (or fail: it exited, saying `log`'s
    text, or `within_s` passed). `exited`: an exit code that skips the test instead."""
    deadline = time.monotonic() + within_s
    while True:
        code = proc.poll()
        if exited is not None and code == exited:
            pytest.skip(f"sluice serve exited {code}: {log.read_text(errors='replace') if log else ''}")
        assert code is None, log.read_text(errors="replace") if log else f"sluice serve exited {code}"
        with contextlib.suppress(httpx.TransportError):
            if http("GET", f"{url}/healthz", timeout=1).status_code == 200:  # the run's TLS context: no certifi load a poll
                return
        assert time.monotonic() < deadline, f"sluice serve did not become healthy in {within_s:g} s"
        time.sleep(0.2)


def start_sluice(home: Path, env: dict[str, str], argv: list[str], *, log: Path, port: int | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """`sluice ARGV --port PORT` (ARGV names `serve` and what goes before and after it), its
    output to `log`, once healthy; the caller stops it. PORT: a free one by default."""
    port = port or free_port()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sluice.cli", *argv, "--port", str(port)],
            env={**env, "SLUICE_HOME": str(home)}, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    wait_healthy(f"http://127.0.0.1:{port}", proc, log)
    return proc, port


@contextlib.contextmanager
def sigterm_after(proc: subprocess.Popen[Any], log: Path) -> Iterator[None]:
    """The block, then SIGTERM: `sluice serve` exits 0 (else the test fails showing `log`).
    Killed instead if the block fails."""
    try:
        yield
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def grpc_client(port: int, *, within_s: float = 30) -> Any:
    """Triton's gRPC client to `sluice serve`'s gRPC port on this machine, once the server
    says it is live (its workers start their gRPC servers after their HTTP)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    deadline = time.monotonic() + within_s
    while True:
        with contextlib.suppress(InferenceServerException):
            if client.is_server_live():
                return client
        assert time.monotonic() < deadline, f"sluice serve's gRPC port answered nothing live in {within_s:g} s"
        time.sleep(0.2)


@contextlib.contextmanager
def running_sluice(home: Path, env: dict[str, str], *args: str, started: list[Any] | None = None, **popen: Any) -> Iterator[tuple[int, str]]:
    """`sluice serve ARGS` on a free port, healthy; yields (port, the local admin key). Its
    output is piped unless `popen` says where (`stdout=` a file, to read its log); its process
    is appended to `started` where given (with `--workers 1`, the process that serves)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sluice.cli", "serve", "--port", str(port), *args],
        env={**env, "SLUICE_HOME": str(home)},
        **{"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True, **popen},
    )
    if started is not None:
        started.append(proc)
    try:
        try:
            wait_healthy(f"http://127.0.0.1:{port}", proc, within_s=60)
        except AssertionError:
            pytest.fail(f"sluice serve did not become healthy: {proc.stdout.read() if proc.stdout and proc.poll() is not None else ''}")
        yield port, (home / "admin-key").read_text().strip()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def demo_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str, Path]]:
    """One `sluice serve --demo --workers 2` for the tests that only talk to it (the local
    service, WebSocket, optimize, metrics and Triton extensions stories): yields (port, the
    admin key, its home). Its tests share a pytest-xdist group (tests/conftest.py), so it
    starts once; each leaves the demo's deployments as it found them (or works in a tenant of
    its own)."""
    import os

    home = tmp_path_factory.mktemp("demo-serve")
    stale = home / "metrics"
    stale.mkdir()
    (stale / "counter_1.db").write_bytes(b"an earlier run's series")  # for the metrics story: cleaned at start
    with running_sluice(home, dict(os.environ), "--demo", "--workers", "2") as (port, key):
        yield port, key, home
