"""The paths of a policy's nodes: what a deployment's statistics count each variant, mirror,
member, case and step under, and what a bandit's assignment names (`subject_at`), found by
walking the tree as a request runs it (`walk_paths`); and the path a bare variant name stored by
earlier releases meant (`legacy_bandit_subject`). The node types themselves and their parsing
live in `sluice.domain.policy`."""

from __future__ import annotations

from sluice.domain.graphs import DEFAULT_CASE
from sluice.domain.policy import Ensemble, Node, Sequence, Shadow, Split, Switch


def subject_at(path: str, name: str) -> str:
    """`name` (a split's variant, a shadow's mirror, an ensemble's member, a switch's case, a
    sequence's step, a reference's `@deployment`) at `path` in the policy: what a deployment's
    statistics count it under and what a bandit's assignment names. A node of the top keeps its
    own name (a top-level split's variant `a`: `a`, as always); one nested in another carries
    the names of the branches above it (`m1/a`: variant `a` of the split in member `m1`), so
    two branches' nodes of one name never count together."""
    return f"{path}/{name}" if path else name


def walk_paths(node: Node, path: str = "") -> list[tuple[str, Node]]:
    """Every node of the tree with the path a request's walk runs it at, parents first: each
    variant, mirror, member, case (`default` for a switch's default) and step adds its name
    (`subject_at`); a shadow's primary and a precomputed node's live one run at their parent's
    path. References are not followed (a referenced deployment's nodes run under `@name`)."""
    out: list[tuple[str, Node]] = [(path, node)]
    named: list[tuple[str | None, Node]]
    if isinstance(node, Split):
        named = [(v.name, v.target) for v in node.variants]
    elif isinstance(node, Shadow):
        named = [(None, node.primary), *((m.name, m.target) for m in node.mirrors)]
    elif isinstance(node, Ensemble):
        named = [(m.name, m.target) for m in node.members]
    elif isinstance(node, Sequence):
        named = [(s.name, s.target) for s in node.steps]
    elif isinstance(node, Switch):
        named = [*((c.name, c.target) for c in node.cases), (DEFAULT_CASE, node.default)]
    else:
        named = [(None, child) for child in node.children()]
    for name, child in named:
        out += walk_paths(child, path if name is None else subject_at(path, name))
    return out


def legacy_bandit_subject(node: Node, name: str) -> str | None:
    """The path (`subject_at`) that a bare variant `name` in a bandit's rewards or assignment,
    stored by releases that counted a nested split's variants by their own names, meant: the
    variant `name` of the policy's one bandit split, when that split is nested. None when the
    bandit is at the top (its variants keep their names), when the policy holds several bandits
    (whose rewards those releases could not tell apart: they start afresh) or none, or when
    the bandit has no variant `name`."""
    bandits = [(path, n) for path, n in walk_paths(node) if isinstance(n, Split) and n.bandit is not None]
    if len(bandits) != 1:
        return None
    path, split = bandits[0]
    return subject_at(path, name) if path and any(v.name == name for v in split.variants) else None


def within_deployment(path: str) -> str:
    """`path` from the deployment whose policy the walk is in: past the last reference followed
    (`m1/@fraud/a` -> `a`), so a referenced deployment's nodes are where they are in it, as
    asked directly."""
    segments = path.split("/") if path else []
    last = max((i for i, segment in enumerate(segments) if segment.startswith("@")), default=-1)
    return "/".join(segments[last + 1 :])
