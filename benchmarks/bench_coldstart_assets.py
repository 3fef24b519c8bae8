"""Cold start from the built Lambda assets: bytecode, and SnapStart's hooks.

The core layer and the function code are built exactly as `cdk synth` builds them (pip for
the runtime's platform, bytecode compiled by the runtime's Python), then run by an interpreter
of that version that cannot write bytecode, as on Lambda (`/opt` and `/var/task` are
read-only):

- import of `sluice.handlers.api` from the assets with their bytecode, against the same assets
  with every `__pycache__` removed (what was shipped before), interleaved, fresh processes;
- in one process standing in for a SnapStart function: the work the before-snapshot hook
  moves out of the cold start (import ONNX Runtime, load the preloaded deployment), the
  after-restore hook, and the first answer after the restore against a warm answer.

The runtime version is the configured one (infra/sluice.yaml) when this machine has it, else
the oldest SnapStart Python (3.12) it has; the section says which.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, Goal, figure, rotate

IMPORT_GOAL = Goal("<=", 0.6)  # the issue measured 370-483 ms against 915-975 ms
TO_FIRST_ANSWER_GOAL = Goal("<=", 0.2)

_IMPORT = """
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
import sluice.handlers.api
c1, t1 = time.process_time(), time.perf_counter()
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "import_cpu_ms": (c1 - c0) * 1e3}))
"""

_SNAPSTART = """
import json, statistics, sys, time
t0 = time.perf_counter()
from sluice.handlers import api, snapstart
import_ms = (time.perf_counter() - t0) * 1e3

class Context:
    function_name = "sluice-api"; function_version = "1"; memory_limit_in_mb = 2048
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:sluice-api:live"
    aws_request_id = "bench"; log_group_name = "/aws/lambda/sluice-api"; log_stream_name = "bench"

event = json.loads(open(sys.argv[1]).read())
warmed = snapstart.before_snapshot()
snapstart.after_restore()
t = time.perf_counter(); first = api.handler(event, Context()); first_ms = (time.perf_counter() - t) * 1e3
warm = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter(); answer = api.handler(event, Context()); warm.append((time.perf_counter() - t) * 1e3)
assert first["statusCode"] == 200 and answer["statusCode"] == 200, (first, answer)
print(json.dumps({
    "import_ms": import_ms, "loaded": warmed.loaded, "warmed": warmed.ms,
    "before_ms": snapstart.state.ms["before_snapshot"], "restore_ms": snapstart.state.ms["after_restore"],
    "first_ms": first_ms, "warm_ms": statistics.median(warm),
}))
"""

_COLD = """
import json, sys, time
t0 = time.perf_counter()
from sluice.handlers import api

class Context:
    function_name = "sluice-api"; function_version = "$LATEST"; memory_limit_in_mb = 2048
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:sluice-api"
    aws_request_id = "bench"; log_group_name = "/aws/lambda/sluice-api"; log_stream_name = "bench"

event = json.loads(open(sys.argv[1]).read())
t1 = time.perf_counter(); answer = api.handler(event, Context()); t2 = time.perf_counter()
assert answer["statusCode"] == 200, answer
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "first_ms": (t2 - t1) * 1e3, "total_ms": (t2 - t0) * 1e3}))
"""


def _runtime_version() -> tuple[str | None, str]:
    from infra.config import load_config
    from infra.constructs.bytecode import find_interpreter

    configured = load_config().functions.python
    for version in (configured, "3.12", "3.13", "3.14"):
        if find_interpreter(version):
            note = (
                f"Python {version}, the configured runtime"
                if version == configured
                else f"Python {version}: this machine has no Python {configured} (the configured runtime)"
            )
            return version, note
    return None, f"no Python {configured}, 3.12, 3.13 or 3.14 on this machine"


def _build(outdir: Path, python: str) -> tuple[Path, Path]:
    """The core layer and the function code, staged by CDK with bundling on."""
    from aws_cdk import App, Stack
    from aws_cdk import aws_lambda as lambda_
    from infra.constructs.functions import FunctionPlatform
    from infra.constructs.python_layer import staged_path

    context = json.loads((REPO / "cdk.json").read_text())["context"]
    app = App(context=context, outdir=str(outdir))
    stack = Stack(app, "Assets")
    platform = FunctionPlatform(
        python=python, architecture_name="x86_64", log_retention_days=30, retain_logs=False, environment={}
    )
    layer = platform.layer(stack, "Core", name="core", description="core")
    function = lambda_.Function(
        stack, "Fn", runtime=platform.runtime, handler="sluice.handlers.api.handler", code=platform.code()
    )
    return staged_path(layer.layer) / "python", staged_path(function)


def _without_bytecode(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"), symlinks=True)
    return target


def _prepare_home(home: Path) -> Path:
    from sluice.domain import Principal
    from sluice.settings import Settings
    from sluice.wiring import Container

    container = Container.from_settings(Settings(mode="local", home=home))
    principal = Principal("default", frozenset({"admin", "predict"}), "bench")
    version = container.models.push(principal, "iris", (REPO / "models" / "iris.onnx").read_bytes())
    container.deployments.create(principal, "iris", {"kind": "single", "model": "iris", "version": version.version})
    event = home / "event.json"
    from benchmarks.inprocess import rest_event

    body = json.dumps({"deployment": "iris", "inputs": [[5.9, 3.0, 5.1, 1.8]]}).encode()
    event.write_text(json.dumps(rest_event("/api/v1/predictions", body, tenant="default")))
    return event


def _child(python: str, code: str, paths: list[Path], *args: str, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run(
        [python, "-c", code, *args],
        env={**env, "PYTHONPATH": os.pathsep.join(str(p) for p in paths), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}): {proc.stderr[-1500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(quick: bool) -> dict[str, Any]:
    from infra.constructs.bytecode import find_interpreter

    version, which = _runtime_version()
    title = "Cold start from the built Lambda assets (bytecode, SnapStart hooks)"
    if version is None:
        return {"title": title, "figures": [], "notes": [f"not measured: {which}"]}
    python = find_interpreter(version)
    assert python is not None
    repeats = 3 if quick else 7
    figures: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        layer, code = _build(root / "cdk.out", version)
        bare = [_without_bytecode(code, root / "code-src"), _without_bytecode(layer, root / "layer-src")]
        compiled = [code, layer]
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", str(root)),
            "SLUICE_HOME": str(root / "home"),
            "SLUICE_PRELOAD": json.dumps(["default/iris"]),
            "POWERTOOLS_METRICS_NAMESPACE": "bench",
            "POWERTOOLS_LOG_LEVEL": "ERROR",
            "LOG_LEVEL": "ERROR",
        }
        event = _prepare_home(root / "home")
        trees = {"bytecode": compiled, "sources only": bare}
        _child(python, _IMPORT, compiled, env=env)  # discarded: warms the file cache
        _child(python, _IMPORT, bare, env=env)
        imports: dict[str, list[dict[str, float]]] = {k: [] for k in trees}
        for r in range(repeats):
            for subject in rotate(list(trees), r):
                imports[subject].append(_child(python, _IMPORT, trees[subject], env=env))
        # CPU time carries the goal: on a shared machine the wall clock also counts the time
        # the process waited for a core.
        for key, clock, goal in (("import_cpu_ms", "CPU time", IMPORT_GOAL), ("import_ms", "wall", None)):
            figures.append(
                figure(
                    f"coldstart_assets.import{'' if goal else '_wall'}",
                    f"import sluice.handlers.api from the built assets, read-only, {clock} "
                    f"(Python {version})",
                    "ms",
                    "bytecode",
                    [i[key] for i in imports["bytecode"]],
                    reference="sources only",
                    ref_values=[i[key] for i in imports["sources only"]],
                    goal=goal,
                )
            )
        snaps = [_child(python, _SNAPSTART, compiled, str(event), "50", env=env) for _ in range(repeats)]
        colds = [_child(python, _COLD, compiled, str(event), env={**env, "SLUICE_PRELOAD": "[]"}) for _ in range(repeats)]
        figures.append(
            figure(
                "coldstart_assets.to_first_answer",
                "cold start to first answer: after-restore hook + first request (SnapStart; "
                "Lambda's snapshot restore not included) vs import + first request (no SnapStart)",
                "ms",
                "SnapStart",
                [s["restore_ms"] + s["first_ms"] for s in snaps],
                reference="no SnapStart",
                ref_values=[c["total_ms"] for c in colds],
                goal=TO_FIRST_ANSWER_GOAL,
            )
        )
        figures.append(
            figure(
                "coldstart_assets.before_snapshot",
                "work moved before the snapshot (routes, ONNX Runtime import, preloaded model load)",
                "ms",
                "before-snapshot hook",
                [s["before_ms"] for s in snaps],
            )
        )
        figures.append(
            figure(
                "coldstart_assets.after_restore",
                "after-restore hook (re-seed, new clients and container, re-read the deployments)",
                "ms",
                "after-restore hook",
                [s["restore_ms"] for s in snaps],
            )
        )
        figures.append(
            figure(
                "coldstart_assets.first_after_restore",
                "first answer after a simulated restore, against a warm answer",
                "ms",
                "first after restore",
                [s["first_ms"] for s in snaps],
                reference="warm (median of 50)",
                ref_values=[s["warm_ms"] for s in snaps],
            )
        )
    return {
        "title": title,
        "figures": figures,
        "notes": [
            f"Interpreter: {which} ({python}); PYTHONDONTWRITEBYTECODE=1 on both trees.",
            "The restore is simulated in process (the hooks run in order, no memory snapshot): "
            "Lambda's own restore time is not in these figures.",
        ],
    }
