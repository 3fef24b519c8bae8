"""What every registry does, whether SQLite or DynamoDB answers (see conftest's `registry`)."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from boto3.dynamodb.types import TypeSerializer
from botocore.stub import Stubber
from hypothesis import HealthCheck, given
from hypothesis import settings as examples
from hypothesis import strategies as st
from tests.integration.contracts.conftest import emptied
from tests.support import at_once

from sluice.clients import AwsClients
from sluice.domain import ApiKey, Deployment, Model, ModelVersion
from sluice.domain.errors import BadRequest, Conflict, NotFound, SluiceError, StaleRead, Unavailable
from sluice.domain.jobs import BatchJob, ChunkResult, OutputInUse
from sluice.domain.optimize_jobs import ERROR_CHARS, REPORT_BYTES, OptimizeJob, stored_report
from sluice.domain.schedules import Schedule
from sluice.domain.signature import Signature, TensorSpec
from sluice.registry.dynamodb import DynamoRegistry, create_table, table_of_url
from sluice.registry.ports import MessageWindow
from sluice.registry.sqlite import SqliteRegistry
from sluice.services.connection_rate import ConnectionRate
from sluice.stats.recorder import StatsRecorder

if TYPE_CHECKING:
    from sluice.registry import Registry

A, B = "acme", "globex"

SIGNATURE = Signature(
    inputs=(TensorSpec("features", "FP32", (-1, 3), feature_names=("age", "income", "score")),),
    outputs=(
        TensorSpec("label", "INT64", (-1,), role="label"),
        TensorSpec("probabilities", "FP32", (-1, 2), role="probabilities"),
    ),
    metadata={"producer": "skl2onnx"},
)


def version_of(model: str, tenant: str = A, **changes: Any) -> ModelVersion:
    version = ModelVersion(
        tenant=tenant,
        model=model,
        version=0,
        runtime="onnx",
        artifact_uri=f"s3://bucket/tenants/{tenant}/sha256/abc.onnx",
        sha256="ab" * 32,
        size_bytes=1234,
        signature=SIGNATURE,
        config={"threshold": 0.35, "bounds": [[0.5, 1.25], {"low": -2.5}], "retries": 3},
        created_by="key-1",
    )
    return replace(version, **changes)


def single(model: str, version: int) -> dict[str, Any]:
    return {"kind": "single", "model": model, "version": version}


def split(weight: float) -> dict[str, Any]:
    return {
        "kind": "split",
        "routes": [
            {"weight": weight, "node": single("churn", 1)},
            {"weight": 1 - weight, "node": single("churn", 2)},
        ],
        "sticky": None,
    }


def raises(error: type[SluiceError], field: str, call: Callable[[], object]) -> SluiceError:
    with pytest.raises(error) as caught:
        call()
    assert caught.value.field == field, caught.value.message
    return caught.value


# Models ---------------------------------------------------------------------------------
def test_models_round_trip_and_list_by_name(registry: Registry) -> None:
    for name in ("fraud", "churn", "ltv"):
        registry.create_model(Model(A, name, description=f"{name} model", created_by="key-1"))
    churn = registry.get_model(A, "churn")
    assert churn.description == "churn model" and churn.created_by == "key-1"
    assert [m.name for m in registry.list_models(A)] == ["churn", "fraud", "ltv"]
    assert registry.list_models(B) == []


def test_model_names_are_unique_per_tenant(registry: Registry) -> None:
    registry.create_model(Model(A, "churn"))
    raises(Conflict, "name", lambda: registry.create_model(Model(A, "churn", description="again")))
    assert registry.get_model(A, "churn").description == ""


def test_missing_model(registry: Registry) -> None:
    raises(NotFound, "model", lambda: registry.get_model(A, "nope"))
    raises(NotFound, "model", lambda: registry.delete_model(A, "nope"))
    raises(NotFound, "model", lambda: registry.add_version(version_of("nope")))


def test_delete_model_removes_its_versions(registry: Registry) -> None:
    registry.create_model(Model(A, "churn"))
    registry.create_model(Model(A, "fraud"))
    for _ in range(3):
        registry.add_version(version_of("churn"))
    registry.add_version(version_of("fraud"))
    registry.delete_model(A, "churn")
    raises(NotFound, "model", lambda: registry.get_model(A, "churn"))
    raises(NotFound, "model", lambda: registry.list_versions(A, "churn"))
    raises(NotFound, "model", lambda: registry.get_version(A, "churn", 1))
    assert [m.name for m in registry.list_models(A)] == ["fraud"]
    assert [v.version for v in registry.list_versions(A, "fraud")] == [1]
    registry.create_model(Model(A, "churn"))
    assert registry.list_versions(A, "churn") == []
    # A model made again under the name numbers on from the deleted one's count: churn:1 named
    # one artifact, and a batch job, a rollout or a kept answer that names it never finds another.
    assert registry.add_version(version_of("churn")).version == 4
    registry.delete_model(A, "churn")
    registry.create_model(Model(A, "churn"))
    assert registry.add_version(version_of("churn")).version == 5
    registry.create_model(Model(B, "churn"))  # each tenant's names number on their own
    assert registry.add_version(version_of("churn", tenant=B)).version == 1
    registry.delete_model(A, "fraud")  # a model deleted with no version left leaves its count too
    registry.create_model(Model(A, "fraud"))
    assert registry.add_version(version_of("fraud")).version == 2


# Versions -------------------------------------------------------------------------------
def test_versions_are_numbered_in_order_and_round_trip(registry: Registry) -> None:
    registry.create_model(Model(A, "churn"))
    stored = [registry.add_version(version_of("churn", version=99)) for _ in range(3)]
    assert [v.version for v in stored] == [1, 2, 3]
    assert registry.get_version(A, "churn", 2) == stored[1]
    assert registry.get_version(A, "churn", 2).signature == SIGNATURE
    assert registry.get_version(A, "churn", 2).config["bounds"] == [[0.5, 1.25], {"low": -2.5}]
    assert registry.latest_version(A, "churn") == stored[2]
    assert registry.list_versions(A, "churn") == stored


def test_whether_any_version_of_any_tenant_uses_a_runtime(registry: Registry) -> None:
    registry.create_model(Model(A, "churn"))
    registry.create_model(Model(B, "fraud"))
    registry.add_version(version_of("churn"))
    assert not registry.uses_runtime("triton")
    triton = registry.add_version(version_of("fraud", tenant=B, runtime="triton", config={"url": "http://127.0.0.1:8100", "model_name": "fraud"}))
    assert registry.uses_runtime("triton") and registry.uses_runtime("onnx")
    registry.delete_version(B, "fraud", triton.version)
    assert not registry.uses_runtime("triton")


def test_lineage_and_tuned_session_options_round_trip(registry: Registry) -> None:
    from sluice.domain import SessionTuning

    registry.create_model(Model(A, "churn"))
    first = registry.add_version(version_of("churn"))
    tuned = (SessionTuning(1, 1769, 1, 1, "sequential", 0.25, 2), SessionTuning(6, 10240, 6, 1, "sequential", None, 2))
    derived = registry.add_version(replace(
        version_of("churn"), derived_from="churn:1",
        optimization={"candidate": "int8-dynamic", "measured": {"agreement": 0.975, "agreement_ci95": [0.96, 0.98]}},
        session_options=tuned,
    ))  # fmt: skip
    assert registry.get_version(A, "churn", 2) == derived
    assert registry.get_version(A, "churn", 2).session_options == tuned
    assert registry.get_version(A, "churn", 1).derived_from is None
    assert registry.get_version(A, "churn", 1).session_options == ()
    # Tuning an existing version replaces its stored record; its number and artifact stay.
    registry.replace_version(replace(first, session_options=tuned[:1]))
    assert registry.get_version(A, "churn", 1).session_options == tuned[:1]
    assert registry.get_version(A, "churn", 1).sha256 == first.sha256
    assert [v.version for v in registry.list_versions(A, "churn")] == [1, 2]
    raises(NotFound, "version", lambda: registry.replace_version(replace(first, version=9)))
    # A number that names another artifact now (the model deleted and made again) is not replaced.
    registry.delete_model(A, "churn")
    registry.create_model(Model(A, "churn"))
    again = registry.add_version(replace(version_of("churn"), sha256="f" * 64))
    assert again.version == 3  # numbered on: churn:1 never names another artifact
    raises(NotFound, "version", lambda: registry.replace_version(replace(first, session_options=tuned)))
    raises(NotFound, "version", lambda: registry.replace_version(replace(again, version=1, session_options=tuned)))
    assert registry.get_version(A, "churn", 3) == again


def test_missing_versions(registry: Registry) -> None:
    registry.create_model(Model(A, "churn"))
    raises(NotFound, "version", lambda: registry.latest_version(A, "churn"))
    raises(NotFound, "version", lambda: registry.get_version(A, "churn", 1))
    raises(NotFound, "version", lambda: registry.delete_version(A, "churn", 1))
    raises(NotFound, "model", lambda: registry.latest_version(A, "nope"))
    raises(NotFound, "model", lambda: registry.get_version(A, "nope", 1))
    raises(NotFound, "model", lambda: registry.list_versions(A, "nope"))


def test_deleted_version_numbers_are_not_reused(registry: Registry) -> None:
    registry.create_model(Model(A, "churn"))
    for _ in range(3):
        registry.add_version(version_of("churn"))
    registry.delete_version(A, "churn", 3)
    registry.delete_version(A, "churn", 1)
    raises(NotFound, "version", lambda: registry.get_version(A, "churn", 3))
    raises(NotFound, "version", lambda: registry.delete_version(A, "churn", 3))
    assert registry.latest_version(A, "churn").version == 2
    assert registry.add_version(version_of("churn")).version == 4
    assert [v.version for v in registry.list_versions(A, "churn")] == [2, 4]


def test_concurrent_pushes_get_distinct_consecutive_numbers(registry: Registry) -> None:
    registry.create_model(Model(A, "churn"))
    numbers: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def push() -> None:
        start.wait()
        try:
            numbers.append(registry.add_version(version_of("churn")).version)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=push) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(numbers) == list(range(1, 9))
    assert [v.version for v in registry.list_versions(A, "churn")] == list(range(1, 9))


def test_lists_span_more_than_one_page(registry: Registry) -> None:
    """DynamoDB answers a query 1 MB at a time; the registry must follow every page."""
    registry.create_model(Model(A, "churn"))
    bulky = {"blob": "x" * 150_000}
    for _ in range(8):
        registry.add_version(version_of("churn", config=bulky))
    assert [v.version for v in registry.list_versions(A, "churn")] == list(range(1, 9))
    assert registry.latest_version(A, "churn").version == 8
    registry.delete_model(A, "churn")
    registry.create_model(Model(A, "churn"))
    assert registry.list_versions(A, "churn") == []


# Deployments ----------------------------------------------------------------------------
def test_deployments_round_trip_and_list_by_name(registry: Registry) -> None:
    created = registry.create_deployment(
        Deployment(A, "scoring", split(0.25), revision=7, description="A/B", updated_by="key-1")
    )
    registry.create_deployment(Deployment(A, "backup", single("churn", 1)))
    assert created.revision == 1
    assert registry.get_deployment(A, "scoring") == created
    assert registry.get_deployment(A, "scoring").policy == split(0.25)
    assert [d.name for d in registry.list_deployments(A)] == ["backup", "scoring"]
    assert registry.list_deployments(B) == []


def test_deployment_names_are_unique_per_tenant(registry: Registry) -> None:
    registry.create_deployment(Deployment(A, "scoring", single("churn", 1)))
    raises(
        Conflict,
        "name",
        lambda: registry.create_deployment(Deployment(A, "scoring", single("churn", 2))),
    )
    assert registry.get_deployment(A, "scoring").policy == single("churn", 1)


def test_missing_deployment(registry: Registry) -> None:
    ghost = Deployment(A, "ghost", single("churn", 1))
    raises(NotFound, "deployment", lambda: registry.get_deployment(A, "ghost"))
    raises(NotFound, "deployment", lambda: registry.update_deployment(ghost, expected_revision=1))
    raises(NotFound, "deployment", lambda: registry.delete_deployment(A, "ghost"))
    assert registry.deployment_history(A, "ghost") == []


def test_updates_are_optimistic(registry: Registry) -> None:
    first = registry.create_deployment(Deployment(A, "scoring", single("churn", 1)))
    second = registry.update_deployment(
        replace(first, policy=split(0.25), updated_by="key-2"), expected_revision=1
    )
    assert second.revision == 2
    assert second.updated_at >= first.updated_at
    assert registry.get_deployment(A, "scoring") == second
    stale = replace(first, policy=single("churn", 2))
    raises(Conflict, "revision", lambda: registry.update_deployment(stale, expected_revision=1))
    assert registry.get_deployment(A, "scoring").policy == split(0.25)


def test_a_rollout_is_kept_with_its_deployment_and_running_ones_are_listed(registry: Registry) -> None:
    from sluice.domain.rollouts import Rollout

    rollout = Rollout(
        model="churn", version=2, stable=single("churn", 1), steps=(1.0, 50.0, 100.0), every_s=600.0,
        gates="error_rate<=0.01", min_requests=10, alarms=("churn-5xx",), started_at=1.5, decided={"metrics": {"p99_ratio": 1.1}},
    )  # fmt: skip
    first = registry.create_deployment(Deployment(A, "scoring", single("churn", 1)))
    registry.create_deployment(Deployment(B, "scoring", single("churn", 1)))
    note = {"rollout": "start", "weight": 1.0, "metrics": {"agreement": None, "p99_ratio": 1.25}}
    second = registry.update_deployment(replace(first, policy=split(0.01), rollout=rollout), expected_revision=1, note=note)
    assert registry.get_deployment(A, "scoring") == second and second.rollout == rollout
    assert registry.get_deployment(B, "scoring").rollout is None
    assert registry.running_rollouts() == [(A, "scoring")]
    assert [c.note for c in registry.deployment_history(A, "scoring")] == [None, note]
    registry.update_deployment(replace(second, rollout=replace(rollout, state="paused")), expected_revision=2)
    assert registry.running_rollouts() == []
    assert registry.deployment_history(A, "scoring")[-1].note is None


def test_a_rollout_whose_endpoint_weights_wait_is_listed_until_they_moved(registry: Registry) -> None:
    from sluice.domain.rollouts import EndpointRollout, Rollout

    endpoint = EndpointRollout(
        name="sluice-a-scoring-0a1b2c3d", candidate="churn-v2", candidate_version=4, stable={"primary": 1.0},
        before={"primary": 1.0}, added=True, pending=True, waiting_since=2.5, weights={"primary": 99.0, "churn-v2": 1.0},
    )  # fmt: skip
    rollout = Rollout(
        model="churn", version=2, stable=single("churn", 3), steps=(1.0, 100.0), every_s=60.0,
        gates="error_rate<=0.01", min_requests=10, state="rolled_back", endpoint=endpoint,
    )  # fmt: skip
    first = registry.create_deployment(Deployment(A, "scoring", single("churn", 3)))
    second = registry.update_deployment(replace(first, rollout=rollout), expected_revision=1)
    assert registry.get_deployment(A, "scoring").rollout == rollout == second.rollout
    assert registry.running_rollouts() == [(A, "scoring")]  # rolled back, its weights still to move
    caught = replace(rollout, endpoint=replace(endpoint, pending=False, waiting_since=None))
    registry.update_deployment(replace(second, rollout=caught), expected_revision=2)
    assert registry.running_rollouts() == []


def test_only_one_of_concurrent_updates_wins(registry: Registry) -> None:
    current = registry.create_deployment(Deployment(A, "scoring", single("churn", 1)))
    outcomes: list[object] = []
    start = threading.Barrier(4)

    def update(version: int) -> None:
        start.wait()
        try:
            outcomes.append(
                registry.update_deployment(
                    replace(current, policy=single("churn", version)), expected_revision=1
                )
            )
        except SluiceError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=update, args=(v,)) for v in range(2, 6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [o for o in outcomes if isinstance(o, Deployment)]
    assert len(winners) == 1 and winners[0].revision == 2
    assert all(
        isinstance(o, Conflict) and o.field == "revision" for o in outcomes if o not in winners
    )
    assert registry.get_deployment(A, "scoring").policy == winners[0].policy
    assert [(c.revision, c.new_policy) for c in registry.deployment_history(A, "scoring")] == [
        (1, single("churn", 1)),
        (2, winners[0].policy),
    ]


def ref(name: str) -> dict[str, Any]:
    return {"kind": "ref", "deployment": name}


def refs_of(policy: dict[str, Any]) -> list[str]:
    return [policy["deployment"]] if policy["kind"] == "ref" else []


def races(registry: Registry) -> int:
    """How many rounds a race is run: thirty on SQLite; ten on moto's DynamoDB, whose every
    transaction copies the whole table (thirty rounds cost ten times as much there)."""
    return 30 if isinstance(registry, SqliteRegistry) else 10


def link(registry: Registry, tenant: str, name: str, target: str, checked: threading.Barrier) -> Deployment:
    """What `DeploymentService.update` does to point `name` at `target`: read, refuse a cycle
    (`target` leads back to `name`), then write on the strength of what was read. Every
    thread is past its check before any writes (`checked`)."""
    current = registry.get_deployment(tenant, name)
    read: dict[str, Deployment] = {}
    pending = [target]
    while pending:
        found = registry.get_deployment(tenant, pending.pop())
        read[found.name] = found
        if name in refs_of(found.policy):
            raise AssertionError(f"{name} -> {target} would close a cycle")  # not with `checked` in place
        pending += [r for r in refs_of(found.policy) if r not in read]
    checked.wait()
    return registry.update_deployment(
        replace(current, policy=ref(target)), expected_revision=current.revision, refs_read=read.values()
    )


def cycle_in(registry: Registry, tenant: str) -> list[str] | None:
    stored = {d.name: refs_of(d.policy) for d in registry.list_deployments(tenant)}
    for start in stored:
        path, current = [start], start
        while stored.get(current):
            current = stored[current][0]
            if current in path:
                return [*path, current]
            path.append(current)
    return None


def test_links_written_at_once_never_close_a_cycle(registry: Registry) -> None:
    """Rings of two or three deployments whose every link (p -> q) is checked, then written at
    the same moment by a thread of its own, many times over: each check passed on what it
    read, yet no cycle is stored; the links that rest on a read gone stale are refused."""
    for round_ in range(races(registry)):
        ring = [f"r{round_}-{i}" for i in range(2 + round_ % 2)]
        for name in ring:
            registry.create_deployment(Deployment(A, name, single("churn", 1)))
        checked = threading.Barrier(len(ring))
        outcomes = at_once(
            *(partial(link, registry, A, name, ring[(i + 1) % len(ring)], checked) for i, name in enumerate(ring))
        )
        refused = [o for o in outcomes if not isinstance(o, Deployment)]
        assert all(isinstance(o, StaleRead) and o.field == "policy" for o in refused), outcomes
        assert 0 < len(refused) < len(ring), outcomes
        assert cycle_in(registry, A) is None, cycle_in(registry, A)


def test_a_write_resting_on_a_deployment_changed_deleted_or_created_again_is_refused(registry: Registry) -> None:
    p = registry.create_deployment(Deployment(A, "p", single("churn", 1)))
    q = registry.create_deployment(Deployment(A, "q", single("churn", 1)))

    def point_p_at_q() -> Deployment:
        return registry.update_deployment(replace(p, policy=ref("q")), expected_revision=1, refs_read=[q])

    registry.update_deployment(replace(q, policy=single("churn", 2)), expected_revision=1)
    raises(StaleRead, "policy", point_p_at_q)
    registry.delete_deployment(A, "q")
    raises(StaleRead, "policy", point_p_at_q)
    again = registry.create_deployment(Deployment(A, "q", single("churn", 1)))
    assert again.policy == q.policy and again.revision == 4  # another deployment: its revisions go on from its name's writes
    raises(StaleRead, "policy", point_p_at_q)
    raises(StaleRead, "policy", lambda: registry.create_deployment(Deployment(A, "r", ref("q")), refs_read=[q]))
    assert registry.get_deployment(A, "p") == p
    assert [d.name for d in registry.list_deployments(A)] == ["p", "q"]
    assert [c.revision for c in registry.deployment_history(A, "p")] == [1]
    # On what is stored now, both go through; the deployment written may be among what was read.
    stored = registry.update_deployment(replace(p, policy=ref("q")), expected_revision=1, refs_read=[again, p])
    assert stored.revision == 2 and registry.get_deployment(A, "p").policy == ref("q")
    assert registry.create_deployment(Deployment(A, "r", ref("p")), refs_read=[stored, again]).revision == 1


def test_history_records_every_change_old_to_new(registry: Registry) -> None:
    first = registry.create_deployment(
        Deployment(A, "scoring", single("churn", 1), updated_by="key-1")
    )
    second = registry.update_deployment(
        replace(first, policy=split(0.25), updated_by="key-2"), expected_revision=1
    )
    registry.update_deployment(
        replace(second, policy=single("churn", 2), updated_by="key-3"), expected_revision=2
    )
    registry.delete_deployment(A, "scoring", by="key-4")
    raises(NotFound, "deployment", lambda: registry.get_deployment(A, "scoring"))
    registry.create_deployment(Deployment(A, "scoring", single("churn", 3), updated_by="key-5"))

    history = registry.deployment_history(A, "scoring")
    assert [(c.revision, c.by, c.old_policy, c.new_policy) for c in history] == [
        (1, "key-1", None, single("churn", 1)),
        (2, "key-2", single("churn", 1), split(0.25)),
        (3, "key-3", split(0.25), single("churn", 2)),
        (4, "key-4", single("churn", 2), None),
        (5, "key-5", None, single("churn", 3)),  # created again: its revisions go on, never repeat
    ]
    assert all(c.tenant == A and c.name == "scoring" for c in history)
    assert [c.at for c in history] == sorted(c.at for c in history)
    assert registry.deployment_history(B, "scoring") == []


# Statistics and assignments ------------------------------------------------------------
def test_stats_add_up_and_keep_maxima(registry: Registry) -> None:
    registry.merge_stats(A, "scoring", 1, "variant:a", {"requests": 2, "lat_10": 1.5}, {"peak": 3})
    registry.merge_stats(A, "scoring", 1, "variant:a", {"requests": 1, "lat_10": 0.25}, {"peak": 2})
    registry.merge_stats(A, "scoring", 1, "mirror:b", {}, {"peak": 0.75})
    registry.merge_stats(A, "scoring", 1, "mirror:b", {}, {"peak": 1.25})
    registry.merge_stats(A, "scoring", 2, "variant:a", {"requests": 7}, {})
    registry.merge_stats(A, "scoring", 1, "variant:c", {}, {})
    assert registry.read_stats(A, "scoring", 1) == {
        "variant:a": {"requests": 3.0, "lat_10": 1.75, "peak": 3.0},
        "mirror:b": {"peak": 1.25},
    }
    assert registry.read_stats(A, "scoring", 2) == {"variant:a": {"requests": 7.0}}
    assert all(
        isinstance(value, float)
        for c in registry.read_stats(A, "scoring", 1).values()
        for value in c.values()
    )
    assert registry.read_stats(A, "scoring", 3) == {}
    assert registry.read_stats(B, "scoring", 1) == {}


def test_concurrent_stat_merges_all_count(registry: Registry) -> None:
    start = threading.Barrier(8)

    def merge(i: int) -> None:
        start.wait()
        registry.merge_stats(A, "scoring", 1, "deployment", {"requests": 1}, {"peak": float(i)})

    threads = [threading.Thread(target=merge, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert registry.read_stats(A, "scoring", 1) == {"deployment": {"requests": 8.0, "peak": 7.0}}


def test_a_registry_stores_every_statistic_its_numbers_admit(registry: Registry) -> None:
    """`stat_numbers` is what the backend holds: its largest admitted magnitude is stored, and
    one below its smallest is stored as 0."""
    numbers = registry.stat_numbers
    largest = math.nextafter(numbers.below, 0)
    registry.merge_stats(A, "scoring", 1, "mirror:b", {"diff_sumsq": largest}, {"diff_max": -largest})
    assert registry.read_stats(A, "scoring", 1)["mirror:b"] == {"diff_sumsq": largest, "diff_max": -largest}
    assert numbers.stored(largest) == largest and numbers.stored(math.nextafter(largest, math.inf)) is None
    assert numbers.stored(float("nan")) is None and numbers.stored(numbers.tiny / 2) in (0.0, numbers.tiny / 2)


_STAT = st.one_of(
    st.floats(-1e6, 1e6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e70, -1e140, 1e-140, -1e-135, 9.999999999999998e125, 1e126, 1e300]),
)
_DEPLOYMENTS = itertools.count()


@examples(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(adds=st.lists(st.tuples(_STAT, _STAT), min_size=1, max_size=6))
def test_no_statistic_value_keeps_a_key_from_being_written(registry: Registry, adds: list[tuple[float, float]]) -> None:
    """Whatever a count is (NaN, 1e140: past DynamoDB's 9.99e125, 1e-140: below its 1e-130),
    the recorder holds it within what the backend stores: the flush writes the key, a value it
    cannot store is dropped and reported with the other members of its mean, and the request's
    other counts (`requests`, `compared`) are written."""
    deployment = f"scoring-{next(_DEPLOYMENTS)}"
    key = (A, deployment, 1, "mirror:candidate")
    dropped: list[tuple[object, float, str]] = []
    recorder = StatsRecorder(registry, timed=False, on_drop=dropped.extend)
    for diff, peak in adds:
        recorder.request(key, 1.0, ok=True)
        recorder.add(key, {"compared": 1, "diff_sum": abs(diff), "diff_sumsq": diff * diff, "diff_n": 1}, {"diff_max": peak})
    assert recorder.flush()  # nothing refused, nothing kept back
    stored = registry.read_stats(A, deployment, 1)["mirror:candidate"]
    assert (stored["requests"], stored["compared"]) == (len(adds), len(adds))
    assert all("not a number the registry stores" in why for _, _, why in dropped)
    if all(abs(d) <= 1e6 and abs(p) <= 1e6 for d, p in adds):
        assert not dropped and stored["diff_n"] == len(adds)


def test_assignments_are_kept_per_tenant_and_deployment(registry: Registry) -> None:
    registry.put_assignment(A, "scoring", "req-1", ("a",), revision=1)
    registry.put_assignment(A, "scoring", "req-2", ("b",), revision=1)
    registry.put_assignment(A, "scoring", "req-2", ("c",), revision=4)
    assert registry.get_assignment(A, "scoring", "req-1") == (("a",), 1)
    assert registry.get_assignment(A, "scoring", "req-2") == (("c",), 4)
    # A request through bandits nested in two ensemble members: each one's choice, by its path.
    registry.put_assignment(A, "scoring", "req-2", ("m1/a", "m2/b", "@other/low/c"), revision=5)
    assert registry.get_assignment(A, "scoring", "req-2") == (("m1/a", "m2/b", "@other/low/c"), 5)
    assert registry.get_assignment(A, "scoring", "req-3") is None
    assert registry.get_assignment(A, "other", "req-1") is None
    assert registry.get_assignment(B, "scoring", "req-1") is None


def test_cached_answers_are_kept_per_tenant_and_deployment_until_they_expire(registry: Registry) -> None:
    body = bytes(range(256)) * 4  # any bytes, zeros included
    registry.put_cached_answer(A, "scoring", "k1", body, expires_at=2000.0)
    assert registry.get_cached_answer(A, "scoring", "k1", now=1000.0) == body
    assert registry.get_cached_answer(A, "scoring", "k1", now=2000.5) is None
    assert registry.get_cached_answer(A, "scoring", "k2", now=1000.0) is None
    assert registry.get_cached_answer(A, "other", "k1", now=1000.0) is None
    assert registry.get_cached_answer(B, "scoring", "k1", now=1000.0) is None
    registry.put_cached_answer(A, "scoring", "k1", b"newer", expires_at=3000.0)
    assert registry.get_cached_answer(A, "scoring", "k1", now=2500.0) == b"newer"
    # to the fraction of a second: an answer is never read past its time to live
    registry.put_cached_answer(A, "scoring", "k3", body, expires_at=3000.25)
    assert registry.get_cached_answer(A, "scoring", "k3", now=3000.2) == body
    assert registry.get_cached_answer(A, "scoring", "k3", now=3000.3) is None


def test_a_deployments_cache_settings_round_trip(registry: Registry) -> None:
    from sluice.domain import CacheSettings

    stored = registry.create_deployment(Deployment(A, "cached", single("churn", 1), cache=CacheSettings(30.0, 500)))
    assert registry.get_deployment(A, "cached").cache == CacheSettings(30.0, 500) == stored.cache
    registry.update_deployment(replace(stored, cache=None), expected_revision=1)
    assert registry.get_deployment(A, "cached").cache is None
    assert registry.get_deployment(A, "cached").revision == 2


def test_a_reward_is_claimed_once_per_request(registry: Registry) -> None:
    registry.put_assignment(A, "scoring", "req-1", ("a",), revision=1)
    assert registry.claim_reward(A, "scoring", "req-1", made=1) is True
    assert registry.claim_reward(A, "scoring", "req-1", made=1) is False
    assert registry.claim_reward(B, "scoring", "req-1", made=1) is True  # another tenant's request
    assert registry.claim_reward(A, "other", "req-1", made=1) is True
    # A deployment made again under the name (at revision 3) claims afresh, once; the earlier one no more.
    assert registry.claim_reward(A, "scoring", "req-1", made=3) is True
    assert registry.claim_reward(A, "scoring", "req-1", made=3) is False
    assert registry.claim_reward(A, "scoring", "req-1", made=1) is False


# API keys -------------------------------------------------------------------------------
def key_of(key_id: str, tenant: str = A) -> ApiKey:
    return ApiKey(
        key_id,
        tenant,
        "f" * 64,
        frozenset({"predict", "admin"}),
        name="ci",
        created_at=1_700_000_000.5,
    )


def test_api_keys_are_found_by_id_and_listed_per_tenant(registry: Registry) -> None:
    for key in (key_of("sk_b"), key_of("sk_a"), key_of("sk_c", tenant=B)):
        assert registry.put_api_key(key) == key
    assert registry.get_api_key("sk_c") == key_of("sk_c", tenant=B)
    assert registry.get_api_key("sk_missing") is None
    assert [k.key_id for k in registry.list_api_keys(A)] == ["sk_a", "sk_b"]
    assert registry.list_api_keys(B) == [key_of("sk_c", tenant=B)]


def test_api_key_ids_are_unique_across_tenants(registry: Registry) -> None:
    registry.put_api_key(key_of("sk_a"))
    raises(Conflict, "key_id", lambda: registry.put_api_key(key_of("sk_a", tenant=B)))
    assert registry.get_api_key("sk_a") == key_of("sk_a")
    assert registry.list_api_keys(B) == []


def test_revoke_is_idempotent_and_tenant_scoped(registry: Registry) -> None:
    registry.put_api_key(key_of("sk_a"))
    raises(NotFound, "key_id", lambda: registry.revoke_api_key(B, "sk_a"))
    raises(NotFound, "key_id", lambda: registry.revoke_api_key(A, "sk_missing"))
    assert registry.get_api_key("sk_a").active  # type: ignore[union-attr]

    revoked = registry.revoke_api_key(A, "sk_a")
    assert revoked.revoked_at is not None and not revoked.active
    assert registry.get_api_key("sk_a") == revoked
    assert registry.list_api_keys(A) == [revoked]
    assert registry.revoke_api_key(A, "sk_a") == revoked


def test_the_last_active_admin_key_is_kept_when_asked(registry: Registry) -> None:
    registry.put_api_key(key_of("sk_a"))
    registry.put_api_key(replace(key_of("sk_p"), scopes=frozenset({"predict"})))
    registry.put_api_key(key_of("sk_b", tenant=B))  # another tenant's admin key does not count
    raises(Conflict, "key_id", lambda: registry.revoke_api_key(A, "sk_a", keep_an_admin=True))
    assert registry.get_api_key("sk_a").active  # type: ignore[union-attr]
    assert not registry.revoke_api_key(A, "sk_p", keep_an_admin=True).active  # not an admin key
    registry.put_api_key(key_of("sk_c"))
    revoked = registry.revoke_api_key(A, "sk_a", keep_an_admin=True)
    assert not revoked.active
    assert registry.revoke_api_key(A, "sk_a", keep_an_admin=True) == revoked  # again: a no-op
    raises(Conflict, "key_id", lambda: registry.revoke_api_key(A, "sk_c", keep_an_admin=True))
    assert [k.key_id for k in registry.list_api_keys(A) if k.active] == ["sk_c"]
    assert registry.get_api_key("sk_c").active  # type: ignore[union-attr]


def test_admin_keys_revoked_all_at_once_leave_exactly_one(registry: Registry) -> None:
    """Three admin keys of a tenant, each revoked at the same moment by a thread of its own,
    many times over: two revokes go through, one is refused, one admin key stays."""
    for round_ in range(races(registry)):
        tenant = f"t{round_}"
        ids = [f"sk_{round_}_{i}" for i in range(3)]
        for key_id in ids:
            registry.put_api_key(key_of(key_id, tenant=tenant))
        outcomes = at_once(*(partial(registry.revoke_api_key, tenant, k, keep_an_admin=True) for k in ids))
        refused = [o for o in outcomes if not isinstance(o, ApiKey)]
        assert len(refused) == 1 and isinstance(refused[0], Conflict) and refused[0].field == "key_id", outcomes
        active = [k.key_id for k in registry.list_api_keys(tenant) if k.active]
        assert len(active) == 1, active
        assert registry.get_api_key(active[0]).active  # type: ignore[union-attr]


# Batch jobs -----------------------------------------------------------------------------
def job_of(job_id: str, tenant: str = A, created_at: float = 1.0) -> BatchJob:
    return BatchJob(
        id=job_id, tenant=tenant, deployment="scoring", input_uri="s3://b/inbox/acme/scoring/in.csv",
        output_uri=f"s3://b/outbox/acme/{job_id}/", format="csv", output_format="parquet",
        key_columns=("customer",), created_at=created_at, created_by="key-1",
    )  # fmt: skip


def chunk_of(index: int, rows: int = 10, failed: int = 1) -> ChunkResult:
    return ChunkResult(
        index, rows, rows - failed, failed, f"s3://b/out/part-{index}", None, {"churn:1": rows - failed}, 0.5,
        part_bytes=100 * rows, part_version=f'"etag-{index}"',  # what Score saw it write
    )  # fmt: skip


def round_trip_and_list_newest_first(
    job: Callable[..., Any], create: Callable[[Any], Any], get: Callable[[str, str], Any], listed: Callable[..., list[Any]]
) -> None:
    """What batch jobs and optimize jobs alike keep: a job reads back as it was created, and a
    tenant's jobs list newest first, `limit` at most, another tenant's not among them."""
    for i, job_id in enumerate(["job-b", "job-a", "job-c"]):
        create(job(job_id, created_at=10.0 + i))
    create(job("job-z", tenant=B))
    assert get(A, "job-a") == job("job-a", created_at=11.0)
    assert [j.id for j in listed(A)] == ["job-c", "job-a", "job-b"]
    assert [j.id for j in listed(A, limit=2)] == ["job-c", "job-a"]
    assert [j.id for j in listed(B)] == ["job-z"]


def test_jobs_round_trip_and_list_newest_first(registry: Registry) -> None:
    round_trip_and_list_newest_first(job_of, registry.create_job, registry.get_job, registry.list_jobs)
    raises(Conflict, "id", lambda: registry.create_job(job_of("job-a")))
    raises(NotFound, "job", lambda: registry.get_job(B, "job-a"))
    raises(NotFound, "job", lambda: registry.update_job(B, "job-a", status="CANCELLED"))


def test_job_status_moves_are_enforced_and_a_finished_job_stays_finished(registry: Registry) -> None:
    registry.create_job(job_of("job-1"))
    raises(Conflict, "status", lambda: registry.update_job(A, "job-1", status="SUCCEEDED"))
    running = registry.update_job(A, "job-1", status="RUNNING", chunks_total=3, rows_total=30, started_at=5.0, revision=4, refs={"base": 12, "b": 1})
    assert (running.status, running.chunks_total, running.rows_total, running.started_at) == ("RUNNING", 3, 30, 5.0)
    assert running.revision == registry.get_job(A, "job-1").revision == 4  # the deployment's revision Plan pinned
    assert running.refs == registry.get_job(A, "job-1").refs == {"base": 12, "b": 1}  # and those of the deployments it references
    assert type(registry.get_job(A, "job-1").refs["base"]) is int
    assert registry.update_job(A, "job-1", status="RUNNING", chunks_total=3).status == "RUNNING"  # a retried Plan
    done = registry.update_job(A, "job-1", status="SUCCEEDED", finished_at=9.0)
    assert done.finished_at == 9.0 and done.key_columns == ("customer",)
    for target in ("RUNNING", "FAILED", "CANCELLED", "SUCCEEDED"):
        raises(Conflict, "status", lambda target=target: registry.update_job(A, "job-1", status=target))
    raises(Conflict, "status", lambda: registry.update_job(A, "job-1", error="late"))
    assert registry.get_job(A, "job-1").status == "SUCCEEDED"
    registry.create_job(job_of("job-2"))
    failed = registry.update_job(A, "job-2", status="FAILED", error="no such deployment")
    assert failed.error == "no such deployment"
    with pytest.raises(ValueError):
        registry.update_job(A, "job-2", rows_in=5)  # counters are only ever added to


def test_chunks_count_once_even_when_scored_twice(registry: Registry) -> None:
    registry.create_job(job_of("job-1"))
    assert registry.record_chunk(A, "job-1", chunk_of(0)) is False  # not running yet
    registry.update_job(A, "job-1", status="RUNNING", chunks_total=3)
    assert registry.record_chunk(A, "job-1", chunk_of(0)) is True
    assert registry.record_chunk(A, "job-1", chunk_of(0)) is False
    assert registry.record_chunk(A, "job-1", chunk_of(2, rows=5, failed=0)) is True
    job = registry.get_job(A, "job-1")
    assert (job.chunks_done, job.rows_in, job.rows_out, job.rows_failed) == (2, 15, 14, 1)
    assert registry.list_chunks(A, "job-1") == [chunk_of(0), chunk_of(2, rows=5, failed=0)]
    assert registry.get_chunk(A, "job-1", 2) == chunk_of(2, rows=5, failed=0)
    assert registry.get_chunk(A, "job-1", 1) is None and registry.get_chunk(B, "job-1", 0) is None
    assert registry.list_chunks(B, "job-1") == []
    registry.update_job(A, "job-1", status="CANCELLED")
    assert registry.record_chunk(A, "job-1", chunk_of(1)) is False
    assert registry.get_job(A, "job-1").chunks_done == 2


def test_concurrent_chunk_scorers_add_up_exactly(registry: Registry) -> None:
    registry.create_job(job_of("job-1"))
    registry.update_job(A, "job-1", status="RUNNING", chunks_total=12)
    start = threading.Barrier(8)
    outcomes: list[bool] = []

    def score(worker: int) -> None:
        start.wait()
        for index in range(worker % 4, 12, 4):  # two workers score every chunk
            outcomes.append(registry.record_chunk(A, "job-1", chunk_of(index, rows=index + 1)))

    threads = [threading.Thread(target=score, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    job = registry.get_job(A, "job-1")
    assert sorted(outcomes).count(True) == 12 and len(outcomes) == 24
    assert (job.chunks_done, job.rows_in, job.rows_failed) == (12, sum(range(1, 13)), 12)
    assert job.rows_in == job.rows_out + job.rows_failed


def into(folder: str, job_id: str, tenant: str = A, **changes: Any) -> BatchJob:
    return replace(job_of(job_id, tenant), output_uri=folder, **changes)


SHARED = "file:///data/scored/"


def test_a_job_holds_its_output_folder_until_it_finishes(registry: Registry) -> None:
    registry.create_job(into(SHARED, "job-1"))
    assert registry.output_holder(A, SHARED) == "job-1"
    refused = raises(OutputInUse, "output_uri", lambda: registry.create_job(into(SHARED, "job-2")))
    assert isinstance(refused, Conflict) and refused.holder == "job-1" and refused.to_dict()["details"] == {"job": "job-1"}  # type: ignore[attr-defined]
    raises(NotFound, "job", lambda: registry.get_job(A, "job-2"))  # refused whole: no job without its folder
    registry.create_job(into(SHARED, "job-b", tenant=B))  # another tenant's folder of the same name
    registry.create_job(into("file:///data/other/", "job-3"))
    registry.update_job(A, "job-1", status="RUNNING", heartbeat_at=5.0, worker="host:1")
    assert registry.output_holder(A, SHARED) == "job-1"
    registry.update_job(A, "job-1", status="SUCCEEDED")
    assert registry.output_holder(A, SHARED) is None
    registry.create_job(into(SHARED, "job-2"))  # a re-run into a finished job's folder
    assert registry.output_holder(A, SHARED) == "job-2" and registry.output_holder(B, SHARED) == "job-b"
    registry.create_job(into(SHARED, "job-refused", status="FAILED", error="no such deployment"))  # holds nothing
    assert registry.output_holder(A, SHARED) == "job-2"
    registry.update_job(A, "job-2", status="CANCELLED")
    assert registry.output_holder(A, SHARED) is None


def test_a_hold_passes_only_from_the_job_the_taker_names(registry: Registry) -> None:
    registry.create_job(into(SHARED, "job-dead"))
    caught = raises(OutputInUse, "output_uri", lambda: registry.create_job(into(SHARED, "job-2"), replacing="job-other"))
    assert caught.holder == "job-dead"  # type: ignore[attr-defined]
    registry.create_job(into(SHARED, "job-2"), replacing="job-dead")
    assert registry.output_holder(A, SHARED) == "job-2"
    registry.update_job(A, "job-dead", status="FAILED", error="its process stopped")  # lets go of nothing now
    assert registry.output_holder(A, SHARED) == "job-2"
    taken = raises(OutputInUse, "output_uri", lambda: registry.create_job(into(SHARED, "job-3"), replacing="job-dead"))
    assert taken.holder == "job-2"  # type: ignore[attr-defined]  # job-dead no longer holds it



def test_of_jobs_created_at_once_into_one_folder_one_holds_it(registry: Registry) -> None:
    ids = [f"job-{n}" for n in range(6)]
    outcomes = at_once(*(partial(registry.create_job, into(SHARED, job_id)) for job_id in ids))
    won = [o for o in outcomes if isinstance(o, BatchJob)]
    assert len(won) == 1, outcomes
    refused = [o for o in outcomes if not isinstance(o, BatchJob)]
    assert all(isinstance(o, OutputInUse) and o.holder == won[0].id for o in refused), outcomes
    assert registry.output_holder(A, SHARED) == won[0].id
    assert [j.id for j in registry.list_jobs(A)] == [won[0].id]


def test_of_two_takers_replacing_one_dead_job_at_once_one_wins(registry: Registry) -> None:
    registry.create_job(into(SHARED, "job-dead"))
    registry.update_job(A, "job-dead", status="RUNNING")
    outcomes = at_once(*(partial(registry.create_job, into(SHARED, f"job-{n}"), replacing="job-dead") for n in range(4)))
    won = [o for o in outcomes if isinstance(o, BatchJob)]
    assert len(won) == 1, outcomes
    assert all(isinstance(o, OutputInUse) and o.holder == won[0].id for o in outcomes if o is not won[0]), outcomes
    assert registry.output_holder(A, SHARED) == won[0].id


# Optimize jobs --------------------------------------------------------------------------
def optimize_job_of(job_id: str, tenant: str = A, created_at: float = 1.0) -> OptimizeJob:
    return OptimizeJob(job_id, tenant, "iris", 3, created_by="key-1", worker="host-a:4242", created_at=created_at)


REPORT = {"model": "iris", "version": 3, "candidates": [{"candidate": "graph", "p50_ms_b1": 0.125, "within_budget": True}],
          "recommendation": {"candidate": "graph", "why": "fastest within the budget"}}  # fmt: skip


def test_optimize_jobs_round_trip_and_list_newest_first_per_tenant(registry: Registry) -> None:
    round_trip_and_list_newest_first(
        optimize_job_of, registry.create_optimize_job, registry.get_optimize_job, registry.list_optimize_jobs
    )
    assert registry.list_jobs(A) == []  # batch jobs are another aggregate
    raises(Conflict, "id", lambda: registry.create_optimize_job(optimize_job_of("job-a")))
    # Another tenant's job is missing, exactly as one that never was.
    theirs = raises(NotFound, "job_id", lambda: registry.get_optimize_job(B, "job-a"))
    nobody = raises(NotFound, "job_id", lambda: registry.get_optimize_job(B, "job-never"))
    assert theirs.to_dict() == {**nobody.to_dict(), "error": nobody.message.replace("job-never", "job-a")}
    raises(NotFound, "job_id", lambda: registry.update_optimize_job(B, "job-a", status="FAILED"))
    assert registry.get_optimize_job(A, "job-a").status == "RUNNING"


def test_optimize_job_moves_are_checked_and_a_finished_job_stays_finished(registry: Registry) -> None:
    registry.create_optimize_job(optimize_job_of("opt-1"))
    beat = registry.update_optimize_job(A, "opt-1", heartbeat_at=5.0)
    assert (beat.status, beat.heartbeat_at, beat.worker) == ("RUNNING", 5.0, "host-a:4242")
    raises(Conflict, "status", lambda: registry.update_optimize_job(A, "opt-1", status="PENDING"))  # type: ignore[arg-type]
    done = registry.update_optimize_job(A, "opt-1", status="SUCCEEDED", report=REPORT, finished_at=9.5)
    assert done == replace(optimize_job_of("opt-1"), status="SUCCEEDED", heartbeat_at=5.0, report=REPORT, finished_at=9.5)
    assert registry.get_optimize_job(A, "opt-1") == done
    for target in ("RUNNING", "FAILED", "SUCCEEDED"):
        raises(Conflict, "status", lambda target=target: registry.update_optimize_job(A, "opt-1", status=target))
    raises(Conflict, "status", lambda: registry.update_optimize_job(A, "opt-1", heartbeat_at=10.0))
    registry.create_optimize_job(optimize_job_of("opt-2"))
    failed = registry.update_optimize_job(A, "opt-2", status="FAILED", error="the optimizer failed (MemoryError)", finished_at=3.0)
    assert registry.get_optimize_job(A, "opt-2") == failed and failed.error == "the optimizer failed (MemoryError)"
    with pytest.raises(ValueError, match="cannot update"):
        registry.update_optimize_job(A, "opt-2", worker="host-b:1")  # the worker is the one that started it


def test_only_one_of_concurrent_finishers_wins(registry: Registry) -> None:
    registry.create_optimize_job(optimize_job_of("opt-1"))
    start = threading.Barrier(6)
    outcomes: list[str] = []

    def finish(worker: int) -> None:
        start.wait()
        target = "SUCCEEDED" if worker % 2 else "FAILED"
        try:
            registry.update_optimize_job(A, "opt-1", status=target, error=f"worker {worker}", finished_at=float(worker + 1))
            outcomes.append(f"{target} {worker}")
        except Conflict:
            outcomes.append("conflict")

    threads = [threading.Thread(target=finish, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (won,) = [o for o in outcomes if o != "conflict"]
    job = registry.get_optimize_job(A, "opt-1")
    status, worker = won.split()
    assert (job.status, job.finished_at, job.error) == (status, float(int(worker) + 1), f"worker {worker}")


def test_what_an_optimize_job_stores_is_bounded(registry: Registry) -> None:
    # The worst case for an item's size: many small numbers (a byte each in JSON, more in DynamoDB's maps).
    near = {"model": "iris", "tuning": [[1] * 1000 for _ in range(120)], "note": "x" * 10_000, "nan": float("nan")}
    registry.create_optimize_job(optimize_job_of("opt-near"))
    stored = registry.update_optimize_job(A, "opt-near", status="SUCCEEDED", report=near).report
    assert stored == {**near, "nan": None} and len(json.dumps(stored)) > REPORT_BYTES * 0.9
    assert registry.get_optimize_job(A, "opt-near").report == stored

    huge = {**REPORT, "candidates": [{"candidate": f"c{i}", "how": "x" * 1000} for i in range(400)],
            "tuning": [{"vcpus": i, "p50_ms": [0.5] * 100} for i in range(200)]}  # fmt: skip
    registry.create_optimize_job(optimize_job_of("opt-huge"))
    kept = registry.update_optimize_job(A, "opt-huge", status="SUCCEEDED", report=huge).report
    assert kept == stored_report(huge) and kept is not None
    assert kept["omitted"] == ["candidates"] and kept["tuning"] == huge["tuning"]
    assert kept["recommendation"] == REPORT["recommendation"]
    assert registry.get_optimize_job(A, "opt-huge").report == kept

    registry.create_optimize_job(optimize_job_of("opt-loud"))
    error = registry.update_optimize_job(A, "opt-loud", status="FAILED", error="é" * 300_000).error
    assert error is not None and len(error) == ERROR_CHARS and error.endswith("…")


# Tenants --------------------------------------------------------------------------------
def test_tenants_do_not_see_each_other(registry: Registry) -> None:
    registry.create_model(Model(A, "churn", description="acme's"))
    registry.create_model(Model(B, "churn", description="globex's"))
    registry.create_model(Model(A, "fraud"))
    registry.add_version(version_of("churn"))
    registry.add_version(version_of("churn"))
    assert registry.add_version(version_of("churn", tenant=B)).version == 1
    registry.add_version(version_of("fraud"))
    registry.create_deployment(Deployment(A, "scoring", single("fraud", 1)))

    assert registry.get_model(B, "churn").description == "globex's"
    assert [m.name for m in registry.list_models(B)] == ["churn"]
    assert [v.version for v in registry.list_versions(B, "churn")] == [1]
    assert registry.latest_version(B, "churn").tenant == B
    raises(NotFound, "model", lambda: registry.get_model(B, "fraud"))
    raises(NotFound, "model", lambda: registry.get_version(B, "fraud", 1))
    raises(NotFound, "model", lambda: registry.delete_model(B, "fraud"))
    raises(NotFound, "version", lambda: registry.delete_version(B, "fraud", 1))
    raises(NotFound, "deployment", lambda: registry.get_deployment(B, "scoring"))
    raises(NotFound, "deployment", lambda: registry.delete_deployment(B, "scoring"))
    raises(
        NotFound,
        "deployment",
        lambda: registry.update_deployment(
            Deployment(B, "scoring", single("churn", 1)), expected_revision=1
        ),
    )
    assert registry.list_deployments(B) == []

    registry.delete_model(B, "churn")
    assert [v.version for v in registry.list_versions(A, "churn")] == [1, 2]
    assert registry.get_version(A, "fraud", 1).tenant == A
    assert registry.get_deployment(A, "scoring").revision == 1


def schedule_of(name: str, tenant: str = A, **changes: Any) -> Schedule:
    return Schedule(
        tenant, name, "scoring", "s3://b/inbox/" + tenant + "/dt={date}/x.csv", "cron(0 2 * * *)",
        timezone="Europe/Paris", key_columns=("id",), created_at=1.0, **changes,
    )  # fmt: skip


def test_schedules_round_trip_update_and_delete_per_tenant(registry: Registry) -> None:
    nightly = registry.create_schedule(schedule_of("nightly", overlap="queue"))
    registry.create_schedule(schedule_of("hourly"))
    registry.create_schedule(schedule_of("nightly", tenant=B))
    assert registry.get_schedule(A, "nightly") == nightly
    assert [s.name for s in registry.list_schedules(A)] == ["hourly", "nightly"]
    raises(Conflict, "name", lambda: registry.create_schedule(schedule_of("nightly")))

    paused = registry.update_schedule(A, "nightly", state="PAUSED", last_fire=7.5, skipped=2)
    assert (paused.state, paused.last_fire, paused.skipped, paused.overlap) == ("PAUSED", 7.5, 2, "queue")
    assert registry.get_schedule(A, "nightly") == paused
    assert registry.get_schedule(B, "nightly").state == "ENABLED"  # another tenant's, untouched
    with pytest.raises(ValueError, match="cannot update"):
        registry.update_schedule(A, "nightly", deployment="other")

    registry.delete_schedule(A, "nightly")
    raises(NotFound, "schedule", lambda: registry.get_schedule(A, "nightly"))
    raises(NotFound, "schedule", lambda: registry.delete_schedule(A, "nightly"))
    raises(NotFound, "schedule", lambda: registry.update_schedule(A, "nightly", state="ENABLED"))
    raises(NotFound, "schedule", lambda: registry.get_schedule(B, "hourly"))
    assert [s.name for s in registry.list_schedules(B)] == ["nightly"]


def test_a_schedule_update_that_expects_what_was_read_is_made_once(registry: Registry) -> None:
    """Two schedulers recording the same refused run, each from what it read: the first write
    is made, the second finds the schedule changed (StaleRead naming `schedule`) and writes
    nothing. A field expected unset must be unset."""
    registry.create_schedule(schedule_of("nightly"))
    first = registry.update_schedule(A, "nightly", expect={"last_refused_at": None}, refused=1, last_error="gone", last_refused_at=7.0)
    assert (first.refused, first.last_error, first.last_refused_at) == (1, "gone", 7.0)
    raises(StaleRead, "schedule", lambda: registry.update_schedule(
        A, "nightly", expect={"last_refused_at": None}, refused=1, last_error="other", last_refused_at=7.0))  # fmt: skip
    assert registry.get_schedule(A, "nightly") == first
    second = registry.update_schedule(A, "nightly", expect={"last_refused_at": 7.0, "refused": 1}, refused=2, last_refused_at=8.0)
    assert (second.refused, second.last_error) == (2, "gone")
    cleared = registry.update_schedule(A, "nightly", refused=0, last_error=None)
    assert (cleared.refused, cleared.last_error, cleared.last_refused_at) == (0, None, 8.0)
    raises(NotFound, "schedule", lambda: registry.update_schedule(A, "other", expect={"last_refused_at": None}, refused=1))


def test_dynamodb_schedules_of_earlier_releases_meet_what_is_expected_of_them(dynamodb: Any) -> None:
    """A schedule item written before refusals were counted has no `refused`: expected 0, as it
    reads, its update is made."""
    registry = DynamoRegistry("sluice-registry", client=dynamodb)
    registry.create_schedule(schedule_of("nightly"))
    dynamodb.update_item(TableName="sluice-registry", Key={"pk": {"S": f"T#{A}"}, "sk": {"S": "SC#nightly"}},
                         UpdateExpression="REMOVE refused", ConditionExpression="attribute_exists(refused)")  # fmt: skip
    assert registry.get_schedule(A, "nightly").refused == 0
    made = registry.update_schedule(A, "nightly", expect={"refused": 0, "last_refused_at": None}, refused=1, last_refused_at=5.0)
    assert made.refused == 1


def test_a_job_names_its_schedule(registry: Registry) -> None:
    job = replace(job_of("job-s"), schedule="nightly", scheduled_for=1764122400.0, source="schedule")
    registry.create_job(job)
    assert registry.get_job(A, "job-s") == job


def test_a_schedules_runs_are_listed_however_many_jobs_came_after(registry: Registry) -> None:
    """`overlap: skip` looks for the run still going among the schedule's runs: the tenant's
    newest jobs may all be uploads."""
    run = replace(job_of("job-run", created_at=1.0), schedule="nightly", source="schedule")
    registry.create_job(run)
    registry.create_job(replace(job_of("job-other", created_at=1.5), schedule="hourly", source="schedule"))
    for i in range(5):
        registry.create_job(job_of(f"job-up-{i}", created_at=2.0 + i))
    assert [j.id for j in registry.list_jobs(A, limit=3)] == ["job-up-4", "job-up-3", "job-up-2"]
    assert registry.list_jobs(A, limit=3, schedule="nightly") == [run]
    assert registry.list_jobs(B, schedule="nightly") == []


def test_nan_and_infinity_are_refused_not_changed(registry: Registry) -> None:
    """JSON has no NaN: storing one as null (or as text) would change what the user sent."""
    registry.create_model(Model(A, "churn"))
    for bad in (float("nan"), float("inf")):
        with pytest.raises(BadRequest):
            registry.add_version(version_of("churn", config={"threshold": bad}))
        with pytest.raises(BadRequest):
            registry.create_deployment(Deployment(A, "scoring", {"kind": "split", "weight": bad}))
    raises(NotFound, "version", lambda: registry.latest_version(A, "churn"))
    raises(NotFound, "deployment", lambda: registry.get_deployment(A, "scoring"))


# Records written by earlier releases ----------------------------------------------------
# As the hand-written mapping stored them: None fields of a signature left out, and on
# DynamoDB every None attribute left out.
OLD_VERSION: dict[str, Any] = {
    "tenant": A, "model": "churn", "version": 1, "runtime": "onnx", "artifact_uri": "s3://b/a.onnx",
    "sha256": "ab" * 32, "size_bytes": 1234, "config": {"threshold": 0.35}, "created_at": 1_700_000_000.25,
    "created_by": "key-1",
    "signature": {
        "inputs": [{"name": "features", "datatype": "FP32", "shape": [-1, 3], "feature_names": ["age", "income", "score"]}],
        "outputs": [{"name": "label", "datatype": "INT64", "shape": [-1], "role": "label"},
                    {"name": "probabilities", "datatype": "FP32", "shape": [-1, 2], "role": "probabilities"}],
        "metadata": {"producer": "skl2onnx"},
    },
}  # fmt: skip
OLD_CREATE: dict[str, Any] = {
    "tenant": A, "name": "scoring", "revision": 1, "at": 1_700_000_000.5, "by": "key-1",
    "new_policy": {"kind": "single", "model": "churn", "version": 1},
}  # fmt: skip
OLD_KEY: dict[str, Any] = {
    "key_id": "sk_a", "tenant": A, "secret_hash": "f" * 64, "scopes": ["admin", "predict"],
    "name": "ci", "created_at": 1_700_000_000.5,
}  # fmt: skip


def check_old_records(registry: Registry) -> None:
    assert registry.get_version(A, "churn", 1) == version_of(
        "churn", version=1, artifact_uri="s3://b/a.onnx", config={"threshold": 0.35},
        created_at=1_700_000_000.25,
    )  # fmt: skip
    assert [(c.revision, c.old_policy, c.new_policy) for c in registry.deployment_history(A, "scoring")] == [
        (1, None, single("churn", 1))
    ]
    assert registry.get_api_key("sk_a") == key_of("sk_a")
    assert registry.get_api_key("sk_a").active  # type: ignore[union-attr]


def test_sqlite_reads_records_of_earlier_releases(tmp_path: Any) -> None:
    registry = SqliteRegistry(tmp_path / "registry.db")
    registry.create_model(Model(A, "churn"))
    db = registry.db.conn()
    db.execute("INSERT INTO versions VALUES (?, ?, ?, ?)", (A, "churn", 1, json.dumps(OLD_VERSION)))
    db.execute("INSERT INTO deployment_history (tenant, name, doc) VALUES (?, ?, ?)",
               (A, "scoring", json.dumps(OLD_CREATE | {"old_policy": None})))  # fmt: skip
    db.execute("INSERT INTO api_keys VALUES (?, ?, ?)", ("sk_a", A, json.dumps(OLD_KEY | {"revoked_at": None})))
    check_old_records(registry)


def check_old_claims(registry: Registry) -> None:
    """An assignment kept before assignments had their revision is read with none (the
    feedback it gets is taken); a reward or label claimed before claims had the revision their
    deployment was made at stays claimed for any deployment of the name."""
    assert registry.get_assignment(A, "scoring", "req-1") == (("a",), None)
    assert registry.claim_reward(A, "scoring", "req-1", made=5) is False
    assert registry.claim_labels(A, "scoring", [("req-1", 0), ("req-1", 1)], expires_at=2e9, made=5) == [False, True]
    registry.put_assignment(A, "scoring", "req-1", ("b",), revision=5)
    assert registry.get_assignment(A, "scoring", "req-1") == (("b",), 5)


def test_sqlite_reads_claims_of_earlier_releases(tmp_path: Any) -> None:
    """A file whose tables lack the columns added since gets them when it is opened."""
    import sqlite3

    with sqlite3.connect(tmp_path / "registry.db") as db:
        db.executescript("""
            CREATE TABLE assignments (tenant TEXT NOT NULL, deployment TEXT NOT NULL, request_id TEXT NOT NULL,
                variant TEXT NOT NULL, at REAL NOT NULL, PRIMARY KEY (tenant, deployment, request_id));
            CREATE TABLE rewards (tenant TEXT NOT NULL, deployment TEXT NOT NULL, request_id TEXT NOT NULL,
                at REAL NOT NULL, PRIMARY KEY (tenant, deployment, request_id));
            CREATE TABLE monitor_labels (tenant TEXT NOT NULL, deployment TEXT NOT NULL, request_id TEXT NOT NULL,
                row INTEGER NOT NULL, expires_at REAL NOT NULL, PRIMARY KEY (tenant, deployment, request_id, row));
        """)
        db.execute("INSERT INTO assignments VALUES (?, ?, ?, ?, ?)", (A, "scoring", "req-1", "a", 1.0))
        db.execute("INSERT INTO rewards VALUES (?, ?, ?, ?)", (A, "scoring", "req-1", 1.0))
        db.execute("INSERT INTO monitor_labels VALUES (?, ?, ?, ?, ?)", (A, "scoring", "req-1", 0, 2e9))
    db.close()
    check_old_claims(SqliteRegistry(tmp_path / "registry.db"))
    assert SqliteRegistry(tmp_path / "registry.db").get_assignment(A, "scoring", "req-1") == (("b",), 5)  # opened again: as it was left


# The AWS twin's own behaviour -----------------------------------------------------------
class Meanwhile:
    """A client that lets another writer in once, just before the first `operation` call:
    the moment between a read and the conditional write that relies on it."""

    def __init__(self, client: Any, operation: str, meanwhile: Callable[[], object]) -> None:
        self._client = client
        self._operation = operation
        self._meanwhile: Callable[[], object] | None = meanwhile

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name != self._operation:
            return attr

        def call(**params: Any) -> Any:
            if self._meanwhile is not None:
                meanwhile, self._meanwhile = self._meanwhile, None
                meanwhile()
            return attr(**params)

        return call


@pytest.fixture
def dynamodb(registry_table: Any) -> Iterator[Any]:
    """The registry table on moto (the module's, empty) and a client of it."""
    with emptied(registry_table) as client:
        yield client


def test_dynamodb_reads_items_of_earlier_releases(dynamodb: Any) -> None:
    registry = DynamoRegistry("sluice-registry", client=dynamodb)
    registry.create_model(Model(A, "churn"))
    serialize = TypeSerializer().serialize
    for pk, sk, record in [
        (f"T#{A}#M#churn", "V#0000000001", OLD_VERSION),
        (f"T#{A}#D#scoring", "H#0000000001", OLD_CREATE),
        ("K#sk_a", "KEY", OLD_KEY),
    ]:
        item = json.loads(json.dumps(record), parse_float=Decimal) | {"pk": pk, "sk": sk}
        dynamodb.put_item(TableName="sluice-registry", Item={k: serialize(v) for k, v in item.items()})
    check_old_records(registry)


def test_dynamodb_reads_claims_of_earlier_releases(dynamodb: Any) -> None:
    serialize = TypeSerializer().serialize
    for sk, record in [("ASSIGNMENT", {"variant": "a", "at": 1}), ("REWARD", {"at": 1}), ("LABEL#000000", {"expires_at": 2_000_000_000})]:
        item = record | {"pk": f"T#{A}#D#scoring#R#req-1", "sk": sk}
        dynamodb.put_item(TableName="sluice-registry", Item={k: serialize(v) for k, v in item.items()})
    check_old_claims(DynamoRegistry("sluice-registry", client=dynamodb))


def test_dynamodb_keeps_its_key_layout(dynamodb: Any) -> None:
    """Deployed tables hold these keys and IAM conditions name their prefixes."""
    registry = DynamoRegistry("sluice-registry", client=dynamodb)
    registry.create_model(Model(A, "churn"))
    registry.add_version(version_of("churn"))
    first = registry.create_deployment(Deployment(A, "scoring", single("churn", 1)))
    registry.update_deployment(replace(first, policy=split(0.5)), expected_revision=1)
    registry.merge_stats(A, "scoring", 1, "variant:a", {"requests": 1}, {"peak": 2})
    registry.put_assignment(A, "scoring", "req-1", ("a",), revision=2)
    registry.put_api_key(key_of("sk_a"))
    registry.create_job(job_of("job-1"))
    registry.update_job(A, "job-1", status="RUNNING")
    registry.record_chunk(A, "job-1", chunk_of(0))
    items = dynamodb.scan(TableName="sluice-registry")["Items"]
    assert sorted((i["pk"]["S"], i["sk"]["S"]) for i in items) == [
        ("K#sk_a", "KEY"),
        ("T#acme", "D#scoring"),
        ("T#acme", "J#job-1"),
        ("T#acme", "K#sk_a"),
        ("T#acme", "M#churn"),
        ("T#acme", "O#" + hashlib.sha256(b"s3://b/outbox/acme/job-1/").hexdigest()),  # the folder job-1 holds
        ("T#acme#D#scoring", "H#0000000001"),
        ("T#acme#D#scoring", "H#0000000002"),
        ("T#acme#D#scoring", "S#0000000001#variant:a"),
        ("T#acme#D#scoring", "SEQ"),
        ("T#acme#D#scoring#R#req-1", "ASSIGNMENT"),
        ("T#acme#J#job-1", "C#000000"),
        ("T#acme#M#churn", "V#0000000001"),
    ]
    by_key = {(i["pk"]["S"], i["sk"]["S"]): i for i in items}
    stats = by_key[("T#acme#D#scoring", "S#0000000001#variant:a")]
    assert (float(stats["stat:requests"]["N"]), float(stats["stat:peak"]["N"])) == (1, 2)
    assert "expires_at" in by_key[("T#acme#D#scoring#R#req-1", "ASSIGNMENT")]
    assert by_key[("T#acme#D#scoring", "SEQ")]["last_seq"] == {"N": "2"}
    assert by_key[("T#acme", "J#job-1")]["chunks_done"] == {"N": "1"}
    hold = by_key[("T#acme", "O#" + hashlib.sha256(b"s3://b/outbox/acme/job-1/").hexdigest())]
    assert (hold["uri"], hold["job"]) == ({"S": "s3://b/outbox/acme/job-1/"}, {"S": "job-1"})
    registry.update_job(A, "job-1", status="SUCCEEDED")  # released: no job, and it expires
    released = registry.table.get("T#acme", "O#" + hashlib.sha256(b"s3://b/outbox/acme/job-1/").hexdigest())
    assert released is not None and "job" not in released and released["expires_at"] > 0


def test_dynamodb_keeps_an_optimize_job_in_its_tenants_partition_with_its_report_as_json(dynamodb: Any) -> None:
    registry = DynamoRegistry("sluice-registry", client=dynamodb)
    registry.create_optimize_job(optimize_job_of("opt-1"))
    registry.update_optimize_job(A, "opt-1", status="SUCCEEDED", report={"p50_ms": 1.0, "rows": 3})
    (found,) = dynamodb.scan(TableName="sluice-registry")["Items"]
    assert (found["pk"], found["sk"]) == ({"S": "T#acme"}, {"S": "OJ#opt-1"})
    assert json.loads(found["report"]["S"]) == {"p50_ms": 1.0, "rows": 3}
    assert registry.get_optimize_job(A, "opt-1").report == {"p50_ms": 1.0, "rows": 3}  # 1.0 stays a float


def racing(client: Any, operation: str, meanwhile: Callable[[], object]) -> DynamoRegistry:
    return DynamoRegistry("sluice-registry", client=Meanwhile(client, operation, meanwhile))


def test_dynamodb_update_that_lost_a_race_is_a_conflict(dynamodb: Any) -> None:
    other = DynamoRegistry("sluice-registry", client=dynamodb)
    first = other.create_deployment(Deployment(A, "scoring", single("churn", 1)))
    winner = replace(first, policy=single("churn", 2))
    registry = racing(
        dynamodb,
        "transact_write_items",
        lambda: other.update_deployment(winner, expected_revision=1),
    )
    loser = replace(first, policy=single("churn", 3))
    raises(Conflict, "revision", lambda: registry.update_deployment(loser, expected_revision=1))
    assert other.get_deployment(A, "scoring").policy == single("churn", 2)
    assert [c.new_policy for c in other.deployment_history(A, "scoring")] == [
        single("churn", 1),
        single("churn", 2),
    ]


def test_dynamodb_write_whose_reference_changed_after_the_registry_read_is_refused(dynamodb: Any) -> None:
    """q -> p lands between the registry's own reads for p -> q and its write."""
    other = DynamoRegistry("sluice-registry", client=dynamodb)
    p = other.create_deployment(Deployment(A, "p", single("churn", 1)))
    q = other.create_deployment(Deployment(A, "q", single("churn", 1)))
    registry = racing(
        dynamodb,
        "transact_write_items",
        lambda: other.update_deployment(replace(q, policy=ref("p")), expected_revision=1, refs_read=[p]),
    )
    stale = lambda: registry.update_deployment(replace(p, policy=ref("q")), expected_revision=1, refs_read=[q])  # noqa: E731
    raises(StaleRead, "policy", stale)
    assert other.get_deployment(A, "p") == p
    assert other.get_deployment(A, "q").policy == ref("p")


def test_dynamodb_revoke_whose_other_admin_key_was_revoked_meanwhile_is_refused(dynamodb: Any) -> None:
    """sk_b's revoke lands between the reads of sk_a's revoke (sk_b active: sk_a may go) and
    its write."""
    other = DynamoRegistry("sluice-registry", client=dynamodb)
    other.put_api_key(key_of("sk_a"))
    other.put_api_key(key_of("sk_b"))
    registry = racing(
        dynamodb, "transact_write_items", lambda: other.revoke_api_key(A, "sk_b", keep_an_admin=True)
    )
    raises(Conflict, "key_id", lambda: registry.revoke_api_key(A, "sk_a", keep_an_admin=True))
    assert [k.key_id for k in other.list_api_keys(A) if k.active] == ["sk_a"]
    assert other.get_api_key("sk_a").active  # type: ignore[union-attr]
    assert not other.get_api_key("sk_b").active  # type: ignore[union-attr]


def test_dynamodb_update_decided_on_a_deployment_deleted_and_created_again_meanwhile_is_refused(
    dynamodb: Any,
) -> None:
    """Revision 1 read, then deleted and created again: another deployment, at revision 3 (its
    name's third write), so the update decided on revision 1 is refused and the history shows
    what happened, each entry once."""
    other = DynamoRegistry("sluice-registry", client=dynamodb)
    first = other.create_deployment(Deployment(A, "scoring", single("churn", 1)))

    def recreate() -> None:
        other.delete_deployment(A, "scoring")
        other.create_deployment(Deployment(A, "scoring", single("churn", 2)))

    registry = racing(dynamodb, "transact_write_items", recreate)
    raises(Conflict, "revision", lambda: registry.update_deployment(replace(first, policy=split(0.25)), expected_revision=1))
    history = other.deployment_history(A, "scoring")
    assert [(c.revision, c.old_policy, c.new_policy) for c in history] == [
        (1, None, single("churn", 1)),
        (2, single("churn", 1), None),
        (3, None, single("churn", 2)),
    ]
    assert other.get_deployment(A, "scoring").policy == single("churn", 2)


def test_dynamodb_version_of_a_model_deleted_meanwhile_is_not_kept(dynamodb: Any) -> None:
    other = DynamoRegistry("sluice-registry", client=dynamodb)
    other.create_model(Model(A, "churn"))

    def recreate() -> None:
        other.delete_model(A, "churn")
        other.create_model(Model(A, "churn"))

    registry = racing(dynamodb, "transact_write_items", recreate)
    raises(NotFound, "model", lambda: registry.add_version(version_of("churn")))
    assert other.list_versions(A, "churn") == []
    assert other.add_version(version_of("churn")).version == 2  # the number the lost add took is not given again


def test_dynamodb_delete_model_sweeps_versions_added_meanwhile(dynamodb: Any) -> None:
    other = DynamoRegistry("sluice-registry", client=dynamodb)
    other.create_model(Model(A, "churn"))
    other.add_version(version_of("churn"))
    registry = racing(dynamodb, "transact_write_items", lambda: other.add_version(version_of("churn")))
    registry.delete_model(A, "churn")
    raises(NotFound, "model", lambda: other.get_model(A, "churn"))
    left = dynamodb.scan(TableName="sluice-registry")["Items"]  # where the count stood, alone
    assert left == [{"pk": {"S": "T#acme#M#churn"}, "sk": {"S": "NUMBERS"}, "last_version": {"N": "2"}}], left


@pytest.mark.usefixtures("aws")
def test_dynamodb_from_url_builds_its_own_client() -> None:
    create_table(boto3.client("dynamodb", region_name="eu-west-1"), "sluice-registry")
    registry = DynamoRegistry.from_url("dynamodb://sluice-registry", region="eu-west-1")
    registry.create_model(Model(A, "churn"))
    assert registry.client.meta.region_name == "eu-west-1"
    assert [m.name for m in registry.list_models(A)] == ["churn"]
    clients = AwsClients(region="eu-west-1")
    given = DynamoRegistry.from_url("dynamodb://sluice-registry", clients=clients)
    assert [m.name for m in given.list_models(A)] == ["churn"]
    assert given.client is clients.client("dynamodb", connect_timeout=3, read_timeout=10)
    assert table_of_url("dynamodb://sluice-registry/") == "sluice-registry"
    for bad in ("dynamodb://", "sqlite:///registry.db", "sluice-registry"):
        with pytest.raises(ValueError):
            table_of_url(bad)


@pytest.mark.usefixtures("aws")
def test_dynamodb_failures_become_sluice_errors_without_their_text() -> None:
    client = boto3.client(
        "dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    registry = DynamoRegistry("sluice-registry", client=client)
    with Stubber(client) as stub:
        stub.add_client_error(
            "get_item",
            "ProvisionedThroughputExceededException",
            "arn:aws:dynamodb:secret-detail",
            400,
        )
        stub.add_client_error("query", "InternalServerError", "arn:aws:dynamodb:secret-detail", 500)
        with pytest.raises(Unavailable) as throttled:
            registry.get_model(A, "churn")
        with pytest.raises(Unavailable) as broken:
            registry.list_models(A)
    for caught in (throttled, broken):
        assert "secret-detail" not in caught.value.message


def test_messages_are_counted_per_connection_and_window_up_to_their_limit(registry: Registry) -> None:
    second = [MessageWindow("1s#100", 3, 2000.0)]
    counted = [registry.count_message(A, "conn-1", second) for _ in range(5)]
    assert counted == [None, None, None, 0, 0]
    assert registry.count_message(A, "conn-1", [MessageWindow("1s#101", 3, 2000.0)]) is None  # the next window
    assert registry.count_message(A, "conn-2", second) is None  # another connection
    assert registry.count_message(B, "conn-1", second) is None  # another tenant's
    assert registry.count_message(A, "conn-3", [MessageWindow("1s#100", 0, 2000.0)]) == 0


def test_a_message_refused_by_one_window_is_counted_in_none(registry: Registry) -> None:
    """5/minute;2/second: a burst of six in one second gets two answers, and the four refused
    by the second's window leave the minute's with three messages to go."""
    minute, seconds = MessageWindow("60s#7", 5, 2000.0), [MessageWindow(f"1s#{n}", 2, 2000.0) for n in range(420, 424)]
    burst = [registry.count_message(A, "conn", [minute, seconds[0]]) for _ in range(6)]
    assert burst == [None, None, 1, 1, 1, 1]
    later = [registry.count_message(A, "conn", [minute, s]) for s in seconds[1:] for _ in range(2)]
    assert later == [None, None, None, 0, 0, 0]  # the minute's window full at five, not before


@pytest.mark.parametrize("spec", ["5/second;10 per 1 second", "10/second;5 per 1 second"])
def test_two_rates_of_one_window_length_count_each_message_once(registry: Registry, spec: str) -> None:
    """Both rates fall in one window: a burst in one second gets the lower rate's five answers
    (on DynamoDB a transaction naming the window twice failed every message; SQLite counted
    each twice), then refusals that name it."""
    import asyncio

    rate = ConnectionRate(registry, spec, A, clock=lambda: 1_000_000.2)
    answered: list[str] = []
    for _ in range(7):
        try:
            asyncio.run(rate.check("conn"))
            answered.append("answered")
        except SluiceError as refused:  # a 502 on DynamoDB before
            answered.append(f"{refused.status} {refused.message}")
    assert answered[:5] == ["answered"] * 5
    assert all(a.startswith("429 ") and "over its rate of 5" in a for a in answered[5:]), answered



def test_dynamodb_a_pause_made_while_the_scheduler_records_a_run_stays(dynamodb: Any) -> None:
    """The scheduler records a run (`last_fire`) as a tenant pauses the schedule: the pause
    lands just before the scheduler's write reaches DynamoDB, and stays (as SQLite's
    transaction keeps it): the schedule does not fire again though the tenant was told PAUSED."""
    registry = DynamoRegistry("sluice-registry", client=dynamodb)
    registry.create_schedule(schedule_of("nightly"))
    pending = [lambda: registry.update_schedule(A, "nightly", state="PAUSED")]

    def pause_first(model: Any, **_: Any) -> None:
        if model.name in ("PutItem", "UpdateItem") and pending:
            pending.pop()()

    dynamodb.meta.events.register("before-call.dynamodb.*", pause_first)
    try:
        recorded = registry.update_schedule(A, "nightly", last_fire=7.5)
    finally:
        dynamodb.meta.events.unregister("before-call.dynamodb.*", pause_first)
    assert not pending
    assert (recorded.state, recorded.last_fire) == ("PAUSED", 7.5)
    assert registry.get_schedule(A, "nightly") == recorded
