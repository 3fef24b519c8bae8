"""What a `sluice` process costs to start: CPU seconds (user + system) of the whole process and
the processes it waited for, from spawn to exit.

- `sluice batch list` on a home with the demo deployments (a plain CLI command: the parser, the
  settings, the registry opened, one query, a table);
- `sluice batch run` on a 1,000-row Parquet file (start-up is nearly all of it), against the
  plain pyarrow + ONNX Runtime script scoring the same file (`benchmarks/plain_batch.py`);
- `sluice serve --workers 1` and `--workers 2`: spawned, `/healthz` polled until it answers,
  then until the process tree's CPU stays still for half a second (every worker has started:
  `/healthz` answers from the first), then SIGTERM and the exit;
- `serve 1 api`: as `serve 1`, and once healthy one request to each of several of the API's
  routers (models, deployments, batch jobs, keys, v2 metadata), with the admin key: what a
  worker that serves the API pays by its first requests.

The polling is this process's CPU, not the subject's. Each figure is the median of its rounds,
the subjects taking turns in a rotated order; a busy machine moves CPU time much less than
wall time.

A/B between two source trees (each a folder holding the `sluice` package), alternated per
round: `python -m benchmarks.bench_startup --tree main=../main/functions --tree new=functions
--rounds 5`. It prints each subject's CPU seconds per tree and the ranges.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    PYTHON,
    REPO,
    WORK,
    bench_env,
    figure,
    free_port,
    rotate,
    tree_cpu_s,
    wait_http,
)

MODEL = REPO / "models" / "diabetes_mlp.onnx"
ROWS = 1_000
SUBJECTS = ("batch list", "batch run", "plain script", "serve 1", "serve 2", "serve 1 api")
FIRST_REQUESTS = ("/api/v1/models", "/api/v1/deployments", "/api/v1/batch-jobs", "/api/v1/keys", "/v2/models/diabetes")


def _env(functions: Path, home: Path) -> dict[str, str]:
    env = bench_env(SLUICE_HOME=str(home), SLUICE_LOG_LEVEL="WARNING", SLUICE_GRPC_PORT="0")
    env["PYTHONPATH"] = os.pathsep.join([str(functions), str(REPO), env.get("PYTHONPATH", "")])
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's interpreter caches bytecode
    env.pop("SLUICE_BATCH_CONCURRENCY", None)
    return env


def _prepare(work: Path, functions: Path) -> tuple[Path, Path]:
    """A home with the demo deployments, and the input file."""
    home = work / "home"
    code = (
        "from sluice.demo import install_demo; from sluice.domain import Principal; from sluice import wiring; "
        "install_demo(wiring.get_container(), Principal('default', frozenset({'admin', 'predict'}), 'bench'))"
    )
    subprocess.run([PYTHON, "-c", code], env=_env(functions, home), cwd=REPO, check=True, timeout=300, capture_output=True)
    source = work / "diabetes-1k.parquet"
    code = f"from benchmarks.bench_batch import _write_input; from pathlib import Path; _write_input(Path({str(source)!r}), {ROWS})"
    subprocess.run([PYTHON, "-c", code], cwd=REPO, env=bench_env(), check=True, timeout=300)
    return home, source


def _exited(process: subprocess.Popen[bytes], argv: list[str]) -> float:
    """Wait for the process; its CPU seconds and those of the children it waited for."""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        error = process.stderr.read().decode(errors="replace") if process.stderr else ""
        raise RuntimeError(f"{argv[2:6]} exited {process.returncode}: {error[-1500:]}")
    return usage.ru_utime + usage.ru_stime


def _command(argv: list[str], env: dict[str, str]) -> float:
    process = subprocess.Popen(argv, env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return _exited(process, argv)


def _serve(workers: int, env: dict[str, str], *, api: bool = False) -> float:
    port = free_port()
    argv = [PYTHON, "-m", "sluice.cli", "serve", "--port", str(port), "--workers", str(workers)]
    process = subprocess.Popen(argv, env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout_s=120, proc=process)
        if api:
            _first_requests(port, (Path(env["SLUICE_HOME"]) / "admin-key").read_text().strip())
        before = tree_cpu_s(process.pid)
        while True:  # every worker started: the tree's CPU stays still
            time.sleep(0.5)
            now = tree_cpu_s(process.pid)
            if now - before < 0.03:
                break
            before = now
        process.send_signal(signal.SIGTERM)
        return _exited(process, argv)
    finally:
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _first_requests(port: int, key: str) -> None:
    import urllib.request

    for path in FIRST_REQUESTS:
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"x-api-key": key})
        with urllib.request.urlopen(request, timeout=60) as response:
            if response.status != 200:
                raise RuntimeError(f"{path}: {response.status}")


def _subject(name: str, env: dict[str, str], work: Path, source: Path) -> float:
    sluice = [PYTHON, "-m", "sluice.cli"]
    if name == "batch list":
        return _command([*sluice, "batch", "list"], env)
    if name == "batch run":
        out = work / "sluice-out"
        shutil.rmtree(out, ignore_errors=True)
        return _command([*sluice, "batch", "run", str(source), "--deployment", "diabetes", "--out", str(out), "--concurrency", "1"], env)
    if name == "plain script":
        return _command([PYTHON, "-m", "benchmarks.plain_batch", str(MODEL), str(source), str(work / "plain.parquet")], env)
    return _serve(int(name.split()[1]), env, api=name.endswith(" api"))


def measure(trees: dict[str, Path], rounds: int, subjects: tuple[str, ...] = SUBJECTS) -> dict[tuple[str, str], list[float]]:
    """{(tree, subject): CPU seconds per round}, the trees and subjects alternated per round."""
    work = WORK / "startup"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    home, source = _prepare(work, next(iter(trees.values())))
    runs = [(tree, name) for name in subjects for tree in trees if name != "plain script" or tree == next(iter(trees))]
    results: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
    for _ in range(1):  # one discarded round: bytecode written, files cached
        for tree, name in runs:
            _subject(name, _env(trees[tree], home), work, source)
    for r in range(rounds):
        for tree, name in rotate(runs, r):
            results[(tree, name)].append(_subject(name, _env(trees[tree], home), work, source))
    shutil.rmtree(work, ignore_errors=True)
    return results


def run(quick: bool) -> dict[str, Any]:
    rounds = 2 if quick else 5
    results = measure({"sluice": REPO / "functions"}, rounds)
    plain = results[("sluice", "plain script")]
    figures = [
        figure("startup.batch_run", f"`sluice batch run`, {ROWS:,}-row Parquet: CPU of the whole process", "CPU s",
               "sluice batch run --concurrency 1", results[("sluice", "batch run")], reference="plain script", ref_values=plain,
               note="spawn to exit: start-up is nearly all of it"),
        figure("startup.batch_list", "`sluice batch list`: CPU of the whole process", "CPU s", "sluice batch list",
               results[("sluice", "batch list")], reference="plain script", ref_values=plain),
    ]  # fmt: skip
    for workers in (1, 2):
        figures.append(figure(
            f"startup.serve.{workers}", f"`sluice serve --workers {workers}`: start, healthy, SIGTERM, exit", "CPU s",
            f"sluice serve --workers {workers}", results[("sluice", f"serve {workers}")],
            note="the supervisor and its workers, every worker started before the signal",
        ))  # fmt: skip
    figures.append(figure(
        "startup.serve.1.api", "`sluice serve --workers 1`: start, healthy, first requests to five routers, SIGTERM, exit", "CPU s",
        "sluice serve --workers 1, then " + ", ".join(FIRST_REQUESTS), results[("sluice", "serve 1 api")],
        note="what a worker serving the API pays by its first requests",
    ))  # fmt: skip
    notes = [f"{rounds} rounds after one discarded, subjects in a rotated order; user + system CPU seconds of each process and the children it waited for."]
    return {"title": "Start-up", "figures": figures, "notes": notes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", required=True, metavar="NAME=FOLDER", help="a folder holding the sluice package (repeat: A/B)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", help=f"comma-separated subjects ({', '.join(SUBJECTS)})")
    args = parser.parse_args(argv)
    trees = {name: Path(folder).resolve() for name, folder in (t.split("=", 1) for t in args.tree)}
    subjects = tuple(args.only.split(",")) if args.only else SUBJECTS
    results = measure(trees, args.rounds, subjects)
    print(f"load average at the end: {os.getloadavg()}")
    for name in subjects:
        for tree in trees:
            values = results.get((tree, name))
            if values:
                print(f"{name:13} {tree:8} median {statistics.median(values):.3f}  [{min(values):.3f}-{max(values):.3f}]  {' '.join(f'{v:.2f}' for v in values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
