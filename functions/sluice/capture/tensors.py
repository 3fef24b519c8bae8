"""Captured records read back into tensors, many records at once: the records of one layout
(the same tensors, datatypes and shapes past the batch axis) stacked into one array per
tensor. A redacted value (`null`) reads as NaN in a number tensor and as None in a text one; a
tensor captured without its data (a redacted tensor, or outputs left out) is left out."""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.codecs.datatypes import numpy_of_v2

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

Layout = tuple[tuple[str, str, tuple[int, ...]], ...]


def layout(record: dict[str, Any], part: str) -> Layout | None:
    """The tensors of `part` that carry data, with their datatypes and shapes past the batch
    axis; None when the record's `part` cannot be read that way."""
    tensors = record.get(part)
    if not isinstance(tensors, dict):
        return () if tensors is None else None
    out = []
    for name, item in tensors.items():
        if not isinstance(item, dict) or not isinstance(item.get("shape"), list) or not item["shape"]:
            return None
        if not isinstance(item.get("data"), list):
            continue  # captured without its data
        out.append((name, str(item.get("datatype")), tuple(item["shape"][1:])))
    return tuple(out)


def stacked(records: list[dict[str, Any]], part: str, found: Layout, rows: int) -> dict[str, np.ndarray]:
    """One array per tensor of `found` for all `records` (of that layout); raises ValueError
    or TypeError when their data does not make `rows` rows of it."""
    out: dict[str, np.ndarray] = {}
    for name, datatype, shape in found:
        flat = list(chain.from_iterable(r[part][name]["data"] for r in records))
        if datatype == "BYTES":
            array = np.asarray(flat, dtype=object)
        else:
            kind = numpy_of_v2(datatype)
            array = np.asarray(flat, dtype=np.float64 if kind.kind in "fiu" and None in flat else kind)
        out[name] = array.reshape(rows, *shape)
    return out


def batches(records: Iterable[dict[str, Any]], *, rows: int = 4096) -> Iterator[tuple[list[dict[str, Any]], int]]:
    """The readable records in groups of one layout (inputs and outputs) of about `rows` rows,
    each with its row count; an unreadable record is yielded alone with -1 rows."""
    pending: dict[tuple[Layout, Layout], tuple[list[dict[str, Any]], list[int]]] = {}
    for record in records:
        found = (layout(record, "inputs"), layout(record, "outputs"))
        n = record.get("rows")
        if "unreadable" in record or None in found or not isinstance(n, int) or n < 0:
            yield [record], -1
            continue
        group, count = pending.setdefault(found, ([], [0]))  # type: ignore[arg-type]
        group.append(record)
        count[0] += n
        if count[0] >= rows:
            del pending[found]  # type: ignore[arg-type]
            yield group, count[0]
    for group, count in pending.values():
        yield group, count[0]
