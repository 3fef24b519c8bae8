"""The artifact store protocol.

Artifacts are content-addressed per tenant (`tenants/<tenant>/sha256/<digest><suffix>`), so a
push of the same bytes stores them once and every read can be checked against its digest.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from sluice.domain.errors import BackendError, faults_named
from sluice.domain.objects import check_name

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

STORAGE = "artifact store"  # what a storage fault of these stores names


@dataclass(frozen=True, slots=True)
class ArtifactRef:
    uri: str
    sha256: str
    size_bytes: int


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def artifact_key(tenant: str, digest: str, suffix: str) -> str:
    return f"tenants/{check_name(tenant, field='tenant')}/sha256/{digest}{suffix}"


def on_disk(*, writing: bool = True) -> AbstractContextManager[None]:
    """A folder store's disk that is full, read-only or failing raised as the artifact store's
    `StorageFault` (`sluice.domain.errors.faults_named`)."""
    return faults_named(STORAGE, writing=writing)


def verify(data: bytes, expected_sha256: str, uri: str) -> bytes:
    if sha256_hex(data) != expected_sha256:
        raise BackendError(f"the stored artifact sha256:{expected_sha256[:12]} does not match its checksum; refusing to load it")
    return data


class ArtifactStore(Protocol):
    def put(self, tenant: str, data: bytes, *, suffix: str = "") -> ArtifactRef:
        """Store bytes under the tenant, content-addressed; idempotent."""
        ...

    def get(self, uri: str, *, sha256: str) -> bytes:
        """Read an artifact this store wrote, verifying its checksum."""
        ...

    def read_external(self, tenant: str, uri: str, max_bytes: int | None = None) -> bytes:
        """Read bytes a caller names by URI (push by URI). Refuses another tenant's artifacts, and
        (PayloadTooLarge) past `max_bytes` before reading them."""
        ...

    def owns(self, tenant: str, uri: str) -> bool:
        """Whether `uri` lies in this tenant's part of the store."""
        ...

    def tenant_root(self, tenant: str) -> str:
        """The URI of this tenant's part of the store (ending in `/`): the `store` root of its
        locations (`sluice.domain.locations`)."""
        ...

    def delete(self, uri: str) -> None: ...
