"""A deployment's statistics as the API and `sluice deployments stats` show them: the whole
deployment, each split's variants (with their rewards), each shadow's mirrors (with how they
compare), each switch's cases (with the rows they took) and each sequence's steps (a cached
lookup's with its cache hits and misses, in rows), in the policy's order; a precomputed node's rows by source, and the share answered live.

Each is named by its path in the policy (`sluice.domain.policy_paths.subject_at`): a node of the
top by its own name (`a`), one nested in another with the branches above it (`m1/a`: variant
`a` of the split in ensemble member `m1`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.domain.graphs import DEFAULT_CASE
from sluice.domain.policy import Sequence, Split, Switch
from sluice.domain.policy_paths import subject_at, walk_paths
from sluice.stats.verdicts import comparison, fallback_rate, merged, traffic

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sluice.domain.policy import Node


def deployment_stats(name: str, revision: int, counters: Mapping[str, Mapping[str, float]], policy: Node) -> dict[str, Any]:
    """The counters of one revision (`subject -> counter -> value`) as the statistics read."""
    overall = counters.get("deployment", {})
    variants: dict[str, Any] = {}
    mirrors: dict[str, Any] = {}
    graph: dict[str, dict[str, Any]] = {"cases": {}, "steps": {}}  # a switch's cases, a sequence's steps
    sources: dict[str, Any] = {}
    for subject, c in sorted(_with_legacy(counters, policy).items()):
        kind, _, label = subject.partition(":")
        if kind == "variant":
            variants[label] = {**traffic(c), **_reward(c)}
        elif kind == "mirror":
            mirrors[label] = {**traffic(c), **comparison(c)}
        elif kind == "case":  # the rows it took too: rows of one request may take different cases
            graph["cases"][label] = {**traffic(c), "rows": int(c.get("rows", 0))}
        elif kind == "step":  # a cached lookup's rows answered from its feature cache, and those read
            graph["steps"][label] = {**traffic(c), **_cache(c)}
        elif kind == "source":  # a precomputed node's rows, by where their answers came from
            sources[label] = {**traffic(c), "rows": int(c.get("rows", 0)), **{k: int(c[k]) for k in ("stale", "missing", "unfit") if k in c}}
    if any(graph.values()):  # in the policy's order: a sequence's steps as they run
        order: dict[str, int] = {}
        for subject in _graph_subjects(policy):
            order.setdefault(subject, len(order))
        graph = {
            kind: dict(sorted(found.items(), key=lambda item, k=kind[:-1]: order.get(f"{k}:{item[0]}", len(order))))
            for kind, found in graph.items()
        }
    return {
        "deployment": name,
        "revision": revision,
        "overall": {**traffic(overall), **_cache(overall)},  # a prediction cache's hits and misses, where it is on
        "variants": variants,
        "mirrors": mirrors,
        **{kind: found for kind, found in graph.items() if found},
        **({"sources": sources, **fallback_rate(sources)} if sources else {}),
    }


def _with_legacy(counters: Mapping[str, Mapping[str, float]], policy: Node) -> dict[str, Mapping[str, float]]:
    """`counters`, with those that releases which counted nested nodes by their own names
    stored (`variant:a`, `case:low`, `step:score`) merged into the one nested node of that kind
    and name the policy holds (`variant:eu/embed/a`); a name the top holds, or several nested
    nodes do, stays as it was stored."""
    nested: dict[str, list[str]] = {}
    for subject in _nested_subjects(policy):
        kind, _, path = subject.partition(":")
        nested.setdefault(f"{kind}:{path.rpartition('/')[2]}", []).append(subject)
    out: dict[str, Mapping[str, float]] = dict(counters)
    for bare, found in nested.items():
        if len(found) == 1 and found[0] != bare and bare in out:
            out[found[0]] = merged(out.get(found[0], {}), out.pop(bare))
    return out


def _nested_subjects(node: Node) -> list[str]:
    """Every variant, case and step of the policy by its path (`walk_paths`), as counted."""
    out = _graph_subjects(node)
    for path, n in walk_paths(node):
        if isinstance(n, Split):
            out += [f"variant:{subject_at(path, v.name)}" for v in n.variants]
    return out


def _graph_subjects(node: Node) -> list[str]:
    """Each sequence's step (`step:<path>`) and each switch's case (`case:<path>`, then its
    default's), in the policy's order; each by its path (`walk_paths`), as it is counted."""
    out: list[str] = []
    for path, n in walk_paths(node):
        if isinstance(n, Sequence):
            out += [f"step:{subject_at(path, s.name)}" for s in n.steps]
        elif isinstance(n, Switch):
            out += [*(f"case:{subject_at(path, c.name)}" for c in n.cases), f"case:{subject_at(path, DEFAULT_CASE)}"]
    return out


def _cache(counters: Mapping[str, float]) -> dict[str, Any]:
    if "cache_hits" not in counters and "cache_misses" not in counters:
        return {}
    hits, misses = int(counters.get("cache_hits", 0)), int(counters.get("cache_misses", 0))
    return {"cache_hits": hits, "cache_misses": misses, "cache_hit_rate": round(hits / (hits + misses), 6) if hits + misses else None}


def _reward(counters: Mapping[str, float]) -> dict[str, Any]:
    n = counters.get("reward_n", 0)
    return {"rewards": int(n), "mean_reward": round(counters.get("reward_sum", 0) / n, 6)} if n else {}
