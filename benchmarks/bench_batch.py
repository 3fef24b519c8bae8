"""Batch inference: rows per second of a local job end to end (read Parquet, check, infer,
write Parquet, manifest) against raw ONNX Runtime on the same rows already in memory, and
peak memory as the file grows.

Every measurement runs in a fresh interpreter (`python -m benchmarks.bench_batch child …`),
so imports, model loads and the allocator start the same each time, and `ru_maxrss` is the
peak of that one job. The inputs are written beforehand, a row group at a time.

The floor is the best raw ORT does on this machine with the session options sluice uses
(one intra-op thread, full graph optimization) and the same batch size: one loop over the
in-memory batches, or the same loop split over as many threads as the job's pool has,
whichever is faster.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import PYTHON, REPO, WORK, Goal, bench_env, figure

BATCH_ROWS = 4096
CHUNK_ROWS = 250_000
ROW_GROUP_ROWS = 131_072
MODELS = {
    "diabetes": ("models/diabetes_mlp.onnx", ("age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6")),
    "iris": ("models/iris.onnx", ("sepal_length", "sepal_width", "petal_length", "petal_width")),
}


def _write_input(path: Path, model: str, rows: int) -> None:
    """`rows` rows of the model's features (float32) and an id, a row group at a time."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    _, names = MODELS[model]
    rng = np.random.default_rng(11)
    schema = pa.schema([("id", pa.int64())] + [(n, pa.float32()) for n in names])
    with pq.ParquetWriter(path, schema, compression="snappy", use_dictionary=False) as writer:
        for start in range(0, rows, ROW_GROUP_ROWS):
            n = min(ROW_GROUP_ROWS, rows - start)
            values = rng.normal(0.5, 0.2, size=(n, len(names))).astype(np.float32)
            columns = [pa.array(np.arange(start, start + n))] + [pa.array(values[:, j]) for j in range(len(names))]
            writer.write_table(pa.Table.from_arrays(columns, schema=schema))


def _child(argv: list[str]) -> dict[str, Any]:
    """One measurement in this fresh process: `job MODEL INPUT HOME` or `ort MODEL INPUT THREADS`."""
    import resource

    kind, model, source = argv[0], argv[1], Path(argv[2])
    if kind == "job":
        return _job(model, source, Path(argv[3]))
    result = _ort(model, source, int(argv[3]))
    result["maxrss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def _job(model: str, source: Path, home: Path) -> dict[str, Any]:
    import resource

    os.environ["SLUICE_LOG_LEVEL"] = "WARNING"
    from sluice.batch.orchestrators import LocalOrchestrator
    from sluice.domain import Principal
    from sluice.settings import Settings
    from sluice.wiring import Container

    settings = Settings(mode="local", home=home, log_level="WARNING", batch_infer_rows=BATCH_ROWS, batch_chunk_rows=CHUNK_ROWS)
    container = Container.from_settings(settings)
    operator = Principal("bench", frozenset({"admin", "predict"}), "bench")
    container.models.push(operator, model, (REPO / MODELS[model][0]).read_bytes())
    container.deployments.create(operator, model, {"kind": "single", "model": model, "version": 1})
    job = container.batch.submit(
        operator, deployment=model, input_uri=str(source), output_uri=str(home / "out"), operator=True, start=False
    )
    pool = settings.batch_concurrency or os.cpu_count() or 1
    started = time.perf_counter()
    LocalOrchestrator(container.batch_runner, concurrency=pool).run(operator.tenant, job.id)
    seconds = time.perf_counter() - started
    done = container.registry.get_job(operator.tenant, job.id)
    if done.status != "SUCCEEDED" or done.rows_out != done.rows_total:
        raise RuntimeError(f"the batch job ended {done.status}: {done.error}")
    return {
        "rows": done.rows_out,
        "seconds": seconds,
        "rows_per_s": done.rows_out / seconds,
        "threads": pool,
        "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _ort(model: str, source: Path, threads: int) -> dict[str, Any]:
    """Raw ORT over the rows already in memory, batch by batch, on `threads` threads."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import onnxruntime as ort
    import pyarrow.parquet as pq

    path, names = MODELS[model]
    table = pq.read_table(source, columns=list(names))
    matrix = np.column_stack([table.column(n).to_numpy() for n in names]).astype(np.float32)
    batches = [matrix[i : i + BATCH_ROWS] for i in range(0, len(matrix), BATCH_ROWS)]
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(REPO / path), options, providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0].name
    session.run(None, {feed: batches[0]})  # warm, as the job's first batch also loads the model

    def share(k: int) -> None:
        for batch in batches[k::threads]:
            session.run(None, {feed: batch})

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(share, range(threads)))
    seconds = time.perf_counter() - started
    return {"rows": len(matrix), "seconds": seconds, "rows_per_s": len(matrix) / seconds, "threads": threads}


def _measure(*argv: str) -> dict[str, Any]:
    done = subprocess.run(
        [PYTHON, "-m", "benchmarks.bench_batch", "child", *argv],
        cwd=REPO, env=bench_env(), capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"measurement {argv[:2]} failed: {done.stderr[-1500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(quick: bool) -> dict[str, Any]:
    work = WORK / "batch"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    repeats = 1 if quick else 3
    pool = os.cpu_count() or 1
    figures: list[dict[str, Any]] = []
    notes: list[str] = []
    rows = 1_000_000
    for model in ("diabetes", "iris") if not quick else ("diabetes",):
        source = work / f"{model}-1m.parquet"
        _write_input(source, model, rows)
        jobs, floors = [], []
        for r in range(repeats):
            jobs.append(_measure("job", model, str(source), str(work / f"home-{model}-{r}"))["rows_per_s"])
            floors.append(max(_measure("ort", model, str(source), str(t))["rows_per_s"] for t in sorted({1, pool})))
        row = figure(
            f"batch.throughput.{model}", f"1M-row Parquet job, {model}: read, check, infer, write",
            "rows/s", "sluice batch (local)", jobs, reference="ORT, rows in memory", ref_values=floors,
            goal=Goal(">=", 0.8), better="higher",
            note=f"batches of {BATCH_ROWS} rows, {pool} scoring threads, chunks of {CHUNK_ROWS} rows",
        )  # fmt: skip
        figures.append(row)
    peaks = {}
    for n in (1_000_000, 4_000_000):
        source = work / f"diabetes-{n // 1_000_000}m.parquet"
        if not source.exists():
            _write_input(source, "diabetes", n)
        peaks[n] = _measure("job", "diabetes", str(source), str(work / f"home-mem-{n}"))["maxrss_mib"]
    memory = figure(
        "batch.peak_memory", "peak memory (maxrss) of a job, 4M rows vs 1M rows", "MiB", "4M rows",
        [peaks[4_000_000]], reference="1M rows", ref_values=[peaks[1_000_000]], goal=Goal("<=", 1.25),
        better="lower", note="each job in a fresh process; memory follows the chunk, not the file",
    )  # fmt: skip
    figures.append(memory)
    notes.append(
        "The ORT floor for these demo models is tens of nanoseconds per row; decoding and "
        "encoding Parquet costs more than that, so the ratio measures I/O against a model that "
        "does almost no work. A model that costs microseconds per row puts the job near its floor."
    )
    shutil.rmtree(work, ignore_errors=True)
    return {"title": "Batch inference", "figures": figures, "notes": notes}


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        print(json.dumps(_child(sys.argv[2:])))
    else:
        print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
