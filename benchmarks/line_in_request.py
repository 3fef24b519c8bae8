"""The prediction's log line measured inside the request it belongs to (docs/features.md, the
lookups' Performance). The lookup graph of `bench_lookups` through the Lambda handler, the same
graph with its line left out, the same with its line written by the least code that could write
it (the line's fixed keys as one text, `orjson.dumps` of the fields, one write), and the
hand-written handler, taken in random order request by request in one process: each subject
meets the others' work between its requests, as a line meets the rest of its request. A tight
loop of the line alone says far less (its code and data stay in the processor's caches there).
No goal, not in `make bench`: `python -m benchmarks.line_in_request [--n 3000] [--runs 3]`."""

from __future__ import annotations

import argparse
import io
import json
import random
import time
from pathlib import Path
from typing import Any

from benchmarks.common import percentile

SUBJECTS = ("graph", "without its line", "least line", "hand-written")


def child(out: Path, folder: Path, n: int) -> None:
    import orjson
    from tests.support import LambdaContext

    import sluice.observability.telemetry as telemetry
    from benchmarks.bench_lookups import one_row
    from sluice.handlers import api
    from sluice.observability import get_logger

    hand, graph, plain = one_row(folder)
    context = LambdaContext()
    handler = get_logger()._logger.handlers[0]
    stream, written = handler.stream, io.StringIO()
    handler.stream = written  # one line, to take its fixed keys from
    api.handler(graph, context)
    handler.stream = stream
    line = written.getvalue()
    prefix = line[: line.index('"request_id"')]  # level, location, message, timestamp, service, the Lambda context
    log_info = telemetry.log_info

    def least(_logger: Any, _message: str, fields: dict[str, Any]) -> None:
        stream.write(prefix + orjson.dumps(fields, default=str)[1:].decode() + "\n")

    def variant(write: Any) -> Any:
        def call(event: dict[str, Any], ctx: Any) -> Any:
            telemetry.log_info = write
            try:
                return api.handler(event, ctx)
            finally:
                telemetry.log_info = log_info

        return call

    subjects = {
        "graph": (api.handler, graph),
        "without its line": (variant(lambda *_: None), graph),
        "least line": (variant(least), graph),
        "hand-written": (hand, plain),
    }
    for call, event in subjects.values():
        for _ in range(200):
            if call(event, context)["statusCode"] != 200:
                raise RuntimeError("unexpected answer")
    samples: dict[str, list[float]] = {name: [] for name in subjects}
    order = list(subjects.items())
    clock = time.perf_counter
    for _ in range(n):
        random.shuffle(order)  # random order: no subject always follows the same one
        for name, (call, event) in order:
            started = clock()
            call(event, context)
            samples[name].append((clock() - started) * 1e6)
    out.write_text(json.dumps({name: percentile(taken, 50) for name, taken in samples.items()}))


def run(n: int, runs: int) -> list[dict[str, float]]:
    from benchmarks.bench_lookups import in_child

    return [in_child("benchmarks.line_in_request", "--n", str(n)) for _ in range(runs)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", type=Path)
    parser.add_argument("--folder", type=Path)
    parser.add_argument("--n", type=int, default=3000, help="requests of each subject in a run")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.folder, args.n)
        return
    for result in run(args.n, args.runs):
        graph = result["graph"]
        print("  ".join(f"{name} {result[name]:.0f} µs" for name in SUBJECTS), f"| the line {graph - result['without its line']:.0f} µs, the least line {result['least line'] - result['without its line']:.0f} µs")


if __name__ == "__main__":
    main()
