"""Selections of the bulk call's records (or rows): a run of them (a slice) or their positions
in order (an array), and how the bulk call (`inference.bulk.score_many`) cuts them: into
calls of at most `max_rows` rows, one record at a time, halves (bisecting a refused call), or
runs of one switch case; and the rows a selection of records takes."""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from sluice.domain.errors import CasesApart

Selection = slice | np.ndarray  # records (or rows): a run of them, or their positions in order


def offsets_of(rows: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(rows) + 1, dtype=np.intp)
    np.cumsum(rows, out=offsets[1:])
    return offsets


def count_of(chosen: Selection) -> int:
    return chosen.stop - chosen.start if isinstance(chosen, slice) else len(chosen)


def positions_of(chosen: Selection) -> range | np.ndarray:
    return range(chosen.start, chosen.stop) if isinstance(chosen, slice) else chosen


def one_by_one(chosen: Selection) -> list[Selection]:
    """The chosen records one by one, in order."""
    if isinstance(chosen, slice):
        return [slice(at, at + 1) for at in range(chosen.start, chosen.stop)]
    return [chosen[at : at + 1] for at in range(len(chosen))]


def halves(chosen: Selection) -> tuple[Selection, Selection]:
    half = count_of(chosen) // 2
    if isinstance(chosen, slice):
        return slice(chosen.start, chosen.start + half), slice(chosen.start + half, chosen.stop)
    return chosen[:half], chosen[half:]


def by_case(exc: Exception, chosen: Selection, offsets: np.ndarray | None) -> list[Selection] | None:
    """The chosen records in runs whose rows took one switch case, in order (a record whose
    rows took several is a run alone: it fails alone), where `exc` says each row's case; None
    where it does not say it for these rows (a switch under a node that answers some rows
    itself saw fewer), or they are one run."""
    if not isinstance(exc, CasesApart):
        return None
    count = count_of(chosen)
    cases = np.asarray(exc.cases)
    if cases.shape != ((count if offsets is None else int(offsets[-1])),):
        return None
    own = cases
    if offsets is not None:
        own = np.empty(count, dtype=np.intp)
        for j in range(count):
            mine = cases[offsets[j] : offsets[j + 1]]
            own[j] = mine[0] if len(mine) and (mine == mine[0]).all() else -1 - j  # a case of its own
    edges = [0, *(np.flatnonzero(own[1:] != own[:-1]) + 1).tolist(), count]
    if len(edges) == 2:
        return None
    if isinstance(chosen, slice):
        return [slice(chosen.start + a, chosen.start + b) for a, b in pairwise(edges)]
    return [chosen[a:b] for a, b in pairwise(edges)]


def rows_of_records(chosen: Selection, offsets: np.ndarray | None) -> tuple[Selection, np.ndarray | None]:
    """The rows of the chosen records, and where each record's start among them."""
    if offsets is None:
        return chosen, None
    if isinstance(chosen, slice):
        start, stop = int(offsets[chosen.start]), int(offsets[chosen.stop])
        return slice(start, stop), offsets[chosen.start : chosen.stop + 1] - start
    starts, lengths = offsets[chosen], offsets[chosen + 1] - offsets[chosen]
    local = offsets_of(lengths)
    rows = np.repeat(starts - local[:-1], lengths) + np.arange(local[-1], dtype=np.intp)
    return rows, local


def runs_of(chosen: Selection, offsets: np.ndarray | None, max_rows: int) -> list[Selection]:
    """The chosen records in runs of at most `max_rows` rows, in order (a record with more
    rows than that is a run of its own)."""
    count = count_of(chosen)
    if offsets is None:
        if count <= max_rows:
            return [chosen] if count else []
        if isinstance(chosen, slice):
            return [slice(at, min(at + max_rows, chosen.stop)) for at in range(chosen.start, chosen.stop, max_rows)]
        return [chosen[at : at + max_rows] for at in range(0, count, max_rows)]
    if not count:
        return []
    _, local = rows_of_records(chosen, offsets)
    assert local is not None
    if local[-1] <= max_rows:
        return [chosen]
    parts: list[Selection] = []
    at = 0
    while at < count:
        end = max(int(np.searchsorted(local, local[at] + max_rows, side="right")) - 1, at + 1)
        parts.append(slice(chosen.start + at, chosen.start + end) if isinstance(chosen, slice) else chosen[at:end])
        at = end
    return parts
