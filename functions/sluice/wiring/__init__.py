"""The one place adapters are chosen from settings and built: once per process (once per
Lambda cold start). `adapters` chooses each port's adapter, `runtimes` the runtimes by kind,
`container` assembles the data plane and builds the control plane's services on first use,
handing each the group of settings it reads. Tests build a Container with their own parts."""

from __future__ import annotations

from functools import lru_cache

from sluice.settings import get_settings
from sluice.wiring.adapters import build_endpoint_control, build_store
from sluice.wiring.container import Container
from sluice.wiring.runtimes import build_runtimes

# What callers build a Container from, besides settings (the rest: sluice.wiring.adapters).
__all__ = ["Container", "build_endpoint_control", "build_runtimes", "build_store", "get_container"]


@lru_cache(maxsize=1)
def get_container() -> Container:
    return Container.from_settings(get_settings())
