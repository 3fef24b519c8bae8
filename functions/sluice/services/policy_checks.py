"""A deployment's policy checked against what it reaches in the registry: references
resolve and nest at most MAX_GRAPH_DEPTH deep without a cycle, function and lookup steps are
the tenant's to run, inputs agree across branches, an ensemble's answers fit its aggregator,
a cached route is deterministic; and the deployments that reach a changed one still hold.

Each deployment the checks read is read once (`_Reads`) and handed back, for the write to
rest on (`refs_read`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sluice.domain.capture import check_redacted
from sluice.domain.errors import BadRequest, InvalidRequest, Unprocessable
from sluice.domain.functions import Function
from sluice.domain.lookups import Lookup
from sluice.domain.objects import check_policy_size
from sluice.domain.parts import HEADER_NAME
from sluice.domain.policy import (
    Ensemble,
    Ref,
    Shadow,
    Single,
    Split,
    parse_policy,
    policy_dict,
    primary_single,
    referenced_deployments,
    uncacheable,
    walk,
)
from sluice.domain.signature import Signature
from sluice.domain.transforms import Transform
from sluice.registry.guards import MAX_REFS_READ
from sluice.routing.aggregators import check_fits
from sluice.services.graph_checks import GraphChecks, fields_of, leading_transform
from sluice.services.models import require_found
from sluice.services.precomputed_checks import check_tables
from sluice.services.written_bounds import check_written

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from sluice.domain import CacheSettings, Deployment
    from sluice.domain.capture import CaptureSettings
    from sluice.domain.policy import Node
    from sluice.domain.signature import TensorSpec
    from sluice.registry import Registry
    from sluice.registry.precomputed import PrecomputedStore
    from sluice.runtimes.functions import FunctionSteps
    from sluice.runtimes.lookups import LookupSteps

MAX_GRAPH_DEPTH = 8
MAX_GRAPH_CALLS = 1024  # calls (models, functions, lookups, tables) one request may make, its worst case


def calls_of(node: Node, through: Callable[[str], int]) -> int:
    """The most calls one request makes through `node`: a split's or a switch's one branch (the
    costliest), every member, step and mirror of the others, a reference's deployment's
    (`through`), one for each node that calls something."""
    kind = node.kind
    if kind == "ref":
        return through(node.deployment)  # type: ignore[attr-defined]
    children = node.children()
    if kind in ("split", "switch"):
        return max((calls_of(c, through) for c in children), default=0)
    own = 1 if kind in ("single", "function", "lookup", "precomputed") else 0
    return own + sum(calls_of(c, through) for c in children)


class _Reads:
    """The deployments a policy's checks read, each read once (every check sees the same
    one), for the write to rest on."""

    def __init__(self, registry: Registry, tenant: str) -> None:
        self.registry = registry
        self.tenant = tenant
        self.found: dict[str, Deployment] = {}

    def __call__(self, name: str) -> Deployment:
        if name not in self.found:
            if len(self.found) >= MAX_REFS_READ:
                raise Unprocessable(f"policy reaches more than {MAX_REFS_READ} deployments", field="policy")
            self.found[name] = require_found(self.registry.get_deployment, self.tenant, name, field="policy")
        return self.found[name]


def _resolver(read: _Reads, nodes: dict[str, Node]) -> Callable[[str], Node]:
    """A deployment's policy by name, parsed once (`nodes`: those known already)."""

    def resolve(ref: str) -> Node:
        if ref not in nodes:
            nodes[ref] = parse_policy(read(ref).policy)
        return nodes[ref]

    return resolve


class PolicyChecks:
    """The checks a deployment's policy passes before it is written, made on the registry as
    it is now. `functions`, `lookup_steps`, `precomputed`: as `DeploymentService` holds them."""

    def __init__(
        self,
        registry: Registry,
        functions: FunctionSteps | None = None,
        lookup_steps: LookupSteps | None = None,
        precomputed: PrecomputedStore | None = None,
    ) -> None:
        self.registry = registry
        self.functions = functions
        self.lookup_steps = lookup_steps
        self.precomputed = precomputed

    def validated(
        self,
        tenant: str,
        name: str,
        policy: Any,
        cache: CacheSettings | None = None,
        capture: CaptureSettings | None = None,
        kept_with: dict[str, Any] | None = None,
        *,
        stored: dict[str, Any] | None = None,
    ) -> tuple[dict[str, Any], list[Deployment]]:
        """The policy, checked (with the capture settings it must fit: `kept_with`, the stored
        policy they were kept with, or None for settings given now), and the other
        deployments the checks read. `stored`: the deployment's policy now, whose values past a
        bound written since stay allowed (`sluice.services.written_bounds`)."""
        node = parse_policy(policy)
        check_written(node, stored)
        checked_form = policy_dict(node)
        _refuse_reserved_variant_names(checked_form, stored)
        _refuse_transform_faults(checked_form, stored)
        self._check_functions(tenant, node)
        read = _Reads(self.registry, tenant)
        self._check_graph(tenant, name, node, read, capture, kept_with)
        if cache is not None:
            self._check_cacheable(node, read)
        checked = policy_dict(node)
        check_policy_size(checked)
        return checked, list(read.found.values())

    def _check_functions(self, tenant: str, node: Node) -> None:
        """Each function step names a function its tenant may run, each lookup a store it may
        read (checked again on every call)."""
        for field, child in fields_of(node):
            if isinstance(child, Function):
                refused = "function steps are not served here" if self.functions is None else self.functions.refusal(child, tenant)
                if refused is None and self.functions is not None:
                    refused = self.functions.unknown_callable(child, tenant)
                if refused is not None:
                    raise Unprocessable(refused, field=f"{field}.function")
            elif isinstance(child, Lookup):
                refused = "lookup steps are not served here" if self.lookup_steps is None else self.lookup_steps.refusal(child, tenant)
                if refused is not None:
                    raise Unprocessable(refused, field=f"{field}.table")

    def _check_cacheable(self, node: Node, read: _Reads) -> None:
        """A cached deployment's route must be deterministic, through its references too."""
        seen: set[str] = set()
        pending: list[tuple[str | None, Node]] = [(None, node)]
        while pending:
            ref_name, current = pending.pop()
            found = uncacheable(current)
            if found is not None:
                field, reason = found
                if ref_name is not None:  # the fault is in another deployment's policy
                    field, reason = "policy", f"referenced deployment '{ref_name}' ({field}): {reason}"
                raise Unprocessable(f"cache is on: {reason}", field=field)
            for ref in referenced_deployments(current):
                if ref not in seen:
                    seen.add(ref)
                    pending.append((ref, parse_policy(read(ref).policy)))

    def _check_graph(
        self, tenant: str, name: str, node: Node, read: _Reads, capture: CaptureSettings | None = None, kept_with: dict[str, Any] | None = None
    ) -> None:
        resolve = _resolver(read, {name: node})
        # Each deployment walked once (how deep references go below it, and how many calls a
        # request makes through it at most), however many paths reach it: walked once per path,
        # 16 ensembles of 16 references three deep took 35 s to save.
        below: dict[str, tuple[int, int]] = {}

        def visit(current: str, path: list[str]) -> tuple[int, int]:
            found = below.get(current)
            if found is not None:
                return found
            if len(path) > MAX_GRAPH_DEPTH:
                raise Unprocessable(f"deployment references nest more than {MAX_GRAPH_DEPTH} deep", field="policy")
            height = 1
            for child in walk(resolve(current)):
                if isinstance(child, Ref):
                    if child.deployment in path:
                        cycle = " -> ".join([*path, child.deployment])
                        raise Unprocessable(f"policy makes a cycle: {cycle}", field="policy")
                    height = max(height, 1 + visit(child.deployment, [*path, child.deployment])[0])
            if len(path) - 1 + height > MAX_GRAPH_DEPTH:
                raise Unprocessable(f"deployment references nest more than {MAX_GRAPH_DEPTH} deep", field="policy")
            below[current] = (height, calls_of(resolve(current), lambda ref: below[ref][1]))
            return below[current]

        calls = visit(name, [name])[1]
        if calls > MAX_GRAPH_CALLS:
            raise Unprocessable(
                f"a request would make up to {calls} calls through this policy (its ensembles, sequences and shadows, "
                f"through its references), past the {MAX_GRAPH_CALLS} one request may make",
                field="policy",
            )
        signature_of = self._signature_resolver(tenant, resolve)
        before = None if kept_with is None else lambda: self._stored_inputs(tenant, kept_with)
        check_redacted(capture, signature_of(node).inputs, before=before)  # named as callers name them (a leading step's)
        for child in walk(node):
            if isinstance(child, Single):
                require_found(self.registry.get_version, tenant, child.model, child.version, field="policy")
        graphs = GraphChecks(signature_of, resolve)
        graphs.check(node)
        check_tables(node, graphs, self.precomputed, tenant)
        for where, child in fields_of(node):  # each named by its field: `policy.variants.1.target.aggregator`
            first_inputs = signature_of(child).inputs  # a sequence's later steps take other inputs than the policy
            branches: list[tuple[str, str, Node]] = []
            if isinstance(child, Split):
                if child.routing_key is not None and not re.fullmatch(HEADER_NAME, child.routing_key):
                    # Checked as a policy is saved, not as one stored is read: a key the body
                    # gives (`routing_key`) routes by any name, and such a split keeps doing so.
                    raise Unprocessable(
                        f"routing_key {child.routing_key!r} is no header name (letters, digits and !#$%&'*+.^_`|~- alone, "
                        "at most 64): no client could send it as one",
                        field=f"{where}.routing_key",
                    )
                branches = [(f"{where}.variants.{i}.target", f"variant '{v.name}'", v.target) for i, v in enumerate(child.variants)]
            elif isinstance(child, Shadow):
                branches = [(f"{where}.mirrors.{i}.target", f"mirror '{m.name}'", m.target) for i, m in enumerate(child.mirrors)]
            elif isinstance(child, Ensemble):
                branches = [(f"{where}.members.{i}.target", f"member '{m.name}'", m.target) for i, m in enumerate(child.members)]
                problem = check_fits(child.aggregator, [graphs.answers(m.target) for m in child.members])
                if problem:
                    raise Unprocessable(f"aggregator '{child.aggregator}' does not fit: {problem}", field=f"{where}.aggregator")
            for field, label, branch in branches:
                if signature_of(branch).inputs != first_inputs:
                    raise Unprocessable(f"{label} takes different inputs from the rest of the policy", field=field)

    def dependents(self, tenant: str, name: str) -> list[Deployment]:
        """The tenant's deployments whose policies reach `name` through references, directly
        or through others."""
        deployments = {d.name: d for d in self.registry.list_deployments(tenant)}
        refs = {n: set(referenced_deployments(parse_policy(d.policy))) for n, d in deployments.items() if n != name}
        found: set[str] = set()
        pending = [name]
        while pending:
            target = pending.pop()
            for other, reached in refs.items():
                if target in reached and other not in found:
                    found.add(other)
                    pending.append(other)
        return [deployments[n] for n in sorted(found)]

    def check_dependents(self, tenant: str, changed: Deployment) -> None:
        """The checks each deployment that reaches `changed` passed when it was saved (inputs
        agree, answers fit, a cached route stays deterministic) made again on `changed`'s new
        policy: a change that would break one is refused, naming it."""
        for dependent in self.dependents(tenant, changed.name):
            read = _Reads(self.registry, tenant)
            read.found[changed.name] = changed
            node = parse_policy(dependent.policy)
            try:
                self._check_graph(tenant, dependent.name, node, read, dependent.capture, dependent.policy)
                if dependent.cache is not None:
                    self._check_cacheable(node, read)
            except (Unprocessable, BadRequest) as exc:
                raise Unprocessable(
                    f"deployment '{dependent.name}' references '{changed.name}' and would not hold with this policy: {exc.message}", field="policy"
                ) from None

    def _stored_inputs(self, tenant: str, policy: dict[str, Any]) -> tuple[TensorSpec, ...]:
        """The inputs `policy` takes through the deployments it reaches as they are stored
        (before the change being checked)."""
        resolve = _resolver(_Reads(self.registry, tenant), {})
        return self._signature_resolver(tenant, resolve)(parse_policy(policy)).inputs

    def _signature_resolver(self, tenant: str, resolve: Callable[[str], Node]) -> Callable[[Node], Signature]:
        def signature_of(node: Node) -> Signature:
            if isinstance(node, Transform | Lookup):  # a sequence's step: what it declares (a later one takes what comes)
                return Signature(node.input_specs(), ())
            if isinstance(node, Function):
                return node.signature
            first = primary_single(node, resolve)
            assert first is not None
            signature = require_found(self.registry.get_version, tenant, first.model, first.version, field="policy").signature
            leading = leading_transform(node, resolve)
            return signature if leading is None else Signature(leading.input_specs(), signature.outputs, signature.metadata)

        return signature_of


def _outermost(policy: Any, kind: str, field: str = "policy") -> Iterator[tuple[dict[str, Any], str]]:
    """Each node of `kind` in a policy's dict form that no node of that kind holds, with its
    field (the walk does not go into one it yields)."""
    if isinstance(policy, dict):
        if policy.get("kind") == kind:
            yield policy, field
            return
        for key, value in policy.items():
            yield from _outermost(value, kind, f"{field}.{key}")
    elif isinstance(policy, list):
        for i, value in enumerate(policy):
            yield from _outermost(value, kind, f"{field}.{i}")


def _transform_fault(node: dict[str, Any], field: str) -> InvalidRequest | None:
    """What a transform cannot mean, that its schema lets through (checked where a policy is
    written, not read: a policy stored before keeps being read and served as it was)."""
    names = [spec.get("name") for spec in node.get("inputs") or () if isinstance(spec, dict)]
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:  # no request could give both
        return InvalidRequest(f"input '{twice}' is declared twice", field=f"{field}.inputs")
    for i, op in enumerate(node.get("ops") or ()):
        if not isinstance(op, dict):
            continue
        target = op.get("output") or op.get("input")
        if op.get("op") == "top_k" and op.get("indices") == target:  # the scores the signature says, the columns it would hold
            return InvalidRequest(f"top_k's indices name the tensor its values go to ('{target}'): give each its own name", field=f"{field}.ops.{i}.indices")
        if op.get("op") == "min_max":
            low, high = op.get("min"), op.get("max")
            lows, highs = (low if isinstance(low, list) else [low]), (high if isinstance(high, list) else [high])
            if len(lows) != len(highs) and 1 in (len(lows), len(highs)):  # one bound for every column against one a column
                pairs = [(lo, hi) for lo in lows for hi in highs]
                if any(isinstance(lo, int | float) and isinstance(hi, int | float) and hi <= lo for lo, hi in pairs):
                    return InvalidRequest("max must be above min, for every column", field=f"{field}.ops.{i}")
        if op.get("op") == "select":
            for j, column in enumerate(op.get("columns") or ()):
                if type(column) is int and column < 0:  # counted from the start, however many columns come
                    return InvalidRequest(f"a column is 0 or more, not {column}", field=f"{field}.ops.{i}.columns.{j}")
    return None


def _refuse_transform_faults(policy: dict[str, Any], stored: dict[str, Any] | None) -> None:
    """The first transform fault of a policy being written (`_transform_fault`), unless the
    stored policy holds the same transform (a policy stored before the rule keeps it)."""
    kept = [node for node, _ in _outermost(stored, "transform")] if stored is not None else []
    for node, field in _outermost(policy, "transform"):
        fault = _transform_fault(node, field)
        if fault is not None and node not in kept:
            raise fault


RESERVED_VARIANT = "default"  # monitoring's name for the traffic of a deployment without a split (`?variant=default`)


def _split_variants(policy: Any) -> Iterator[tuple[str, str]]:
    """The names of the split variants a request's answer is counted under unprefixed — those of
    any split not inside another split's variant (a nested split's are `outer/inner`): through
    shadows, switches, sequences, ensembles and precomputed nodes — in a policy's dict form,
    with the field that gives each."""
    for split, field in _outermost(policy, "split"):
        for i, variant in enumerate(split.get("variants") or ()):
            if isinstance(variant, dict):
                yield str(variant.get("name")), f"{field}.variants.{i}.name"


def _refuse_reserved_variant_names(policy: dict[str, Any], stored: dict[str, Any] | None) -> None:
    """A split variant may not be named `default`: monitoring names the traffic of a deployment
    without a split so, and the two would read as one (a policy stored with one keeps it)."""
    if stored is not None and any(name == RESERVED_VARIANT for name, _ in _split_variants(stored)):
        return  # stored with one where it counts: kept
    for name, field in _split_variants(policy):
        if name == RESERVED_VARIANT:
            raise InvalidRequest(
                f"a split's variant may not be named '{RESERVED_VARIANT}': monitoring reads the traffic of a deployment without a "
                "split by that name; choose another",
                field=field,
            )
