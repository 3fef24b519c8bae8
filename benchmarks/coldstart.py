"""Cold start: a fresh Python process that imports the handler and answers its first request.

For each repeat and each subject a new interpreter starts, imports its handler module
(`sluice.handlers.api`, or the hand-written `benchmarks.peers.handwritten` serving only that
model, as a Lambda function would), and passes one API Gateway event through it. sluice builds
its services and loads the model on that first request, from a prepared home (SQLite registry,
artifact folder); the hand-written app loads its session at import. The figure is the time from
spawning the process to the first response, which is what Lambda's init plus first invoke costs.

Also measured on their own, in fresh processes: the import of `sluice.handlers.api` against the
import of `onnxruntime, fastapi, boto3` (the libraries a hand-written Lambda of this kind pays for).
One discarded run of each warms the file cache and writes bytecode.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import PYTHON, REPO, Goal, bench_env, figure, lambda_env, rotate, section
from benchmarks.inprocess import rest_event
from benchmarks.prepare import HOME, MODELS, MODELS_DIR, handwritten_body, sluice_body

GOAL = Goal("<=", 1.1)

# Each child writes its timings to argv[1]; stdout (logs, metrics) goes to /dev/null.
_FIRST_REQUEST = """
import time, sys
t0 = time.perf_counter(); w0 = time.time()
import json
from {module} import handler
t1 = time.perf_counter()
event = json.loads(open(sys.argv[2]).read())
from benchmarks.inprocess import LambdaContext
response = handler(event, LambdaContext())
t2 = time.perf_counter(); w2 = time.time()
open(sys.argv[1], "w").write(json.dumps({{
    "start_wall": w0, "end_wall": w2, "import_ms": (t1 - t0) * 1e3, "first_ms": (t2 - t1) * 1e3,
    "status": response.get("statusCode"), "body": str(response.get("body"))[:300],
}}))
"""

_IMPORT_ONLY = """
import time, sys
t0 = time.perf_counter()
{imports}
t1 = time.perf_counter()
open(sys.argv[1], "w").write('{{"import_ms": %f}}' % ((t1 - t0) * 1e3))
"""

IMPORTS = {
    "sluice.handlers.api": "import sluice.handlers.api",
    "onnxruntime, fastapi, boto3": "import onnxruntime, fastapi, boto3",
}


def _spawn(code: str, *args: str, env: dict[str, str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        spawned = time.time()
        proc = subprocess.run(
            [PYTHON, "-c", code, str(out), *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"cold-start child failed ({proc.returncode}): {proc.stderr[-1500:]}")
        data = json.loads(out.read_text())
    if "end_wall" in data:
        if data["status"] != 200:
            raise RuntimeError(f"cold-start first request answered {data['status']}: {data['body']}")
        data["total_ms"] = (data["end_wall"] - spawned) * 1e3
        data["interpreter_ms"] = (data["start_wall"] - spawned) * 1e3
    return data


def run(quick: bool) -> list[dict[str, Any]]:
    repeats = 3 if quick else 5
    models = ["iris"] if quick else ["iris", "mlp_large"]
    env = lambda_env(SLUICE_HOME=str(HOME), BENCH_MODELS_DIR=str(MODELS_DIR))
    figures: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            model = MODELS[name]
            events = {
                "sluice": Path(tmp) / f"{name}-sluice.json",
                "hand-written": Path(tmp) / f"{name}-hand.json",
            }
            events["sluice"].write_text(json.dumps(rest_event("/api/v1/predictions", sluice_body(model), tenant="default")))
            events["hand-written"].write_text(json.dumps(rest_event(f"/models/{name}/predict", handwritten_body(model))))
            codes = {
                "sluice": _FIRST_REQUEST.format(module="sluice.handlers.api"),
                "hand-written": _FIRST_REQUEST.format(module="benchmarks.peers.handwritten"),
            }
            subject_env = {"sluice": env, "hand-written": {**env, "BENCH_MODEL": name}}
            runs: dict[str, list[dict[str, Any]]] = {s: [] for s in codes}
            for subject in codes:  # discarded: warms the file cache and the bytecode
                _spawn(codes[subject], str(events[subject]), env=subject_env[subject])
            for r in range(repeats):
                for subject in rotate(list(codes), r):
                    runs[subject].append(_spawn(codes[subject], str(events[subject]), env=subject_env[subject]))
            ours, hand = runs["sluice"], runs["hand-written"]
            for key, label, goal in (
                ("total_ms", "process start to first response", GOAL),
                ("import_ms", "import of the handler module", None),
                ("first_ms", "first request (sluice: builds services, loads the model)", None),
            ):
                figures.append(
                    figure(
                        f"coldstart.{name}.{key.removesuffix('_ms')}",
                        f"{name}: {label}",
                        "ms",
                        "sluice",
                        [x[key] for x in ours],
                        reference="hand-written Mangum",
                        ref_values=[x[key] for x in hand],
                        goal=goal,
                    )
                )
        env_plain = bench_env()
        imports: dict[str, list[float]] = {k: [] for k in IMPORTS}
        for label in IMPORTS:
            _spawn(_IMPORT_ONLY.format(imports=IMPORTS[label]), env=env_plain)
        for r in range(repeats):
            for label in rotate(list(IMPORTS), r):
                imports[label].append(_spawn(_IMPORT_ONLY.format(imports=IMPORTS[label]), env=env_plain)["import_ms"])
        figures.append(
            figure(
                "coldstart.import.sluice_vs_libs",
                "import sluice.handlers.api vs import onnxruntime, fastapi, boto3",
                "ms",
                "import sluice.handlers.api",
                imports["sluice.handlers.api"],
                reference="import onnxruntime, fastapi, boto3",
                ref_values=imports["onnxruntime, fastapi, boto3"],
            )
        )
    return [
        section(
            "coldstart",
            "Cold start in fresh processes (REST event through the handler, prepared home)",
            figures,
            notes=[
                "sluice imports onnxruntime lazily, on the first request that needs a session, so its import "
                "figure leaves ONNX Runtime out and its first-request figure has it in.",
            ],
        )
    ]
