"""A full or read-only registry or store is named: 503 with `storage_full` or
`storage_read_only` (never 500 internal_error), reads and predictions go on, and the CLI says
it in one line. The registry is real SQLite refusing by its own limits; the folder store is
a real file size limit (RLIMIT_FSIZE) on a `sluice` process."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from tests.conftest import MODELS, REPO
from tests.integration.conftest import auth, run_cli
from tests.integration.registry_limits import RegistryLimits

if TYPE_CHECKING:
    from pathlib import Path

    from fastapi.testclient import TestClient

    from sluice.wiring import Container

SETOSA = {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}


def _predict(client: TestClient, key: str) -> None:
    r = client.post("/api/v1/predictions", json={"deployment": "iris", "features": SETOSA}, headers=auth(key))
    assert r.status_code == 200, r.text


def test_a_registry_that_fills_up_is_a_503_saying_so_and_reads_and_predictions_go_on(
    demo: Container, client: TestClient, keys: dict[str, str]
) -> None:
    limits = RegistryLimits(demo.registry)  # type: ignore[arg-type]
    _predict(client, keys["acme"])  # before the disk filled
    limits.full()
    for _ in range(1000):  # every write keeps a revision: the file fills up
        r = client.put("/api/v1/deployments/iris", json={"model": "iris", "version": 1}, headers=auth(keys["acme"]))
        if r.status_code != 200:
            break
    assert r.status_code == 503, r.text
    assert r.json() == {
        "error": "the registry's disk is full (or a size or quota limit was reached): nothing was written; free space, then try again",
        "code": "storage_full",
        "details": {"storage": "registry"},
    }
    r = client.get("/api/v1/deployments/iris", headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    revision = r.json()["revision"]
    _predict(client, keys["acme"])
    assert client.get("/api/v1/deployments/iris/stats", headers=auth(keys["acme"])).status_code == 200

    limits.lift()
    r = client.put("/api/v1/deployments/iris", json={"model": "iris", "version": 1}, headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    stats = client.get("/api/v1/deployments/iris/stats", headers=auth(keys["acme"]), params={"revision": revision}).json()
    assert stats["overall"]["requests"] == 1  # the prediction made while the disk was full, counted once it had room


def test_a_read_only_registry_is_a_503_saying_so(demo: Container, client: TestClient, keys: dict[str, str]) -> None:
    limits = RegistryLimits(demo.registry)  # type: ignore[arg-type]
    limits.read_only()
    r = client.post("/api/v1/deployments", json={"name": "other", "model": "iris", "version": 1}, headers=auth(keys["acme"]))
    assert r.status_code == 503, r.text
    assert (r.json()["code"], r.json()["details"]) == ("storage_read_only", {"storage": "registry"})
    assert client.get("/api/v1/deployments", headers=auth(keys["acme"])).status_code == 200
    _predict(client, keys["acme"])


def test_the_cli_says_the_registry_is_full_in_one_line(cli_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sluice.cli import pieces

    assert run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0
    assert run_cli(capsys, "deployments", "create", "iris", "--model", "iris")[0] == 0
    limits = RegistryLimits(pieces.container().registry)  # type: ignore[arg-type]
    limits.full()
    for _ in range(1000):
        code, _, err = run_cli(capsys, "deployments", "set", "iris", "--model", "iris", "--version", "1")
        if code != 0:
            break
    assert code == 2
    assert err == "error: the registry's disk is full (or a size or quota limit was reached): nothing was written; free space, then try again\n"


def _sluice(home: Path, *args: str, file_size_limit: int | None = None) -> subprocess.CompletedProcess[str]:
    """`sluice ARGS` in a process of its own, its files limited to `file_size_limit` bytes (a
    write past it fails with EFBIG, as a write to a full disk fails with ENOSPC)."""

    def limited() -> None:
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the signal ends the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    env = {**os.environ, "SLUICE_HOME": str(home), "PYTHONPATH": str(REPO / "functions")}
    return subprocess.run(
        [sys.executable, "-m", "sluice.cli", *args], env=env, capture_output=True, text=True, timeout=120,
        preexec_fn=limited if file_size_limit is not None else None,
    )  # fmt: skip


def _large_model(floats: int) -> bytes:
    """`y = x + b`, `b` a constant of `floats` numbers: a valid model as large as wanted."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["y"])], "large",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, floats])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, floats])],
        initializer=[numpy_helper.from_array(np.ones(floats, dtype=np.float32), "b")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_the_cli_says_the_artifact_store_is_full_in_one_line(cli_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The limited push in a process of its own (the limit is a process's); the commands
    around it in this one."""
    home = cli_home
    assert run_cli(capsys, "models", "list")[0] == 0  # the registry made, before the limit
    big = tmp_path / "large.onnx"
    big.write_bytes(_large_model(64 * 1024))  # 256 KiB; the registry's own files stay below the limit
    pushed = _sluice(home, "models", "push", "large", str(big), file_size_limit=128 * 1024)
    assert pushed.returncode == 2, pushed.stderr
    assert pushed.stderr == (
        "error: the artifact store's disk is full (or a size or quota limit was reached): nothing was written; free space, then try again\n"
    )
    assert not [p for p in (home / "artifacts").rglob("*") if p.is_file()]  # nothing half-written left
    code, _, err = run_cli(capsys, "models", "push", "large", str(big))
    assert code == 0, err


# Prometheus' multiprocess files under a size limit below the first page the client maps.
METRICS = r"""
import json, os, resource, signal, sys
os.environ["PROMETHEUS_MULTIPROC_DIR"] = sys.argv[1]
from sluice.metrics import PrometheusMetrics

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
metrics = PrometheusMetrics(sys.argv[1])
fields = {"tenant": "acme", "deployment": "iris", "model": "iris", "version": 1}
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
metrics.prediction(fields, 2.0, 1, None)
metrics.flush()  # the disk cannot take it: lost, not raised
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
metrics.prediction(fields, 2.0, 1, None)
print("--- exposition ---")
print(metrics.exposition("acme").decode())
"""


def test_metrics_a_full_disk_cannot_take_are_lost_not_raised_into_the_request(tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    done = subprocess.run(
        [sys.executable, "-c", METRICS, str(tmp_path)],
        # the logger's lines on stdout, where the test reads them (a command sets stderr)
        env={**os.environ, "PYTHONPATH": str(REPO / "functions"), "SLUICE_LOG_STREAM": "stdout"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    log, _, exposition = done.stdout.partition("--- exposition ---")
    assert "metrics not written" in log
    (requests,) = [s.value for f in text_string_to_metric_families(exposition) for s in f.samples if s.name == "ml_inference_requests_total"]
    assert requests == 1  # the second, on a disk with room; the scrape reads every file
