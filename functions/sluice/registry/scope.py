"""Which tenant the registry calls of this request act for.

The edge binds the authenticated principal's tenant for the whole request (`use_tenant`);
a registry whose credentials are confined to one tenant by IAM (DynamoDB behind the tenant
role, `registry.dynamodb.tenant_scope`) sends each call as that tenant, and refuses a call
made with no tenant bound. Elsewhere the binding costs one context variable and changes
nothing. The tenant always comes from authentication, never from a request body.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("sluice_registry_tenant", default=None)


def bound_tenant() -> str | None:
    return _current.get()


def bind_tenant(tenant: str) -> contextvars.Token[str | None]:
    """`use_tenant` without a context manager, for the request path: `unbind_tenant(token)`."""
    return _current.set(tenant)


def unbind_tenant(token: contextvars.Token[str | None]) -> None:
    _current.reset(token)


@contextmanager
def use_tenant(tenant: str) -> Iterator[None]:
    """Registry calls made inside this block (threads started from it included, as
    `asyncio.to_thread` copies the context) act for `tenant`."""
    token = _current.set(tenant)
    try:
        yield
    finally:
        _current.reset(token)
