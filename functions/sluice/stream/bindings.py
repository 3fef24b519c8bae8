"""Which tenant, deployment and destination each source is bound to: the bindings' rules are
`sluice.domain.stream_bindings` (which the settings read as the process starts); here, which
binding a record's source takes."""

from __future__ import annotations

from sluice.domain.errors import NotFound
from sluice.domain.stream_bindings import Binding, Destination, parse_bindings

__all__ = ["Binding", "Destination", "binding_for", "parse_bindings"]


def binding_for(bindings: dict[str, Binding], source: str) -> Binding:
    found = bindings.get(source)
    if found is None:
        found = bindings.get("*")
    if found is None:
        raise NotFound(f"no stream binding for source '{source}'", field="SLUICE_STREAMS")
    return found
