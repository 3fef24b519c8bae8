"""Profiles made from captured traffic (`sluice.capture`): a baseline from a window of a
deployment's captured requests, or a window of its traffic recomputed from capture.

Unlike the request path's profiles, which sketch a uniform sample of 1024 rows of each fold of
up to 8192, every captured row goes into the sketches: the figures of such a window carry the
sketches' own error alone (a KLL rank error of about 1.3%), and its row and missing counts are
those of the captured records. It is the window's traffic exactly when capture kept every
request (`sample_percent` 100); cache hits are neither captured nor profiled. Columns a record
redacted are left out of the profile (they would read as missing values), as are records that
cannot be read (counted as `skipped`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.capture.tensors import batches, layout, stacked
from sluice.domain.errors import SluiceError
from sluice.monitor.sketches import Profile

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from sluice.domain.signature import Signature


def profile_of_capture(
    records: Iterable[dict[str, Any]],
    signature_of: Callable[[str, int], Signature | None],
    *,
    max_columns: int,
    revision: int | None = None,
    variant: str | None = None,
    outputs: bool = True,
) -> tuple[Profile, dict[str, int]]:
    """The profile of the records (of `revision` and `variant`, where given: `""` is the
    traffic of no split), every row sketched; with counts of the records and rows profiled and
    of the rows skipped. `signature_of(model, version)` names a captured version's features
    (None: gone, the tensors' columns are then named by position)."""
    profile = Profile()
    counts = {"records": 0, "rows": 0, "skipped_rows": 0}
    redacted: set[str] = set()
    signatures: dict[tuple[str, int], Signature | None] = {}

    def wanted(record: dict[str, Any]) -> bool:
        if revision is not None and record.get("revision") != revision:
            return False
        return variant is None or (record.get("variant") or "") == variant

    for group, rows in batches(r for r in records if "unreadable" in r or wanted(r)):
        if rows < 0:
            counts["skipped_rows"] += _rows(group[0])
            continue
        try:
            inputs = stacked(group, "inputs", layout(group[0], "inputs") or (), rows)
            answered = stacked(group, "outputs", layout(group[0], "outputs") or (), rows) if outputs else {}
        except (ValueError, TypeError, KeyError):
            if len(group) == 1:
                counts["skipped_rows"] += rows
                continue
            for one in group:  # read alone, the ones that can
                found, _ = profile_of_capture([one], signature_of, max_columns=max_columns, outputs=outputs)
                _add(profile, counts, found, 1, found.rows)
                counts["skipped_rows"] += _rows(one) - found.rows
            continue
        if not inputs:
            counts["skipped_rows"] += rows
            continue
        first = group[0]
        key = (str(first.get("model")), first.get("version"))
        if key not in signatures:
            signatures[key] = _signature(signature_of, *key)
        classes = first.get("classes") if isinstance(first.get("classes"), dict) else None
        profile.add_rows(inputs, answered, signatures[key], classes, max_columns=max_columns)
        counts["records"] += len(group)
        counts["rows"] += rows
        for record in group:
            redacted.update(str(name) for name in record.get("redacted") or ())
    for name in redacted:
        profile.columns.pop(name, None)
    return profile, counts


def _add(profile: Profile, counts: dict[str, int], found: Profile, records: int, rows: int) -> None:
    if rows:
        profile.merge(found)
        counts["records"] += records
        counts["rows"] += rows


def _rows(record: dict[str, Any]) -> int:
    n = record.get("rows")
    return n if isinstance(n, int) and n > 0 else 0


def _signature(signature_of: Callable[[str, int], Signature | None], model: str, version: Any) -> Signature | None:
    if not isinstance(version, int) or isinstance(version, bool):
        return None
    try:
        return signature_of(model, version)
    except SluiceError:
        return None
