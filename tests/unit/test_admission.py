"""`InFlight`: requests in flight per key, capped; the count every transport of `sluice serve`
goes through (the end-to-end tier drives it through a real server)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sluice.domain.errors import RateLimited, TooManyInFlight
from sluice.services.admission import InFlight
from sluice.settings import Settings

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
    assert Settings(mode="local", home=tmp_path).admission.max_in_flight_per_key == 64
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "sluice-api")
    assert Settings(mode="local", home=tmp_path).admission.max_in_flight_per_key == 0
