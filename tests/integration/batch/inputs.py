"""Iris inputs for batch jobs: rows with ids, written as CSV, JSON Lines or Parquet."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from pathlib import Path

FEATURES = ("sepal_length", "sepal_width", "petal_length", "petal_width")


def iris_rows(n: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    lows, highs = np.array([4.3, 2.0, 1.0, 0.1]), np.array([7.9, 4.4, 6.9, 2.5])
    values = np.round(rng.uniform(lows, highs, size=(n, 4)), 2)
    return [{"id": f"r{i:06d}", **dict(zip(FEATURES, map(float, row), strict=True))} for i, row in enumerate(values)]


def write_input(path: Path, rows: list[dict[str, Any]], *, row_group_rows: int = 1000) -> Path:
    """Rows as the file's suffix says: .csv (header first), .jsonl or .parquet."""
    if path.suffix == ".parquet":
        table = pa.Table.from_pylist(rows) if rows else pa.table({c: pa.array([], pa.float64()) for c in ("id", *FEATURES)})
        pq.write_table(table, path, row_group_size=row_group_rows)
    elif path.suffix == ".csv":
        columns = ["id", *FEATURES]
        lines = [",".join(columns)] + [",".join("" if r.get(c) is None else str(r[c]) for c in columns) for r in rows]
        path.write_text("\n".join(lines) + "\n")
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
