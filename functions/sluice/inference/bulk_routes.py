"""The routes records take through the bulk call (`inference.bulk.score_many`): each record
goes the way it would go alone, so records are grouped by a variant asked for, or by a sticky
split's routing key, hashed here as the split would hash it (or by the key itself, where a
split further down or a switch reads it)."""

from __future__ import annotations

from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.domain.graphs import reads_routing_key
from sluice.domain.policy import walk
from sluice.routing.choose import sticky_pick

if TYPE_CHECKING:
    from sluice.domain.policy import Node, Split
    from sluice.inference.bulk import Records
    from sluice.inference.selections import Selection


def sticky_fields(nodes: list[Node]) -> tuple[str, ...]:
    """The record fields the sticky splits among `nodes` (a policy's, through the deployments it
    references: `references.walk_through`) read their routing keys from, the headers they name:
    a reader takes them from each record beside `routing_key`."""
    return tuple(dict.fromkeys(n.routing_key for n in nodes if n.kind == "split" and n.routing_key))  # type: ignore[union-attr]


def _sticky_split(node: Node) -> Split | bool | None:
    """The top split when it alone routes by key, nothing below it splitting (records are
    grouped by the variant each would get alone, asked for by name); False when a split further
    down routes too (the variant's name would be asked of it as well, and a keyed one draws by
    its own place: `sticky_pick`), a reference may lead to one, or a switch's condition reads
    the key (records are grouped by the key itself, each group walked as a request with it is);
    None when nothing routes by key."""
    nodes = walk(node)
    split_below = any(n is not node and n.kind == "split" for n in nodes) or any(n.kind == "ref" for n in nodes)
    if node.kind == "split" and node.routing_key and node.bandit is None and not split_below and not reads_routing_key(node):  # type: ignore[union-attr]
        return node  # type: ignore[return-value]
    if any(n.kind == "split" and n.routing_key for n in nodes) or any(n.kind == "ref" for n in nodes) or reads_routing_key(node):  # type: ignore[union-attr]
        return False
    return None


def groups(node: Node, records: Records, count: int) -> list[tuple[str | None, str | None, Selection]]:
    """(variant, routing key, records) per route, in the order routes first appear."""
    whole: list[tuple[str | None, str | None, Selection]] = [(None, None, slice(0, count))]
    if records.variants is None and records.keys is None:
        return whole
    sticky = _sticky_split(node)
    variants = repeat(None) if records.variants is None else records.variants
    keys = repeat(None) if records.keys is None else records.keys
    routes: dict[tuple[str | None, str | None], list[int]] = {}
    for position, variant, key in zip(range(count), variants, keys, strict=False):
        routes.setdefault(_route(variant, key, sticky), []).append(position)
    if len(routes) == 1:
        (variant, key), _ = routes.popitem()
        return [(variant, key, slice(0, count))]
    return [(variant, key, np.asarray(positions, dtype=np.intp)) for (variant, key), positions in routes.items()]


def _route(variant: str | None, key: Any, sticky: Split | bool | None) -> tuple[str | None, str | None]:
    if variant is not None:  # the key kept where something below the variant asked for reads it
        return str(variant), (str(key) if sticky is False and key is not None else None)
    if sticky is None or key is None:
        return None, None
    if sticky:
        return sticky_pick(sticky.variants, str(key)).name, None  # type: ignore[union-attr]
    return None, str(key)
