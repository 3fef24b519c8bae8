"""Peers over HTTP, Open Inference Protocol v2 JSON: sluice vs a real Triton (CPU) and MLServer.

All serve the same ONNX files on the same cores and take the same v2 body:

- sluice: `sluice serve` with 2 workers, `/v2/models/{deployment}/infer`, with its API key,
  twice: the model's deployment as it is, and its `<name>-batched` twin with adaptive
  batching on (max_batch_size 64, max_delay_us 100: Triton's dynamic batching settings);
- Triton: the local Triton server of `sluice.endpoints.local_triton` (the tritonserver build in
  the nvidia-pytriton wheel, `make triton-env`), serving the model repository sluice writes for
  it (`sluice.endpoints.repository`, flavour `local`: ONNX Runtime in Triton's python backend),
  with dynamic batching (max_batch_size 64, 100 µs queue delay) and 2 model instances;
- MLServer: mlserver in its own virtualenv (benchmarks/work/venv-mlserver), with the custom
  ONNX Runtime model of benchmarks/peers/mlserver_onnx.py and 2 parallel inference workers.

Only models with tensor outputs take part: the iris classifier's ZipMap output (a list of
maps) is something neither Triton nor MLServer's NumPy codec can return.

Besides req/s, each run records the CPU time the server's processes used (all of them: workers,
Triton's backend stubs) per request answered: on a machine shared with other work, req/s
depends on how much of the cores each server got, CPU per request much less.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from benchmarks.common import (
    REPO,
    WORK,
    Goal,
    bench_env,
    figure,
    free_port,
    rotate,
    section,
    server,
    tree_cpu_s,
)
from benchmarks.httpbench import LOGS, check_once, loaded, sluice_process, throughput_figures
from benchmarks.loadgen import latency_notes
from benchmarks.prepare import BATCHING, HOME, MODELS, TENANT, api_key, batched, v2_body

if TYPE_CHECKING:
    from collections.abc import Iterator

GOAL_VS_TRITON = Goal(">=", 1.0)
GOAL_BATCHED_P99 = Goal("<=", 1.1)  # p99 with adaptive batching over p99 without, same server and load
MLSERVER_VERSION = "1.7.1"
MLSERVER_ENV = WORK / "venv-mlserver"
TRITON_HOME = WORK / "triton-home"
TRITON_INSTANCES = 2
MLSERVER_WORKERS = 2


# Triton -------------------------------------------------------------------------------------
@contextlib.contextmanager
def triton_server(models: list[str]) -> Iterator[tuple[str, dict[str, Any], int]]:
    from sluice.endpoints import local_triton
    from sluice.endpoints.repository import TritonOptions, build_repository
    from sluice.settings import Settings
    from sluice.wiring import Container

    env = local_triton.find_env()  # Unavailable, with what to do, when `make triton-env` was not run
    container = Container.from_settings(Settings(mode="local", home=HOME, registry="", store=""))
    root = WORK / "triton-repository"
    if root.exists():
        import shutil

        shutil.rmtree(root)
    root.mkdir(parents=True)
    options = TritonOptions(instance_count=TRITON_INSTANCES)
    for name in models:
        version = container.registry.latest_version(TENANT, name)
        build_repository(root, version, container.store, flavour="local", options=options, name=name)
    local_triton.stop(TRITON_HOME)  # a server a crashed run left behind
    started = local_triton.start(root, home=TRITON_HOME, port=local_triton.free_base_port(), env=env)
    try:
        meta = check_once(f"{started.http_url}/v2", None, {})
        info = {"server": f"tritonserver {meta.get('version')}", "instances": TRITON_INSTANCES,
                "dynamic_batching": {"max_batch_size": 64, "max_queue_delay_us": options.max_queue_delay_us}}
        yield started.http_url, info, started.pid
    finally:
        local_triton.stop(TRITON_HOME)


# MLServer -----------------------------------------------------------------------------------
_PROBE = """
import mlserver, onnxruntime, uvloop
assert tuple(int(p) for p in uvloop.__version__.split(".")[:2]) < (0, 22)
print(mlserver.__version__)
"""


def ensure_mlserver_env() -> str:
    """A separate virtualenv with mlserver and onnxruntime (its pins differ from sluice's)."""
    python = MLSERVER_ENV / "bin" / "python"
    check = [str(python), "-c", _PROBE]
    if python.exists():
        probe = subprocess.run(check, capture_output=True, text=True, check=False)
        if probe.returncode == 0 and probe.stdout.strip() == MLSERVER_VERSION:
            return probe.stdout.strip()
    uv = REPO / ".venv" / "bin" / "uv"
    steps = [
        [str(uv), "venv", "--quiet", "--python", sys.executable, str(MLSERVER_ENV)],
        [str(uv), "pip", "install", "--quiet", "--python", str(python), f"mlserver=={MLSERVER_VERSION}", "onnxruntime",
         # mlserver 1.7.1 calls asyncio.get_event_loop() in its workers, which uvloop 0.22+ refuses
         "uvloop<0.22"],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"could not install MLServer: {' '.join(step[:3])} failed: {done.stderr[-800:]}")
    return subprocess.run(check, capture_output=True, text=True, check=True).stdout.strip()


@contextlib.contextmanager
def mlserver_server(models: list[str]) -> Iterator[tuple[str, dict[str, Any], int]]:
    version = ensure_mlserver_env()
    root = WORK / "mlserver-models"
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    settings = {
        "debug": False,
        "host": "127.0.0.1",
        "http_port": port,
        "grpc_port": free_port(),
        "metrics_port": free_port(),
        "parallel_workers": MLSERVER_WORKERS,
    }
    (root / "settings.json").write_text(json.dumps(settings))
    for name in models:
        folder = root / name
        folder.mkdir(exist_ok=True)
        (folder / "model-settings.json").write_text(
            json.dumps({"name": name, "implementation": "mlserver_onnx.OnnxModel", "parameters": {"uri": str(MODELS[name].path)}})
        )
    env = bench_env()
    env["PYTHONPATH"] = str(REPO / "benchmarks" / "peers")  # the runtime, and nothing of sluice's
    command = [str(MLSERVER_ENV / "bin" / "mlserver"), "start", str(root)]
    with server(command, ready_url=f"http://127.0.0.1:{port}/v2/health/ready", log=LOGS / "mlserver.log", env=env, cwd=root, timeout_s=120) as proc:
        yield f"http://127.0.0.1:{port}", {"server": f"mlserver {version}", "parallel_workers": MLSERVER_WORKERS}, proc.pid


# the benchmark ------------------------------------------------------------------------------
def _first_output(answer: dict[str, Any]) -> list[float]:
    outputs = sorted(answer.get("outputs", []), key=lambda o: o["name"])
    return outputs[0]["data"] if outputs else []


def _same_answer(a: dict[str, Any], b: dict[str, Any]) -> bool:
    x, y = _first_output(a), _first_output(b)
    return len(x) == len(y) and all(abs(p - q) <= 1e-4 * max(1.0, abs(p)) for p, q in zip(x, y, strict=True))


PEERS = {
    "triton": ("Triton (CPU, python backend, dynamic batching)", triton_server, GOAL_VS_TRITON),
    "mlserver": ("MLServer (custom ONNX runtime)", mlserver_server, None),
}


def measured(url: str, body: bytes, headers: dict[str, str], connections: int, duration_s: int, pid: int) -> dict[str, Any]:
    """One load, with the CPU time the server's processes spent on it per request answered."""
    before = tree_cpu_s(pid)
    result = loaded(url, body, headers, connections, duration_s)
    result["cpu_us"] = (tree_cpu_s(pid) - before) / max(result["requests"], 1) * 1e6
    return result


SLUICE = "sluice serve (2 workers)"
SLUICE_BATCHED = "sluice serve, adaptive batching (2 workers)"


def run(quick: bool) -> list[dict[str, Any]]:
    repeats = 3
    duration = 1 if quick else 2
    concurrencies = (8,) if quick else (8, 32)  # where the goal is set; 1 connection is in httpbench
    models = [m for m in (["diabetes"] if quick else list(MODELS)) if MODELS[m].triton]
    key = api_key()
    sections = []
    with sluice_process(2) as (ours, ours_pid):
        ours_headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
        for peer, (label, start, goal) in PEERS.items():
            figures: list[dict[str, Any]] = []
            notes: list[str] = [
                f"{SLUICE_BATCHED}: the same model's deployment with batching {BATCHING}; the goal is set on it, "
                "as Triton batches too (dynamic batching)."
                if goal is not None
                else f"No goal against {label}: {SLUICE} alone, at {concurrencies[0]} connections."
            ]
            info: dict[str, Any] = {}
            try:
                with start(models) as (base, info, peer_pid):
                    for name in models:
                        body = v2_body(MODELS[name])
                        # Batching and 32 connections where the goal is set; a peer without one
                        # is weighed against the plain service at 8 (the run stays under its budget).
                        tags = {SLUICE: "", SLUICE_BATCHED: ".batched"} if goal is not None else {SLUICE: ""}
                        targets = {who: (f"{ours}/v2/models/{batched(name) if tag else name}/infer", ours_headers, ours_pid) for who, tag in tags.items()}
                        targets[peer] = (f"{base}/v2/models/{name}/infer", {"Content-Type": "application/json"}, peer_pid)
                        answers = {who: check_once(url, body, headers) for who, (url, headers, _) in targets.items()}
                        for who in tags:
                            if not _same_answer(answers[who], answers[peer]):
                                notes.append(f"{name}: {peer} and {who} gave different outputs: {answers}")
                        for url, headers, _ in targets.values():
                            loaded(url, body, headers, 8, 1)  # warm-up
                        for conc in concurrencies if goal is not None else concurrencies[:1]:
                            runs: dict[str, list[dict[str, Any]]] = {who: [] for who in targets}
                            for r in range(repeats):
                                for who in rotate(list(targets), r):
                                    url, headers, pid = targets[who]
                                    runs[who].append(measured(url, body, headers, conc, duration, pid))
                            notes += latency_notes(f"{name}, {conc} conn", runs)
                            for who, tag in reversed(tags.items()):  # the batched service's figures first
                                prefix, where = f"peers.{peer}.{name}.c{conc}{tag}", f"{name}, {conc} conn"
                                figures += throughput_figures(prefix, where, runs[who], who, runs[peer], label, goal if tag else None)
                                figures.append(
                                    figure(f"{prefix}.cpu", f"{where}: server CPU per request", "µs", who,
                                           [x["cpu_us"] for x in runs[who]], reference=label,
                                           ref_values=[x["cpu_us"] for x in runs[peer]])
                                )  # fmt: skip
                            if goal is not None:  # batching must not cost the tail (the runs interleave)
                                figures.append(
                                    figure(f"peers.{peer}.{name}.c{conc}.batched.p99_vs_unbatched",
                                           f"{name}, {conc} conn: p99 with adaptive batching ÷ without", "µs", SLUICE_BATCHED,
                                           [x["p99_us"] for x in runs[SLUICE_BATCHED]], reference=SLUICE,
                                           ref_values=[x["p99_us"] for x in runs[SLUICE]], goal=GOAL_BATCHED_P99)
                                )  # fmt: skip
            except Exception as exc:  # a peer that cannot run is reported, not fatal
                notes.append(f"{label} did not run: {type(exc).__name__}: {str(exc)[:600]}")
            sections.append(
                section(
                    f"peers.{peer}",
                    f"Peer: sluice vs {label}, v2 JSON over HTTP, same cores",
                    figures,
                    notes=notes,
                    peer=info,
                )
            )
    return sections


if __name__ == "__main__":
    json.dump(run("--quick" in sys.argv), sys.stdout, indent=1)
