"""Schedules on AWS, as EventBridge Scheduler keeps them (moto): one Scheduler schedule per
tenant and name, whatever dots the two hold; schedules an earlier release named moved to their
own names; what Scheduler cannot take refused naming the field, before anything is written."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.stub import Stubber
from hypothesis import given, settings
from hypothesis import strategies as st
from moto import mock_aws

from sluice.batch.eventbridge import (
    EventBridgeSchedules,
    legacy_schedule_name,
    schedule_name,
    target_input,
)
from sluice.batch.schedules import ScheduleService
from sluice.domain import Principal
from sluice.domain.errors import BadRequest, Unavailable
from tests.conftest import MODELS

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sluice.wiring import Container

GROUP = "sluice-batch"
ROLE = "arn:aws:iam::123456789012:role/sluice-batch-scheduler"
MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:sluice-batch"
SCHEDULER_NAME = re.compile(r"[0-9a-zA-Z\-_.]{1,64}")  # Scheduler's own rule for a schedule's name
NAMES = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,62}", fullmatch=True)  # a tenant's, a schedule's


@settings(max_examples=150, deadline=None)
@given(NAMES, NAMES, NAMES, NAMES)
def test_every_tenant_and_name_has_a_scheduler_name_of_its_own(tenant: str, name: str, other_tenant: str, other_name: str) -> None:
    mine, theirs = schedule_name(tenant, name), schedule_name(other_tenant, other_name)
    assert SCHEDULER_NAME.fullmatch(mine)
    assert (mine == theirs) == ((tenant, name) == (other_tenant, other_name))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.from_regex(r"[a-z0-9][a-z0-9_-]{0,14}", fullmatch=True), min_size=2, max_size=6))
def test_pairs_that_join_to_one_text_have_names_of_their_own(parts: list[str]) -> None:
    """Every way of cutting `a.b.c…` into a tenant and a schedule name is a pair of its own."""
    pairs = [(".".join(parts[:i]), ".".join(parts[i:])) for i in range(1, len(parts))]
    names = {schedule_name(*pair) for pair in pairs}
    assert len(names) == len(pairs) and all(SCHEDULER_NAME.fullmatch(n) for n in names)


def test_pairs_that_shared_a_name_before_no_longer_do() -> None:
    # joined by a dot: both `acme.prod.nightly`
    assert legacy_schedule_name("acme.prod", "nightly") == legacy_schedule_name("acme", "prod.nightly")
    assert schedule_name("acme.prod", "nightly") != schedule_name("acme", "prod.nightly")
    # a long pair's digest was computable: a short name under a tenant of its first 20 characters
    long = ("acme-corporation-limited", "n" * 50)
    digest = legacy_schedule_name(*long).split(".", 1)[1]
    assert legacy_schedule_name("acme-corporation-lim", digest) == legacy_schedule_name(*long)
    assert schedule_name("acme-corporation-lim", digest) != schedule_name(*long)


@pytest.fixture
def scheduler(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("scheduler", region_name="us-east-1")
        client.create_schedule_group(Name=GROUP)
        yield client


def _service(batch: Container, client: Any) -> ScheduleService:
    timer = EventBridgeSchedules(group=GROUP, role_arn=ROLE, state_machine_arn=MACHINE, client=client)
    return ScheduleService(batch.registry, batch.batch, timer)


def _tenant(batch: Container, tenant: str) -> Principal:
    from sluice.demo import install_demo

    principal = Principal(tenant, frozenset({"admin", "predict"}), f"key-{tenant}")
    install_demo(batch, principal, MODELS)
    return principal


def _create(service: ScheduleService, batch: Container, who: Principal, name: str, expression: str) -> None:
    service.create(who, name=name, deployment="iris", input_uri=batch.batch.paths.inbox(who.tenant) + "iris/{date}.csv", expression=expression)


def _spec(client: Any, name: str) -> dict[str, Any]:
    return json.loads(client.get_schedule(Name=name, GroupName=GROUP)["Target"]["Input"])


def _names(client: Any) -> set[str]:
    return {s["Name"] for s in client.list_schedules(GroupName=GROUP)["Schedules"]}


def test_two_tenants_whose_names_join_alike_keep_schedules_apart(batch: Container, scheduler: Any) -> None:
    """`acme.prod`'s `nightly` and `acme`'s `prod.nightly` were one Scheduler schedule: the second
    replaced the first's expression and job, and deleting it deleted the first's."""
    service = _service(batch, scheduler)
    first, second = _tenant(batch, "acme.prod"), _tenant(batch, "acme")
    _create(service, batch, first, "nightly", "cron(0 2 * * *)")
    _create(service, batch, second, "prod.nightly", "cron(0 3 * * *)")
    mine, theirs = schedule_name("acme.prod", "nightly"), schedule_name("acme", "prod.nightly")
    assert _names(scheduler) == {mine, theirs}
    assert _spec(scheduler, mine)["tenant"] == "acme.prod"
    assert scheduler.get_schedule(Name=mine, GroupName=GROUP)["ScheduleExpression"] == "cron(0 2 * * ? *)"
    service.pause(second, "prod.nightly")
    assert scheduler.get_schedule(Name=mine, GroupName=GROUP)["State"] == "ENABLED"
    service.delete(second, "prod.nightly")
    assert _names(scheduler) == {mine}


def test_a_schedule_an_earlier_release_named_moves_to_its_own_name_and_anothers_is_left(batch: Container, scheduler: Any) -> None:
    service = _service(batch, scheduler)
    acme = _tenant(batch, "acme")
    _create(service, batch, acme, "nightly", "cron(0 2 * * *)")
    made = service.show(acme, "nightly").schedule
    # As an earlier release made it: under `acme.nightly` (beside the new one, here).
    legacy = legacy_schedule_name("acme", "nightly")
    scheduler.create_schedule(
        Name=legacy, GroupName=GROUP, ScheduleExpression="cron(0 2 * * ? *)", FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": MACHINE, "RoleArn": ROLE, "Input": json.dumps(target_input(made))},
    )  # fmt: skip
    # And a name another pair held then, whose schedule is not acme's `other`'s.
    scheduler.create_schedule(
        Name=legacy_schedule_name("acme", "other"), GroupName=GROUP, ScheduleExpression="rate(1 day)",
        FlexibleTimeWindow={"Mode": "OFF"}, Target={"Arn": MACHINE, "RoleArn": ROLE, "Input": json.dumps({"tenant": "acme.x", "schedule": "other"})},
    )  # fmt: skip
    service.pause(acme, "nightly")
    assert legacy not in _names(scheduler)
    assert scheduler.get_schedule(Name=schedule_name("acme", "nightly"), GroupName=GROUP)["State"] == "DISABLED"
    _create(service, batch, acme, "other", "rate(1 day)")
    service.delete(acme, "other")
    assert legacy_schedule_name("acme", "other") in _names(scheduler)  # not acme's: left alone


@pytest.mark.parametrize(
    ("expression", "timezone", "field"),
    [
        # a valid cron that EventBridge writes in 270 characters (its bound: 256)
        ("cron(" + " ".join(",".join(map(str, r)) for r in (range(60), range(24), "*", range(1, 13), "*")) + ")", "UTC", "expression"),
        ("rate(1 day)", "America/Argentina/ComodRivadavia", None),  # 32 characters: taken
    ],
)
def test_what_scheduler_cannot_take_is_refused_naming_the_field_and_nothing_is_kept(
    batch: Container, scheduler: Any, expression: str, timezone: str, field: str | None
) -> None:
    service = _service(batch, scheduler)
    acme = _tenant(batch, "acme")
    made = dict(name="n", deployment="iris", input_uri=batch.batch.paths.inbox("acme") + "iris/{date}.csv", expression=expression, timezone=timezone)
    if field is None:
        service.create(acme, **made)
        return
    with pytest.raises(BadRequest) as refused:
        service.create(acme, **made)
    assert refused.value.field == field
    assert service.list(acme) == [] and _names(scheduler) == set()


@pytest.mark.parametrize(("code", "error"), [("ValidationException", BadRequest), ("ThrottlingException", Unavailable)])
def test_a_refusal_from_scheduler_is_the_apis_and_the_schedule_is_not_kept(batch: Container, code: str, error: type[Exception]) -> None:
    client = boto3.client("scheduler", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    service = _service(batch, client)
    acme = _tenant(batch, "acme")
    with Stubber(client) as stub:
        stub.add_client_error("create_schedule", service_error_code=code, service_message="no", http_status_code=400)
        with pytest.raises(error):
            _create(service, batch, acme, "n", "rate(1 day)")
    assert service.list(acme) == []
