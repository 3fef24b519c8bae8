"""The floor for a batch job: a plain, single-threaded script that scores a Parquet file with
ONNX Runtime and writes the predictions to Parquet, with nothing else (no checks, no registry,
no manifest). `python -m benchmarks.plain_batch MODEL.onnx INPUT.parquet OUTPUT.parquet`

pyarrow reads 65,536 rows at a time; each batch is one ONNX Runtime call (one intra-op
thread, full graph optimization, as sluice builds its sessions); a ParquetWriter writes the
row number and the prediction. The feature columns are the model's, in order, named in the
file as the benchmark writes it (every column but `id`).
"""

from __future__ import annotations

import sys


def main(model: str, source: str, target: str) -> int:
    import numpy as np
    import onnxruntime as ort
    import pyarrow as pa
    import pyarrow.parquet as pq

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0].name
    parquet = pq.ParquetFile(source)
    features = [n for n in parquet.schema_arrow.names if n != "id"]
    writer = None
    start = 0
    for batch in parquet.iter_batches(batch_size=65_536, columns=features):
        matrix = np.column_stack([c.to_numpy() for c in batch.columns]).astype(np.float32, copy=False)
        (prediction,) = session.run(None, {feed: matrix})
        rows = np.arange(start, start + batch.num_rows, dtype=np.int64)
        start += batch.num_rows
        table = pa.table({"row": rows, "prediction": prediction.reshape(len(rows))})
        if writer is None:
            writer = pq.ParquetWriter(target, table.schema)
        writer.write_table(table)
    if writer is not None:
        writer.close()
    return 0


def ort_only(model: str, rows: int, threads: int) -> int:
    """ONNX Runtime alone on `rows` rows already in memory, 65,536 at a time, shared by
    `threads` threads: what this machine gives a second thread at the moment of the run
    (on a busy machine, less than a second core)."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0]
    matrix = np.random.default_rng(1).random((rows, feed.shape[1]), dtype=np.float32)
    batches = [matrix[i : i + 65_536] for i in range(0, rows, 65_536)]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda batch: session.run(None, {feed.name: batch}), batches))
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--ort-only":
        sys.exit(ort_only(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    sys.exit(main(*sys.argv[1:4]))
