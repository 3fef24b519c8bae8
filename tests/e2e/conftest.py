"""`sluice serve` as a real process, for the end-to-end tier."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sluice(home: Path, env: dict[str, str], argv: list[str], *, log: Path, port: int | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """`sluice ARGV --port PORT` (ARGV names `serve` and what goes before and after it), its
    output to `log`, once healthy; the caller stops it. PORT: a free one by default."""
    port = port or free_port()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sluice.cli", *argv, "--port", str(port)],
            env={**env, "SLUICE_HOME": str(home)}, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    deadline = time.monotonic() + 90
    while True:
        assert proc.poll() is None, f"sluice serve exited: {log.read_text()[-3000:]}"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc, port
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "sluice serve did not become healthy in 90 s"
        time.sleep(0.2)


@contextlib.contextmanager
def running_sluice(home: Path, env: dict[str, str], *args: str, **popen: Any) -> Iterator[tuple[int, str]]:
    """`sluice serve ARGS` on a free port, healthy; yields (port, the local admin key). Its
    output is piped unless `popen` says where (`stdout=` a file, to read its log)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sluice.cli", "serve", "--port", str(port), *args],
        env={**env, "SLUICE_HOME": str(home)},
        **{"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True, **popen},
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"sluice serve exited: {proc.stdout.read() if proc.stdout else ''}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("sluice serve did not become healthy in 60 s")
            time.sleep(0.2)
        yield port, (home / "admin-key").read_text().strip()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
