"""Closed-loop gRPC load from a separate process: the gRPC twin of `benchmarks.loadgen`.

`clients` clients, each on a connection of its own (as separate client processes or machines
would be: gRPC otherwise shares one connection between channels to one address), each sending
the same `ModelInfer` request as soon as the previous answer arrives, for `duration_s` seconds.
The request is serialized once and the answers are not parsed, so the generator spends its CPU
on gRPC itself, not on protobuf. The result: requests, req/s, p50/p99 latency, errors, and the
CPU the generator used (so a report can show whether it was the bottleneck).

    python -m benchmarks.grpcload 127.0.0.1:8001 --request-file F --header 'authorization: Bearer …' -c 8 -d 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import PYTHON, REPO, bench_env, percentile

METHOD = "/inference.GRPCInferenceService/ModelInfer"


def load(address: str, request: bytes, *, headers: dict[str, str], clients: int, duration_s: float) -> dict[str, Any]:
    """Run the generator in a child process; its JSON report."""
    with tempfile.TemporaryDirectory() as tmp:
        request_file = Path(tmp) / "request"
        request_file.write_bytes(request)
        args = [PYTHON, "-m", "benchmarks.grpcload", address, "--request-file", str(request_file), "-c", str(clients), "-d", str(duration_s)]
        for k, v in headers.items():
            args += ["--header", f"{k}: {v}"]
        proc = subprocess.run(args, cwd=REPO, env=bench_env(), capture_output=True, text=True, check=False, timeout=duration_s + 120)
    if proc.returncode != 0:
        raise RuntimeError(f"gRPC load generator failed: {proc.stderr[-1000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


async def _client(
    address: str, method: str, request: bytes, metadata: tuple[tuple[str, str], ...], deadline: float, samples: list[int], state: dict[str, int]
) -> None:
    import grpc.aio

    # A pool of its own: a connection of its own. Messages as large as the servers take.
    options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        call = channel.unary_unary(method)  # bytes in, bytes out: no (de)serializer
        await channel.channel_ready()
        clock = time.perf_counter_ns
        while time.monotonic() < deadline:
            t0 = clock()
            try:
                await call(request, metadata=metadata)
            except grpc.aio.AioRpcError:
                state["errors"] += 1
                continue
            samples.append(clock() - t0)


async def _generate(address: str, method: str, request: bytes, headers: dict[str, str], clients: int, duration_s: float) -> dict[str, Any]:
    samples: list[int] = []
    state = {"errors": 0}
    metadata = tuple(headers.items())
    cpu0 = time.process_time()
    started = time.monotonic()
    deadline = started + duration_s
    await asyncio.gather(*(_client(address, method, request, metadata, deadline, samples, state) for _ in range(clients)))
    wall = time.monotonic() - started
    micros = [s / 1000 for s in samples] or [0.0]
    return {
        "tool": "python grpc.aio",
        "requests": len(samples),
        "rps": len(samples) / wall,
        "p50_us": percentile(micros, 50),
        "p99_us": percentile(micros, 99),
        "errors": state["errors"],
        "wall_s": wall,
        "loadgen_cpu": (time.process_time() - cpu0) / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("address")
    parser.add_argument("-c", "--clients", type=int, default=8)
    parser.add_argument("-d", "--duration", type=float, default=2.0)
    parser.add_argument("--request-file", type=Path, required=True, help="a serialized ModelInferRequest")
    parser.add_argument("--header", action="append", default=[])
    parser.add_argument("--method", default=METHOD, help=f"the RPC's path (default {METHOD})")
    args = parser.parse_args()
    if not args.address.startswith("127.0.0.1:"):
        parser.error("loads go to 127.0.0.1 only")
    headers = dict(h.split(": ", 1) for h in args.header)
    result = asyncio.run(_generate(args.address, args.method, args.request_file.read_bytes(), headers, args.clients, args.duration))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
