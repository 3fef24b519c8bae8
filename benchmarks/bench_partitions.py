"""Whole partitions: a folder of 20 Parquet files against the same rows in one file (#18).

The rows are the demo diabetes MLP's ten features and an id, as in `bench_batch`: 1M rows
written once as one Parquet file (pyarrow's defaults: one row group) and once as a folder of
20 files of 50,000 rows each (`part-00000.parquet` …, one row group each). Each measurement
is a fresh `sluice batch run` process, timed from spawn to exit, so planning (listing the
folder, reading 20 footers) counts. The subjects take turns, in a rotated order each round,
and every figure is the median of its rounds.

Figures: rows/s of the folder against the one file, with 1 and 2 workers (goal: ≥ 0.9x,
"within 10%").

    python -m benchmarks.bench_partitions [--quick]
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.bench_batch import SLUICE, TENANT, _env, _prepare, _timed
from benchmarks.common import PYTHON, REPO, WORK, Goal, bench_env, figure

ROWS = 1_000_000
FILES = 20


def write_inputs(single: Path, folder: Path, rows: int = ROWS, files: int = FILES) -> None:
    """The same rows as one Parquet file and as a folder of `files` files."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from benchmarks.bench_batch import FEATURES

    rng = np.random.default_rng(11)
    values = rng.normal(0.5, 0.2, size=(rows, len(FEATURES))).astype(np.float32)
    columns = {"id": pa.array(np.arange(rows, dtype=np.int64))} | {n: pa.array(values[:, j]) for j, n in enumerate(FEATURES)}
    table = pa.table(columns)
    pq.write_table(table, single)
    folder.mkdir(parents=True, exist_ok=True)
    step = rows // files
    for i in range(files):
        pq.write_table(table.slice(i * step, step), folder / f"part-{i:05d}.parquet")


Measured = dict[str, list[tuple[float, float, float]]]


def measure(work: Path, rounds: int) -> Measured:
    """{subject: [(wall s, CPU s, MiB)]} for one file and the folder, 1 and 2 workers."""
    home = work / "home"
    _prepare(home)
    env = _env(home)
    single, folder = work / "diabetes-1m.parquet", work / "diabetes-1m-parts"
    if not single.exists():  # in a child: this process stays small (see bench_batch._timed)
        code = (
            "from benchmarks.bench_partitions import write_inputs; from pathlib import Path; "
            f"write_inputs(Path({str(single)!r}), Path({str(folder)!r}))"
        )
        subprocess.run([PYTHON, "-c", code], cwd=REPO, env=bench_env(), check=True, timeout=600)
    runs: list[tuple[str, list[str]]] = []
    for name, source in (("file", single), ("folder", folder)):
        for workers in (1, 2):
            argv = [SLUICE, "--tenant", TENANT, "batch", "run", str(source), "--deployment", "diabetes",
                    "--out", str(work / f"out-{name}"), "--concurrency", str(workers)]  # fmt: skip
            runs.append((f"{name}-c{workers}", argv))
    results: Measured = {name: [] for name, _ in runs}
    for r in range(rounds):
        shift = r % len(runs)
        for name, argv in runs[shift:] + runs[:shift]:
            results[name].append(_timed(argv, env))
    return results


def run(quick: bool) -> dict[str, Any]:
    work = WORK / "partitions"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rounds = 1 if quick else 5
    results = measure(work, rounds)
    figures: list[dict[str, Any]] = []
    for workers in (1, 2):
        figures.append(figure(
            f"batch.partitions.c{workers}",
            f"1M rows, diabetes MLP: a folder of {FILES} Parquet files vs one file, {workers} worker{'s' if workers > 1 else ''}",
            "rows/s", f"folder of {FILES} files", [ROWS / s for s, _, _ in results[f"folder-c{workers}"]],
            reference="one file", ref_values=[ROWS / s for s, _, _ in results[f"file-c{workers}"]],
            goal=Goal(">=", 0.9), better="higher",
            note=f"sluice batch run --concurrency {workers}; spawn to exit, planning included",
        ))  # fmt: skip
    for workers in (1, 2):
        figures.append(figure(
            f"batch.partitions.cpu.c{workers}", f"1M rows: CPU seconds of the whole process, {workers} worker{'s' if workers > 1 else ''}",
            "s", f"folder of {FILES} files", [cpu for _, cpu, _ in results[f"folder-c{workers}"]],
            reference="one file", ref_values=[cpu for _, cpu, _ in results[f"file-c{workers}"]], better="lower",
        ))  # fmt: skip
    notes = [
        f"{rounds} round(s), subjects interleaved in a rotated order; medians, min-max in brackets.",
        f"The folder holds {FILES} files of {ROWS // FILES:,} rows (one chunk each); the file one row group of {ROWS:,} rows.",
    ]
    shutil.rmtree(work, ignore_errors=True)
    return {"title": "Batch: whole partitions", "figures": figures, "notes": notes}


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
