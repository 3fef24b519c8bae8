"""The gRPC transport's own cost per call: the least a grpcio server can do. Every
`/inference.GRPCInferenceService/ModelInfer` call is answered with the same pre-serialized
`ModelInferResponse` (one FP32 output of shape [1, 1], as sluice answers the diabetes MLP),
bytes in and bytes out: no message parsed or built, no key checked, no model run.

Served as `sluice serve --workers N --grpc-port` serves gRPC: N processes, each grpcio's
asyncio server on uvloop, all on one port with SO_REUSEPORT, with sluice's message-size
options and the method registered as sluice registers it. What sluice's gRPC spends per call
beyond this server is sluice's; what this server reaches is the most any server built on
grpcio could. Prints `ready PORT` once every process is listening.

    python -m benchmarks.peers.grpc_floor --port 8001 --workers 2
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys

SERVICE = "inference.GRPCInferenceService"
READY = "ready"


def response() -> bytes:
    """A valid `ModelInferResponse` of the size and shape of sluice's answer to one row of the
    diabetes MLP (its parameters included: 102 bytes)."""
    import numpy as np
    from tritonclient.grpc import service_pb2 as pb

    answer = pb.ModelInferResponse(model_name="diabetes", model_version="1")
    answer.parameters["latency_ms"].double_param = 0.1
    answer.parameters["version"].int64_param = 1
    answer.parameters["model"].string_param = "diabetes"
    answer.outputs.add(name="variable", datatype="FP32", shape=[1, 1])
    answer.raw_output_contents.append(np.array([[0.5]], dtype=np.float32).tobytes())
    return answer.SerializeToString()


async def _serve(port: int) -> None:
    import grpc
    import grpc.aio

    from sluice.grpc_service.server import options
    from sluice.settings.serving import LimitSettings

    answer = response()

    async def infer(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return answer

    handlers = {"ModelInfer": grpc.unary_unary_rpc_method_handler(infer)}  # no (de)serializer: bytes
    limits = LimitSettings()
    server = grpc.aio.server(options=options(limits.max_request_bytes, limits.max_response_bytes, share_port=True))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(READY, flush=True)
    await server.wait_for_termination()


def _worker(port: int) -> None:
    import uvloop

    uvloop.run(_serve(port))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.port)
        return
    # The workers are processes of their own, started before this one imports grpcio.
    command = [sys.executable, "-m", "benchmarks.peers.grpc_floor", "--port", str(args.port), "--worker"]
    workers = [subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True) for _ in range(args.workers)]
    try:
        for worker in workers:
            if worker.stdout is None or worker.stdout.readline().strip() != READY:
                raise SystemExit(f"a worker did not start (exit code {worker.wait()})")
        print(f"{READY} {args.port}", flush=True)
        os.wait()  # until a worker ends: then all do
        raise SystemExit("a worker exited")
    finally:
        for worker in workers:
            with contextlib.suppress(ProcessLookupError):
                worker.terminate()
        for worker in workers:
            worker.wait(timeout=10)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
