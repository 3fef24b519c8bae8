"""The optimize job record's own rules: its moves, when its worker counts as gone, and the
bounded, plain-JSON form of its report."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sluice.domain.errors import Conflict
from sluice.domain.liveness import STALE_AFTER_S
from sluice.domain.optimize_jobs import (
    REPORT_BYTES,
    OptimizeJob,
    check_optimize_move,
    stored_report,
)


def test_a_running_job_may_stay_or_finish_and_a_finished_one_never_moves() -> None:
    check_optimize_move("opt-1", "RUNNING", "RUNNING")
    check_optimize_move("opt-1", "RUNNING", "SUCCEEDED")
    check_optimize_move("opt-1", "RUNNING", "FAILED")
    with pytest.raises(Conflict, match="cannot go from RUNNING to PENDING"):
        check_optimize_move("opt-1", "RUNNING", "PENDING")
    for finished in ("SUCCEEDED", "FAILED"):
        for target in ("RUNNING", "SUCCEEDED", "FAILED"):
            with pytest.raises(Conflict, match=f"already {finished}"):
                check_optimize_move("opt-1", finished, target)


def test_a_job_is_stale_once_its_worker_is_silent_past_the_bound() -> None:
    job = OptimizeJob("opt-1", "acme", "iris", 1, created_at=1000.0)
    assert not job.stale(1000.0 + STALE_AFTER_S) and job.stale(1000.0 + STALE_AFTER_S + 1)  # no beat yet: its start
    beating = OptimizeJob("opt-1", "acme", "iris", 1, created_at=1000.0, heartbeat_at=5000.0)
    assert not beating.stale(5000.0 + STALE_AFTER_S) and beating.stale(5000.0 + STALE_AFTER_S + 1)
    done = OptimizeJob("opt-1", "acme", "iris", 1, status="SUCCEEDED", created_at=1000.0)
    assert not done.stale(1e12)


def test_a_report_is_plain_json() -> None:
    report = {"p50": np.float32(0.5), "n": np.int64(3), "ok": np.bool_(True), "nan": float("nan"),
              "inf": [float("inf"), 1.5], "shape": (1, 2), 7: "seven"}  # fmt: skip
    stored = stored_report(report)
    assert stored == {"p50": 0.5, "n": 3, "ok": True, "nan": None, "inf": [None, 1.5], "shape": [1, 2], "7": "seven"}
    assert json.loads(json.dumps(stored, allow_nan=False)) == stored


def test_a_large_report_loses_its_largest_parts_first_and_names_them() -> None:
    report = {"model": "iris", "recommendation": {"candidate": "graph"}, "registered": [{"version": 2}],
              "candidates": ["x" * 300_000], "tuning": ["y" * 250_000], "triton": ["z" * 50_000]}  # fmt: skip
    stored = stored_report(report)
    assert stored["omitted"] == ["candidates", "tuning"]
    assert {k: v for k, v in stored.items() if k != "omitted"} == {k: report[k] for k in ("model", "recommendation", "registered", "triton")}
    assert len(json.dumps(stored).encode()) <= REPORT_BYTES
    assert stored_report(stored) == stored  # storing it again changes nothing
    small = {"model": "iris", "candidates": ["x" * 1000]}
    assert stored_report(small) == small
