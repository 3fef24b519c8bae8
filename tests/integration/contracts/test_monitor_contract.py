"""The monitoring part of the registry port, on SQLite and on DynamoDB (moto): a baseline per
deployment and tenant, replaced whole; profiles appended per flush and read back by revision
and window, merged by the reader; and the profile recorder's writes through it, kept when the
registry refuses one."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

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
    registry.put_baseline(B, "iris", {"revision": 1, "rows": 5, "columns": {}})
    registry.delete_baseline(A, "iris")  # its deployment deleted: that tenant's alone
    assert registry.get_baseline(A, "iris") is None and not registry.has_baseline(A, "iris")
    assert registry.get_baseline(B, "iris") == {"revision": 1, "rows": 5, "columns": {}}
    registry.delete_baseline(A, "iris")  # none: nothing to do


def test_monitored_lists_every_tenants_deployments_with_a_baseline(registry: Registry) -> None:
    assert registry.monitored() == []
    registry.put_baseline(B, "iris", {"revision": 1, "rows": 0, "columns": {}})
    registry.put_baseline(A, "wine", {"revision": 1, "rows": 0, "columns": {}})
    registry.put_baseline(A, "iris", {"revision": 1, "rows": 0, "columns": {}})
    registry.add_profile(A, "plain", 1, "", 0, {"rows": 0, "columns": {}})  # traffic, no baseline
    assert registry.monitored() == [(A, "iris"), (A, "wine"), (B, "iris")]


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


def _kept(rid: str, window: int = 3600, variant: str = "") -> dict[str, Any]:
    return {"request_id": rid, "revision": 1, "variant": variant, "window": window, "kind": "class", "predicted": ["a", "b"]}


def test_kept_predictions_are_found_by_request_id_per_tenant_until_they_expire(registry: Registry) -> None:
    t = time.time()
    registry.keep_predictions(A, "iris", [_kept("r1"), _kept("r2", 7200, "candidate")], expires_at=t + 2000)
    registry.keep_predictions(A, "iris", [_kept("old")], expires_at=t + 500)
    found = registry.find_predictions(A, "iris", ["r1", "r2", "r1", "old", "nope"], now=t + 1000)
    assert sorted(found) == ["r1", "r2"] and found["r2"]["window"] == 7200 and found["r2"]["variant"] == "candidate"
    assert registry.find_predictions(B, "iris", ["r1", "r2"], now=t) == {}  # another tenant's ids: never found
    assert registry.find_predictions(A, "wine", ["r1"], now=t) == {}
    assert registry.find_predictions(A, "iris", ["r1"], now=t + 3000) == {}  # expired
    many = [f"m{i}" for i in range(105)]  # more than one BatchGetItem's hundred keys
    registry.keep_predictions(A, "iris", [_kept(rid) for rid in many], expires_at=t + 2000)
    assert len(registry.find_predictions(A, "iris", many, now=t)) == 105


def test_a_labelled_row_is_claimed_once_and_counts_are_appended_per_window(registry: Registry) -> None:
    assert registry.claim_labels(A, "iris", [("r1", 0), ("r1", 1), ("r1", 0)], expires_at=2e9, made=1) == [True, True, False]
    assert registry.claim_labels(A, "iris", [("r1", 1), ("r2", 0)], expires_at=2e9, made=1) == [False, True]
    assert registry.claim_labels(B, "iris", [("r1", 0)], expires_at=2e9, made=1) == [True]
    registry.release_labels(A, "iris", [("r1", 1), ("nobody", 0)])  # one whose counts were not written; one never claimed
    assert registry.claim_labels(A, "iris", [("r1", 0), ("r1", 1)], expires_at=2e9, made=1) == [False, True]
    assert registry.claim_labels(B, "iris", [("r1", 1)], expires_at=2e9, made=1) == [True]  # another tenant's rows are its own
    # A deployment made again under the name (at revision 3) claims its rows afresh, once; the earlier one no more.
    assert registry.claim_labels(A, "iris", [("r1", 0), ("r1", 0)], expires_at=2e9, made=3) == [True, False]
    assert registry.claim_labels(A, "iris", [("r1", 0)], expires_at=2e9, made=1) == [False]
    doc = {"": {"kind": "class", "rows": 1, "pairs": [["a", "a", 1]]}}
    registry.add_outcomes(A, "iris", 1, 7200, doc)
    registry.add_outcomes(A, "iris", 1, 3600, doc)
    registry.add_outcomes(A, "iris", 1, 3600, doc)
    registry.add_outcomes(A, "iris", 2, 3600, doc)
    registry.add_outcomes(B, "iris", 1, 3600, doc)
    assert [w for w, _ in registry.read_outcomes(A, "iris", 1)] == [3600, 3600, 7200]
    assert registry.read_outcomes(A, "iris", 1)[0][1] == doc
    assert len(registry.read_outcomes(B, "iris", 1)) == 1 and registry.read_outcomes(A, "wine", 1) == []


def test_the_keeper_writes_for_deployments_with_a_baseline_and_caps_a_window(registry: Registry) -> None:
    from sluice.domain.results import InferenceResult
    from sluice.domain.signature import Signature, TensorSpec
    from sluice.monitor.kept import PredictionKeeper

    signature = Signature(inputs=(), outputs=(TensorSpec("y", "FP32", (-1,)),))
    result = InferenceResult({"y": np.array([1.0, 2.0], np.float32)})
    t = time.time() // 3600 * 3600 + 100
    keeper = PredictionKeeper(registry, mode="baseline", max_rows=4, timed=False, clock=lambda: t)
    for rid in ("a", "b", "c"):  # the third is past the window's four rows
        keeper.observe((A, "iris", 1, ""), signature, result, rid, 2)
    keeper.observe((A, "wine", 1, ""), signature, result, "w", 2)
    keeper.observe((A, "iris", 1, ""), signature, result, None, 2)  # no request id: nothing to join a label to
    registry.put_baseline(A, "iris", {"rows": 0, "columns": {}})
    assert keeper.flush() is True and keeper.not_kept == 2
    found = registry.find_predictions(A, "iris", ["a", "b", "c"], now=t)
    assert sorted(found) == ["a", "b"] and found["a"] == {"request_id": "a", "revision": 1, "variant": "", "window": t - 100, "kind": "value", "predicted": [1.0, 2.0]}
    assert registry.find_predictions(A, "wine", ["w"], now=t) == {}  # no baseline: not kept


def test_a_deployment_found_without_a_baseline_has_nothing_held_and_is_looked_at_again_each_minute(registry: Registry) -> None:
    """Answers of a deployment the keeper found without a baseline are not held for the next
    flush to leave (at thousands of requests a second they were objects by the hundred thousand
    for the garbage collector to walk). A deployment never looked at is looked at a second after
    the last flush, not thirty; a finding a minute old is looked at again at the next flush, and
    a baseline set meanwhile has the later answers kept."""
    from sluice.domain.results import InferenceResult
    from sluice.domain.signature import Signature, TensorSpec
    from sluice.monitor import kept
    from sluice.monitor.kept import PredictionKeeper

    signature = Signature(inputs=(), outputs=(TensorSpec("y", "FP32", (-1,)),))
    result = InferenceResult({"y": np.array([1.0], np.float32)})
    t, now = time.time(), [1000.0]
    keeper = PredictionKeeper(registry, mode="baseline", timed=False, clock=lambda: t, monotonic=lambda: now[0])
    keeper.observe((A, "iris", 1, ""), signature, result, "first", 1)  # never looked at: held, and looked at soon
    keeper.observe((B, "iris", 1, ""), signature, result, "other", 1)
    registry.put_baseline(B, "iris", {"rows": 0, "columns": {}})  # another tenant's deployment of the same name
    assert keeper.pending() and not keeper.due()
    now[0] += kept.LOOK_SOON_S
    assert keeper.due() and keeper.flush() is True  # a second after the last flush, not thirty
    keeper.observe((A, "iris", 1, ""), signature, result, "second", 1)
    assert not keeper.pending()  # found without a baseline: nothing held
    keeper.observe((B, "iris", 1, ""), signature, result, "other-2", 1)
    now[0] += kept.LOOK_SOON_S
    assert keeper.pending() and not keeper.due()  # known to have a baseline: held until the usual flush
    now[0] += keeper.flush_every_s
    assert keeper.due() and keeper.flush() is True
    registry.put_baseline(A, "iris", {"rows": 0, "columns": {}})
    now[0] += kept.MONITORED_TTL_S
    keeper.observe((A, "iris", 1, ""), signature, result, "third", 1)  # the finding is a minute old: still not held,
    assert keeper.pending() and keeper.due()  # but looked at again at the next flush
    assert keeper.flush() is True and not keeper.pending()
    keeper.observe((A, "iris", 1, ""), signature, result, "fourth", 1)  # a baseline now: held and kept
    now[0] += keeper.flush_every_s
    assert keeper.due() and keeper.flush() is True
    assert sorted(registry.find_predictions(A, "iris", ["first", "second", "third", "fourth"], now=t)) == ["fourth"]
    assert sorted(registry.find_predictions(B, "iris", ["other", "other-2"], now=t)) == ["other", "other-2"]


def test_a_keeper_whose_registry_fails_looks_again_at_its_usual_pace_not_every_second(registry: Registry) -> None:
    """A deployment never looked at brings the flush forward once; if the registry fails it, the
    keeper goes back to its usual pace (one flush, and one baseline lookup, per `flush_every_s`)
    rather than trying every second."""
    from sluice.domain.results import InferenceResult
    from sluice.domain.signature import Signature, TensorSpec
    from sluice.monitor import kept
    from sluice.monitor.kept import PredictionKeeper

    class Down:
        lookups = 0

        def has_baseline(self, tenant: str, deployment: str) -> bool:
            self.lookups += 1
            raise ConnectionError("registry down")

    signature = Signature(inputs=(), outputs=(TensorSpec("y", "FP32", (-1,)),))
    result = InferenceResult({"y": np.array([1.0], np.float32)})
    down, now = Down(), [1000.0]
    keeper = PredictionKeeper(down, mode="baseline", timed=False, monotonic=lambda: now[0])  # type: ignore[arg-type]
    keeper.observe((A, "iris", 1, ""), signature, result, "r0", 1)
    now[0] += kept.LOOK_SOON_S
    assert keeper.due() and keeper.flush() is False and down.lookups == 1
    for i in range(1, 30):  # a request a second for the rest of the period: held, no flush due
        keeper.observe((A, "iris", 1, ""), signature, result, f"r{i}", 1)
        now[0] += 1.0
        assert keeper.pending() and not keeper.due(), i
    now[0] += 1.0
    assert keeper.due() and keeper.flush() is False and down.lookups == 2  # its usual pace; every answer still held
    assert len(keeper._held) == 30


def test_a_baseline_lookup_that_fails_leaves_the_finding_standing_and_loses_no_answer(registry: Registry) -> None:
    """Looking again at a minute-old finding fails (the registry is down): the finding stands,
    nothing keeps the keeper flushing with nothing to do, and answers of other deployments held
    meanwhile are written, never dropped at close."""
    from sluice.domain.results import InferenceResult
    from sluice.domain.signature import Signature, TensorSpec
    from sluice.monitor import kept
    from sluice.monitor.kept import PredictionKeeper

    class Flaky:
        def __init__(self) -> None:
            self.down, self.lookups = False, 0

        def has_baseline(self, tenant: str, deployment: str) -> bool:
            self.lookups += 1
            if self.down:
                raise ConnectionError("registry down")
            return registry.has_baseline(tenant, deployment)

        def keep_predictions(self, *args: Any, **kwargs: Any) -> Any:
            return registry.keep_predictions(*args, **kwargs)

    signature = Signature(inputs=(), outputs=(TensorSpec("y", "FP32", (-1,)),))
    result = InferenceResult({"y": np.array([1.0], np.float32)})
    t, now, flaky = time.time(), [1000.0], Flaky()
    keeper = PredictionKeeper(flaky, mode="baseline", timed=False, clock=lambda: t, monotonic=lambda: now[0])  # type: ignore[arg-type]
    registry.put_baseline(B, "wine", {"rows": 0, "columns": {}})
    keeper.observe((A, "iris", 1, ""), signature, result, "a1", 1)
    now[0] += kept.LOOK_SOON_S
    assert keeper.flush() is True and not keeper.pending()  # iris: no baseline
    now[0] += kept.MONITORED_TTL_S + 1
    flaky.down = True
    keeper.observe((A, "iris", 1, ""), signature, result, "a2", 1)  # a minute old: looked at again at the next flush
    assert keeper.pending() and keeper.due()
    assert keeper.flush() is True and not keeper.pending()  # the lookup failed: nothing left to do, nothing dropped
    lookups = flaky.lookups
    for _ in range(20):  # no more traffic: no more flushes or lookups
        now[0] += keeper.flush_every_s
        assert not keeper.due()
    assert flaky.lookups == lookups
    flaky.down = False
    keeper.observe((B, "wine", 1, ""), signature, result, "b1", 1)
    keeper.close()  # written, not dropped
    assert sorted(registry.find_predictions(B, "wine", ["b1"], now=t)) == ["b1"]
    assert registry.find_predictions(A, "iris", ["a1", "a2"], now=t) == {}


def test_a_prediction_too_large_to_keep_is_left_alone_and_the_others_are_kept(registry: Registry) -> None:
    """DynamoDB holds 400 KB an item: a 30,000-row answer cannot be kept there. It is counted
    and left, never held to try again, so the requests before and after it keep theirs."""
    from sluice.domain.results import InferenceResult
    from sluice.domain.signature import Signature, TensorSpec
    from sluice.monitor.kept import PredictionKeeper

    signature = Signature(inputs=(), outputs=(TensorSpec("y", "FP32", (-1,)),))
    small, big = InferenceResult({"y": np.array([1.0], np.float32)}), InferenceResult({"y": np.random.default_rng(0).random(30_000).astype(np.float32)})
    t = time.time()
    keeper = PredictionKeeper(registry, mode="all", timed=False, clock=lambda: t)
    for rid, result in (("before", small), ("big", big), ("after", small)):
        keeper.observe((A, "iris", 1, ""), signature, result, rid, len(result.outputs["y"]))
    assert keeper.flush() is True and not keeper.pending()
    keeper.observe((A, "iris", 1, ""), signature, small, "later", 1)
    assert keeper.flush() is True
    found = registry.find_predictions(A, "iris", ["before", "big", "after", "later"], now=t)
    assert {"before", "after", "later"} <= set(found)
    assert keeper.too_large == (0 if "big" in found else 1)  # SQLite keeps any size
    too_long = "r" * 3000  # a key DynamoDB refuses (2 KB): refused as too large, never held
    assert registry.keep_predictions(A, "iris", [_kept(too_long), _kept("fine")], expires_at=t + 100) in ([], [too_long])
    assert "fine" in registry.find_predictions(A, "iris", ["fine"], now=t)


def test_a_claim_that_fails_midway_claims_none_of_its_rows(registry_table: Any) -> None:
    """DynamoDB claims row by row (the tenant role has no BatchWriteItem): a put that fails
    after others succeeded lets those go, as SQLite's transaction rolls back, so the client's
    retry counts every row."""
    from botocore.exceptions import ClientError
    from tests.integration.contracts.conftest import TABLE, emptied

    from sluice.domain.errors import SluiceError
    from sluice.registry.dynamodb import DynamoRegistry

    class ThrottledAt:
        def __init__(self, client: Any, nth: int) -> None:
            self.client, self.nth, self.puts = client, nth, 0

        def __getattr__(self, name: str) -> Any:
            return getattr(self.client, name)

        def put_item(self, **kwargs: Any) -> Any:
            self.puts += 1
            if self.puts == self.nth:
                raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}}, "PutItem")
            return self.client.put_item(**kwargs)

    with emptied(registry_table) as client:
        rows = [("r1", 0), ("r1", 1), ("r2", 0)]
        with pytest.raises((ClientError, SluiceError)):  # the third put is throttled
            DynamoRegistry(TABLE, client=ThrottledAt(client, 3)).claim_labels(A, "iris", rows, expires_at=2e9, made=1)  # type: ignore[arg-type]
        assert DynamoRegistry(TABLE, client=client).claim_labels(A, "iris", rows, expires_at=2e9, made=1) == [True, True, True]
