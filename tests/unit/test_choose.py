"""Split choices: sticky keys stay put, weight moves move about as many keys, bandits follow reward."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from sluice.domain.policy import Bandit, Single, Variant
from sluice.routing.choose import bandit_pick, sampled, sticky_pick, weighted_pick

NODE = Single(model="m", version=1)
KEYS = [f"user-{i}" for i in range(20_000)]


def variants(*weights: float) -> list[Variant]:
    return [Variant(name=name, weight=w, target=NODE) for name, w in zip("abcdef", weights, strict=False)]


def test_the_same_key_lands_on_the_same_variant() -> None:
    split = variants(50, 30, 20)
    first = [sticky_pick(split, k).name for k in KEYS]
    again = [sticky_pick(split, k).name for k in KEYS]
    assert first == again
    share = Counter(first)
    assert share["a"] / len(KEYS) == pytest.approx(0.5, abs=0.015)
    assert share["c"] / len(KEYS) == pytest.approx(0.2, abs=0.015)


@pytest.mark.parametrize(("before", "after", "moved"), [((90, 10), (80, 20), 0.10), ((50, 50), (40, 60), 0.10), ((99, 1), (90, 10), 0.09)])
def test_moving_weight_moves_only_that_share_of_keys(before: tuple[int, int], after: tuple[int, int], moved: float) -> None:
    old = {k: sticky_pick(variants(*before), k).name for k in KEYS}
    new = {k: sticky_pick(variants(*after), k).name for k in KEYS}
    changed = [k for k in KEYS if old[k] != new[k]]
    assert len(changed) / len(KEYS) == pytest.approx(moved, abs=0.012)
    assert all(old[k] == "a" and new[k] == "b" for k in changed)  # only from the variant that lost weight


def test_moving_weight_among_three_moves_about_that_share() -> None:
    old = {k: sticky_pick(variants(60, 30, 10), k).name for k in KEYS}
    new = {k: sticky_pick(variants(50, 30, 20), k).name for k in KEYS}
    changed = [k for k in KEYS if old[k] != new[k]]
    # Rendezvous hashing rebalances in proportion: a few keys also pass through b on their
    # way to c, but none lands on the variant that lost weight.
    assert 0.10 <= len(changed) / len(KEYS) <= 0.14
    assert not any(new[k] == "a" for k in changed)


def test_zero_weight_never_wins_and_random_choice_follows_weights() -> None:
    split = variants(0, 1)
    assert {sticky_pick(split, k).name for k in KEYS[:2000]} == {"b"}
    rng = random.Random(1)
    picks = Counter(weighted_pick(variants(75, 25, 0), rng).name for _ in range(20_000))
    assert picks["a"] / 20_000 == pytest.approx(0.75, abs=0.015) and picks["c"] == 0


def test_thompson_sampling_favours_the_better_variant() -> None:
    rng = random.Random(2)
    rewards = {"a": (200, 40.0), "b": (200, 160.0)}
    picks = Counter(bandit_pick(variants(1, 1), Bandit(algorithm="thompson"), rewards, rng).name for _ in range(2000))
    assert picks["b"] > 0.95 * 2000
    # With no evidence both are explored.
    fresh = Counter(bandit_pick(variants(1, 1), Bandit(algorithm="thompson"), {}, rng).name for _ in range(2000))
    assert 0.4 < fresh["a"] / 2000 < 0.6


def test_epsilon_greedy_exploits_and_explores() -> None:
    rng = random.Random(3)
    rewards = {"a": (100, 10.0), "b": (100, 90.0), "c": (100, 50.0)}
    picks = Counter(bandit_pick(variants(1, 1, 1), Bandit(algorithm="epsilon_greedy", epsilon=0.3), rewards, rng).name for _ in range(6000))
    assert picks["b"] / 6000 == pytest.approx(0.7 + 0.1, abs=0.03)
    assert picks["a"] / 6000 == pytest.approx(0.1, abs=0.02)
    unseen = bandit_pick(variants(1, 1), Bandit(algorithm="epsilon_greedy", epsilon=0.0), {"a": (10, 9.0)}, rng)
    assert unseen.name == "b"  # an unseen variant is tried first


def test_sampling_percentages() -> None:
    rng = random.Random(4)
    assert sum(sampled(25, rng) for _ in range(20_000)) / 20_000 == pytest.approx(0.25, abs=0.015)
    assert not any(sampled(0, rng) for _ in range(100)) and all(sampled(100, rng) for _ in range(100))


@pytest.mark.parametrize(("outer", "inner"), [((50, 50), (50, 50)), ((50, 50), (10, 90)), ((30, 70), (80, 20))])
def test_a_nested_split_holds_its_own_weights_among_the_keys_that_reach_it(outer: tuple[int, int], inner: tuple[int, int]) -> None:
    """An inner split whose variants bear the outer's names, keyed alike: salted by its path, it
    splits the keys the outer sent it by its own weights (unsalted, outer `a` meant inner `a`)."""
    reached = [k for k in KEYS if sticky_pick(variants(*outer), k).name == "a"]
    inside = Counter(sticky_pick(variants(*inner), k, salt="a").name for k in reached)
    assert inside["a"] / len(reached) == pytest.approx(inner[0] / sum(inner), abs=0.03)


def test_a_top_split_draws_as_it_always_has() -> None:
    """No salt at the top: keys keep the variants they had before nested splits were salted."""
    import hashlib
    import math

    def before(split: list[Variant], key: str) -> str:  # the draw as written before the salt
        scores = {v.name: -v.weight / math.log((int.from_bytes(hashlib.blake2b(f"{v.name}\x00{key}".encode(), digest_size=8).digest(), "big") + 0.5) / float(1 << 64)) for v in split}
        return max(scores, key=scores.__getitem__)

    split = variants(50, 30, 20)
    assert all(sticky_pick(split, k).name == before(split, k) for k in KEYS[:2000])
