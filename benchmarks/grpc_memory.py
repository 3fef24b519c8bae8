"""What one large gRPC infer request costs `sluice serve --grpc-port` in memory.

One request of `--mib` MiB of FP32 (rows of 10 features) goes to `sluice serve --workers 1`,
whose one process serves gRPC beside HTTP, sent
the two ways the Open Inference Protocol allows: as
`raw_input_contents` (what `tritonclient` sends) and as typed `fp32_contents` (a repeated
field). Around each request the script reads that process's resident memory from
/proc: RSS before, RSS after, and the peak in between (VmHWM, reset before each request by
writing 5 to /proc/<pid>/clear_refs). It then sends `--concurrent` such requests at once, to
show what many in flight cost together. Linux only.

The deployment is `sum10`, a model that sums each row (its own work needs next to no memory),
so what is measured is what carrying and decoding the request costs; `--deployment diabetes`
(the demo's MLP, 32 hidden units: 16 MiB of activations per 5 MiB of input) adds a model's.

    .venv/bin/python -m benchmarks.grpc_memory [--mib 5] [--repeats 3] [--concurrent 8] [--deployment sum10]
    .venv/bin/python -m benchmarks.grpc_memory --explain   # where it goes, stage by stage, in process

`--explain` runs the server's steps for one request in this process instead (parse the message,
decode its tensors, predict, build and serialize the answer), with Python's allocations traced
(tracemalloc: what Python objects take at most during each stage) beside the process's RSS;
grpc's own buffers and the protobuf message live outside Python's allocator and show only in RSS.

Not part of `make bench`: it measures a memory bound, not a speed. Prints one JSON report.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import PYTHON, REPO, bench_env, free_port, local_container, server

MiB = 1 << 20
FEATURES = 10  # both models take [-1, 10] FP32


def _sum_model() -> bytes:
    """[-1, 10] FP32 -> the sum of each row, [-1, 1]: a model that needs no memory of its own."""
    from onnx import TensorProto, helper

    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["input", "axes"], ["sum"], keepdims=1)],
        "sum10",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, FEATURES])],
        [helper.make_tensor_value_info("sum", TensorProto.FLOAT, [None, 1])],
        [axes],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of `pid`, in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = int(value.split()[0]) * 1024
    return out


def _reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def _requests(deployment: str, rows: int, key: str) -> dict[str, Any]:
    """The same input as a raw request (tritonclient) and as a typed one (the generated stub)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.grpc import service_pb2 as pb

    data = np.random.default_rng(0).standard_normal((rows, FEATURES)).astype(np.float32)
    raw = grpcclient.InferInput("input", [rows, FEATURES], "FP32")
    raw.set_data_from_numpy(data)
    typed = pb.ModelInferRequest(model_name=deployment)
    tensor = typed.inputs.add(name="input", datatype="FP32", shape=[rows, FEATURES])
    tensor.contents.fp32_contents.extend(data.ravel().tolist())
    return {"deployment": deployment, "raw": [raw], "typed": typed, "metadata": (("authorization", f"Bearer {key}"),), "bytes": data.nbytes, "wire_typed": typed.ByteSize()}


def _send(address: str, how: str, made: dict[str, Any]) -> str:
    """One request; the status it ended with (OK or the gRPC code)."""
    import grpc
    import tritonclient.grpc as grpcclient
    from tritonclient.grpc import service_pb2_grpc as pb_grpc
    from tritonclient.utils import InferenceServerException

    if how == "raw":
        client = grpcclient.InferenceServerClient(address)
        try:
            client.infer(made["deployment"], made["raw"], headers=dict(made["metadata"]))
            return "OK"
        except InferenceServerException as exc:
            return str(exc.status())
        finally:
            client.close()
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(address, options=options) as channel:
        try:
            pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(made["typed"], metadata=made["metadata"], timeout=120)
            return "OK"
        except grpc.RpcError as exc:
            return str(exc.code())


def _one(pid: int, address: str, how: str, made: dict[str, Any], concurrent: int = 1) -> dict[str, Any]:
    before = _status(pid)["VmRSS"]
    _reset_peak(pid)
    with ThreadPoolExecutor(concurrent) as pool:
        statuses = list(pool.map(lambda _: _send(address, how, made), range(concurrent)))
    time.sleep(0.5)  # what the server frees after answering
    after = _status(pid)
    return {
        "how": how,
        "concurrent": concurrent,
        "statuses": sorted(set(statuses)),
        "ok": statuses.count("OK"),
        "rss_before_mib": round(before / MiB, 1),
        "rss_after_mib": round(after["VmRSS"] / MiB, 1),
        "peak_mib": round(after["VmHWM"] / MiB, 1),
        "peak_over_before_mib": round((after["VmHWM"] - before) / MiB, 1),
    }


def explain(mib: float) -> dict[str, Any]:
    """One request's stages in this process, for each way of sending the tensor."""
    import asyncio
    import tracemalloc

    from tritonclient.grpc import service_pb2 as pb

    from sluice.api.present import who_answered
    from sluice.domain.requests import PredictionRequest, TensorInputs
    from sluice.grpc_service.tensors import response_of, tensors_of
    from sluice.grpc_service.wire import read_infer_request

    os.environ.setdefault("SLUICE_LOG_LEVEL", "WARNING")  # the report alone on stdout
    rows = int(mib * MiB) // (4 * FEATURES)
    data = np.random.default_rng(0).standard_normal((rows, FEATURES)).astype(np.float32)
    wires = {}
    for how in ("raw", "typed"):
        message = pb.ModelInferRequest(model_name="sum10")
        tensor = message.inputs.add(name="input", datatype="FP32", shape=[rows, FEATURES])
        if how == "raw":
            message.raw_input_contents.append(data.tobytes())
        else:
            tensor.contents.fp32_contents.extend(data.ravel().tolist())
        wires[how] = message.SerializeToString()
    del message, tensor

    async def stages(container: Any, principal: Any, wire: bytes, traced: bool) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []

        def mark(stage: str) -> None:
            peak = tracemalloc.get_traced_memory()[1] if traced else 0
            out.append({"stage": stage, "rss_mib": round(_status_self() / MiB, 1), "python_peak_mib": round(peak / MiB, 1)})
            if traced:
                tracemalloc.reset_peak()

        if traced:
            tracemalloc.start()
        mark("start")
        request = read_infer_request(wire)
        mark("parse the message (its raw tensors left in place)")
        tensors = tensors_of(request)
        mark("decode its tensors")
        prediction = await container.predictions.predict(principal, PredictionRequest(deployment="sum10", inputs=TensorInputs(tensors)))
        mark("predict")
        answer = response_of(pb, prediction, request_id="r", wanted=None, who=who_answered(prediction)).serialize()
        mark("answer")
        del request, tensors, prediction, answer
        mark("all freed")
        if traced:
            tracemalloc.stop()
        return out

    report: dict[str, Any] = {"tensor_mib": round(data.nbytes / MiB, 2)}
    with tempfile.TemporaryDirectory() as tmp:
        container, principal = local_container(Path(tmp) / "home")
        version = container.models.push(principal, "sum10", _sum_model())
        container.deployments.create(principal, "sum10", {"kind": "single", "model": "sum10", "version": version.version})
        for how, wire in wires.items():
            asyncio.run(stages(container, principal, wire, traced=False))  # warm: the model loaded
            report[how] = asyncio.run(stages(container, principal, wire, traced=True))
    return report


def _status_self() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=float, default=5.0, help="MiB of FP32 per request (default 5)")
    parser.add_argument("--repeats", type=int, default=3, help="requests of each kind, one at a time (default 3)")
    parser.add_argument("--concurrent", type=int, default=8, help="requests sent at once in the last round (default 8; 0: none)")
    parser.add_argument("--deployment", choices=("sum10", "diabetes"), default="sum10", help="the model that answers (default sum10)")
    parser.add_argument("--explain", action="store_true", help="one request's stages in this process, with tracemalloc")
    args = parser.parse_args()
    if args.explain:
        print(json.dumps(explain(args.mib), indent=2))
        return
    import tritonclient.grpc as grpcclient

    rows = int(args.mib * MiB) // (4 * FEATURES)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        container, principal = local_container(home)  # the tenant `sluice serve` makes its key for
        version = container.models.push(principal, "sum10", _sum_model())
        container.deployments.create(principal, "sum10", {"kind": "single", "model": "sum10", "version": version.version})
        port, grpc_port = free_port(), free_port()
        command = [PYTHON, "-m", "sluice.cli", "serve", "--demo", "--workers", "1", "--port", str(port), "--grpc-port", str(grpc_port)]
        env = bench_env(SLUICE_HOME=str(home), SLUICE_LOG_LEVEL="WARNING")
        with server(command, ready_url=f"http://127.0.0.1:{port}/healthz", log=home / "serve.log", env=env, cwd=REPO, quiet_stdout=True) as proc:
            address = f"127.0.0.1:{grpc_port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    if grpcclient.InferenceServerClient(address).is_server_live():
                        break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                time.sleep(0.2)
            pid = proc.pid  # one worker: the command's own process serves HTTP and gRPC
            key = (home / "admin-key").read_text().strip()
            small, made = _requests(args.deployment, 2, key), _requests(args.deployment, rows, key)
            for how in ("raw", "typed"):  # the model loaded, every path imported
                assert _send(address, how, small) == "OK"
            report: dict[str, Any] = {
                "request": {"deployment": args.deployment, "rows": rows, "tensor_mib": round(made["bytes"] / MiB, 2), "typed_message_mib": round(made["wire_typed"] / MiB, 2)},
                "settled_rss_mib": round(_status(pid)["VmRSS"] / MiB, 1),
                "one_at_a_time": [_one(pid, address, how, made) for how in ("raw", "typed") for _ in range(args.repeats)],
            }
            if args.concurrent:
                report["at_once"] = [_one(pid, address, how, made, args.concurrent) for how in ("raw", "typed")]
            report["rss_at_end_mib"] = round(_status(pid)["VmRSS"] / MiB, 1)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
