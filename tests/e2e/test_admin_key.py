"""The local admin key `sluice serve` makes at first start: shown once on a terminal, never in
output that something captures (a pipe, a log file, a service manager's journal), never by a
logger, even at DEBUG; always saved where the output says."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from tests.e2e.conftest import free_port, wait_healthy
from tests.support import http

if TYPE_CHECKING:
    from pathlib import Path


def _exercise(port: int, key: str) -> None:
    """Requests that pass, fail authentication and fail validation: what a log might tell."""
    base = f"http://127.0.0.1:{port}"
    assert http("GET", f"{base}/api/v1/deployments", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    assert http("GET", f"{base}/api/v1/deployments", headers={"Authorization": f"Bearer {key}x"}).status_code == 401
    bad = http("POST", f"{base}/api/v1/predictions", json={"deployment": "iris"}, headers={"x-api-key": key})
    assert bad.status_code == 400


def test_output_that_is_not_a_terminal_says_where_the_key_is_and_never_shows_it(tmp_path: Path) -> None:
    """`sluice serve > serve.log 2>&1`, logging at DEBUG."""
    home, port, log = tmp_path / "home", free_port(), tmp_path / "serve.log"
    command = [sys.executable, "-m", "sluice.cli", "serve", "--demo", "--workers", "1", "--port", str(port)]
    env = {**os.environ, "SLUICE_HOME": str(home), "SLUICE_LOG_LEVEL": "DEBUG"}
    with log.open("wb") as out:
        proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_healthy(port, proc)
        key = (home / "admin-key").read_text().strip()
        _exercise(port, key)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    output = log.read_text(errors="replace")
    assert key and key not in output, output
    assert key.split("_", 2)[2] not in output  # nor its secret part alone (sk_<id>_<secret>)
    assert f"saved to {home / 'admin-key'}" in output and "shown only on a terminal" in output


def _wait_healthy(port: int, proc: subprocess.Popen[bytes]) -> None:
    wait_healthy(f"http://127.0.0.1:{port}", proc, within_s=60)


def test_on_a_terminal_the_key_is_shown_once(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    command = [sys.executable, "-m", "sluice.cli", "serve", "--workers", "1", "--port", str(port)]
    env = {**os.environ, "SLUICE_HOME": str(home)}
    for start in ("first", "second"):
        controller, terminal = pty.openpty()
        proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal)
        os.close(terminal)
        try:
            shown = _read_until(controller, b"Serving on")
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            with contextlib.suppress(OSError):
                os.close(controller)
        key = (home / "admin-key").read_text().strip()
        if start == "first":
            assert f"    {key}" in shown and "shown this once" in shown
        else:  # it exists already: where it is, not what it is
            assert key not in shown and f"Local admin key: {home / 'admin-key'}" in shown


def _read_until(fd: int, marker: bytes, timeout_s: float = 60.0) -> str:
    got = b""
    deadline = time.monotonic() + timeout_s
    while marker not in got and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the process closed the terminal
                break
            if not chunk:
                break
            got += chunk
    assert marker in got, got.decode(errors="replace")
    return got.decode(errors="replace")
