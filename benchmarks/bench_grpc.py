"""The Open Inference Protocol over HTTP and gRPC: sluice (`sluice serve --workers 2
--grpc-port`, every worker serving both) against the local Triton serving the same ONNX files
through the same protocol (its python backend with ONNX Runtime, as many instances as sluice
has workers), and sluice's gRPC against grpcio's floor.

Requests per second at 1, 8 and 32 concurrent clients, each client on a connection of its own,
closed loop: HTTP by `benchmarks.loadgen` (the same v2 JSON body to both servers), gRPC by
`benchmarks.grpcload` (the same serialized `ModelInferRequest`, raw tensors, as tritonclient
sends it). Two models: one row of the diabetes MLP (the protocol's overhead) and a 1 MiB FP32
tensor summed by a one-node model (the bytes' cost, gRPC only). The subjects take turns going
first in each repeat. The load generators run on the same two cores as the servers.

The floor (`benchmarks.peers.grpc_floor`, the diabetes row only): as many grpcio asyncio
servers as sluice has workers, on one port as sluice's are, answering every `ModelInfer` with
fixed bytes and doing nothing else. Its CPU per call is the transport's own, which no server
built on grpcio spends less than; its req/s, the most such a server reaches. Figures: sluice
gRPC against it (req/s, CPU per call at 8 clients), and it against sluice's HTTP (req/s at 8
and 32 clients: the ceiling any grpcio server has there). References, with no goals.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks import grpcload, loadgen
from benchmarks.common import (
    PYTHON,
    REPO,
    WORK,
    Goal,
    bench_env,
    figure,
    free_port,
    server,
    tree_cpu_s,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

HOME = WORK / "grpc-home"
TENANT = "default"
WORKERS = 2
CLIENTS = (1, 8, 32)
MIB_CLIENTS = (1, 8)
MIB_VALUES = 262_144  # 1 MiB of FP32


def _prepare() -> Any:
    from tests.models import sum_model

    from sluice.domain import Principal
    from sluice.settings import Settings
    from sluice.wiring import Container

    shutil.rmtree(HOME, ignore_errors=True)
    container = Container.from_settings(Settings(mode="local", home=HOME, registry="", store=""))
    principal = Principal(TENANT, frozenset({"admin", "predict"}), "bench")
    for name, data in (("diabetes", (REPO / "models" / "diabetes_mlp.onnx").read_bytes()), ("mib", sum_model(MIB_VALUES))):
        version = container.models.push(principal, name, data)
        container.deployments.create(principal, name, {"kind": "single", "model": name, "version": version.version})
    return container


@contextlib.contextmanager
def _triton(container: Any) -> Iterator[tuple[str, str, int]]:
    from sluice.endpoints import local_triton
    from sluice.endpoints.repository import TritonOptions, build_repository

    options = TritonOptions(instance_count=WORKERS)  # as many model instances as sluice has workers

    env = local_triton.find_env()
    root = WORK / "grpc-triton-repository"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for name in ("diabetes", "mib"):
        build_repository(root, container.registry.latest_version(TENANT, name), container.store, flavour="local", options=options, name=name)
    home = WORK / "grpc-triton-home"
    local_triton.stop(home)
    started = local_triton.start(root, home=home, port=local_triton.free_base_port(), env=env)
    try:
        yield started.http_url, started.grpc_address, started.pid
    finally:
        local_triton.stop(home)


@contextlib.contextmanager
def _sluice() -> Iterator[tuple[str, str, dict[str, str], int]]:
    """(HTTP URL, gRPC address, the key's header, pid) of `sluice serve --workers 2 --grpc-port`."""
    import tritonclient.grpc as grpcclient

    port, grpc_port = free_port(), free_port()
    command = [PYTHON, "-m", "sluice.cli", "serve", "--port", str(port), "--workers", str(WORKERS), "--grpc-port", str(grpc_port)]
    env = bench_env(SLUICE_HOME=str(HOME))
    with server(command, ready_url=f"http://127.0.0.1:{port}/healthz", log=HOME / "serve.log", env=env, cwd=REPO, quiet_stdout=True) as proc:
        address = f"127.0.0.1:{grpc_port}"
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(Exception):
                if grpcclient.InferenceServerClient(address).is_server_live():
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("sluice's gRPC port did not open in 30 s")
            time.sleep(0.2)
        time.sleep(2.0)  # the second worker's gRPC server: its startup follows the first's
        yield f"http://127.0.0.1:{port}", address, {"authorization": f"Bearer {(HOME / 'admin-key').read_text().strip()}"}, proc.pid


@contextlib.contextmanager
def _floor() -> Iterator[tuple[str, int]]:
    """(gRPC address, pid) of `benchmarks.peers.grpc_floor` with sluice's number of workers,
    once it says every worker listens."""
    port = free_port()
    command = [PYTHON, "-m", "benchmarks.peers.grpc_floor", "--port", str(port), "--workers", str(WORKERS)]
    with server(command, ready_line=f"ready {port}", log=WORK / "grpc-floor.log", env=bench_env(), cwd=REPO, timeout_s=30) as proc:
        yield f"127.0.0.1:{port}", proc.pid


def _array(model: str) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.normal(0, 0.05, (1, 10)).astype(np.float32) if model == "diabetes" else rng.random((1, MIB_VALUES), dtype=np.float32)


def grpc_request(model: str) -> bytes:
    """A serialized `ModelInferRequest` as tritonclient sends it: raw little-endian contents."""
    from tritonclient.grpc import service_pb2 as pb

    array = _array(model)
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="input", datatype="FP32", shape=list(array.shape))
    request.raw_input_contents.append(array.tobytes())
    return request.SerializeToString()


def http_body(model: str) -> bytes:
    array = _array(model)
    return json.dumps({"inputs": [{"name": "input", "shape": list(array.shape), "datatype": "FP32", "data": array.ravel().tolist()}]}).encode()


def _check_http(url: str, headers: dict[str, str]) -> None:
    import httpx

    answer = httpx.post(f"{url}/v2/models/diabetes/infer", content=http_body("diabetes"), headers={**headers, "content-type": "application/json"}, timeout=30)
    if answer.status_code != 200:
        raise RuntimeError(f"{url}: {answer.status_code} {answer.text[:300]}")


def _measure(subject: tuple[str, str], where: dict[str, Any], model: str, clients: int, duration_s: float) -> dict[str, Any]:
    server_name, protocol = subject
    http_url, address, headers, pid = where[server_name]
    cpu_s = tree_cpu_s(pid)
    if protocol == "http":
        result = loadgen.run_python(
            f"{http_url}/v2/models/{model}/infer", body=http_body(model),
            headers={**headers, "content-type": "application/json"}, connections=clients, duration_s=duration_s,
        )  # fmt: skip
    else:
        result = grpcload.load(address, grpc_request(model), headers=headers, clients=clients, duration_s=duration_s)
    # What the server spent on a request, whatever else the machine ran meanwhile.
    result["server_cpu_us"] = (tree_cpu_s(pid) - cpu_s) / max(1, result["requests"]) * 1e6
    if result["errors"]:
        raise RuntimeError(f"{server_name} {protocol} {model} at {clients} clients: {result['errors']} errors")
    return result


def run(quick: bool) -> dict[str, Any]:
    repeats, duration_s = (2, 1.5) if quick else (3, 2.0)
    container = _prepare()
    cells = [(model, clients) for clients in CLIENTS for model in ("diabetes",)] + [("mib", c) for c in MIB_CLIENTS]
    results: dict[tuple[str, str, str, int], list[dict[str, Any]]] = {}
    with (
        _triton(container) as (triton_http, triton_grpc, triton_pid),
        _sluice() as (sluice_http, sluice_grpc, key, sluice_pid),
        _floor() as (floor_grpc, floor_pid),
    ):
        # The floor is sent sluice's key too (and ignores it): the same bytes on the wire.
        where = {
            "sluice": (sluice_http, sluice_grpc, key, sluice_pid),
            "triton": (triton_http, triton_grpc, {}, triton_pid),
            "floor": ("", floor_grpc, key, floor_pid),
        }
        for name in ("sluice", "triton"):
            _check_http(where[name][0], where[name][2])
        for i in range(repeats):
            for model, clients in cells:
                protocols = ("grpc",) if model == "mib" else ("http", "grpc")
                for protocol in protocols if i % 2 == 0 else tuple(reversed(protocols)):
                    servers = ("sluice", "triton", "floor") if protocol == "grpc" and model == "diabetes" else ("sluice", "triton")
                    for who in servers if i % 2 == 0 else tuple(reversed(servers)):
                        got = _measure((who, protocol), where, model, clients, duration_s)
                        results.setdefault((who, protocol, model, clients), []).append(got)
    return {
        "title": "Open Inference Protocol over HTTP and gRPC at 1, 8 and 32 clients: sluice vs Triton",
        "figures": _figures(results),
        "notes": [
            f"sluice: `sluice serve --workers {WORKERS} --grpc-port`, every worker serving HTTP and gRPC, an API key "
            f"checked per call; Triton: its python backend running ONNX Runtime, {WORKERS} instances, no key.",
            "Each client on a connection of its own; the Python load generators share the machine's cores with the "
            "servers (their CPU share is in the data: loadgen_cpu). On two cores a second ONNX Runtime thread adds "
            "only 1.08x, so the figures at 8 and 32 clients measure how the servers share two cores, not how they scale.",
            "Server CPU per request (the server's process tree, user + system, over the requests answered) is the steadier "
            "figure on a loaded machine: there req/s also follows how many threads each server runs (Triton's C++ "
            "front end and backend stubs, gRPC's event-engine threads), since the kernel shares the cores by thread.",
            f"grpcio floor: {WORKERS} processes of grpcio's asyncio server on one port, as sluice's workers are (uvloop, "
            "sluice's message limits), answering every ModelInfer with the same fixed bytes: no message read, no key, "
            "no model. What it spends on a call is grpcio's own, the least any Python server built on grpcio spends; "
            "what sluice's gRPC spends beyond it is sluice's. Its req/s against sluice's HTTP is the most any grpcio "
            "server could reach there. References, with no goals.",
        ],
        "runs": {"|".join(map(str, k)): v for k, v in results.items()},
    }


def _rps(results: dict[tuple[str, str, str, int], list[dict[str, Any]]], *key: Any) -> list[float]:
    return [r["rps"] for r in results[key]]  # type: ignore[index]


def _cpu(results: dict[tuple[str, str, str, int], list[dict[str, Any]]], *key: Any) -> list[float]:
    return [r["server_cpu_us"] for r in results[key]]  # type: ignore[index]


def _figures(results: dict[tuple[str, str, str, int], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    figures = []
    for clients in CLIENTS:
        for protocol, name in (("http", "HTTP (v2 JSON)"), ("grpc", "gRPC")):
            figures.append(figure(
                f"protocols.{protocol}.c{clients}", f"{name}, 1 row (diabetes MLP): req/s, {clients} client(s)", "req/s", "sluice",
                _rps(results, "sluice", protocol, "diabetes", clients), reference="Triton",
                ref_values=_rps(results, "triton", protocol, "diabetes", clients), better="higher",
                goal=Goal(">=", 1.0) if clients == 1 else None,
            ))  # fmt: skip
        if clients == 8:  # what a request costs the server: the machine's load does not change it much
            for protocol, name in (("http", "HTTP (v2 JSON)"), ("grpc", "gRPC")):
                figures.append(figure(
                    f"protocols.{protocol}.cpu", f"{name}, 1 row: server CPU per request, 8 clients", "µs", "sluice",
                    _cpu(results, "sluice", protocol, "diabetes", clients), reference="Triton",
                    ref_values=_cpu(results, "triton", protocol, "diabetes", clients),
                ))  # fmt: skip
            figures.append(figure(
                "protocols.grpc_vs_http.cpu", "sluice gRPC vs sluice HTTP, 1 row: server CPU per request, 8 clients", "µs",
                "sluice gRPC", _cpu(results, "sluice", "grpc", "diabetes", clients), reference="sluice HTTP",
                ref_values=_cpu(results, "sluice", "http", "diabetes", clients),
            ))  # fmt: skip
        if clients > 1:
            figures.append(figure(
                f"protocols.grpc_vs_http.c{clients}", f"sluice gRPC vs sluice HTTP, 1 row: req/s, {clients} clients", "req/s",
                "sluice gRPC", _rps(results, "sluice", "grpc", "diabetes", clients), reference="sluice HTTP",
                ref_values=_rps(results, "sluice", "http", "diabetes", clients), better="higher", goal=Goal(">=", 1.0),
            ))  # fmt: skip
    for clients in MIB_CLIENTS:
        figures.append(figure(
            f"protocols.mib.c{clients}", f"gRPC, 1 MiB FP32 tensor: req/s, {clients} client(s)", "req/s", "sluice",
            _rps(results, "sluice", "grpc", "mib", clients), reference="Triton",
            ref_values=_rps(results, "triton", "grpc", "mib", clients), better="higher", goal=Goal(">=", 1.0),
        ))  # fmt: skip
        figures.append(figure(
            f"protocols.mib.cpu.c{clients}", f"gRPC, 1 MiB FP32 tensor: server CPU per request, {clients} client(s)", "µs",
            "sluice", _cpu(results, "sluice", "grpc", "mib", clients), reference="Triton",
            ref_values=_cpu(results, "triton", "grpc", "mib", clients),
        ))  # fmt: skip
        p50 = [r["p50_us"] for r in results[("sluice", "grpc", "mib", clients)]]
        ref = [r["p50_us"] for r in results[("triton", "grpc", "mib", clients)]]
        figures.append(figure(
            f"protocols.mib.p50.c{clients}", f"gRPC, 1 MiB FP32 tensor: p50, {clients} client(s)", "µs", "sluice", p50,
            reference="Triton", ref_values=ref,
        ))  # fmt: skip
    return figures + _floor_figures(results)


def _floor_figures(results: dict[tuple[str, str, str, int], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The transport's own share: references, no goals."""
    figures = []
    for clients in CLIENTS:
        figures.append(figure(
            f"protocols.grpc_floor.c{clients}", f"sluice gRPC vs a grpcio server doing no work, 1 row: req/s, {clients} client(s)",
            "req/s", "sluice gRPC", _rps(results, "sluice", "grpc", "diabetes", clients), reference="grpcio floor",
            ref_values=_rps(results, "floor", "grpc", "diabetes", clients), better="higher",
        ))  # fmt: skip
    figures.append(figure(
        "protocols.grpc_floor.cpu", "sluice gRPC vs a grpcio server doing no work, 1 row: server CPU per request, 8 clients",
        "µs", "sluice gRPC", _cpu(results, "sluice", "grpc", "diabetes", 8), reference="grpcio floor",
        ref_values=_cpu(results, "floor", "grpc", "diabetes", 8),
    ))  # fmt: skip
    for clients in CLIENTS[1:]:
        figures.append(figure(
            f"protocols.grpc_floor_vs_http.c{clients}", f"grpcio doing no work vs sluice HTTP, 1 row: req/s, {clients} clients",
            "req/s", "grpcio floor", _rps(results, "floor", "grpc", "diabetes", clients), reference="sluice HTTP",
            ref_values=_rps(results, "sluice", "http", "diabetes", clients), better="higher",
        ))  # fmt: skip
    return figures


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
