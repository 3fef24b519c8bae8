"""The checks a `sequence` or a `switch` node makes on itself when a policy is parsed (what no
field can check alone); `parse_policy` runs them. Checks against the models' signatures (a
step's inputs are its previous step's outputs, a condition's input exists and has the type of
its value) need the registry and live in `sluice.services.graph_checks`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.domain.conditions import MAX_CONDITION_DEPTH, comparisons
from sluice.domain.errors import InvalidRequest

if TYPE_CHECKING:
    from sluice.domain.policy import Node, Sequence, Switch
    from sluice.domain.signature import Signature

DEFAULT_CASE = "default"
STEPS_ONLY = ("transform", "function", "lookup")  # kinds that run only as a sequence's step, with no model version


def check_graph_node(node: Sequence | Switch, *, field: str) -> list[tuple[str, Node]]:
    """Check `node` alone; its children, with their fields, for the caller to check in turn."""
    if node.kind == "sequence":
        return _sequence(node, field)  # type: ignore[arg-type]
    return _switch(node, field)  # type: ignore[arg-type]


def _sequence(node: Sequence, field: str) -> list[tuple[str, Node]]:
    unique_names([s.name for s in node.steps], f"{field}.steps")
    if node.steps[0].map is not None:
        raise InvalidRequest("the first step takes the request's inputs: it has no map", field=f"{field}.steps.0.map")
    transforms = [i for i, s in enumerate(node.steps) if s.target.kind in ("transform", "lookup")]  # take what comes before
    if all(s.target.kind in STEPS_ONLY for s in node.steps):
        raise InvalidRequest("a sequence runs at least one model: every step here is a transform, a function or a lookup", field=f"{field}.steps")
    for i in transforms:
        kind = node.steps[i].target.kind
        declares = node.steps[i].target.inputs is not None  # type: ignore[union-attr]
        if i == 0 and not declares:
            raise InvalidRequest(f"a {kind} that is the first step declares the inputs a caller sends", field=f"{field}.steps.0.target.inputs")
        if i > 0 and declares:
            raise InvalidRequest(
                f"only a first step declares inputs: a later {kind} takes the previous step's outputs", field=f"{field}.steps.{i}.target.inputs"
            )
        if i > 0 and node.steps[i].map is not None:
            raise InvalidRequest(f"a {kind} takes every output of the previous step: it has no map", field=f"{field}.steps.{i}.map")
    steps = {s.name: i for i, s in enumerate(node.steps)}
    for i, exposed in enumerate(node.expose or ()):
        step, _, output = exposed.partition(".")
        where = f"{field}.expose.{i}"
        if step not in steps or not output:
            raise InvalidRequest(f"'{exposed}' is not 'step.output' with a step of this sequence ({sorted(steps)})", field=where)
        if steps[step] == len(node.steps) - 1:
            raise InvalidRequest(f"step '{step}' is the last: its outputs are the answer already", field=where)
        if exposed in (node.expose or ())[:i]:
            raise InvalidRequest(f"'{exposed}' is exposed twice", field=where)
    return [(f"{field}.steps.{i}.target", s.target) for i, s in enumerate(node.steps) if s.target.kind not in STEPS_ONLY]


def _switch(node: Switch, field: str) -> list[tuple[str, Node]]:
    unique_names([c.name for c in node.cases], f"{field}.cases")
    for i, case in enumerate(node.cases):
        if case.name == DEFAULT_CASE:
            raise InvalidRequest(f"'{DEFAULT_CASE}' names the switch's default; give this case another name", field=f"{field}.cases.{i}.name")
        if any(depth > MAX_CONDITION_DEPTH for _, depth in comparisons(case.when)):
            raise InvalidRequest(f"conditions nest at most {MAX_CONDITION_DEPTH} levels deep", field=f"{field}.cases.{i}.when")
    return [*((f"{field}.cases.{i}.target", c.target) for i, c in enumerate(node.cases)), (f"{field}.default", node.default)]


def unique_names(names: list[str], field: str) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise InvalidRequest(f"name '{name}' is used twice", field=f"{field}.{i}.name")
        seen.add(name)


def reads_routing_key(node: Node) -> bool:
    """True when a switch in the policy `node` (references not followed) has a condition on
    the routing key, or a precomputed node keys its table by it."""
    if node.kind == "switch" and any(c.source == "routing_key" for case in node.cases for c, _ in comparisons(case.when)):  # type: ignore[union-attr]
        return True
    if node.kind == "precomputed" and node.source == "routing_key":  # type: ignore[union-attr]
        return True
    return any(reads_routing_key(child) for child in node.children())


def deterministic(node: Node) -> bool:
    """True when a graph node gives the same answer to the same request (its inputs, and the
    routing key, headers and parameters its conditions read), every step and case under it
    too: the prediction cache keeps only such answers. One branch per graph kind; the policy
    kinds that route (a split, an ensemble) are judged by `domain.policy.uncacheable`, which
    walks the tree and asks this of every other node."""
    kind = node.kind
    if kind == "sequence":  # its steps one after another: deterministic when each is
        return all(deterministic(step.target) for step in node.steps)  # type: ignore[union-attr]
    if kind == "switch":  # its conditions read the request only; then the case's target
        return all(deterministic(child) for child in node.children())
    if kind == "transform":  # declarative ops on the request's tensors, no state
        return True
    if kind == "function":  # a tenant's own code: only as deterministic as its author declares
        return bool(node.deterministic)  # type: ignore[union-attr]
    # A lookup: the store's values change between requests (and go stale); a precomputed node's
    # answers change with each publication of its table. The others (single, ref, split, shadow,
    # ensemble) are not graph nodes (see `uncacheable`).
    return kind not in ("lookup", "precomputed")


def sequence_signature(node: Sequence, flow: list[Signature]) -> Signature:
    """What a sequence takes and answers, given each step's signature in order (`flow`, whose
    last carries the sequence's inputs): the last step's outputs, then each output the sequence
    exposes (`<step>.<output>`, a value) that its step has."""
    import dataclasses

    from sluice.domain.signature import Signature as Made

    last = flow[-1]
    exposed = []
    for name in node.expose or ():
        step, _, output = name.partition(".")
        found = flow[next(i for i, s in enumerate(node.steps) if s.name == step)].output(output)
        if found is not None:
            exposed.append(dataclasses.replace(found, name=name, role="value"))
    if not exposed:
        return last
    return Made(last.inputs, (*last.outputs, *exposed), last.metadata)
