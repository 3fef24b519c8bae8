"""Choosing among variants: weighted, sticky by key, or a bandit. Pure: randomness is passed in."""

from __future__ import annotations

import hashlib
import math
import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sluice.domain.policy import Bandit, Variant

_SCALE = float(1 << 64)


def _unit_hash(key: str, name: str, salt: str = "") -> float:
    """A uniform number in (0, 1) for (key, variant), stable across processes and releases;
    `salt` (a nested split's place in its policy) draws it afresh for that split."""
    text = f"{name}\x00{key}" if not salt else f"{salt}\x00{name}\x00{key}"
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / _SCALE


def sticky_pick(variants: Sequence[Variant], key: str, *, salt: str = "") -> Variant:
    """Weighted rendezvous hashing: each variant scores `-weight / ln(h(key, variant))` and
    the highest wins. A key keeps its variant while weights stay put. Moving weight between
    the two variants of a split (a rollout's stable and candidate) moves only the keys that
    must move, all toward the one that gained; with three or more variants about the share
    moved changes variant, none onto one that lost weight, and some (about a fifth as many)
    between variants whose weights did not change. `salt`: the split's path in its policy
    (empty at the top): a split nested in another, whose variants may bear the same names, draws
    its own numbers, so that its weights hold among the keys that reach it."""
    best, best_score = variants[0], -math.inf
    for variant in variants:
        if variant.weight <= 0:
            continue
        score = -variant.weight / math.log(_unit_hash(key, variant.name, salt))
        if score > best_score:
            best, best_score = variant, score
    return best


def weighted_pick(variants: Sequence[Variant], rng: random.Random | None = None) -> Variant:
    rng = rng or random
    total = sum(v.weight for v in variants)
    point = rng.random() * total
    for variant in variants:
        point -= variant.weight
        if point < 0 and variant.weight > 0:
            return variant
    return next(v for v in reversed(variants) if v.weight > 0)


def bandit_pick(
    variants: Sequence[Variant],
    bandit: Bandit,
    rewards: Mapping[str, tuple[int, float]],
    rng: random.Random | None = None,
) -> Variant:
    """Pick by reward: `rewards[name] = (count, sum of rewards in [0, 1])`.

    Thompson sampling draws from Beta(1 + sum, 1 + count - sum) per variant; epsilon-greedy
    explores uniformly with probability epsilon and otherwise takes the best mean (unseen
    variants first). Variants with weight 0 are never picked.
    """
    rng = rng or random.Random()
    live = [v for v in variants if v.weight > 0]
    if bandit.algorithm == "thompson":
        def draw(v: Variant) -> float:
            count, total = rewards.get(v.name, (0, 0.0))
            return rng.betavariate(1.0 + total, 1.0 + max(count - total, 0.0))

        return max(live, key=draw)
    if rng.random() < bandit.epsilon:
        return rng.choice(live)

    def mean(v: Variant) -> float:
        count, total = rewards.get(v.name, (0, 0.0))
        return math.inf if count == 0 else total / count

    return max(live, key=mean)


def sampled(percent: float, rng: random.Random | None = None) -> bool:
    return percent >= 100 or (percent > 0 and (rng or random).random() * 100 < percent)
