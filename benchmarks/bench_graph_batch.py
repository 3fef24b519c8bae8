"""A batch job through an inference graph: `sluice batch run` of the transform -> model ->
transform graph (`examples/policies/transform.json`) on raw rows (a length and a colour),
against `sluice batch run` of its model alone on the same rows already transformed (the
`embedding` the graph's first step makes, one list of two numbers a row). Goal: the graph's
rows/s >= 0.9x the model's.

Both are whole processes, spawn to exit, on 1M rows written by pyarrow with its defaults (one
row group), two workers (the default, one per core), taking turns in a rotated order each
round as `benchmarks.bench_batch`'s subjects do; figures are medians with the min-max over
the rounds.

    python -m benchmarks.bench_graph_batch [--quick]
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.bench_batch import SLUICE, TENANT, _env, _timed
from benchmarks.common import PYTHON, REPO, WORK, Goal, bench_env, figure

ROWS = 1_000_000
VOCABULARY = ("red", "green", "blue")


def _write_inputs(work: Path, rows: int) -> None:
    """The raw rows (`length` FP32, `colour` text, a quarter of it not in the vocabulary) and
    the same rows as the graph's first step leaves them (`embedding`, two numbers a row)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(7)
    length = rng.normal(5.8, 0.8, rows).astype(np.float32)
    words = np.array([*VOCABULARY, "teal"], dtype=object)[rng.integers(0, 4, rows)]
    pq.write_table(pa.table({"length": pa.array(length), "colour": pa.array(words, pa.string())}), work / "raw.parquet")
    scaled = (length - np.float32(5.8)) / np.float32(0.8)
    codes = np.array([VOCABULARY.index(w) if w in VOCABULARY else -1 for w in words], np.float32)
    embedding = pa.FixedSizeListArray.from_arrays(pa.array(np.stack([scaled, codes], axis=1).reshape(-1)), 2)
    pq.write_table(pa.table({"embedding": embedding}), work / "embedded.parquet")


def _prepare(work: Path, home: Path, rows: int) -> None:
    from tests.models import score_model

    (work / "score.onnx").write_bytes(score_model())
    policy = (REPO / "examples" / "policies" / "transform.json").read_text()
    env = _env(home)
    for argv in (
        ["models", "push", "score", str(work / "score.onnx")],
        ["deployments", "create", "score", "--model", "score"],
        ["deployments", "create", "labelled", "--policy", policy],
    ):
        subprocess.run([SLUICE, "--tenant", TENANT, *argv], env=env, check=True, capture_output=True, timeout=300)
    code = f"from benchmarks.bench_graph_batch import _write_inputs; from pathlib import Path; _write_inputs(Path({str(work)!r}), {rows})"
    subprocess.run([PYTHON, "-c", code], cwd=REPO, env=bench_env(), check=True, timeout=600)


def measure(work: Path, rounds: int, rows: int = ROWS) -> dict[str, list[float]]:
    """rows/s of each subject, once per round, interleaved."""
    home = work / "home"
    _prepare(work, home, rows)
    env = _env(home)
    subjects = {
        "graph": [SLUICE, "--tenant", TENANT, "batch", "run", str(work / "raw.parquet"), "--deployment", "labelled", "--out", str(work / "graph-out")],
        "model": [SLUICE, "--tenant", TENANT, "batch", "run", str(work / "embedded.parquet"), "--deployment", "score", "--out", str(work / "model-out")],
    }  # fmt: skip
    results: dict[str, list[float]] = {name: [] for name in subjects}
    names = list(subjects)
    for r in range(rounds):
        for name in names[r % 2 :] + names[: r % 2]:
            seconds, _, _ = _timed(subjects[name], env)
            results[name].append(rows / seconds)
    for name in names:  # every row answered: neither job spent its time on refusals
        counts = json.loads((work / f"{name}-out" / "_manifest.json").read_text())["counts"]
        if counts["rows_out"] != rows:
            raise RuntimeError(f"the {name} job answered {counts['rows_out']} of {rows} rows")
    return results


def run(quick: bool) -> dict[str, Any]:
    work = WORK / "graph-batch"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rounds = 2 if quick else 5
    results = measure(work, rounds)
    figures = [
        figure(
            "graphs.batch.1m", f"{ROWS // 1_000_000}M-row Parquet through transform -> model -> transform: whole process, 2 workers",
            "rows/s", "sluice batch run, the graph on raw rows", results["graph"],
            reference="sluice batch run, the model alone on pre-transformed rows", ref_values=results["model"],
            goal=Goal(">=", 0.9), better="higher", note="spawn to exit, imports included; one row group",
        )
    ]  # fmt: skip
    notes = [f"{rounds} round(s), the two jobs taking turns in a rotated order; medians, min-max in brackets."]
    shutil.rmtree(work, ignore_errors=True)
    return {"title": "Inference graphs: a batch job", "figures": figures, "notes": notes}


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
