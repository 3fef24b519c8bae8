"""A deployment's policy: a small tree of nodes, parsed and checked from plain dicts.

Node kinds:
- `single`   one model version;
- `split`    weighted choice among named variants (A/B, canary), sticky by a routing key,
             optionally a bandit that moves weight by reward;
- `shadow`   a primary that answers and mirrors that see the same input off the request path;
- `ensemble` members called concurrently and aggregated;
- `ref`      another deployment of the same tenant.

Parsing checks shape and values; checks that need the registry (versions exist, signatures
fit, references resolve without cycles) live in `sluice.services.deployments`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sluice.domain import check_name
from sluice.domain.errors import BadRequest

MAX_DEPTH = 4
MAX_CHILDREN = 16
AGGREGATORS = ("mean", "weighted_mean", "majority", "soft_vote", "max", "median", "first_success")
BANDITS = ("thompson", "epsilon_greedy")


@dataclass(frozen=True, slots=True)
class Target:
    """One model version chosen to answer."""

    model: str
    version: int


@dataclass(frozen=True, slots=True)
class Single:
    model: str
    version: int

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "single", "model": self.model, "version": self.version}


@dataclass(frozen=True, slots=True)
class Ref:
    deployment: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "ref", "deployment": self.deployment}


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    weight: float
    node: Node


@dataclass(frozen=True, slots=True)
class Bandit:
    algorithm: Literal["thompson", "epsilon_greedy"]
    epsilon: float = 0.1


@dataclass(frozen=True, slots=True)
class Split:
    variants: tuple[Variant, ...]
    routing_key: str | None = None  # a request field or header whose value makes routing sticky
    bandit: Bandit | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": "split",
            "variants": [{"name": v.name, "weight": v.weight, "target": v.node.to_dict()} for v in self.variants],
        }
        if self.routing_key:
            data["routing_key"] = self.routing_key
        if self.bandit:
            data["bandit"] = {"algorithm": self.bandit.algorithm, "epsilon": self.bandit.epsilon}
        return data


@dataclass(frozen=True, slots=True)
class Mirror:
    name: str
    node: Node
    sample_percent: float = 100.0


@dataclass(frozen=True, slots=True)
class Shadow:
    primary: Node
    mirrors: tuple[Mirror, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "shadow",
            "primary": self.primary.to_dict(),
            "mirrors": [{"name": m.name, "sample_percent": m.sample_percent, "target": m.node.to_dict()} for m in self.mirrors],
        }


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    node: Node
    weight: float = 1.0
    timeout_ms: float | None = None


@dataclass(frozen=True, slots=True)
class Ensemble:
    members: tuple[Member, ...]
    aggregator: str
    min_members: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": "ensemble",
            "aggregator": self.aggregator,
            "members": [
                {"name": m.name, "weight": m.weight, "target": m.node.to_dict(), **({"timeout_ms": m.timeout_ms} if m.timeout_ms else {})}
                for m in self.members
            ],
        }
        if self.min_members is not None:
            data["min_members"] = self.min_members
        return data


Node = Single | Ref | Split | Shadow | Ensemble


def _number(data: dict[str, Any], key: str, *, field: str, low: float, high: float | None = None, default: float | None = None) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low or (high is not None and value > high):
        bound = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
        raise BadRequest(f"{key} must be a number {bound}", field=f"{field}.{key}")
    return float(value)


def _children(data: dict[str, Any], key: str, *, field: str) -> list[dict[str, Any]]:
    items = data.get(key)
    if not isinstance(items, list) or not items:
        raise BadRequest(f"{key} must be a non-empty list", field=f"{field}.{key}")
    if len(items) > MAX_CHILDREN:
        raise BadRequest(f"at most {MAX_CHILDREN} {key}", field=f"{field}.{key}")
    names: set[str] = set()
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise BadRequest(f"each of {key} is an object", field=f"{field}.{key}.{i}")
        name = check_name(item.get("name"), field=f"{field}.{key}.{i}.name")
        if name in names:
            raise BadRequest(f"name '{name}' is used twice", field=f"{field}.{key}.{i}.name")
        names.add(name)
    return items


def _target(item: dict[str, Any], *, field: str, depth: int) -> Node:
    if "target" not in item:
        raise BadRequest("missing 'target' (a policy node)", field=f"{field}.target")
    return _parse(item["target"], field=f"{field}.target", depth=depth + 1)


def parse_policy(data: Any, *, field: str = "policy") -> Node:
    return _parse(data, field=field, depth=1)


def _parse(data: Any, *, field: str, depth: int) -> Node:
    if depth > MAX_DEPTH:
        raise BadRequest(f"policies nest at most {MAX_DEPTH} levels deep", field=field)
    if not isinstance(data, dict):
        raise BadRequest("a policy node is an object with a 'kind'", field=field)
    kind = data.get("kind", "single")
    if kind == "single":
        model = check_name(data.get("model"), field=f"{field}.model")
        version = data.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise BadRequest("version must be a positive integer", field=f"{field}.version")
        return Single(model, version)
    if kind == "ref":
        return Ref(check_name(data.get("deployment"), field=f"{field}.deployment"))
    if kind == "split":
        items = _children(data, "variants", field=field)
        variants = tuple(
            Variant(
                item["name"],
                _number(item, "weight", field=f"{field}.variants.{i}", low=0),
                _target(item, field=f"{field}.variants.{i}", depth=depth),
            )
            for i, item in enumerate(items)
        )
        if sum(v.weight for v in variants) <= 0:
            raise BadRequest("variant weights must add up to more than 0", field=f"{field}.variants")
        key = data.get("routing_key")
        if key is not None and (not isinstance(key, str) or not key or len(key) > 64):
            raise BadRequest("routing_key names a request field or header", field=f"{field}.routing_key")
        bandit = None
        if data.get("bandit") is not None:
            spec = data["bandit"]
            if not isinstance(spec, dict) or spec.get("algorithm") not in BANDITS:
                raise BadRequest(f"bandit.algorithm must be one of {list(BANDITS)}", field=f"{field}.bandit.algorithm")
            bandit = Bandit(spec["algorithm"], _number(spec, "epsilon", field=f"{field}.bandit", low=0, high=1, default=0.1))
            if key is not None:
                raise BadRequest("a bandit split cannot also be sticky", field=f"{field}.routing_key")
        return Split(variants, key, bandit)
    if kind == "shadow":
        primary = _parse(data.get("primary"), field=f"{field}.primary", depth=depth + 1)
        items = _children(data, "mirrors", field=field)
        mirrors = tuple(
            Mirror(
                item["name"],
                _target(item, field=f"{field}.mirrors.{i}", depth=depth),
                _number(item, "sample_percent", field=f"{field}.mirrors.{i}", low=0, high=100, default=100.0),
            )
            for i, item in enumerate(items)
        )
        return Shadow(primary, mirrors)
    if kind == "ensemble":
        items = _children(data, "members", field=field)
        aggregator = data.get("aggregator")
        if aggregator not in AGGREGATORS:
            raise BadRequest(f"aggregator must be one of {list(AGGREGATORS)}", field=f"{field}.aggregator")
        members = tuple(
            Member(
                item["name"],
                _target(item, field=f"{field}.members.{i}", depth=depth),
                _number(item, "weight", field=f"{field}.members.{i}", low=0, default=1.0),
                _number(item, "timeout_ms", field=f"{field}.members.{i}", low=1) if item.get("timeout_ms") is not None else None,
            )
            for i, item in enumerate(items)
        )
        min_members = data.get("min_members")
        if min_members is not None and (
            isinstance(min_members, bool) or not isinstance(min_members, int) or not 1 <= min_members <= len(members)
        ):
            raise BadRequest(f"min_members must be between 1 and {len(members)}", field=f"{field}.min_members")
        return Ensemble(members, aggregator, min_members)
    raise BadRequest(f"unknown policy kind {kind!r}; expected single, split, shadow, ensemble or ref", field=f"{field}.kind")


def walk(node: Node) -> list[Node]:
    """Every node of the tree, parents first."""
    out: list[Node] = [node]
    if isinstance(node, Split):
        for v in node.variants:
            out += walk(v.node)
    elif isinstance(node, Shadow):
        out += walk(node.primary)
        for m in node.mirrors:
            out += walk(m.node)
    elif isinstance(node, Ensemble):
        for member in node.members:
            out += walk(member.node)
    return out


def referenced_versions(node: Node) -> list[Target]:
    """Every model version the policy names directly (not through references)."""
    return [Target(n.model, n.version) for n in walk(node) if isinstance(n, Single)]


def referenced_deployments(node: Node) -> list[str]:
    return [n.deployment for n in walk(node) if isinstance(n, Ref)]


def primary_single(node: Node, resolve_ref: Any = None) -> Single | None:
    """The version whose signature describes the node's input and answer: a single, a shadow's
    primary, a split's first variant, an ensemble's first member."""
    if isinstance(node, Single):
        return node
    if isinstance(node, Ref):
        return primary_single(resolve_ref(node.deployment), resolve_ref) if resolve_ref else None
    if isinstance(node, Split):
        return primary_single(node.variants[0].node, resolve_ref)
    if isinstance(node, Shadow):
        return primary_single(node.primary, resolve_ref)
    return primary_single(node.members[0].node, resolve_ref)
