"""The rules both registries keep inside the write they guard, so that no concurrent writer
can get between the check and the write: what each refuses, and with which error.

- The last active admin key of a tenant (`revoke_api_key(..., keep_an_admin=True)`): a revoke
  of an active admin key goes through only if another admin key of the tenant is active when
  it is written. SQLite checks and writes in one `BEGIN IMMEDIATE` transaction; DynamoDB's
  revoke transaction carries a ConditionCheck that the other admin key is still not revoked,
  so two keys revoking each other cannot both commit.
- What a write was decided on (`create_deployment`/`update_deployment(..., refs_read=...)`):
  the deployments the caller's checks read (a policy's references, followed to find cycles)
  must be stored still as they were read — the same write of the name (`generation`, which
  counts every write of the name and never repeats), so that a deployment deleted and created
  again does not pass for the one that was read.
- A version or a deployment in use is never deleted (`Catalog`): the deployments' references
  to model versions and to other deployments, and the deletes of versions, models and
  deployments, are each decided on reads (a deployment write checks what it names exists; a
  delete checks no deployment names what it deletes). The tenant keeps two counters, of
  deployment writes and of deletes, which each such write reads before its checks
  (`catalog_read`): a deployment write commits only if no delete came after that read, a delete
  only if no deployment write did, and each moves its own counter on. Of a deployment write and
  a delete that interleave, one is refused (StaleRead) and decided again on what is stored now:
  the delete then finds the deployment that names what it deletes (409), or the deployment
  write what it names gone (422); writes of one kind never refuse each other. SQLite compares
  and moves the counters in the write's `BEGIN IMMEDIATE` transaction; DynamoDB's transaction
  carries an update of the counters' item conditioned on the other counter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, TypeVar

from sluice.domain.errors import Conflict, StaleRead

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from sluice.domain import ApiKey, Deployment

# A DynamoDB transaction holds at most 100 items; a deployment write uses 3 of its own.
MAX_REFS_READ = 64
RECHECKS = 4  # checks of one change, when what they read changes before its write
T = TypeVar("T")


def is_active_admin(key: ApiKey) -> bool:
    return key.active and "admin" in key.scopes


def another_active_admin(keys: Iterable[ApiKey], key_id: str) -> ApiKey | None:
    """An active admin key among `keys` (one tenant's) other than `key_id`, or None."""
    return next((k for k in keys if k.key_id != key_id and is_active_admin(k)), None)


def last_admin_key() -> Conflict:
    return Conflict("this is the tenant's last admin key; create another admin key first", field="key_id")


def others_read(name: str, refs_read: Iterable[Deployment]) -> list[Deployment]:
    """The deployments read besides `name` itself (whose own revision the write names)."""
    others = {d.name: d for d in refs_read if d.name != name}
    if len(others) > MAX_REFS_READ:
        raise ValueError(f"a write can rest on at most {MAX_REFS_READ} deployments read, not {len(others)}")
    return list(others.values())


def same_write(stored: Deployment, seen: Deployment) -> bool:
    """Whether `stored` is the very write `seen` was read from: its generation (which never
    repeats for a name), or for deployments written before generations were kept, the
    revision and the time of the last write."""
    if stored.generation or seen.generation:
        return stored.generation == seen.generation
    return (stored.revision, stored.updated_at) == (seen.revision, seen.updated_at)


def changed_meanwhile(name: str) -> StaleRead:
    return StaleRead(
        f"deployment '{name}', which the policy reaches, changed while the policy was checked; try again",
        field="policy",
    )


class Catalog(NamedTuple):
    """A tenant's counters as read before a check: its deployment writes and its deletes of
    versions, models and deployments (0: none yet)."""

    writes: int = 0
    deletes: int = 0


def catalog_changed(field: str) -> StaleRead:
    return StaleRead("the tenant's models or deployments changed while this was checked; try again", field=field)


def decided_again(change: Callable[[], T]) -> T:
    """Run `change` (read, check, write) again while its write is refused because what its
    checks read changed meanwhile (StaleRead): checked on what is stored now, it is written or
    refused for what it is. After RECHECKS such refusals the StaleRead itself (409) tells the
    caller to try again."""
    for _ in range(RECHECKS - 1):
        try:
            return change()
        except StaleRead:
            continue
    return change()
