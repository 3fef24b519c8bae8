"""Adaptive batching A/B: one model's deployment without batching and its `<name>-batched`
twin, loaded in alternating blocks, one row per request.

    python -m benchmarks.batching_ab [--models diabetes,mlp_large] [-c 8,32] [--repeats 4] [-d 2]
    python -m benchmarks.batching_ab --in-process [-c 1,8,32] [-n 2000]

Over HTTP: `sluice serve` (2 workers), wrk, v2 JSON. In process (`--in-process`): one event
loop (uvloop where installed, as `sluice serve`), `c` clients each sending its next request when
the last is answered, straight to the prediction service (no HTTP): req/s and the CPU time per
request of the process (all its threads), the batcher's own effect. Its latencies do not
compare (an unbatched request runs in one go once its turn comes, and the wait for that turn
is not counted): take p99 from the HTTP run.

Prints, per model and connection count, each block's p99 and req/s and the ratios batched ÷
unbatched (the range over the repeats): on a shared machine only interleaved ratios mean much.
The peers benchmark (`make bench`) records the same ratio with the goal (at most 1.1x).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from benchmarks import loadgen
from benchmarks.common import rotate, tree_cpu_s
from benchmarks.httpbench import check_once, loaded, sluice_process
from benchmarks.prepare import MODELS, api_key, batched, prepare, v2_body


def in_process(models: list[str], connections: list[int], repeats: int, n: int) -> list[dict[str, Any]]:
    """Each model plain and batched, `n` requests per block, blocks alternating."""
    import asyncio
    import time

    from benchmarks.prepare import HOME, TENANT
    from sluice.domain import Principal
    from sluice.domain.requests import PredictionRequest, RowInputs
    from sluice.settings import Settings
    from sluice.wiring import Container

    container = Container.from_settings(Settings(mode="local", home=HOME, registry="", store=""))
    principal = Principal(TENANT, frozenset({"predict"}), "bench")
    predictions = container.predictions

    async def block(deployment: str, rows: list[list[float]], clients: int) -> dict[str, float]:
        left = n

        async def client() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await predictions.predict(principal, PredictionRequest(deployment=deployment, inputs=RowInputs(inputs=rows)))
                await asyncio.sleep(0)  # the answer written, the next request read: a turn of the loop

        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        return {"rps": n / wall, "cpu_us": cpu / n * 1e6}

    async def everything() -> list[dict[str, Any]]:
        out = []
        for name in models:
            rows = MODELS[name].rows(1)
            subjects = {"plain": name, "batched": batched(name)}
            for deployment in subjects.values():
                await block(deployment, rows, 8)  # warm-up
            for conc in connections:
                runs: dict[str, list[dict[str, float]]] = {who: [] for who in subjects}
                for r in range(repeats):
                    for who in rotate(list(subjects), r):
                        runs[who].append(await block(subjects[who], rows, conc))
                out.append(_row(name, conc, runs))
        return out

    try:  # the loop `sluice serve` runs on (uvicorn's choice where uvloop is installed)
        import uvloop
    except ImportError:
        return asyncio.run(everything())
    return uvloop.run(everything())


def _row(name: str, conc: int, runs: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    pairs = list(zip(runs["batched"], runs["plain"], strict=True))
    row = {
        "model": name, "connections": conc,
        **{f"{key}_ratio": [round(b[key] / p[key], 2) for b, p in pairs] for key in ("rps", "cpu_us")},
        **{key: {who: [round(x[key]) for x in v] for who, v in runs.items()} for key in ("rps", "cpu_us")},
    }  # fmt: skip
    ranges = "; ".join(f"{key} {min(row[f'{key}_ratio'])}-{max(row[f'{key}_ratio'])}" for key in ("rps", "cpu_us"))
    print(f"{name} c{conc}: batched/plain {ranges} (req/s {row['rps']}, CPU µs/request {row['cpu_us']})", file=sys.stderr, flush=True)
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="diabetes,mlp_large")
    parser.add_argument("-c", "--connections", default="8,32")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("-d", "--duration", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--in-process", action="store_true", help="no HTTP: the prediction service in this process")
    parser.add_argument("-n", type=int, default=2000, help="--in-process: requests per block")
    args = parser.parse_args(argv)
    prepare()
    if args.in_process:
        connections = [int(c) for c in args.connections.split(",")]
        json.dump(in_process(args.models.split(","), connections, args.repeats, args.n), sys.stdout)
        return
    key = api_key()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    out = []
    with sluice_process(args.workers) as (base, pid):
        for name in args.models.split(","):
            body = v2_body(MODELS[name])
            urls = {"plain": f"{base}/v2/models/{name}/infer", "batched": f"{base}/v2/models/{batched(name)}/infer"}
            for url in urls.values():
                check_once(url, body, headers)
                loaded(url, body, headers, 8, 1)  # warm-up
            for conc in (int(c) for c in args.connections.split(",")):
                runs: dict[str, list[dict[str, float]]] = {who: [] for who in urls}
                for r in range(args.repeats):
                    for who in rotate(list(urls), r):
                        before = tree_cpu_s(pid)
                        result = loadgen.load(urls[who], body=body, headers=headers, connections=conc, duration_s=args.duration)
                        result["cpu_us"] = (tree_cpu_s(pid) - before) / max(result["requests"], 1) * 1e6
                        runs[who].append(result)
                p99 = [b["p99_us"] / p["p99_us"] for b, p in zip(runs["batched"], runs["plain"], strict=True)]
                rps = [b["rps"] / p["rps"] for b, p in zip(runs["batched"], runs["plain"], strict=True)]
                cpu = [b["cpu_us"] / p["cpu_us"] for b, p in zip(runs["batched"], runs["plain"], strict=True)]
                row = {
                    "model": name, "connections": conc,
                    "p99_ratio": [round(x, 2) for x in p99], "rps_ratio": [round(x, 2) for x in rps],
                    "cpu_ratio": [round(x, 2) for x in cpu],
                    "p99_us": {who: [round(x["p99_us"]) for x in v] for who, v in runs.items()},
                    "rps": {who: [round(x["rps"]) for x in v] for who, v in runs.items()},
                    "cpu_us": {who: [round(x["cpu_us"]) for x in v] for who, v in runs.items()},
                    "errors": {who: sum(x["errors"] for x in v) for who, v in runs.items()},
                    "non_2xx": {who: sum(x["non_2xx"] for x in v) for who, v in runs.items()},
                    "latency_notes": loadgen.latency_notes(f"{name}, {conc} conn", runs),
                }  # fmt: skip
                out.append(row)
                for note in row["latency_notes"]:
                    print(f"warning: {note}", file=sys.stderr, flush=True)
                print(
                    f"{name} c{conc}: p99 batched/plain {min(p99):.2f}-{max(p99):.2f} "
                    f"(plain {row['p99_us']['plain']} batched {row['p99_us']['batched']} µs); "
                    f"req/s {min(rps):.2f}-{max(rps):.2f} (plain {row['rps']['plain']} batched {row['rps']['batched']}); "
                    f"CPU/request {min(cpu):.2f}-{max(cpu):.2f} ({row['cpu_us']} µs); errors {row['errors']}",
                    file=sys.stderr,
                    flush=True,
                )
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
