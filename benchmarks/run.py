"""`make bench`: prepare the models and the home, run every benchmark, write the results.

    python -m benchmarks.run            # the full run (under 15 minutes on 2 cores)
    python -m benchmarks.run --quick    # a ~2-minute smoke run: fewer models, shorter loads
    python -m benchmarks.run --only inprocess,coldstart

Writes benchmarks/results/latest.json, latest.md (tables) and latest.png (charts); a --quick
run writes quick.* beside them instead (ignored by git).

Besides its own benchmarks the runner picks up every `benchmarks/bench_*.py` that exposes
`run(quick: bool) -> dict`: the dict is a section (`title`, `figures` made with
`benchmarks.common.figure`, optional `notes`), or any JSON-able data, shown as is. A module
named after a slot in `benchmarks.report.SLOTS` (bench_shadow, bench_ensemble, bench_batch,
bench_triton_client) fills that slot. `benchmarks/triton_overhead.py` fills `triton_client`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import report
from benchmarks.common import BENCH_DIR, PYTHON, REPO, RESULTS, bench_env, machine_info, section

if TYPE_CHECKING:
    from collections.abc import Callable

BUDGET_S = 20 * 60
CORE = ("inprocess", "coldstart", "http", "peers")


def _core(name: str) -> Callable[[bool], list[dict[str, Any]]]:
    module = {"inprocess": "benchmarks.inprocess", "coldstart": "benchmarks.coldstart",
              "http": "benchmarks.httpbench", "peers": "benchmarks.peerbench"}[name]
    return importlib.import_module(module).run


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _timed(name: str, call: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    started = time.monotonic()
    load = _loadavg()
    print(f"[bench] {name} …", flush=True)
    try:
        sections = call()
    except Exception as exc:  # one benchmark failing must not lose the others' figures
        traceback.print_exc()
        sections = [section(name, name, [], error=f"{type(exc).__name__}: {str(exc)[:800]}")]
    took = time.monotonic() - started
    for sec in sections:
        sec.setdefault("duration_s", round(took, 1))
        sec.setdefault("loadavg_start", load)
    print(f"[bench] {name} done in {took:.0f} s", flush=True)
    return sections


# plug-ins -----------------------------------------------------------------------------------
def plugin_modules() -> list[str]:
    return sorted(p.stem for p in BENCH_DIR.glob("bench_*.py"))


def _as_section(key: str, result: Any) -> dict[str, Any]:
    if isinstance(result, dict) and isinstance(result.get("figures"), list):
        return {"key": key, "title": result.get("title", key), "figures": result["figures"],
                "notes": list(result.get("notes", [])), **{k: v for k, v in result.items() if k not in ("title", "figures", "notes", "key")}}
    return {"key": key, "title": key, "figures": [], "data": result}


def run_plugin(stem: str, quick: bool) -> list[dict[str, Any]]:
    def call() -> list[dict[str, Any]]:
        module = importlib.import_module(f"benchmarks.{stem}")
        if not callable(getattr(module, "run", None)):
            raise TypeError(f"benchmarks/{stem}.py has no run(quick: bool) -> dict")
        return [_as_section(stem, module.run(quick))]

    return _timed(stem, call)


def run_triton_overhead(quick: bool) -> list[dict[str, Any]]:
    """The Triton engineer's script: its `run(quick)` if it has one, else run it as its docstring
    says (`python -m benchmarks.triton_overhead --duration S`) and read the JSON it prints."""

    def call() -> list[dict[str, Any]]:
        module = importlib.import_module("benchmarks.triton_overhead")
        if callable(getattr(module, "run", None)):
            return [_as_section("triton_overhead", module.run(quick))]
        args = [PYTHON, "-m", "benchmarks.triton_overhead", "--duration", "1" if quick else "3"]
        if quick:
            args += ["--repeats", "3"]
        done = subprocess.run(args, cwd=REPO, env=bench_env(), capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"triton_overhead.py exited {done.returncode}: {done.stderr[-800:]}")
        data = json.loads(done.stdout[done.stdout.index("{"):])
        sec = _as_section("triton_overhead", data)
        sec["title"] = "sluice -> Triton vs tritonclient -> Triton (benchmarks/triton_overhead.py, one run per phase)"
        return [sec]

    return _timed("triton_overhead", call)


def fill_slots(sections: list[dict[str, Any]]) -> dict[str, str]:
    slots = {}
    for key in report.SLOTS:
        found = [s for s in sections if s["key"] in (f"bench_{key}", *(("triton_overhead",) if key == "triton_client" else ()))]
        if found:
            sec = found[0]
            slots[key] = f"error: {sec['error']}" if sec.get("error") else f"measured: see '{sec['title']}'"
    return slots


# the run ------------------------------------------------------------------------------------
def tool_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    wrk = shutil.which("wrk")
    if wrk:
        out = subprocess.run([wrk, "--version"], capture_output=True, text=True, check=False)
        versions["wrk"] = (out.stdout or out.stderr).split("Copyright")[0].strip() or "wrk"
    else:
        versions["wrk"] = None
    return versions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a ~2-minute smoke run")
    parser.add_argument("--only", help=f"comma-separated: {', '.join(CORE)}, plugins (bench_* names)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for latest.{json,md,png} (quick.* with --quick)")
    args = parser.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None

    started = time.monotonic()
    meta = machine_info()
    meta.update({"quick": args.quick, "loadavg_start": _loadavg(), "tools": tool_versions()})
    meta["loadgen"] = meta["tools"]["wrk"] or "python (benchmarks/loadgen.py; wrk not installed)"

    from benchmarks.prepare import prepare

    print("[bench] preparing models (scripts/make_demo_models.py --large) and the sluice home …", flush=True)
    meta["inputs"] = prepare()
    sections: list[dict[str, Any]] = []
    for name in CORE:
        if only is None or name in only:
            sections += _timed(name, lambda name=name: _core(name)(args.quick))
    for stem in plugin_modules():
        if only is None or stem in only:
            sections += run_plugin(stem, args.quick)
    if (BENCH_DIR / "triton_overhead.py").exists() and (only is None or "triton_overhead" in only):
        sections += run_triton_overhead(args.quick)

    peers = [s.get("peer", {}).get("server") for s in sections if s.get("peer")]
    meta["peers"] = ", ".join(p for p in peers if p) or None
    meta["duration_s"] = round(time.monotonic() - started, 1)
    meta["loadavg_end"] = _loadavg()
    doc = {"schema": 1, "meta": meta, "sections": sections, "slots": fill_slots(sections)}
    # A smoke run must not overwrite the full run's figures that the docs show.
    paths = report.write(doc, args.out, stem="quick" if args.quick else "latest")

    print()
    print("\n".join(report.to_markdown(doc).split("\n## ")[1].split("\n")[:40]))  # the goals table
    shown = [p.resolve().relative_to(REPO) if p.resolve().is_relative_to(REPO) else p.resolve() for p in paths.values()]
    print(f"\n[bench] {meta['duration_s']:.0f} s; wrote " + ", ".join(map(str, shown)))
    if meta["duration_s"] > BUDGET_S and not args.quick:
        print(f"[bench] warning: over the {BUDGET_S // 60}-minute budget", file=sys.stderr)
    failed = [s["key"] for s in sections if s.get("error")]
    if failed:
        print(f"[bench] did not run: {', '.join(failed)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
