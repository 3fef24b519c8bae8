"""A deployment's policy: a small tree of nodes, one pydantic model per kind.

- `single`   one model version;
- `split`    weighted choice among named variants (A/B, canary), sticky by a routing key,
             optionally a bandit that moves weight by reward;
- `shadow`   a primary that answers and mirrors that see the same input off the request path;
- `ensemble` members called concurrently and aggregated;
- `ref`      another deployment of the same tenant;
- `sequence` steps run one after another, each one's outputs the next one's inputs;
- `switch`   cases by conditions on the request (`domain.conditions`), and a default;
- `transform` declarative ops on a request's tensors, a step of a sequence (`domain.transforms`);
- `function` the tenant's own code (a Lambda function, or locally a callable), a step of a
             sequence (`domain.functions`);
- `lookup`   features fetched by entity key from an online store, a step of a sequence
             (`domain.lookups`);
- `precomputed` answers a batch job published, by entity, and a live node for the rest
             (`domain.precomputed`).

The models are the schema: the API documents them (a discriminated union on `kind`) and
validates bodies with them. `parse_policy` adds the checks a field cannot make alone (weights
that add up, unique names, depth); checks that need the registry (versions exist, signatures
fit, references resolve without cycles) live in the deployments service.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cached_property
from typing import Annotated, Any, Literal, Union

from pydantic import (
    Discriminator,
    Field,
    StrictFloat,
    StrictInt,
    Tag,
    TypeAdapter,
    ValidationError,
)

from sluice.domain.conditions import TAGS, Condition
from sluice.domain.errors import InvalidRequest
from sluice.domain.functions import Function
from sluice.domain.graphs import STEPS_ONLY, check_graph_node, deterministic
from sluice.domain.graphs import unique_names as _unique
from sluice.domain.lookups import Lookup
from sluice.domain.parts import Part as _Part
from sluice.domain.policy_numbers import check_finite
from sluice.domain.precomputed import Precomputed
from sluice.domain.transforms import OPS, Transform
from sluice.domain.values import StrictVersionNumber

MAX_DEPTH = 4
MAX_CHILDREN = 16
MAX_WEIGHT = 1e9  # a weight's bound: any sum of them stays finite (1e308 twice is infinity)
# Checked where a policy is written (`DeploymentService`), not here: a policy stored before the
# bound still reads, serves and can be changed. The schema shows it all the same.
Weight = Annotated[StrictFloat, Field(ge=0, allow_inf_nan=False, json_schema_extra={"maximum": MAX_WEIGHT})]
AGGREGATORS = ("mean", "weighted_mean", "majority", "soft_vote", "max", "median", "first_success")
KINDS = ("single", "ref", "split", "shadow", "ensemble", "sequence", "switch", "transform", "function", "lookup", "precomputed")
MIN_STEPS, MAX_STEPS = 2, 15
NOT_FIELDS = frozenset((*KINDS, *TAGS, *OPS))  # union tags pydantic puts in an error's location
NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"

Name = Annotated[str, Field(pattern=NAME_PATTERN, description="1-63 characters of a-z, 0-9, '.', '_' or '-'.")]
Aggregator = Literal["mean", "weighted_mean", "majority", "soft_vote", "max", "median", "first_success"]


class _Node(_Part):
    """What every kind offers: its children, and the version whose signature describes its
    input and answer (`primary_single`: a single; otherwise, unless a kind says, its first
    child's: a shadow's primary, a split's first variant, an ensemble's first member, a
    switch's first case; through a reference only with a resolver)."""

    def children(self) -> list[Node]:
        return []

    def primary_single(self, resolve_ref: Callable[[str], Node] | None = None) -> Single | None:
        return self.children()[0].primary_single(resolve_ref)


class Single(_Node):
    kind: Literal["single"] = "single"
    model: Name
    version: StrictVersionNumber

    def primary_single(self, resolve_ref: Callable[[str], Node] | None = None) -> Single:
        return self

    @property
    def ref(self) -> str:
        return f"{self.model}:{self.version}"


class Ref(_Node):
    kind: Literal["ref"] = "ref"
    deployment: Name

    def primary_single(self, resolve_ref: Callable[[str], Node] | None = None) -> Single | None:
        return resolve_ref(self.deployment).primary_single(resolve_ref) if resolve_ref else None


class Variant(_Part):
    name: Name
    weight: Weight
    target: Node


class Bandit(_Part):
    algorithm: Literal["thompson", "epsilon_greedy"]
    epsilon: StrictFloat = Field(0.1, ge=0, le=1)


class Split(_Node):
    kind: Literal["split"] = "split"
    variants: tuple[Variant, ...] = Field(min_length=1, max_length=MAX_CHILDREN)
    routing_key: str | None = Field(
        None, min_length=1, max_length=64, description="A request field or header whose value makes routing sticky."
    )
    bandit: Bandit | None = None

    def children(self) -> list[Node]:
        return [v.target for v in self.variants]


class Mirror(_Part):
    name: Name
    target: Node
    sample_percent: StrictFloat = Field(100.0, ge=0, le=100)


class Shadow(_Node):
    kind: Literal["shadow"] = "shadow"
    primary: Node
    mirrors: tuple[Mirror, ...] = Field(min_length=1, max_length=MAX_CHILDREN)

    def children(self) -> list[Node]:
        return [self.primary, *(m.target for m in self.mirrors)]


class Member(_Part):
    name: Name
    target: Node
    weight: Weight = 1.0
    timeout_ms: StrictFloat | None = Field(None, ge=1, allow_inf_nan=False)


class Ensemble(_Node):
    kind: Literal["ensemble"] = "ensemble"
    members: tuple[Member, ...] = Field(min_length=1, max_length=MAX_CHILDREN)
    aggregator: Aggregator
    min_members: StrictInt | None = Field(None, ge=1)

    def children(self) -> list[Node]:
        return [m.target for m in self.members]


class Step(_Part):
    name: Name
    target: Node
    map: dict[str, str] | None = Field(
        None, description="{this step's input: the previous step's output}; inputs not named take the output of the same name."
    )


class Sequence(_Node):
    kind: Literal["sequence"] = "sequence"
    steps: tuple[Step, ...] = Field(min_length=MIN_STEPS, max_length=MAX_STEPS)
    expose: tuple[str, ...] | None = Field(
        None, max_length=MAX_CHILDREN, description="'step.output': intermediate outputs answered beside the last step's."
    )

    def children(self) -> list[Node]:
        return [s.target for s in self.steps]

    @cached_property
    def prepared(self) -> dict[Any, Any]:
        """What running it works out once rather than per request (`sluice.inference.sequences`)."""
        return {}

    def primary_single(self, resolve_ref: Callable[[str], Node] | None = None) -> Single | None:
        first_model = next(s.target for s in self.steps if s.target.kind not in STEPS_ONLY)  # a first transform has no version
        return first_model.primary_single(resolve_ref)


class Case(_Part):
    name: Name
    when: Condition
    target: Node


class Switch(_Node):
    kind: Literal["switch"] = "switch"
    cases: tuple[Case, ...] = Field(min_length=1, max_length=MAX_CHILDREN)
    default: Node

    def children(self) -> list[Node]:
        return [*(c.target for c in self.cases), self.default]


def _kind(value: Any) -> str | None:
    if isinstance(value, dict):
        kind = value.get("kind", "single")  # a bare {"model", "version"} is a single
        return kind if kind in KINDS else None
    return getattr(value, "kind", None)


Node = Annotated[
    Union[  # noqa: UP007  (a discriminated union needs the Union form for its tags)
        Annotated[Single, Tag("single")],
        Annotated[Ref, Tag("ref")],
        Annotated[Split, Tag("split")],
        Annotated[Shadow, Tag("shadow")],
        Annotated[Ensemble, Tag("ensemble")],
        Annotated[Sequence, Tag("sequence")],
        Annotated[Switch, Tag("switch")],
        Annotated[Transform, Tag("transform")],
        Annotated[Function, Tag("function")],
        Annotated[Lookup, Tag("lookup")],
        Annotated[Precomputed, Tag("precomputed")],
    ],
    Discriminator(
        _kind,
        custom_error_type="policy_kind",
        custom_error_message="unknown policy kind; expected single, split, shadow, ensemble, ref, sequence, switch, transform, function, lookup or precomputed",
    ),
]

for _model in (Single, Ref, Variant, Split, Mirror, Shadow, Member, Ensemble, Step, Sequence, Case, Switch):
    _model.model_rebuild()
Precomputed.model_rebuild(_types_namespace={"Node": Node})  # `live` is any node

NODE: TypeAdapter[Node] = TypeAdapter(Node)


def policy_field(loc: tuple[Any, ...] | list[Any], prefix: str = "policy", kind: str = "") -> str:
    """A pydantic error location as the API names fields: union tags left out (a name right
    after a tag is a field of the tagged part, as a function node's `function` is), and the
    labels pydantic gives the members of a plain union: `constrained-int` or `list[...]`
    anywhere, and a type's name (`int`, `bool`) last where the error (`kind`, its type) is
    that type's (a map's key named `int` whose value is wrong stays: its error is another's)."""
    parts = [prefix] if prefix else []
    after_tag = False
    last = len(loc) - 1
    for i, p in enumerate(loc):
        after_tag = p in NOT_FIELDS and not after_tag
        if after_tag or type(p) is not str:
            if not after_tag:
                parts.append(str(p))
            continue
        keyed = i > 0 and loc[i - 1] in KEYED  # a key of a mapping the policy gives: a field, whatever its spelling
        if not keyed and (UNION_MEMBER.fullmatch(p) or (i == last and kind.startswith(TYPE_ERRORS.get(p, ("\0",))))):
            continue
        parts.append(p)
    return ".".join(parts)


KEYED = frozenset(("map", "keys"))  # the policy's mappings (a step's `map`, a lookup's `keys`)
UNION_MEMBER = re.compile(r"constrained-[a-z]+|[a-z-]+\[.*\]")  # pydantic's labels of a union's members
TYPE_ERRORS = {  # a union member labelled by its type's name, and the errors of that type
    "bool": ("bool_",), "int": ("int_",), "float": ("float_", "finite_number"), "str": ("string_",), "bytes": ("bytes_",), "none": ("none_required",),
}  # fmt: skip


def parse_policy(data: Any, *, field: str = "policy") -> Node:
    """Validate a policy (a dict, or a node already built) and check what no field can alone."""
    check_finite(data, field=field)
    try:
        node = NODE.validate_python(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = tuple(first["loc"])
        if first["type"] == "policy_kind" and isinstance(first.get("input"), dict):
            loc = (*loc, "kind")
        named = policy_field(loc, field, first["type"])
        raise InvalidRequest(f"{named}: {first['msg']}", field=named) from None
    check_tree(node, field=field)
    return node


def check_tree(node: Node, *, field: str = "policy", depth: int = 1) -> None:
    if depth > MAX_DEPTH:
        raise InvalidRequest(f"policies nest at most {MAX_DEPTH} levels deep", field=field)
    if isinstance(node, Split):
        _unique([v.name for v in node.variants], f"{field}.variants")
        if sum(v.weight for v in node.variants) <= 0:
            raise InvalidRequest("variant weights must add up to more than 0", field=f"{field}.variants")
        if node.bandit is not None and node.routing_key is not None:
            raise InvalidRequest("a bandit split cannot also be sticky", field=f"{field}.routing_key")
        for i, v in enumerate(node.variants):
            check_tree(v.target, field=f"{field}.variants.{i}.target", depth=depth + 1)
    elif isinstance(node, Shadow):
        _unique([m.name for m in node.mirrors], f"{field}.mirrors")
        check_tree(node.primary, field=f"{field}.primary", depth=depth + 1)
        for i, m in enumerate(node.mirrors):
            check_tree(m.target, field=f"{field}.mirrors.{i}.target", depth=depth + 1)
    elif isinstance(node, Ensemble):
        _unique([m.name for m in node.members], f"{field}.members")
        if node.min_members is not None and node.min_members > len(node.members):
            raise InvalidRequest(f"min_members must be between 1 and {len(node.members)}", field=f"{field}.min_members")
        for i, m in enumerate(node.members):
            check_tree(m.target, field=f"{field}.members.{i}.target", depth=depth + 1)
    elif isinstance(node, Sequence | Switch):
        for child_field, child in check_graph_node(node, field=field):
            check_tree(child, field=child_field, depth=depth + 1)
    elif isinstance(node, Precomputed):
        check_tree(node.live, field=f"{field}.live", depth=depth + 1)
    elif isinstance(node, Transform | Function | Lookup):
        raise InvalidRequest(f"a {node.kind} runs as a step of a sequence (before or after a model)", field=field)


def policy_dict(node: Node) -> dict[str, Any]:
    """The stored (JSON) form of a policy."""
    return NODE.dump_python(node, mode="json")


def first_branch(node: Node) -> Node:
    """The child whose version describes a node (not a sequence's leading transforms)."""
    if isinstance(node, Sequence):
        return next(s.target for s in node.steps if s.target.kind not in STEPS_ONLY)
    return node.children()[0]


def walk(node: Node, *, mirrors: bool = True) -> list[Node]:
    """Every node of the tree, parents first; `mirrors=False`: but a shadow's mirrors (the
    nodes that may answer)."""
    out: list[Node] = [node]
    for child in node.children() if mirrors or not isinstance(node, Shadow) else [node.primary]:
        out += walk(child, mirrors=mirrors)
    return out


def referenced_versions(node: Node) -> list[Single]:
    """Every model version the policy names directly (not through references)."""
    return [n for n in walk(node) if n.kind == "single"]  # type: ignore[misc]


def referenced_deployments(node: Node) -> list[str]:
    return [n.deployment for n in walk(node) if isinstance(n, Ref)]


def single_policy(model: str, version: int) -> dict[str, Any]:
    return {"kind": "single", "model": model, "version": version}


def primary_single(node: Node, resolve_ref: Callable[[str], Node] | None = None) -> Single | None:
    return node.primary_single(resolve_ref)


def uncacheable(node: Node, *, field: str = "policy") -> tuple[str, str] | None:
    """Where a policy stops being deterministic, as (field, reason), or None when the same
    input always gets the same answer (references not followed). A cached answer is only
    right for a route that would give it again: a split picked at random or by a bandit, or an
    ensemble whose answer depends on which members answer first, would not."""
    if isinstance(node, Split):
        live = [v for v in node.variants if v.weight > 0]
        if node.bandit is not None:
            return f"{field}.bandit", "a bandit split picks a variant by reward, so its answers cannot be cached"
        if node.routing_key is None and len(live) > 1:
            return (
                f"{field}.routing_key",
                "a split without a routing_key picks a variant at random, so its answers cannot be cached; "
                "give it a routing_key (sticky routing) or turn the cache off",
            )
        children = [(f"{field}.variants.{i}.target", v.target) for i, v in enumerate(node.variants)]
    elif isinstance(node, Ensemble):
        if node.aggregator == "first_success":
            return f"{field}.aggregator", "a first_success (hedged) ensemble answers with whichever member is fastest, so its answers cannot be cached"
        if node.min_members is not None and node.min_members < len(node.members):
            return f"{field}.min_members", "an ensemble that answers without all its members depends on which answer in time, so its answers cannot be cached"
        children = [(f"{field}.members.{i}.target", m.target) for i, m in enumerate(node.members)]
    elif isinstance(node, Shadow):
        children = [(f"{field}.primary", node.primary)]  # mirrors never change the answer
    elif isinstance(node, Precomputed):
        return field, "a precomputed node's answers change with each publication, so they are not cached; turn the cache off"
    elif isinstance(node, Single | Ref):
        return None
    else:  # a graph node (a sequence, a switch, a step): each step and case, then the node itself
        children = graph_fields(node, field)
    for child_field, child in children:
        found = uncacheable(child, field=child_field)
        if found is not None:
            return found
    if not isinstance(node, Split | Ensemble | Shadow) and not deterministic(node):
        return field, f"{node.kind} step is not deterministic (the same request may get another answer), so its answers cannot be cached"
    return None


def graph_fields(node: Node, field: str) -> list[tuple[str, Node]]:
    """A graph node's children with their fields: a sequence's steps, a switch's cases and default."""
    if isinstance(node, Sequence):
        return [(f"{field}.steps.{i}.target", s.target) for i, s in enumerate(node.steps)]
    if isinstance(node, Switch):
        return [*((f"{field}.cases.{i}.target", c.target) for i, c in enumerate(node.cases)), (f"{field}.default", node.default)]
    return []
