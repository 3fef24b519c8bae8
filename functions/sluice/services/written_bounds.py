"""Bounds a policy is held to where it is written, not where it is read: a variant's or
member's weight at most MAX_WEIGHT (any sum of them stays finite), a lookup feature's default a
value of its datatype (an INT32 default of 5e9 failed every row that took it), a SageMaker
lookup's names SageMaker feature names (another was a 502 on every call), a transform's
number one a 64-bit float holds (a whole number of 400 digits was a 500 on every request; one
stored before reads as infinity, `sluice.routing.transforms`). A policy stored
before a bound keeps what it holds: it still reads and serves, and a policy written to the
same deployment may carry those values again (an update that keeps it, a rollout that starts
from it and goes back to it); a value past its bound that it does not hold is a 422 naming it."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import InvalidRequest, SluiceError
from sluice.domain.lookups import Lookup
from sluice.domain.policy import MAX_WEIGHT, Ensemble, Split, parse_policy
from sluice.domain.transforms import Transform, numbers_past_float
from sluice.services.graph_checks import fields_of

if TYPE_CHECKING:
    from collections.abc import Hashable, Iterator

    from sluice.domain.policy import Node


def check_written(node: Node, stored: dict[str, Any] | None) -> None:
    """`node`, a policy written to a deployment whose policy now is `stored` (None: a new one)."""
    kept: set[Hashable] = set()
    if stored is not None:
        with contextlib.suppress(SluiceError):  # a stored policy that no longer reads keeps nothing
            kept = {what for _, what, _ in _past_bounds(parse_policy(stored))}
    for where, what, why in _past_bounds(node):
        if what not in kept:
            raise InvalidRequest(f"{where}: {why}", field=where)


def _past_bounds(node: Node) -> Iterator[tuple[str, Hashable, str]]:
    """Each value of the policy past its bound: the field, the value (as stored policies are
    matched), and why."""
    for field, child in fields_of(node):
        weights: list[tuple[str, float]] = []
        if isinstance(child, Split):
            weights = [(f"{field}.variants.{i}.weight", v.weight) for i, v in enumerate(child.variants)]
        elif isinstance(child, Ensemble):
            weights = [(f"{field}.members.{i}.weight", m.weight) for i, m in enumerate(child.members)]
        elif isinstance(child, Transform):
            for i, op in enumerate(child.ops):
                for name, value in numbers_past_float(op):
                    yield f"{field}.ops.{i}.{name}", ("number", value), f"a number a 64-bit float holds (at most about 1.8e308 in size), not one of {len(str(abs(value)))} digits"
        elif isinstance(child, Lookup):
            for i, feature in enumerate(child.features):
                why = feature.past_range_default()
                if why is not None:
                    yield f"{field}.features.{i}", ("default", feature.name, feature.datatype, feature.default), why
            for where, name, said in child.misnamed():
                yield f"{field}.{where}", ("name", child.store, name), f"'{name}' is not {said}"
        for where, weight in weights:
            if weight > MAX_WEIGHT:
                yield where, ("weight", weight), f"a weight is at most {MAX_WEIGHT:.0f}, not {weight!r}"
