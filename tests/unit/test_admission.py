"""Admission: `InFlight` (requests in flight per key, capped), `Capacity` (a process's predictions
in flight, and each tenant's share of them while another tenant wants room) and `Admission`,
which every transport of `sluice serve` goes through (the integration and end-to-end tiers
drive them through real servers)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sluice.domain import Principal
from sluice.domain.errors import (
    Overloaded,
    RateLimited,
    SluiceError,
    TenantOverloaded,
    TooManyInFlight,
)
from sluice.observability import Telemetry
from sluice.services.admission import CONTENDED_S, Admission, Capacity, InFlight
from sluice.settings import Settings
from tests.unit.test_telemetry import lines

if TYPE_CHECKING:
    from pathlib import Path


def test_a_key_gets_its_cap_and_no_more_and_other_keys_their_own() -> None:
    slots = InFlight(2)
    slots.enter("a")
    slots.enter("a")
    with pytest.raises(TooManyInFlight) as refused:
        slots.enter("a")
    assert isinstance(refused.value, RateLimited)  # a 429 with Retry-After wherever RateLimited is
    assert (refused.value.status, refused.value.retry_after_s, refused.value.field) == (429, 1, "key")
    assert slots.count("a") == 2  # the refused one took nothing
    slots.enter("b")
    slots.leave("a")
    slots.enter("a")
    assert (slots.count("a"), slots.count("b")) == (2, 1)


def test_a_held_slot_comes_back_however_the_block_ends() -> None:
    slots = InFlight(1)
    with pytest.raises(ValueError), slots.held("a"):
        raise ValueError("the request failed")
    with slots.held("a"):
        assert slots.count("a") == 1
    assert slots.count("a") == 0


def test_off_in_lambda_where_a_container_takes_one_request_at_a_time(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    local = Settings(mode="local", home=tmp_path).admission
    assert (local.max_in_flight_per_key, local.max_predictions_in_flight, local.tenant_share) == (64, 32, 0.5)
    assert Admission.from_settings(local) is not None
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "sluice-api")
    in_lambda = Settings(mode="local", home=tmp_path).admission
    assert (in_lambda.max_in_flight_per_key, in_lambda.max_predictions_in_flight) == (0, 0)
    assert Admission.from_settings(in_lambda) is None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_process_takes_its_limit_and_refuses_the_next_with_a_503_to_retry() -> None:
    capacity = Capacity(3, 1.0)
    for _ in range(3):
        capacity.enter("acme")
    with pytest.raises(Overloaded) as refused:
        capacity.enter("globex")  # whoever asks: the process is full
    assert (refused.value.status, refused.value.code, refused.value.retry_after_s) == (503, "overloaded", 1)
    assert refused.value.to_dict()["details"] == {"retry_after_s": 1, "limit": 3}
    assert (capacity.count(), capacity.count("globex"), capacity.refused) == (3, 0, 1)  # the refused one took nothing
    capacity.leave("acme")
    capacity.enter("globex")
    assert (capacity.count(), capacity.count("acme"), capacity.count("globex")) == (3, 2, 1)


def test_a_tenant_alone_may_use_every_slot() -> None:
    capacity = Capacity(4, 0.5)
    for _ in range(4):
        capacity.enter("acme")  # its share is 2, but nobody else wants room
    with pytest.raises(Overloaded):
        capacity.enter("acme")


def test_past_its_share_a_tenant_gets_a_429_while_another_tenant_has_predictions_in_flight() -> None:
    capacity = Capacity(4, 0.5)
    capacity.enter("globex")
    capacity.enter("acme")
    capacity.enter("acme")
    with pytest.raises(TenantOverloaded) as refused:
        capacity.enter("acme")
    assert isinstance(refused.value, RateLimited)  # a 429 with Retry-After wherever RateLimited is
    assert (refused.value.status, refused.value.code, refused.value.field, refused.value.details["limit"]) == (429, "tenant_overloaded", "tenant", 2)
    capacity.enter("globex")  # the other tenant is still served
    assert capacity.count() == 4
    capacity.leave("globex")
    capacity.leave("globex")
    capacity.enter("acme")  # alone again: past its share
    assert capacity.count("acme") == 3


def test_a_tenant_turned_away_for_lack_of_room_keeps_the_one_that_filled_the_process_to_its_share() -> None:
    clock = Clock()
    capacity = Capacity(4, 0.5, clock=clock)
    for _ in range(4):
        capacity.enter("acme")
    with pytest.raises(Overloaded):
        capacity.enter("globex")  # no room: globex has nothing in flight, but it wants some
    capacity.leave("acme")
    with pytest.raises(TenantOverloaded):
        capacity.enter("acme")  # the slot acme gave back is kept for globex
    capacity.enter("globex")
    assert (capacity.count("acme"), capacity.count("globex")) == (3, 1)
    capacity.leave("globex")
    clock.now += CONTENDED_S + 0.1  # globex has not asked again for a while: acme may take the room
    capacity.enter("acme")
    assert capacity.count("acme") == 4


def test_a_share_of_one_is_first_come_first_served() -> None:
    capacity = Capacity(2, 1.0)
    capacity.enter("globex")
    capacity.enter("acme")
    with pytest.raises(Overloaded):
        capacity.enter("acme")


def test_admission_counts_a_key_and_a_prediction_together_and_takes_nothing_when_it_refuses() -> None:
    telemetry = Telemetry(emit_metrics=False)
    admission = Admission(InFlight(2), Capacity(1), telemetry=telemetry)
    acme, other = Principal("acme", frozenset({"predict"}), "k1"), Principal("acme", frozenset({"predict"}), "k2")
    admission.enter(acme)  # a prediction: the key and the process
    with pytest.raises(Overloaded):
        admission.enter(acme)
    assert admission.per_key.count("k1") == 1  # type: ignore[union-attr]  # the refused prediction left its key's count as it was
    admission.enter(acme, prediction=False)  # any other request: the key only, whatever the process holds
    with pytest.raises(TooManyInFlight):
        admission.enter(acme, prediction=False)
    with admission.held(other, prediction=False):
        pass
    admission.leave(acme)
    with admission.held(other):
        assert admission.capacity.count() == 1  # type: ignore[union-attr]
    assert telemetry.refusals == {"overloaded": 1, "too_many_in_flight": 1}


def test_refusals_are_logged_at_most_once_in_a_while_with_their_counts(caplog: pytest.LogCaptureFixture) -> None:
    """A line per refusal would add to the load that caused them."""
    caplog.set_level("INFO")
    telemetry = Telemetry(emit_metrics=False)
    for code in ("overloaded", "overloaded", "tenant_overloaded"):
        telemetry.refused(tenant="acme", code=code)
    (line,) = lines(caplog)
    assert (line["message"], line["refused"], line["level"]) == ("requests refused by admission", {"overloaded": 1}, "WARNING")
    assert telemetry.refusals == {"overloaded": 2, "tenant_overloaded": 1}


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@settings(max_examples=100, deadline=None)
@example(  # a tenant that filled the process, another turned away, a slot back: the first keeps to its share
    limit=2, share=0.5, per_key=4,
    steps=[("enter", "a", 0, True), ("enter", "a", 1, True), ("enter", "b", 0, True), ("leave", 0, 0, False), ("enter", "a", 2, True)],
)
@given(
    limit=st.integers(1, 6),
    share=st.sampled_from([0.25, 0.5, 1.0]),
    per_key=st.integers(1, 4),
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("enter"), st.sampled_from(["a", "b"]), st.integers(0, 2), st.booleans()),
            st.tuples(st.just("leave"), st.integers(0, 40), st.just(0), st.just(False)),
            st.tuples(st.just("wait"), st.sampled_from([0.5, 3.0]), st.just(0), st.just(False)),
        ),
        max_size=40,
    ),
)
def test_any_enters_and_leaves_keep_every_count_and_refuse_only_by_the_rules(
    limit: int, share: float, per_key: int, steps: list[tuple[str, Any, int, bool]]
) -> None:
    """Requests of any tenants and keys entering and leaving in any order, with time passing:
    the counts are always what was admitted and not left, never above their caps; a refused
    request counts nothing; and each refusal is the one the rules give (the key's cap, then the
    tenant's share while another tenant wants room, then the process's limit)."""
    clock = _Clock()
    capacity = Capacity(limit, share, clock=clock)
    admission = Admission(InFlight(per_key), capacity)
    held: list[tuple[Principal, bool]] = []  # admitted and not left: (principal, prediction)
    turned_away: dict[str, float] = {}  # the model's own record of refusals for lack of room
    for kind, what, which, prediction in steps:
        if kind == "wait":
            clock.now += what
            continue
        if kind == "leave":
            if held:
                principal, was = held.pop(what % len(held))
                admission.leave(principal, prediction=was)
            continue
        principal = Principal(what, frozenset({"predict"}), f"{what}-key{which}")
        by_key = sum(1 for p, _ in held if p.subject == principal.subject)
        mine = sum(1 for p, was in held if was and p.tenant == what)
        total = sum(1 for _, was in held if was)
        others = any(was and p.tenant != what for p, was in held) or any(
            t != what and clock.now - at <= CONTENDED_S for t, at in turned_away.items()
        )
        if by_key >= per_key:
            expected = "too_many_in_flight"
        elif prediction and mine >= capacity.share and capacity.share < limit and others:
            expected = "tenant_overloaded"
        elif prediction and total >= limit:
            expected = "overloaded"
        else:
            expected = None
        try:
            admission.enter(principal, prediction=prediction)
            got = None
        except SluiceError as refused:
            got = refused.code
        assert got == expected, (kind, what, which, prediction, held)
        if got == "overloaded":
            turned_away[what] = clock.now
        if got is None:
            held.append((principal, prediction))
        assert capacity.count() == sum(1 for _, was in held if was) <= limit
        for tenant in "ab":
            assert capacity.count(tenant) == sum(1 for p, was in held if was and p.tenant == tenant)
        for subject in {p.subject for p, _ in held}:
            assert admission.per_key.count(subject) == sum(1 for p, _ in held if p.subject == subject) <= per_key  # type: ignore[union-attr]


@settings(max_examples=150, deadline=None)
@given(
    limit=st.integers(1, 6),
    share=st.sampled_from([0.25, 0.5, 1.0]),
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("enter"), st.sampled_from(["a", "b", "c"])),
            st.tuples(st.just("read"), st.integers(0, 40)),
            st.tuples(st.just("leave"), st.integers(0, 40)),
            st.tuples(st.just("wait"), st.sampled_from([0.5, 3.0])),
        ),
        max_size=40,
    ),
)
def test_slots_held_while_bodies_arrive_go_to_a_tenant_turned_away_down_to_each_share(limit: int, share: float, steps: list[tuple[str, Any]]) -> None:
    """Predictions entering (each then reading its body), their bodies coming in, and leaving,
    in any order: a tenant that finds the process full takes back one slot another tenant holds
    above its share while its body still arrives (the tenant holding the most, its newest), is
    admitted where that made room, and refused otherwise; an evicted prediction's task is cancelled and gives
    back its key alone. The counts stay what the model says, never above the limit."""

    class Task:  # what eviction cancels
        cancelled = False

        def cancel(self) -> None:
            self.cancelled = True

    clock = _Clock()
    capacity = Capacity(limit, share, clock=clock)
    admission = Admission(None, capacity)
    held: list[list[Any]] = []  # admitted, not left: [tenant, reading or None, evicted, task]
    turned_away: dict[str, float] = {}
    for kind, what in steps:
        if kind == "wait":
            clock.now += what
        elif kind == "read":
            readers = [h for h in held if h[1] is not None]
            if readers:
                one = readers[what % len(readers)]
                capacity.read(one[1])
                one[1] = None
        elif kind == "leave":
            if held:
                tenant, reading, evicted, _ = held.pop(what % len(held))
                if reading is not None:
                    capacity.read(reading)
                admission.leave(Principal(tenant, frozenset({"predict"}), tenant), prediction=not evicted)
        else:
            counted = {t: sum(1 for h in held if h[0] == t and not h[2]) for t in "abc"}
            others = any(n for t, n in counted.items() if t != what) or any(t != what and clock.now - at <= CONTENDED_S for t, at in turned_away.items())
            to_evict = []
            if counted[what] >= capacity.share and capacity.share < limit and others:
                expected = "tenant_overloaded"
            elif sum(counted.values()) >= limit:
                over = [(counted[t], t) for t in "abc" if t != what and counted[t] > capacity.share
                        and any(h[0] == t and h[1] is not None and not h[2] for h in held)]  # fmt: skip
                if over:  # one slot, from the tenant holding the most (by name on a tie): its newest reader
                    victim = min(over, key=lambda o: (-o[0], o[1]))[1]
                    to_evict.append([h for h in held if h[0] == victim and h[1] is not None and not h[2]][-1])
                    counted[victim] -= 1
                expected = None if sum(counted.values()) < limit else "overloaded"
            else:
                expected = None
            try:
                admission.enter(Principal(what, frozenset({"predict"}), what))
                got = None
            except SluiceError as refused:
                got = refused.code
            assert got == expected, (what, held)
            for victim in to_evict:
                assert victim[1].evicted and victim[3].cancelled
                victim[2] = True
            assert all(h[3].cancelled == h[2] for h in held)  # only those evicted
            if got == "overloaded" or to_evict:
                turned_away[what] = clock.now
            if got is None:
                task = Task()
                held.append([what, capacity.reading(what, task), False, task])  # type: ignore[arg-type]
        assert capacity.count() == sum(1 for h in held if not h[2]) <= limit
        for tenant in "abc":
            assert capacity.count(tenant) == sum(1 for h in held if h[0] == tenant and not h[2])
