"""What every benchmark shares: folders, statistics, figures, processes and the machine's facts.

A *figure* is one number worth reporting: a median over repeated runs, its min-max over those
runs (the machine's noise), and the reference it is judged against (a floor or a peer measured
in the same run), with the ratio between the two and, where the project set one, the goal.
"""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
WORK = BENCH_DIR / "work"  # generated models, the benchmark home, logs, peer venvs (ignored)
RESULTS = BENCH_DIR / "results"
PYTHON = sys.executable


# statistics ---------------------------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation, as numpy's default."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median and min-max of one quantity measured once per repeat."""
    if not values:
        raise ValueError("no values")
    return {
        "median": float(statistics.median(values)),
        "min": float(min(values)),
        "max": float(max(values)),
        "n": len(values),
    }


def latency_summary(samples_ns: Sequence[int], wall_s: float) -> dict[str, float]:
    """p50/p99 in microseconds and the rate of one run of sequential requests."""
    micros = [s / 1000.0 for s in samples_ns]
    return {
        "p50_us": percentile(micros, 50),
        "p99_us": percentile(micros, 99),
        "rps": len(samples_ns) / wall_s if wall_s > 0 else 0.0,
        "count": len(samples_ns),
    }


def rotate(items: Sequence[Any], by: int) -> list[Any]:
    """The items starting at `by` (mod n): alternates which subject runs first per repeat."""
    if not items:
        return []
    k = by % len(items)
    return [*items[k:], *items[:k]]


# figures ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Goal:
    """`ratio <op> target`, where ratio = subject / reference for the figure's quantity."""

    op: str  # "<=" or ">="
    target: float

    def met(self, ratio: float) -> bool:
        return ratio <= self.target if self.op == "<=" else ratio >= self.target

    def __str__(self) -> str:
        return f"{self.op} {self.target:g}x"


def figure(
    fid: str,
    label: str,
    unit: str,
    subject: str,
    values: Sequence[float],
    *,
    reference: str | None = None,
    ref_values: Sequence[float] | None = None,
    goal: Goal | None = None,
    better: str = "lower",
    note: str | None = None,
) -> dict[str, Any]:
    """One row of the report: the subject's median (min-max) next to its reference's."""
    value = spread(values)
    row: dict[str, Any] = {
        "id": fid,
        "label": label,
        "unit": unit,
        "better": better,
        "subject": subject,
        "value": value,
        "reference": reference,
        "ref_value": None,
        "ratio": None,
        "goal": str(goal) if goal else None,
        "met": None,
    }
    if reference is not None and ref_values:
        ref = spread(ref_values)
        row["ref_value"] = ref
        if ref["median"]:
            row["ratio"] = value["median"] / ref["median"]
            if goal is not None:
                row["met"] = goal.met(row["ratio"])
    if note:
        row["note"] = note
    return row


def section(key: str, title: str, figures: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"key": key, "title": title, "figures": figures, **extra}


# processes ----------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_http(url: str, *, timeout_s: float, proc: subprocess.Popen[bytes] | None = None, log: Path | None = None) -> None:
    """Poll a GET until it answers 200; fail early (with the log's tail) if the process dies."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited with code {proc.returncode}{_tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url}: not ready after {timeout_s:.0f} s{_tail(log)}")


def wait_line(line: str, *, log: Path, timeout_s: float, proc: subprocess.Popen[bytes]) -> None:
    """Wait until the server's log holds `line` (a server with no HTTP to poll says it is ready
    there); fail early (with the log's tail) if the process dies."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{line!r}: the server exited with code {proc.returncode}{_tail(log)}")
        if log.exists() and line in log.read_text(errors="replace"):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{line!r}: not in the server's log after {timeout_s:.0f} s{_tail(log)}")


def _tail(log: Path | None, lines: int = 15) -> str:
    if log is None or not log.exists():
        return ""
    text = log.read_text(errors="replace").splitlines()[-lines:]
    return "; log ends:\n" + "\n".join(text)


@contextlib.contextmanager
def server(
    command: list[str],
    *,
    ready_url: str | None = None,
    ready_line: str | None = None,
    log: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout_s: float = 90.0,
    quiet_stdout: bool = False,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run a server in its own session until the block ends, then stop it and its workers.
    Ready once `ready_url` answers 200, or (a server with no HTTP) once its log holds `ready_line`.

    `quiet_stdout` sends stdout (per-request log lines) to /dev/null and keeps stderr in the log.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL if quiet_stdout else out,
            stderr=out if quiet_stdout else subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    try:
        if ready_url is not None:
            wait_http(ready_url, timeout_s=timeout_s, proc=proc, log=log)
        else:
            assert ready_line is not None, "a server is ready at a URL or at a line of its log"
            wait_line(ready_line, log=log, timeout_s=timeout_s, proc=proc)
        yield proc
    finally:
        stop_group(proc)


def local_container(home: Path) -> tuple[Any, Any]:
    """A local sluice container on `home` and the default tenant's admin principal, to set
    deployments up before `local_service` serves them (sluice imported here, not above)."""
    from sluice.domain import Principal
    from sluice.settings import Settings
    from sluice.wiring import Container

    container = Container.from_settings(Settings(mode="local", home=home))
    return container, Principal("default", frozenset({"admin", "predict"}), "bench")


@contextlib.contextmanager
def local_service(home: Path) -> Iterator[tuple[Any, str]]:
    """`sluice serve` on `home` (1 worker, stdout quiet, log in home/serve.log) until the block
    ends: an httpx client bearing the home's admin key, and the service's base URL."""
    import httpx

    port = free_port()
    command = [PYTHON, "-m", "sluice.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    with server(command, ready_url=f"http://127.0.0.1:{port}/healthz", log=home / "serve.log", env=bench_env(SLUICE_HOME=str(home)), cwd=REPO, quiet_stdout=True):
        key = (home / "admin-key").read_text().strip()
        # identity: httpx asks gzip by default, and the serving is measured, not zlib
        with httpx.Client(headers={"Authorization": f"Bearer {key}", "Accept-Encoding": "identity"}, timeout=10) as client:
            yield client, f"http://127.0.0.1:{port}"


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process `pid` and its live descendants (a
    server's workers, Triton's backend stubs): read before and after a load, the difference is
    what serving it cost, whatever else the machine was doing meanwhile."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    used: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()
        parents[int(entry.name)] = int(fields[1])
        used[int(entry.name)] = int(fields[11]) + int(fields[12])  # utime, stime
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, of in parents.items():
            if of == parent and child not in tree:
                tree.add(child)
                frontier.append(child)
    return sum(used.get(p, 0) for p in tree) / tick


def stop_group(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM the process group this benchmark started, SIGKILL it if it lingers."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
    # Workers of a supervisor that was killed may outlive it: clear the group either way.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def bench_env(**extra: str) -> dict[str, str]:
    """This interpreter's environment plus the source tree on the path, quiet logs."""
    env = dict(os.environ)
    paths = [str(REPO), str(REPO / "functions")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.pop("AWS_LAMBDA_FUNCTION_NAME", None)
    env.update(extra)
    return env


# The settings Lambda's environment gives that need no AWS account (`AWS_LAMBDA_FUNCTION_NAME`
# itself would make the settings refuse the embedded registry): EMF lines, and no admission
# counting, off in Lambda, where a container takes one request at a time.
LAMBDA_SETTINGS = {"SLUICE_EMF": "1", "SLUICE_MAX_IN_FLIGHT_PER_KEY": "0", "SLUICE_MAX_PREDICTIONS_IN_FLIGHT": "0"}


def lambda_env(**extra: str) -> dict[str, str]:
    """`bench_env` for a child that runs the API's Lambda handler in process, with `LAMBDA_SETTINGS`."""
    return bench_env(**LAMBDA_SETTINGS, **extra)


def rotated_p50s(calls: dict[str, Any], subjects: Sequence[str], *, repeats: int, n: int, blocks: int = 1) -> dict[str, list[float]]:
    """Each subject's p50 over `n` calls (`calls[subject](n)` returns the latencies), `repeats`
    times, the subjects' order rotated each round so none always runs first. `blocks`: a round's
    calls of each subject taken in that many turns of the subjects (tight loops of n / blocks),
    so that a burst of the machine's other work lands on all of them rather than on one."""
    runs: dict[str, list[float]] = {subject: [] for subject in subjects}
    for r in range(repeats):
        taken: dict[str, list[float]] = {subject: [] for subject in subjects}
        for b in range(blocks):
            for subject in rotate(subjects, r + b):
                taken[subject] += calls[subject](max(1, n // blocks))
        for subject in subjects:
            runs[subject].append(percentile(taken[subject], 50))
    return runs


def run_child(module: str, tmp: str, env: dict[str, str], *args: str, timeout_s: float = 600, under: Sequence[str] = ()) -> Any:
    """`python -m module --child OUT ARGS...` in a process of its own (`under` another
    program, such as a profiler, where given); what it wrote to OUT."""
    import json

    out = Path(tmp) / "child.json"
    proc = subprocess.run(
        [*under, PYTHON, "-m", module, "--child", str(out), *args],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout_s, check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{module} failed: {proc.stderr[-2000:]}")
    return json.loads(out.read_text())


def alternating_latencies(
    client: Any, url: str, names: Sequence[str], row: Any, *, repeats: int, n: int, warm: int = 50
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Simple JSON predictions of `row` to `url` over `client` (an httpx.Client), alternating
    between the deployments `names`, after `warm` requests to each: the p50 and p99 in µs of
    each deployment per repeat of `n` requests each."""
    p50s: dict[str, list[float]] = {name: [] for name in names}
    p99s: dict[str, list[float]] = {name: [] for name in names}
    for name in names:
        for _ in range(warm):
            client.post(url, json={"deployment": name, "inputs": row}).raise_for_status()
    for _ in range(repeats):
        times: dict[str, list[float]] = {name: [] for name in names}
        for i in range(len(names) * n):
            name = names[i % len(names)]
            started = time.perf_counter()
            response = client.post(url, json={"deployment": name, "inputs": row})
            times[name].append((time.perf_counter() - started) * 1e6)
            response.raise_for_status()
        for name, values in times.items():
            p50s[name].append(percentile(values, 50))
            p99s[name].append(percentile(values, 99))
    return p50s, p99s


# the machine --------------------------------------------------------------------------------
PACKAGES = (
    "sluice",
    "onnxruntime",
    "numpy",
    "fastapi",
    "starlette",
    "pydantic",
    "mangum",
    "uvicorn",
    "uvloop",
    "httptools",
    "orjson",
    "aws-lambda-powertools",
    "cachetools",
    "boto3",
    "tritonclient",
)


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    try:
        cores_usable = len(os.sched_getaffinity(0))
    except AttributeError:
        cores_usable = os.cpu_count()
    memory_gib = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": cores_usable,
        "memory_gib": memory_gib,
        "os": platform.platform(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "packages": versions,
        "git_commit": _git_commit(),
    }


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None
