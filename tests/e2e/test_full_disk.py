"""`sluice serve` on a disk that fills up: a real, tiny filesystem (tmpfs, mounted in a user
and mount namespace of its own, where the system allows one). With one worker and no traffic
before the disk filled, the first prediction afterwards is answered and the server lives on
(it used to die of SIGBUS writing its metrics); writes are 503 `storage_full`, reads go on;
at SIGTERM the counts it cannot write are reported dropped, and it exits 0."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

from tests.conftest import MODELS, REPO
from tests.e2e.conftest import free_port, sigterm_after, wait_healthy
from tests.support import http

if TYPE_CHECKING:
    from pathlib import Path

SETOSA = {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}
NO_MOUNT = 77

# Run inside the namespace: mount the disk, serve from it, fill it when told, pass SIGTERM on.
DRIVER = r"""
import os, shutil, signal, subprocess, sys, time
disk, outside, port = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", disk]).returncode == 0
except OSError:  # no mount(8)
    mounted = False
if not mounted:
    sys.exit(77)
home = os.path.join(disk, "home")
serve = subprocess.Popen(
    [sys.executable, "-m", "sluice.cli", "serve", "--demo", "--workers", "1", "--port", port],
    env={**os.environ, "SLUICE_HOME": home},
)
signal.signal(signal.SIGTERM, lambda *_: serve.send_signal(signal.SIGTERM))
while not os.path.exists(os.path.join(outside, "fill")) and serve.poll() is None:
    time.sleep(0.1)
shutil.copy(os.path.join(home, "admin-key"), os.path.join(outside, "admin-key"))
with open(os.path.join(disk, "ballast"), "wb", buffering=0) as ballast:
    try:
        while True:
            ballast.write(b"\0" * 65536)
    except OSError:
        pass
open(os.path.join(outside, "full"), "w").close()
sys.exit(serve.wait())
"""


def _namespaces() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    return subprocess.run([unshare, "--user", "--map-root-user", "--mount", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _namespaces(), reason="no user and mount namespaces here to mount a small filesystem in")
def test_a_server_whose_disk_fills_up_answers_and_says_so(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "functions"), os.environ.get("PYTHONPATH", "")])}
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["unshare", "--user", "--map-root-user", "--mount", sys.executable, "-c", DRIVER, str(disk), str(tmp_path), str(port)],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    with sigterm_after(proc, log):
        wait_healthy(url, proc, log, exited=NO_MOUNT)  # NO_MOUNT: a small filesystem cannot be mounted here
        (tmp_path / "fill").touch()
        while not (tmp_path / "full").exists():
            assert proc.poll() is None, log.read_text()
            time.sleep(0.1)
        headers = {"Authorization": f"Bearer {(tmp_path / 'admin-key').read_text().strip()}"}

        r = http("POST", f"{url}/api/v1/predictions", json={"deployment": "iris", "features": SETOSA}, headers=headers, timeout=30)
        assert r.status_code == 200, r.text
        r = http("PUT", f"{url}/api/v1/deployments/iris", json={"model": "iris", "version": 1}, headers=headers, timeout=30)
        assert r.status_code == 503, r.text
        assert (r.json()["code"], r.json()["details"]) == ("storage_full", {"storage": "registry"})
        r = http("POST", 
            f"{url}/api/v1/models/forest/versions", content=(MODELS / "iris_forest.onnx").read_bytes(),
            headers={**headers, "content-type": "application/octet-stream"}, timeout=30,
        )  # fmt: skip
        assert r.status_code == 503, r.text
        assert (r.json()["code"], r.json()["details"]) == ("storage_full", {"storage": "artifact store"})
        r = http("GET", f"{url}/api/v1/deployments/iris/stats", headers=headers, timeout=30)
        assert r.status_code == 200, r.text
        r = http("POST", f"{url}/api/v1/predictions", json={"deployment": "iris", "features": SETOSA}, headers=headers, timeout=30)
        assert r.status_code == 200, r.text
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    (dropped,) = [line for line in lines if line.get("message") == "statistics dropped"]
    assert dropped["requests"] == 2  # the two predictions, which the full disk could not record
