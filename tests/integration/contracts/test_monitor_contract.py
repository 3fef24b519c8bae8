"""The monitoring part of the registry port, on SQLite and on DynamoDB (moto): a baseline per
deployment and tenant, replaced whole; profiles appended per flush and read back by revision
and window, merged by the reader; and the profile recorder's writes through it, kept when the
registry refuses one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.monitor.profiler import ProfileRecorder
from sluice.monitor.sketches import Profile

if TYPE_CHECKING:
    from sluice.registry import Registry

A, B = "acme", "globex"


def test_a_baseline_is_kept_per_tenant_and_deployment_and_replaced_whole(registry: Registry) -> None:
    assert registry.get_baseline(A, "iris") is None
    registry.put_baseline(A, "iris", {"revision": 1, "rows": 10, "columns": {"x": {"kind": "number"}}})
    registry.put_baseline(A, "iris", {"revision": 3, "rows": 20, "columns": {}})
    assert registry.get_baseline(A, "iris") == {"revision": 3, "rows": 20, "columns": {}}
    assert registry.get_baseline(B, "iris") is None
    assert registry.get_baseline(A, "wine") is None


def test_profiles_are_appended_and_read_by_revision_and_window(registry: Registry) -> None:
    doc: dict[str, Any] = {"rows": 1, "columns": {}}
    registry.add_profile(A, "iris", 2, "stable", 7200, {**doc, "rows": 2})
    registry.add_profile(A, "iris", 2, "", 3600, doc)
    registry.add_profile(A, "iris", 2, "stable", 3600, doc)  # a second process's flush of the same window
    registry.add_profile(A, "iris", 1, "", 3600, doc)
    registry.add_profile(B, "iris", 2, "", 3600, doc)
    found = registry.read_profiles(A, "iris", 2)
    assert sorted((v, w) for v, w, _ in found) == [("", 3600), ("stable", 3600), ("stable", 7200)]
    assert [w for _, w, _ in found] == sorted(w for _, w, _ in found)  # oldest window first
    assert [(v, w, d["rows"]) for v, w, d in registry.read_profiles(A, "iris", 2, since=7200)] == [("stable", 7200, 2)]
    assert len(registry.read_profiles(B, "iris", 2)) == 1
    assert registry.read_profiles(A, "wine", 2) == []


class RefusesOnce:
    """The registry, refusing the first profile written."""

    def __init__(self, registry: Registry) -> None:
        self.registry, self.refused = registry, 0

    def add_profile(self, *args: Any) -> None:
        if not self.refused:
            self.refused += 1
            raise OSError("disk full")
        self.registry.add_profile(*args)


def test_the_recorder_writes_each_window_once_and_keeps_what_was_refused(registry: Registry) -> None:
    recorder = ProfileRecorder(RefusesOnce(registry), window_s=3600, fold_rows=10, timed=False)  # type: ignore[arg-type]
    x = np.arange(24, dtype=np.float32).reshape(8, 3)
    for _ in range(3):  # 24 rows: folded on the way (fold_rows), all written by the flush
        recorder.observe((A, "iris", 1, ""), None, {"x": x}, {"y": x[:, 0]}, {}, 8)
    assert recorder.flush() is False  # refused: kept
    assert registry.read_profiles(A, "iris", 1) == []
    assert recorder.flush() is True
    [(variant, window, doc)] = registry.read_profiles(A, "iris", 1)
    profile = Profile.from_dict(doc)
    assert variant == "" and window % 3600 == 0 and profile.rows == 24
    assert profile.columns["x[2]"].count == 24 and profile.columns["y"].role == "output"
    assert recorder.flush() is True and len(registry.read_profiles(A, "iris", 1)) == 1  # nothing written twice
