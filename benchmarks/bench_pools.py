"""Connections to one slow backend: twenty predictions at once against a local Triton whose model
takes `SLOW_S` per batch, through sluice's runtimes as the wiring builds them
(`SLUICE_RUNTIME_CONNECTIONS`, default 64) and through `sluice serve --workers 2`.

The model (Triton's python backend, one instance) sleeps `SLOW_S` per batch and batches what
arrives within `QUEUE_DELAY_US` (up to 64 rows): requests that reach the server together are
answered together, in one backend time; requests a client pool holds back wait for the next
batch. Each subject's burst time is set against one request alone (the backend time); the same
runtimes with a pool of ten show what a pool smaller than the burst costs (about twice).

Needs `make triton-env`. Loads go to 127.0.0.1 only, one burst at a time.

    python -m benchmarks.bench_pools [--quick]
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.common import PYTHON, Goal, bench_env, figure, free_port

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

AT_ONCE = 20
SMALL_POOL = 10
QUEUE_DELAY_US = 200_000
MODEL_PY = """import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({slow_s})
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy())])
            for r in requests
        ]
"""
CONFIG = """name: "slow"
backend: "python"
max_batch_size: 64
input [{{ name: "x", data_type: TYPE_FP32, dims: [4] }}]
output [{{ name: "y", data_type: TYPE_FP32, dims: [4] }}]
dynamic_batching {{ max_queue_delay_microseconds: {delay} }}
instance_group [{{ kind: KIND_CPU, count: 1 }}]
"""


def _repository(root: Path, slow_s: float) -> Path:
    model = root / "models" / "slow"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG.format(delay=QUEUE_DELAY_US))
    (model / "1" / "model.py").write_text(MODEL_PY.format(slow_s=slow_s))
    return root / "models"


async def _timed(call: Callable[[], Awaitable[Any]], n: int) -> float:
    started = time.perf_counter()
    await asyncio.gather(*(call() for _ in range(n)))
    return time.perf_counter() - started


def _runtimes(server: Any, home: Path, connections: int | None) -> dict[str, tuple[Any, Any]]:
    """(runtime, version) of each path to the server, built by the wiring from settings."""
    from sluice.domain import ModelVersion
    from sluice.domain.signature import Signature, TensorSpec
    from sluice.settings import Settings
    from sluice.wiring import build_runtimes, build_store

    signature = Signature((TensorSpec("x", "FP32", (-1, 4)),), (TensorSpec("y", "FP32", (-1, 4)),))
    grpc = f"http://{server.grpc_address}"
    extra = {} if connections is None else {"runtime_connections": connections}
    settings = Settings(
        mode="local", home=home, region="us-east-1", sagemaker_endpoint_url=server.sagemaker_url,
        triton_url_prefixes=[server.http_url, grpc], **extra,
    )  # fmt: skip
    runtimes = build_runtimes(settings, build_store(settings))

    def version(runtime: str, config: dict[str, Any]) -> Any:
        return ModelVersion("bench", "slow", 1, runtime, "file:///slow", "0" * 64, 0, signature, config=config)  # type: ignore[arg-type]

    return {
        "triton runtime, HTTP": (runtimes["triton"], version("triton", {"url": server.http_url, "model_name": "slow"})),
        "triton runtime, gRPC": (runtimes["triton"], version("triton", {"url": grpc, "model_name": "slow", "protocol": "grpc"})),
        "sagemaker runtime": (runtimes["sagemaker"], version("sagemaker", {"endpoint_name": "slow", "max_batch_size": 64})),
    }


def _measure_runtimes(server: Any, home: Path, repeats: int) -> dict[str, dict[str, list[float]]]:
    x = {"x": np.ones((1, 4), dtype=np.float32)}
    found: dict[str, dict[str, list[float]]] = {}

    async def go() -> None:
        for connections, suffix in ((None, ""), (SMALL_POOL, f" (pool of {SMALL_POOL})")):
            paths = _runtimes(server, home, connections)
            for name, (runtime, version) in paths.items():
                if suffix and "gRPC" in name:
                    continue  # one HTTP/2 connection: the setting does not apply
                call = lambda runtime=runtime, version=version: runtime.infer(version, x)  # noqa: E731
                await call()  # connections, the model's layout
                for _ in range(repeats):
                    found.setdefault(name + suffix, {}).setdefault("alone", []).append(await _timed(call, 1))
                    found[name + suffix].setdefault("burst", []).append(await _timed(call, AT_ONCE))
            for runtime in {id(r): r for r, _ in paths.values()}.values():
                closed = runtime.close()
                if asyncio.iscoroutine(closed):
                    await closed

    asyncio.run(go())
    return found


def _measure_serve(server: Any, root: Path, repeats: int, slow_s: float) -> dict[str, list[float]]:
    """The same burst as a client sees it: v2 requests to `sluice serve --workers 2`."""
    import httpx

    home = root / "sluice-home"
    port = free_port()
    env = {**bench_env(), "SLUICE_HOME": str(home), "SLUICE_TRITON_URL_PREFIXES": json.dumps([server.http_url])}
    with (root / "serve.log").open("wb") as log:
        proc = subprocess.Popen(
            [PYTHON, "-m", "sluice.cli", "--tenant", "bench", "serve", "--port", str(port), "--workers", "2"],
            env=env, stdout=log, stderr=log,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sluice serve did not start: {(root / 'serve.log').read_text()[-800:]}")
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        headers = {"Authorization": f"Bearer {(home / 'admin-key').read_text().strip()}"}
        made = httpx.post(f"{base}/api/v1/models/slow/versions", json={"triton_url": server.http_url, "model_name": "slow"}, headers=headers, timeout=60)
        made.raise_for_status()
        policy = {"kind": "single", "model": "slow", "version": 1}
        httpx.post(f"{base}/api/v1/deployments", json={"name": "slow", "policy": policy}, headers=headers, timeout=60).raise_for_status()
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}

        async def go() -> dict[str, list[float]]:
            async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=AT_ONCE * 2)) as client:

                finished: list[float] = []

                async def call() -> None:
                    answer = await client.post(f"{base}/v2/models/slow/infer", json=body, headers=headers)
                    answer.raise_for_status()
                    finished.append(time.perf_counter())

                await call()  # one request first, as a client would: the burst may meet a worker that took none
                times: dict[str, list[float]] = {"alone": [], "burst": [], "late": []}
                for _ in range(repeats):
                    times["alone"].append(await _timed(call, 1))
                    finished.clear()
                    times["burst"].append(await _timed(call, AT_ONCE))
                    # Answered a batch later than the first: it reached the server after the batch closed.
                    times["late"].append(sum(1 for t in finished if t - min(finished) > slow_s / 2))
                return times

        return asyncio.run(go())
    finally:
        proc.terminate()
        proc.wait(90)


def measure(*, slow_s: float, repeats: int) -> dict[str, Any]:
    from sluice.endpoints import local_triton

    env = local_triton.find_env()
    root = Path(tempfile.mkdtemp(prefix="sluice-bench-pools-"))
    server = local_triton.start(_repository(root, slow_s), home=root / "triton-home", port=local_triton.free_base_port(), default_model="slow", env=env)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")  # the sagemaker runtime's calls to the local port are unsigned
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    try:
        found = _measure_runtimes(server, root / "home", repeats)
        found["sluice serve --workers 2 (v2 HTTP)"] = _measure_serve(server, root, repeats, slow_s)
    finally:
        local_triton.stop(root / "triton-home")
    return {"slow_s": slow_s, "queue_delay_ms": QUEUE_DELAY_US / 1000, "at_once": AT_ONCE, "repeats": repeats, "seconds": found}


def run(quick: bool) -> dict[str, Any]:
    report = measure(slow_s=0.5, repeats=3)
    figures = []
    for name, times in report["seconds"].items():
        small = "pool of" in name
        figures.append(figure(
            "pools." + re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_"), f"{AT_ONCE} at once to one slow backend: {name}", "s", "burst", times["burst"],
            reference="one request alone", ref_values=times["alone"], goal=None if small else Goal("<=", 1.5),
        ))  # fmt: skip
    backend = report["slow_s"] + report["queue_delay_ms"] / 1000
    notes = [
        f"A Triton python-backend model that sleeps {report['slow_s']:g} s per batch and batches what arrives within "
        f"{report['queue_delay_ms']:g} ms: one backend time is about {backend:g} s. Each figure is the median (min-max) of "
        f"{report['repeats']} bursts; the ratio is the burst against one request alone, about 1 when all {AT_ONCE} reach "
        f"the server together and about 2 when a pool holds half of them back (the rows with a pool of {SMALL_POOL}).",
    ]
    return {"title": "Connections to one slow backend (benchmarks/bench_pools.py)", "figures": figures, "notes": notes, "report": report}


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv)["report"], indent=2, default=str))
