"""Following a policy's references (`ref`) to the deployments they name: as those stand, or,
inside a call whose references are pinned (a batch job's, `BatchJob.refs`), at the revisions
pinned when it started, so that one job is scored by one set of policies throughout. Every
path that follows a reference (running it, deriving what a policy takes and answers, the
prediction cache's route) reads it through `referenced` (`PredictionService.referenced`)."""

from __future__ import annotations

from contextvars import ContextVar, Token
from typing import TYPE_CHECKING

from sluice.domain.errors import NotFound, SluiceError, UnknownDeployment
from sluice.domain.policy import Ref, referenced_deployments, walk

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from sluice.domain import Deployment
    from sluice.domain.policy import Node
    from sluice.inference.revisions import Revisions

    Reader = Callable[[str, str], Awaitable[tuple[Deployment, Node]]]

# The revisions the references of the call running now are pinned at (None: as they stand).
PINNED_REFS: ContextVar[Mapping[str, int] | None] = ContextVar("sluice_pinned_refs", default=None)


def pin(refs: Mapping[str, int] | None) -> Token[Mapping[str, int] | None] | None:
    """References pinned at `refs` from here (nothing where None), until `unpin` of what this answers."""
    return PINNED_REFS.set(refs) if refs is not None else None


def unpin(token: Token[Mapping[str, int] | None] | None) -> None:
    if token is not None:
        PINNED_REFS.reset(token)


def deleted_at(name: str, revision: int) -> NotFound:
    """A pinned revision of a deployment deleted since: never another policy in its place."""
    return NotFound(f"revision {revision} of deployment '{name}' can no longer be read: the deployment was deleted", field="deployment")


async def referenced(read: Reader, revisions: Revisions, tenant: str, name: str) -> tuple[Deployment, Node]:
    """The deployment a `ref` names, as `read` finds it now; where the call's references are
    pinned, at the revision pinned for it (NotFound where that revision can no longer be read)."""
    pins = PINNED_REFS.get()
    pinned = pins.get(name) if pins else None
    try:
        dep, node = await read(tenant, name)
    except UnknownDeployment:
        if pinned is None:
            raise
        raise deleted_at(name, pinned) from None
    if pinned is not None and pinned != dep.revision:
        return await revisions.at(dep, pinned)
    return dep, node


async def pin_refs(follow: Reader, tenant: str, node: Node) -> dict[str, int]:
    """The revisions of the deployments `node` references, and those they reference in turn,
    as `follow` finds them (as they stand, or as already pinned): what a batch job pins with its
    own revision. A reference to a deployment not there is left out (followed as it is when a
    row reaches it, failing as it does)."""
    pins: dict[str, int] = {}
    todo = [node]
    while todo:
        for name in referenced_deployments(todo.pop()):
            if name in pins:
                continue
            try:
                dep, policy = await follow(tenant, name)
            except UnknownDeployment:
                continue
            pins[name] = dep.revision
            todo.append(policy)
    return pins


async def walk_through(
    follow: Reader, tenant: str, node: Node, *, mirrors: bool = True, refs: Mapping[str, int] | None = None
) -> list[Node]:
    """Every node of the policy (`walk`) and of the policies of the deployments it references,
    in turn, each read once as `follow` finds it (as it stands, or at the revisions `refs` pins,
    a batch job's); one that cannot be read is left out (a row reaching it fails there, as a
    request would). What a rule about every node a call may reach reads: a stream's key fields,
    a job's answers in place, its rows per call and its `variant` column."""
    nodes: list[Node] = []
    todo, seen = [node], set()
    token = pin(refs)
    try:
        while todo:
            for n in walk(todo.pop(), mirrors=mirrors):
                nodes.append(n)
                if isinstance(n, Ref) and n.deployment not in seen:
                    seen.add(n.deployment)
                    try:
                        todo.append((await follow(tenant, n.deployment))[1])
                    except SluiceError:
                        continue
    finally:
        unpin(token)
    return nodes
