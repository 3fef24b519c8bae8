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


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
