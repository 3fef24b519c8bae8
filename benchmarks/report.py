"""Turn a results document (benchmarks/results/latest.json) into Markdown and a PNG.

    python -m benchmarks.report benchmarks/results/latest.json   # rewrites latest.md and latest.png

The documentation site shows these files as they are: docs/benchmarks/index.md includes the
run and goals sections of latest.md (between the markers `section()` writes), the full report
page includes the whole file, and the figure is a link to latest.png. A new run needs no copy.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

DASH = "\u2013"  # en dash, for ranges
NONE = "\u2013"

# Figures later issues add: each is filled by the module named here when it exists.
SLOTS: dict[str, dict[str, str]] = {
    "shadow": {
        "module": "benchmarks/bench_shadow.py",
        "what": "p50/p99 of a deployment with a shadow mirror on vs off (the mirror must stay off the request path)",
    },
    "ensemble": {
        "module": "benchmarks/bench_ensemble.py",
        "what": "ensemble p50 vs its slowest member alone (fan-out is concurrent)",
    },
    "batch": {
        "module": "benchmarks/bench_batch.py",
        "what": "sluice batch run rows/s vs a plain pyarrow + ORT script (1M and 4M rows, 1 and 2 workers), and peak memory at 1M vs 4M rows",
    },
    "triton_client": {
        "module": "benchmarks/bench_triton_client.py or benchmarks/triton_overhead.py",
        "what": "sluice -> Triton vs tritonclient -> Triton, same server and model (runtime overhead)",
    },
}


def fmt(value: float | None) -> str:
    if value is None:
        return NONE
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def cell(spread: dict[str, float] | None) -> str:
    if not spread:
        return NONE
    return f"{fmt(spread['median'])} ({fmt(spread['min'])}{DASH}{fmt(spread['max'])})"


def ratio_cell(row: dict[str, Any]) -> str:
    if row.get("ratio") is None:
        return NONE
    text = f"{row['ratio']:.2f}x"
    if row.get("goal"):
        text += f" (goal {row['goal']}: {'met' if row['met'] else '**missed**'})"
    return text


def figure_table(figures: list[dict[str, Any]]) -> list[str]:
    lines = [
        f"| figure | subject | median (min{DASH}max) | reference | median (min{DASH}max) | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for row in figures:
        lines.append(
            f"| {row['label']} [{row['unit']}] | {row['subject']} | {cell(row['value'])} | "
            f"{row.get('reference') or NONE} | {cell(row.get('ref_value'))} | {ratio_cell(row)} |"
        )
    return lines


def goals(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [row for sec in doc["sections"] for row in sec.get("figures", []) if row.get("goal")]


def section(edge: str, name: str) -> str:
    """A marker the docs' snippet includes cut at (`--8<-- "latest.md:goals"`); an HTML comment,
    so the file reads the same without them."""
    return f"<!-- --8<-- [{edge}:{name}] -->"


# The sections docs/benchmarks/index.md includes.
DOC_SECTIONS = ("run", "goals")


def to_markdown(doc: dict[str, Any]) -> str:
    meta = doc["meta"]
    packages = ", ".join(f"{k} {v}" for k, v in meta["packages"].items() if v)
    out = [
        "# sluice benchmarks",
        "",
        section("start", "run"),
        f"Measured {meta['date']} on {meta['cpu_model']}, {meta['cores']} cores"
        f" ({meta.get('memory_gib')} GiB), {meta['os']}; Python {meta['python']}."
        f" Mode: {'quick' if meta['quick'] else 'full'}; took {meta['duration_s']:.0f} s."
        f" Load average at start: {meta.get('loadavg_start')}.",
        section("end", "run"),
        "",
        f"Packages: {packages}. Peers: {meta.get('peers') or 'none'}. Load generator: {meta.get('loadgen')}.",
        "",
        f"Every number is the median over repeated runs, with the min{DASH}max over those runs in brackets"
        " (the machine's noise). A ratio is the subject's median over its reference's, both measured"
        " in this same run; for latency lower is better, for req/s and rows/s higher is better.",
        "",
        "## Goals",
        "",
        section("start", "goals"),
        "| goal | sluice | reference | ratio | target | met |",
        "|---|---|---|---|---|---|",
    ]
    for row in goals(doc):
        out.append(
            f"| {row['label']} [{row['unit']}], {row['subject']} | {cell(row['value'])} | "
            f"{row['reference']}: {cell(row.get('ref_value'))} | {row['ratio']:.2f}x | {row['goal']} | "
            f"{'yes' if row['met'] else '**no**'} |"
        )
    out += ["", section("end", "goals")]
    for sec in doc["sections"]:
        out += ["", f"## {sec['title']}", ""]
        if sec.get("error"):
            out.append(f"Did not run: {sec['error']}")
        if sec.get("figures"):
            out += figure_table(sec["figures"])
        elif sec.get("data") is not None:
            out += ["```json", json.dumps(sec["data"], indent=1, default=str)[:4000], "```"]
        for note in sec.get("notes", []):
            out += ["", f"- {note}"]
    out += ["", "## Slots for figures later issues add", "", "| slot | module | what | status |", "|---|---|---|---|"]
    for key, slot in SLOTS.items():
        status = doc.get("slots", {}).get(key, "not measured yet")
        out.append(f"| {key} | `{slot['module']}` | {slot['what']} | {status} |")
    return "\n".join(out) + "\n"


# the picture --------------------------------------------------------------------------------
def _find(doc: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    return [row for sec in doc["sections"] for row in sec.get("figures", []) if row["id"].startswith(prefix)]


def _err(spread: dict[str, float]) -> list[float]:
    return [spread["median"] - spread["min"], spread["max"] - spread["median"]]


def _bars(ax: Any, groups: list[str], series: dict[str, list[dict[str, float] | None]], *, log: bool = False) -> None:
    import numpy as np

    width = 0.8 / max(1, len(series))
    x = np.arange(len(groups))
    for i, (name, spreads) in enumerate(series.items()):
        heights = [s["median"] if s else 0 for s in spreads]
        errs = np.array([_err(s) if s else [0, 0] for s in spreads]).T
        ax.bar(x + i * width - 0.4 + width / 2, heights, width, yerr=errs, capsize=2, label=name)
    ax.set_xticks(x, groups, fontsize=8)
    if log:
        ax.set_yscale("log")
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)


def short_label(row: dict[str, Any]) -> str:
    """A goal's name for a chart axis, from its figure id."""
    parts = row["id"].split(".")
    if parts[0] == "inprocess" and len(parts) == 5:
        return f"in-process {parts[1]} {parts[2]} {parts[4]} ({'authorizer' if parts[3] == 'auth' else 'API key'})"
    if parts[0] == "coldstart" and len(parts) == 3:
        return f"cold start {parts[1]} ({parts[2]})"
    if parts[0] == "http" and len(parts) == 5:
        return f"HTTP {parts[1][1:]} worker(s) {parts[2]} {parts[3][1:]} conn {parts[4]}"
    if parts[0] == "peers" and len(parts) == 5:
        return f"vs {parts[1]} {parts[2]} {parts[3][1:]} conn {parts[4]}"
    if parts[0] == "peers" and len(parts) == 6 and parts[4] == "batched":
        return f"vs {parts[1]} {parts[2]} {parts[3][1:]} conn {parts[5]} (batching)"
    return f"{row['label']} ({row['subject']})"


def _goals_panel(ax: Any, rows: list[dict[str, Any]]) -> None:
    from matplotlib.ticker import FixedLocator, FormatStrFormatter, NullLocator

    ratios = [r["ratio"] for r in rows]
    colors = ["tab:green" if r["met"] else "tab:red" for r in rows]
    ax.barh(range(len(rows)), ratios, color=colors, height=0.7)
    for i, r in enumerate(rows):
        target = float(r["goal"].split()[1].rstrip("x"))
        ax.plot([target, target], [i - 0.45, i + 0.45], color="black", lw=2)
        ax.text(r["ratio"], i, f" {r['ratio']:.2f}x", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), [short_label(r) for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ticks = [t for t in (0.1, 0.25, 0.5, 1, 1.5, 2, 4, 8, 16) if min(ratios) / 1.5 <= t <= max(ratios) * 1.5]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FormatStrFormatter("%gx"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(min(ratios) / 1.6, max(ratios) * 1.6)
    ax.set_title(
        "Goals: sluice / reference (latency, ms: lower is better; req/s: higher is better); "
        "black tick: target; green: met, red: missed",
        fontsize=9,
    )
    ax.grid(axis="x", alpha=0.3)


def _conc(row_id: str) -> int:
    return int(row_id.split(".")[3][1:])


def to_png(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = goals(doc)
    fig = plt.figure(figsize=(13, 8 + 0.16 * len(rows)))
    grid = fig.add_gridspec(4, 2, height_ratios=[max(2.0, 0.12 * len(rows)), 1, 1, 1])
    if rows:
        _goals_panel(fig.add_subplot(grid[0, :]), rows)

    ax = fig.add_subplot(grid[1, 0])
    order = ["iris", "diabetes", "mlp_large"]
    models = sorted({r["id"].split(".")[1] for r in _find(doc, "inprocess.")}, key=lambda m: order.index(m) if m in order else 9)
    if models:
        series: dict[str, list[Any]] = {"floor": [], "hand-written": [], "sluice (authorizer)": [], "sluice (API key)": []}
        for m in models:
            auth = next(iter(_find(doc, f"inprocess.{m}.b1.auth.vs_floor")), None)
            key = next(iter(_find(doc, f"inprocess.{m}.b1.key.p50")), None)
            series["floor"].append(auth["ref_value"] if auth else None)
            series["hand-written"].append(key["ref_value"] if key else None)
            series["sluice (authorizer)"].append(auth["value"] if auth else None)
            series["sluice (API key)"].append(key["value"] if key else None)
        _bars(ax, models, series, log=True)
        ax.set_title("In process through the Lambda handler, batch 1: p50 µs (log scale)", fontsize=9)

    ax = fig.add_subplot(grid[1, 1])
    cold = _find(doc, "coldstart.")
    if cold:
        names = [r["id"].removeprefix("coldstart.").replace(".sluice_vs_libs", " (vs libs)") for r in cold]
        _bars(ax, names, {"sluice": [r["value"] for r in cold], "hand-written / libraries": [r["ref_value"] for r in cold]})
        ax.set_title("Cold start in fresh processes: ms", fontsize=9)
        ax.tick_params(axis="x", labelrotation=20)

    for col, workers in enumerate((1, 2)):
        ax = fig.add_subplot(grid[2, col])
        http = [r for r in _find(doc, f"http.w{workers}.") if r["id"].endswith(".rps")]
        if http:
            groups = [f"{r['id'].split('.')[2]} c{_conc(r['id'])}" for r in http]
            _bars(ax, groups, {"sluice serve": [r["value"] for r in http], "hand-written FastAPI": [r["ref_value"] for r in http]})
            ax.set_title(f"Local HTTP, {workers} worker(s) each: req/s by model and connections", fontsize=9)
            ax.tick_params(axis="x", labelrotation=30)

    ax = fig.add_subplot(grid[3, 0])
    peers = [r for r in _find(doc, "peers.") if r["id"].endswith(".rps")]
    if peers:
        cells = sorted({(r["id"].split(".")[2], _conc(r["id"])) for r in peers}, key=lambda mc: (order.index(mc[0]) if mc[0] in order else 9, mc[1]))
        series = {"sluice (2 workers)": [], "sluice, batching": [], "Triton": [], "MLServer": []}
        for m, c in cells:
            tri = next((r for r in peers if r["id"] == f"peers.triton.{m}.c{c}.rps"), None)
            mls = next((r for r in peers if r["id"] == f"peers.mlserver.{m}.c{c}.rps"), None)
            joined = next((r for r in peers if r["id"] in (f"peers.triton.{m}.c{c}.batched.rps", f"peers.mlserver.{m}.c{c}.batched.rps")), None)
            series["sluice (2 workers)"].append((tri or mls or {}).get("value"))
            series["sluice, batching"].append(joined["value"] if joined else None)
            series["Triton"].append(tri["ref_value"] if tri else None)
            series["MLServer"].append(mls["ref_value"] if mls else None)
        _bars(ax, [f"{m} c{c}" for m, c in cells], series)
        ax.set_title("Peers, v2 JSON over HTTP, same cores: req/s", fontsize=9)
        ax.tick_params(axis="x", labelrotation=30)

    ax = fig.add_subplot(grid[3, 1])
    floor = [r for r in _find(doc, "floor.") if r["id"].endswith(".rows")]
    if floor:
        names = [f"{r['id'].split('.')[1]} {r['id'].split('.')[2]}" for r in floor]
        _bars(ax, names, {"onnxruntime.run": [r["value"] for r in floor]}, log=True)
        ax.set_title("Floor: rows/s of InferenceSession.run alone (log scale)", fontsize=9)
        ax.tick_params(axis="x", labelrotation=30)

    meta = doc["meta"]
    fig.suptitle(
        f"sluice benchmarks, {meta['date'][:10]}, {meta['cpu_model']}, {meta['cores']} cores, "
        f"Python {meta['python']} ({'quick' if meta['quick'] else 'full'} run); bars: median, whiskers: min{DASH}max",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=72, format="png")  # explicit: the path ends in .tmp while written
    plt.close(fig)


def _rounded(value: Any) -> Any:
    """Four significant digits are more than any figure here can claim; the file stays small."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def write(doc: dict[str, Any], folder: Path, stem: str = "latest") -> dict[str, Path]:
    """Write JSON, Markdown and PNG, each through a temporary name so a crash leaves the old ones."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"json": folder / f"{stem}.json", "md": folder / f"{stem}.md", "png": folder / f"{stem}.png"}
    tmp = {k: p.with_name(p.name + ".tmp") for k, p in paths.items()}
    tmp["json"].write_text(json.dumps(_rounded(doc), indent=1, default=str) + "\n")
    tmp["md"].write_text(to_markdown(doc))
    try:
        to_png(doc, tmp["png"])
    except ImportError as exc:  # matplotlib is in the `bench` extra
        print(f"no PNG: {exc} (pip install -e '.[bench]')", file=sys.stderr)
        tmp.pop("png")
    for key, path in tmp.items():
        path.replace(paths[key])
    return paths


if __name__ == "__main__":
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "results" / "latest.json"
    document = json.loads(source.read_text())
    for kind, written in write(document, source.parent, source.stem).items():
        print(f"wrote {written} ({kind})")
