"""Follow bindings in every registry (SQLite and DynamoDB on moto): stored per tenant, found by
what they watch across tenants, and written only on the revision read, so that of two pollers
taking the same version one is refused; a claim is a lease, taken over once it lapses, by one
poller of those that find it lapsed."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from sluice.domain.errors import Conflict, NotFound
from sluice.domain.follows import Follow, FollowEvent, parse_plan, parse_source, recorded

if TYPE_CHECKING:
    from sluice.registry import Registry

A, B = "acme", "globex"
GROUP = "arn:aws:sagemaker:us-east-1:123456789012:model-package-group/fraud"


def follow_of(deployment: str, source: str = "models:/fraud@champion", tenant: str = A) -> Follow:
    parsed = parse_source(source)
    plan = str(parse_plan("1,10,50,100 every 10m gate agreement>=0.98"))
    return Follow(tenant, deployment, source, parsed.registry, "fraud", plan, parsed.watch, tracking_uri="sqlite:///m.db", created_at=1.0)


def test_bindings_round_trip_per_tenant_and_refuse_a_second(registry: Registry) -> None:
    stored = registry.create_follow(follow_of("scoring"))
    registry.create_follow(follow_of("batch", GROUP))
    registry.create_follow(follow_of("scoring", tenant=B))
    assert stored.revision == 1 and registry.get_follow(A, "scoring") == stored
    assert [f.deployment for f in registry.list_follows(A)] == ["batch", "scoring"]
    with pytest.raises(Conflict) as caught:
        registry.create_follow(follow_of("scoring", GROUP))
    assert caught.value.field == "deployment"
    assert registry.get_follow(A, "scoring").source == "models:/fraud@champion"


def test_who_made_a_binding_and_when_its_version_was_approved_are_kept(registry: Registry) -> None:
    """`operator` decides what a binding may read (the operator's own, or a tenant's); `seen_at`
    whether a late approval is superseded: both must survive the store, on SQLite and DynamoDB."""
    made = registry.create_follow(replace(follow_of("scoring", GROUP), operator=True, seen="4", seen_at=1772444487.25))
    stored = registry.get_follow(A, "scoring")
    assert stored == made and (stored.operator, stored.seen_at) == (True, 1772444487.25)
    assert registry.get_follow(A, "scoring").watch == follow_of("scoring", GROUP).watch


def test_an_update_names_the_revision_it_read_and_one_of_two_racers_is_refused(registry: Registry) -> None:
    read = registry.create_follow(follow_of("scoring"))
    event = FollowEvent("3", "pushing", 5.0)
    first = registry.update_follow(recorded(read, event, seen="3"), expected_revision=read.revision)
    assert (first.revision, first.seen, first.state) == (2, "3", "pushing")
    with pytest.raises(Conflict) as caught:  # a second poller that read revision 1 too
        registry.update_follow(recorded(read, FollowEvent("3", "pushing", 6.0), seen="3"), expected_revision=read.revision)
    assert caught.value.field == "revision"
    stored = registry.get_follow(A, "scoring")
    assert stored == first and [e.at for e in stored.history] == [5.0]
    done = recorded(stored, FollowEvent("3", "rolled_back", 7.0, reason="gate agreement>=0.98 fails", model_version=2))
    assert registry.update_follow(done, expected_revision=2).history[-1].reason == "gate agreement>=0.98 fails"
    assert registry.get_follow(A, "scoring").state == "failed"


def test_an_update_read_from_a_binding_removed_and_made_again_is_refused(registry: Registry) -> None:
    """A poller read the binding; it was removed and made again (at revision 1 too, watching
    another registry): the poller's claim is refused, never written over the new binding."""
    read = registry.create_follow(follow_of("scoring"))
    registry.delete_follow(A, "scoring")
    again = registry.create_follow(replace(follow_of("scoring", GROUP), created_at=2.0))
    assert again.revision == read.revision
    with pytest.raises(Conflict) as caught:
        registry.update_follow(recorded(read, FollowEvent("3", "pushing", 5.0), seen="3"), expected_revision=read.revision)
    assert caught.value.field == "revision" and "made again" in caught.value.message
    assert registry.get_follow(A, "scoring") == again


def test_followers_are_found_by_what_they_watch_across_tenants_and_deleted(registry: Registry) -> None:
    registry.create_follow(follow_of("scoring", GROUP))
    registry.create_follow(follow_of("other", GROUP, tenant=B))
    registry.create_follow(follow_of("mlflow"))
    assert registry.followers(parse_source(GROUP).watch) == [(A, "scoring"), (B, "other")]
    assert registry.followers() == [(A, "mlflow"), (A, "scoring"), (B, "other")]
    registry.delete_follow(A, "scoring")
    assert registry.followers(parse_source(GROUP).watch) == [(B, "other")]
    for call in (
        lambda: registry.get_follow(A, "scoring"),
        lambda: registry.delete_follow(A, "scoring"),
        lambda: registry.update_follow(replace(follow_of("scoring")), expected_revision=1),
        lambda: registry.get_follow(B, "mlflow"),
    ):
        with pytest.raises(NotFound) as caught:
            call()
        assert caught.value.field == "deployment"


def test_a_claim_is_a_lease_taken_over_once_it_lapses_by_one_of_the_pollers_racing_for_it(registry: Registry) -> None:
    from tests.support import Clock

    from sluice.services.follows import FollowService

    clock = Clock()
    pollers = [FollowService(registry, None, clock=clock, lease_s=600, poller=f"host-{n}:1") for n in range(3)]  # type: ignore[arg-type]
    read = registry.create_follow(follow_of("scoring"))
    claimed = pollers[0].claim(read, "3")  # then host-0 dies
    assert claimed is not None and (claimed.state, claimed.claimed_at, claimed.claimed_by) == ("pushing", clock.now, "host-0:1")
    assert registry.get_follow(A, "scoring") == claimed

    clock.now += 600  # not older than the lease yet: nobody takes it over
    assert not pollers[1].lapsed(claimed) and pollers[1].claim(claimed, "3") is None
    clock.now += 1
    assert pollers[1].lapsed(claimed)

    # Two pollers read the lapsed claim and race to take it over: one conditional write wins.
    barrier = threading.Barrier(2, timeout=30)

    def take(poller: FollowService) -> object:
        barrier.wait()
        return poller.claim(claimed, "3")

    with ThreadPoolExecutor(2) as pool:
        taken = [t for t in pool.map(take, pollers[1:]) if t is not None]
    assert len(taken) == 1
    stored = registry.get_follow(A, "scoring")
    assert stored == taken[0] and stored.revision == claimed.revision + 1 and stored.claimed_at == clock.now
    assert stored.last is not None and stored.last.reason.startswith("taken over from host-0:1, whose claim of 601 s ago")
    assert [e.outcome for e in stored.history] == ["pushing"]
    # The new claim is fresh; once what became of the version is recorded, no claim is left.
    assert all(p.claim(stored, "3") is None for p in pollers)
    done = pollers[2].record(A, "scoring", FollowEvent("3", "rolling_out", clock.now, "pushed as fraud:2", 2, 7))
    assert done is not None and (done.state, done.claimed_at, done.claimed_by) == ("rolling_out", None, None)
    assert done.history[-1].reason.startswith("taken over from host-0:1") and not pollers[2].lapsed(done)
