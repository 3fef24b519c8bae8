"""The check a `precomputed` node gets when its policy is saved: its table serves the live
node's answers. Where a job has published into the table, the outputs its answers hold
(names, datatypes, shapes) must be the live node's; a 422 names the node's `table` field
otherwise. A table nothing was published to yet passes (every row is answered live until a
job publishes; the reader checks each new publication again, and serves none that does not fit)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sluice.domain.errors import Unprocessable
from sluice.domain.precomputed import Precomputed, fits
from sluice.domain.signature import TensorSpec
from sluice.services.graph_checks import fields_of

if TYPE_CHECKING:
    from sluice.domain.policy import Node
    from sluice.registry.precomputed import PrecomputedStore
    from sluice.services.graph_checks import GraphChecks


def check_tables(node: Node, graphs: GraphChecks, store: PrecomputedStore | None, tenant: str) -> None:
    for field, child in fields_of(node):
        if not isinstance(child, Precomputed):
            continue
        if store is None:
            raise Unprocessable("precomputed answers are not served here: no table is configured (SLUICE_PRECOMPUTED_TABLE)", field=f"{field}.table")
        publication = store.publication(tenant, child.table, now=time.time())
        if publication is None:
            continue
        problem = fits([TensorSpec.from_dict(d) for d in publication.outputs], graphs.answers(child.live).outputs)
        if problem is not None:
            raise Unprocessable(
                f"table '{child.table}' (published by batch job {publication.job} of deployment '{publication.deployment}') "
                f"does not fit the live node: {problem}",
                field=f"{field}.table",
            )
