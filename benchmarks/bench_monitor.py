"""What monitoring profiles cost on the request path: p50 (and CPU per request) of the same
simple-JSON prediction with the deployment's profiles on and off, at batch 1 and 64, in
process through the HTTP edge (authentication, the hot route, the prediction, the response),
turn about in one process. CPU per request counts every thread: the folding of held requests
into the sketches (every `fold_rows` rows, on the folder thread) and the timer's flushes are
in it, not only the append on the request. Goal (issue 32): p50 at most 1.03x.

Also what a check costs: sketching 1M rows of 4 numeric columns (the baseline's work, and a
window's), and comparing a window with its baseline; and what closing a window of 1M profiled
rows costs (`close_cost`): iris's requests (batch 64) profiled by the request path's recorder
into a local registry, flushed every 32,768 rows (about what two busy processes write in an
hour of 30-s flushes), then the window closed as the scheduled check closes it
(`MonitorService.closed`) in a fresh process: its seconds, and its peak RSS (VmHWM) and how far
it rose over the process's RSS before closing (VmRSS, with sluice and DataSketches imported).

    python -m benchmarks.bench_monitor [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import REPO, Goal, figure, percentile, rotate, section

SUBJECTS = ("on", "off")
GOAL = Goal("<=", 1.03)


def measure(home: Path, repeats: int, n: int) -> dict[str, list[float]]:
    import httpx

    from sluice.api.app import create_app
    from sluice.domain import Principal
    from sluice.settings import Settings
    from sluice.wiring import Container

    container = Container.from_settings(Settings(mode="local", home=home))
    operator = Principal("default", frozenset({"admin", "predict"}), "bench")
    version = container.models.push(operator, "iris", (REPO / "models" / "iris.onnx").read_bytes())
    container.deployments.create(operator, "iris", {"kind": "single", "model": "iris", "version": version.version})
    _, key = container.keys.create("default", ["predict"])
    recorder = container.predictions.profiles
    if recorder is None:
        raise RuntimeError("profiles are off: install sluice[monitor]")
    rng = np.random.default_rng(0)
    bodies = {
        batch: [json.dumps({"deployment": "iris", "inputs": (rng.normal(size=(batch, 4)) + 4).round(2).tolist()}).encode() for _ in range(16)]
        for batch in (1, 64)
    }
    results: dict[str, list[float]] = {}

    async def one_round(client: httpx.AsyncClient, batch: int, count: int) -> tuple[float, float]:
        times = []
        cpu = time.process_time()
        for i in range(count):
            started = time.perf_counter()
            r = await client.post("/api/v1/predictions", content=bodies[batch][i % 16], headers={"content-type": "application/json"})
            times.append((time.perf_counter() - started) * 1e6)
            if r.status_code != 200:
                raise RuntimeError(r.text[:300])
        return percentile(times, 50), (time.process_time() - cpu) / count * 1e6

    async def go() -> None:
        transport = httpx.ASGITransport(app=create_app(container))
        async with httpx.AsyncClient(transport=transport, base_url="http://bench", headers={"Authorization": f"Bearer {key}"}) as client:
            for subject in SUBJECTS:
                container.predictions.profiles = recorder if subject == "on" else None
                for batch in bodies:
                    await one_round(client, batch, 50)
            for r in range(repeats):
                for batch in bodies:
                    for subject in rotate(SUBJECTS, r):
                        container.predictions.profiles = recorder if subject == "on" else None
                        p50, cpu = await one_round(client, batch, n)
                        results.setdefault(f"{batch}.{subject}", []).append(p50)
                        results.setdefault(f"{batch}.{subject}.cpu", []).append(cpu)

    asyncio.run(go())
    results |= own_cost(recorder, container, repeats)
    container.predictions.profiles = recorder
    container.settle(1.0)
    return results


def own_cost(recorder: Any, container: Any, repeats: int, n: int = 20_000) -> dict[str, list[float]]:
    """What profiling itself takes per request, µs of CPU, in a tight loop (far less swayed by
    a busy machine than a request's p50): on the request's thread (the append; the groups cut
    every `fold_rows` rows are folded on the folder thread), and in the whole process (the
    folding too, the last group folded by a flush); the iris version's signature and real outputs."""
    from sluice.monitor.profiler import ProfileRecorder

    version = container.registry.get_version("default", "iris", 1)
    out: dict[str, list[float]] = {}
    for batch in (1, 64):
        inputs = {"input": np.random.default_rng(2).normal(size=(batch, 4)).astype(np.float32) + 4}
        outputs = {"output_label": np.array(["setosa"] * batch, dtype=object), "output_probability": np.full((batch, 3), 1 / 3, dtype=np.float32)}
        classes = {"output_probability": ["setosa", "versicolor", "virginica"]}
        count = n // batch * 4
        for _ in range(repeats):
            loop = ProfileRecorder(_Discard(), window_s=3600, flush_every_s=3600, timed=False, background=True)
            process, thread = time.process_time(), time.thread_time()
            for _ in range(count):
                loop.observe(("default", "iris", 1, ""), version.signature, inputs, outputs, classes, batch)
            thread = time.thread_time() - thread
            loop.flush()
            out.setdefault(f"{batch}.own", []).append(thread / count * 1e6)
            out.setdefault(f"{batch}.own_all", []).append((time.process_time() - process) / count * 1e6)
    return out


class _Discard:
    """A registry that takes the tight loop's profiles and keeps nothing."""

    def add_profile(self, *args: Any) -> None:
        pass


def check_costs(repeats: int) -> dict[str, list[float]]:
    from sluice.monitor.checks import Thresholds, check
    from sluice.monitor.sketches import Profile

    rng = np.random.default_rng(1)
    rows = rng.normal(size=(1_000_000, 4)).astype(np.float32)
    out: dict[str, list[float]] = {}
    for _ in range(repeats):
        started = time.perf_counter()
        base = Profile()
        for start in range(0, len(rows), 65536):
            base.add_rows({"x": rows[start : start + 65536]}, None, None)
        out.setdefault("sketch_1m_s", []).append(time.perf_counter() - started)
        window = Profile()
        window.add_rows({"x": rows[:20000] + 0.3}, None, None)
        started = time.perf_counter()
        check(base, window, Thresholds())
        out.setdefault("check_ms", []).append((time.perf_counter() - started) * 1000)
    return out


CLOSE_ROWS = 1_000_000
FLUSH_ROWS = 32_768


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _settings(home: Path) -> Any:
    from sluice.settings import Settings

    return Settings(mode="local", home=home, registry="", store="")


def close_window(home: Path, at: float) -> dict[str, float]:
    """In this (fresh) process: close the window before `at`, measured."""
    from sluice.monitor.sketches import Profile
    from sluice.services.monitoring import MonitorService
    from sluice.wiring import Container

    container = Container.from_settings(_settings(home))
    monitor = MonitorService(container.registry, container.settings.monitor)
    Profile().add_rows({"x": np.zeros(4, np.float32)}, None, None)  # DataSketches loaded
    before = _status_kb("VmRSS")
    started = time.perf_counter()
    closed = monitor.closed("default", "iris", at=at)
    seconds = time.perf_counter() - started
    if closed is None or closed["check"] is None:
        raise RuntimeError("the window was not checked")
    return {"rows": closed["check"]["rows"], "seconds": seconds, "rss_before_mb": before / 1024, "peak_mb": _status_kb("VmHWM") / 1024,
            "rise_mb": (_status_kb("VmHWM") - before) / 1024}  # fmt: skip


def close_cost(repeats: int) -> dict[str, list[float]]:
    """A 1M-row window profiled by the request path's recorder, then closed in a fresh process
    `repeats` times (module docstring)."""
    from sluice.domain import Principal
    from sluice.monitor.profiler import ProfileRecorder
    from sluice.monitor.sketches import Profile
    from sluice.wiring import Container

    out: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        container = Container.from_settings(_settings(home))
        operator = Principal("default", frozenset({"admin", "predict"}), "bench")
        version = container.models.push(operator, "iris", (REPO / "models" / "iris.onnx").read_bytes())
        container.deployments.create(operator, "iris", {"kind": "single", "model": "iris", "version": version.version})
        rng = np.random.default_rng(3)
        baseline = Profile()
        baseline.add_rows({"input": rng.normal(size=(20_000, 4)).astype(np.float32) + 4}, None, version.signature)
        container.registry.put_baseline("default", "iris", {"deployment": "iris", "revision": 1, **baseline.to_dict()})
        recorder = ProfileRecorder(container.registry, window_s=3600, flush_every_s=3600, timed=False)
        classes = {"output_probability": ["setosa", "versicolor", "virginica"]}
        window = int(time.time()) // 3600 * 3600
        for done in range(0, CLOSE_ROWS, 64):
            inputs = {"input": rng.normal(size=(64, 4)).astype(np.float32) + 4.2}
            labels = np.array(["setosa", "versicolor", "virginica"], dtype=object)[rng.integers(0, 3, 64)]
            outputs = {"output_label": labels, "output_probability": rng.dirichlet([1, 1, 1], 64).astype(np.float32)}
            recorder.observe(("default", "iris", 1, ""), version.signature, inputs, outputs, classes, 64)
            if (done + 64) % FLUSH_ROWS == 0:
                recorder.flush()
        recorder.flush()
        at = window + 3600 + 300  # as the schedule: five past the hour that closed it
        for _ in range(repeats):
            code = f"import json, sys; from pathlib import Path; from benchmarks.bench_monitor import close_window; print(json.dumps(close_window(Path({str(home)!r}), {at})))"
            found = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
            got = json.loads(found.stdout.strip().splitlines()[-1])
            if got["rows"] != CLOSE_ROWS:
                raise RuntimeError(f"closed {got['rows']} rows, not {CLOSE_ROWS} (the window turned while profiling?)")
            for name in ("seconds", "peak_mb", "rise_mb"):
                out.setdefault(f"close.{name}", []).append(got[name])
            out.setdefault("close.records", [len(container.registry.read_profiles("default", "iris", 1))])
    return out


def run(quick: bool) -> dict[str, Any]:
    repeats, n = (3, 200) if quick else (7, 600)
    with tempfile.TemporaryDirectory() as tmp:
        runs = measure(Path(tmp) / "home", repeats, n)
    costs = check_costs(1 if quick else 3) | close_cost(1 if quick else 3)
    figures = []
    for batch in (1, 64):
        label = f"simple JSON, iris, batch {batch}, in process through the HTTP edge: p50"
        figures.append(figure(f"monitor.{batch}", label, "µs", "profiles on", runs[f"{batch}.on"], reference="profiles off", ref_values=runs[f"{batch}.off"], goal=GOAL))
        label = f"simple JSON, iris, batch {batch}: CPU per request (folding and flushes included)"
        figures.append(figure(f"monitor.{batch}.cpu", label, "µs", "profiles on", runs[f"{batch}.on.cpu"], reference="profiles off", ref_values=runs[f"{batch}.off.cpu"]))
    for batch in (1, 64):
        label = f"batch {batch}: what profiling a request takes on its thread, µs of CPU (a tight loop: the append)"
        figures.append(figure(f"monitor.{batch}.own", label, "µs", "profiles on", runs[f"{batch}.own"]))
        label = f"batch {batch}: what profiling a request takes in the process, µs of CPU (the append and its share of folding)"
        figures.append(figure(f"monitor.{batch}.own_all", label, "µs", "profiles on", runs[f"{batch}.own_all"]))
    figures.append(figure("monitor.sketch", "sketching 1M rows x 4 numeric columns (a baseline's or a window's work)", "s", "KLL k=200", costs["sketch_1m_s"]))
    figures.append(figure("monitor.check", "checking a window against its baseline (4 columns)", "ms", "PSI, JS, KS", costs["check_ms"]))
    flushes = int(costs["close.records"][0])
    what = f"closing a window of 1M profiled iris rows ({flushes} flushes, 8 columns) in a fresh process"
    figures.append(figure("monitor.close", what, "s", "MonitorService.closed", costs["close.seconds"]))
    figures.append(figure("monitor.close.peak", what + ": peak RSS", "MB", "VmHWM", costs["close.peak_mb"]))
    figures.append(figure("monitor.close.rise", what + ": peak RSS over the RSS before closing", "MB", "VmHWM - VmRSS", costs["close.rise_mb"]))
    notes = [
        "Concurrency 1; p50 of each run, median over runs, on and off taking turns going first.",
        "On: every answered request's arrays held, folded into the window's sketches every 8192 rows on a thread of their own, written every 30 s.",
    ]
    return section("monitor", "Monitoring profiles on the request path: on against off", figures, notes=notes)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    quick = parser.parse_args().quick
    # The report alone on stdout (`> out.json`): sluice's log lines, one per prediction, go to
    # stderr, as the `sluice` command sends them; both subjects still write every line, and
    # the window-closing children (which inherit this) answer on their last stdout line.
    os.environ["SLUICE_LOG_STREAM"] = "stderr"
    print(json.dumps(run(quick), indent=2))


if __name__ == "__main__":
    main()
