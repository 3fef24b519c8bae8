"""Follow bindings in every registry (SQLite and DynamoDB on moto): stored per tenant, found by
what they watch across tenants, and written only on the revision read, so that of two pollers
taking the same version one is refused."""

from __future__ import annotations

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
