"""Adaptive batching A/B: `sluice serve` (2 workers), one model's deployment without batching
and its `<name>-batched` twin, loaded in alternating blocks (wrk, v2 JSON, one row per request).

    python -m benchmarks.batching_ab [--models diabetes,mlp_large] [-c 8,32] [--repeats 4] [-d 2]

Prints, per model and connection count, each block's p99 and req/s and the ratios batched ÷
unbatched (the range over the repeats): on a shared machine only interleaved ratios mean much.
The peers benchmark (`make bench`) records the same ratio with the goal (at most 1.1x).
"""

from __future__ import annotations

import argparse
import json
import sys

from benchmarks import loadgen
from benchmarks.common import rotate, tree_cpu_s
from benchmarks.httpbench import check_once, loaded, sluice_process
from benchmarks.prepare import MODELS, api_key, batched, prepare, v2_body


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="diabetes,mlp_large")
    parser.add_argument("-c", "--connections", default="8,32")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("-d", "--duration", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    prepare()
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
                }  # fmt: skip
                out.append(row)
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
