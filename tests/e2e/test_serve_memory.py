"""A `sluice serve` worker serving large requests keeps the memory they need from one request
to the next (`sluice.cli.malloc`): it does not map, fault in, zero and give back a request's
megabytes for each request. Counted as the kernel counts it: the worker's minor page faults."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.e2e.conftest import free_port, grpc_client, running_sluice
from tests.models import sum_model

grpcclient = pytest.importorskip("tritonclient.grpc")

VALUES = 262_144  # 1 MiB of FP32
PAGES = VALUES * 4 // 4096  # what the request's tensor alone spans


def _minor_faults(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[7])


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the worker's page faults from /proc")
def test_a_worker_serving_1_mib_requests_does_not_fault_their_memory_in_again_for_each(tmp_path: Path) -> None:
    from sluice.cli.malloc import operator_tuned, trim
    from sluice.domain import Principal
    from sluice.settings import Settings
    from sluice.wiring import Container

    if not trim():
        pytest.skip("not glibc: its heap's rules are not set")
    if operator_tuned():
        pytest.skip("glibc's malloc thresholds are set in this environment: they are the operator's")
    home = tmp_path / "home"
    container = Container.from_settings(Settings(mode="local", home=home))
    operator = Principal("default", frozenset({"admin", "predict"}), "test")
    version = container.models.push(operator, "sum", sum_model(VALUES))
    container.deployments.create(operator, "sum", {"kind": "single", "model": "sum", "version": version.version})
    port, started = free_port(), []
    with running_sluice(home, dict(os.environ), "--workers", "1", "--grpc-port", str(port), started=started) as (_, key):
        client = grpc_client(port)
        headers = {"authorization": f"Bearer {key}"}
        values = np.random.default_rng(0).random((1, VALUES), dtype=np.float32)
        tensor = grpcclient.InferInput("input", [1, VALUES], "FP32")
        tensor.set_data_from_numpy(values)

        def infer() -> Any:
            return client.infer("sum", [tensor], headers=headers)

        for _ in range(10):  # the worker's heap grows to what a request needs
            infer()
        pid = started[0].pid  # one worker: the process that serves
        faults = []
        total = pytest.approx(float(values.sum(dtype=np.float64)), rel=1e-4)
        for _ in range(40):
            before = _minor_faults(pid)
            answer = infer()
            faults.append(_minor_faults(pid) - before)
            assert float(answer.as_numpy("total")[0, 0]) == total
        # Before, each request faulted in ~700 pages (its tensor, its copies, its message), and
        # took 2.4-2.9 ms of the worker's CPU for it; now a few. The median: once a second the
        # worker gives back what its heap holds free, and the request after that faults it in.
        faults.sort()
        assert faults[len(faults) // 2] < PAGES / 8, f"page faults a request: {faults}"
