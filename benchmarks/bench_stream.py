"""Streaming inference: the stream Lambda in process against a hand-written minimal handler for
the same event, and `sluice stream` against `sluice batch run` on the same rows.

1. Time per invocation of `handlers.stream.handler` for an SQS batch of 10 records and a
   Kinesis batch of 1,000 (the iris model, `{id, features}` records), with validation,
   partial-failure reporting (powertools' batch processor) and output writing on. Outputs go to
   an in-process sink (JSON Lines to the null device), the same for both handlers, so the
   figure is sluice's own cost, not a mock AWS service's. The minimal handler decodes the
   records with orjson, stacks the rows, makes one ONNX Runtime call, encodes one output per
   record (id, label, probabilities) and writes them to the same sink. Goal: <= 1.5x its time
   (for the SQS batch, well under a millisecond either way, <= 1.5x its billed duration: Lambda
   bills whole milliseconds, rounded up).
2. Lines per second through `sluice stream` (a pipe: stdin to stdout) against `sluice batch
   run` on the same rows as JSON Lines (`{id, features}` records for the stream, flat columns
   for the batch job), each a fresh process, start-up included. Goal: >= 0.8x.

Measurements run in a child process (`python -m benchmarks.bench_stream child …`) with logs
at WARNING; the parent alternates which subject runs first.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import PYTHON, REPO, WORK, Goal, bench_env, figure

FEATURES = ("sepal_length", "sepal_width", "petal_length", "petal_width")


def _rows(n: int, seed: int = 7) -> list[dict[str, Any]]:
    import random

    rng = random.Random(seed)
    return [{"id": f"tx-{i}", "features": {f: round(rng.uniform(0.1, 7.0), 2) for f in FEATURES}} for i in range(n)]


def _events(sqs_n: int, kinesis_n: int) -> dict[str, dict[str, Any]]:
    import base64
    import copy

    sqs = json.loads((REPO / "events/stream_sqs.json").read_text())
    template = sqs["Records"][0]
    sqs["Records"] = []
    for n, row in enumerate(_rows(sqs_n)):
        record = copy.deepcopy(template)
        record["messageId"] = f"00000000-0000-4000-8000-{n:012d}"
        record["body"] = json.dumps(row)
        sqs["Records"].append(record)
    kinesis = json.loads((REPO / "events/stream_kinesis.json").read_text())
    template = kinesis["Records"][0]
    kinesis["Records"] = []
    for n, row in enumerate(_rows(kinesis_n)):
        record = copy.deepcopy(template)
        seq = str(49590338271490256608559692538361571095921575989136588898 + n)
        record["kinesis"]["sequenceNumber"] = seq
        record["kinesis"]["data"] = base64.b64encode(json.dumps(row).encode()).decode()
        record["eventID"] = f"shardId-000000000006:{seq}"
        kinesis["Records"].append(record)
    return {"sqs": sqs, "kinesis": kinesis}


def _minimal_handler(session: Any) -> Any:
    """The floor: what a hand-written Lambda for this one model would do, and nothing more."""
    import base64

    import numpy as np
    import orjson

    feed = session.get_inputs()[0].name
    label_name, prob_name = (o.name for o in session.get_outputs())

    def handler(event: dict[str, Any], sink: Any) -> dict[str, Any]:
        records = event["Records"]
        if records[0]["eventSource"] == "aws:kinesis":
            bodies = [orjson.loads(base64.b64decode(r["kinesis"]["data"])) for r in records]
        else:
            bodies = [orjson.loads(r["body"]) for r in records]
        matrix = np.array([[b["features"][f] for f in FEATURES] for b in bodies], dtype=np.float32)
        labels, probs = session.run([label_name, prob_name], {feed: matrix})
        out = []
        for body, label, p in zip(bodies, labels.tolist(), probs, strict=True):  # iris: ZipMap dicts
            out.append(orjson.dumps({"id": body["id"], "prediction": label, "probabilities": p}) + b"\n")
        sink.write(b"".join(out))
        return {"batchItemFailures": []}

    return handler


def _child_handler(home: Path, seconds: float) -> dict[str, Any]:
    os.environ["SLUICE_LOG_LEVEL"] = "WARNING"
    import onnxruntime as ort
    from tests.support import LambdaContext

    from sluice.domain import Principal
    from sluice.handlers import stream
    from sluice.settings import Settings
    from sluice.stream.bindings import Binding
    from sluice.stream.sinks import FileSink
    from sluice.wiring import Container

    settings = Settings(mode="local", home=home, log_level="WARNING", streams={"*": {"tenant": "bench", "deployment": "iris"}})
    container = Container.from_settings(settings)
    operator = Principal("bench", frozenset({"admin", "predict"}), "bench")
    container.models.push(operator, "iris", (REPO / "models/iris.onnx").read_bytes())
    container.deployments.create(operator, "iris", {"kind": "single", "model": "iris", "version": 1})
    stream._container = container
    null = open(os.devnull, "wb")  # noqa: SIM115  (the sink of both handlers, for the whole run)
    stream._sinks[Binding.model_validate(settings.stream.streams["*"]).destination] = FileSink(null)
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(REPO / "models/iris.onnx"), options, providers=["CPUExecutionProvider"])
    minimal = _minimal_handler(session)
    context = LambdaContext(function_name="sluice-stream")
    events = _events(10, 1000)
    subjects = {
        "sluice": lambda event: stream.handler(event, context),
        "minimal": lambda event: minimal(event, null),
    }
    result: dict[str, Any] = {}
    for name, event in events.items():
        for call in subjects.values():  # warm: the model loaded, caches filled
            answer = call(event)
            assert answer == {"batchItemFailures": []}, answer
        per = {s: [] for s in subjects}
        for r in range(6):  # alternate, each a burst of invocations for a share of the time
            for subject in (list(subjects) if r % 2 == 0 else list(subjects)[::-1]):
                call, n, started = subjects[subject], 0, time.perf_counter()
                while time.perf_counter() - started < seconds / 12:
                    call(event)
                    n += 1
                per[subject].append((time.perf_counter() - started) / n)
        result[name] = {s: statistics.median(v) for s, v in per.items()}
        result[name]["runs"] = per
        result[name]["records"] = len(event["Records"])
    return result


def _child_pipe(kind: str, source: Path, home: Path) -> dict[str, Any]:
    """One `sluice stream` or `sluice batch run` over `source`, timed from outside."""
    env = bench_env(SLUICE_HOME=str(home), SLUICE_LOG_LEVEL="WARNING")
    cli = [PYTHON, "-m", "sluice.cli", "--tenant", "bench"]
    started = time.perf_counter()
    if kind == "stream":
        with source.open("rb") as stdin, open(os.devnull, "wb") as stdout:
            subprocess.run([*cli, "stream", "--deployment", "iris", "--quiet"], stdin=stdin, stdout=stdout, env=env, check=True)
    else:
        out = home / "batch-out"
        shutil.rmtree(out, ignore_errors=True)
        done = subprocess.run([*cli, "batch", "run", str(source), "--deployment", "iris", "--out", str(out)], env=env, capture_output=True, text=True)
        if done.returncode != 0 or '"SUCCEEDED"' not in done.stdout:
            raise RuntimeError(f"sluice batch run failed: {done.stdout[-800:]} {done.stderr[-800:]}")
    return {"seconds": time.perf_counter() - started}


def _measure(*argv: str) -> dict[str, Any]:
    done = subprocess.run(
        [PYTHON, "-m", "benchmarks.bench_stream", "child", *argv],
        cwd=REPO, env=bench_env(), capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"measurement {argv[:1]} failed: {done.stderr[-1500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def billed_ms(seconds: float) -> float:
    """What Lambda bills for an invocation of `seconds`: whole milliseconds, rounded up."""
    return float(max(1, math.ceil(seconds * 1000)))


def _prepare_home(home: Path) -> None:
    env = bench_env(SLUICE_HOME=str(home), SLUICE_LOG_LEVEL="WARNING")
    cli = [PYTHON, "-m", "sluice.cli", "--tenant", "bench"]
    subprocess.run([*cli, "models", "push", "iris", str(REPO / "models/iris.onnx")], env=env, check=True, capture_output=True)
    subprocess.run([*cli, "deployments", "create", "iris", "--model", "iris"], env=env, check=True, capture_output=True)


def run(quick: bool) -> dict[str, Any]:
    work = WORK / "stream"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    figures: list[dict[str, Any]] = []
    handler = _measure("handler", str(work / "home-handler"), "3" if quick else "6")
    for name, label in (("sqs", "SQS batch of 10"), ("kinesis", "Kinesis batch of 1,000")):
        runs = handler[name]["runs"]
        billed = name == "sqs"  # well under a millisecond: the goal is on what Lambda bills
        figures.append(figure(
            f"stream.handler.{name}", f"stream Lambda in process, {label}: time per invocation", "ms",
            "handlers.stream", [t * 1000 for t in runs["sluice"]], reference="minimal handler (orjson, one ORT call)",
            ref_values=[t * 1000 for t in runs["minimal"]], goal=None if billed else Goal("<=", 1.5), better="lower",
            note=f"{handler[name]['records']} records per invocation; outputs to an in-process sink (JSON Lines to the null device) for both"
            + ("; no goal: see the billed figure" if billed else ""),
        ))  # fmt: skip
        if billed:
            figures.append(figure(
                f"stream.handler.{name}.billed", f"stream Lambda in process, {label}: billed duration per invocation", "ms",
                "handlers.stream", [billed_ms(t) for t in runs["sluice"]], reference="minimal handler (orjson, one ORT call)",
                ref_values=[billed_ms(t) for t in runs["minimal"]], goal=Goal("<=", 1.5), better="lower",
                note="Lambda bills each invocation's duration rounded up to the next millisecond",
            ))  # fmt: skip
    lines = 100_000 if quick else 1_000_000
    # The same rows in each one's shape: stream records (`{id, features}`), batch columns.
    source, flat = work / "rows.jsonl", work / "rows-flat.jsonl"
    with source.open("w") as f, flat.open("w") as g:
        for row in _rows(lines):
            f.write(json.dumps(row) + "\n")
            g.write(json.dumps({"id": row["id"], **row["features"]}) + "\n")
    home = work / "home-cli"
    _prepare_home(home)
    streams, batches = [], []
    for r in range(1 if quick else 3):
        for kind in ("stream", "batch") if r % 2 == 0 else ("batch", "stream"):
            seconds = _measure("pipe", kind, str(source if kind == "stream" else flat), str(home))["seconds"]
            (streams if kind == "stream" else batches).append(lines / seconds)
    figures.append(figure(
        "stream.cli.throughput", f"`sluice stream` on {lines:,} JSON Lines: lines/s", "lines/s", "sluice stream",
        streams, reference="sluice batch run, same file", ref_values=batches, goal=Goal(">=", 0.8), better="higher",
        note="each a fresh process, start-up included; stream writes JSON Lines to stdout, batch run writes its part files",
    ))  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)
    return {"title": "Streaming inference", "figures": figures, "notes": []}


def _child(argv: list[str]) -> dict[str, Any]:
    if argv[0] == "handler":
        return _child_handler(Path(argv[1]), float(argv[2]))
    return _child_pipe(argv[1], Path(argv[2]), Path(argv[3]))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        print(json.dumps(_child(sys.argv[2:])))
    else:
        print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
