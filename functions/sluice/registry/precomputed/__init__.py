"""Tables of precomputed answers: what a batch job publishes and a `precomputed` node reads.

A table is keyed by (tenant, table, generation, entity). A job writes its answers under a
generation of its own (its id) while it runs; when it succeeds, the table's publication (its
pointer) names that generation, in one write: readers see the previous job's answers until
then, and never a job's that failed. The table only ever moves forward: a job made earlier
that finishes after a later one has published does not replace the later one's answers
(`Superseded`), and a job that turns out not to have succeeded after all is withdrawn only
while the table still points at it (`withdraw`): a publication keeps the one it replaced, as it
was (with what that one replaced, up to `MAX_REPLACED` deep), to put back; a job withdrawn
while a later one stands is taken out of that one's chain, so a failed job's answers are never
put back. The answers of a generation replaced are
removed once the replacement stands (`retire`). Each answer and each publication carries
`expires_at`; an expired one is never read, and the store removes it (DynamoDB's time to live,
SQLite on publishing). Two adapters: SQLite beside the embedded registry (`sqlite`), and a DynamoDB
table of its own whose keys live under the tenant's prefix (`dynamodb`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from sluice.domain.errors import Conflict

if TYPE_CHECKING:
    from collections.abc import Sequence

MAX_GET = 100  # keys per read call (DynamoDB's BatchGetItem limit)
MAX_PUT = 25  # items per write call (BatchWriteItem's)


@dataclass(frozen=True, slots=True)
class Publication:
    """What a table serves: the generation a successful job wrote, and what its answers hold
    (`outputs`: the answering signature's outputs as `TensorSpec.to_dict` writes them;
    `classes`: column labels of probability outputs)."""

    generation: str
    job: str
    deployment: str
    outputs: list[dict[str, Any]]
    classes: dict[str, list[Any]] = field(default_factory=dict)
    published_at: float = 0.0
    rows: int = 0
    made_at: float = 0.0  # when its job was made: of two jobs, the one made later is served
    expires_at: float = 0.0  # when it stops being served (set by `publish`)
    replaced: Publication | None = None  # what it replaced, as it was (with its own, `MAX_REPLACED` deep): put back by `withdraw`
    succeeded: bool = False  # its job's success recorded (`settled`): never withdrawn, so nothing below it is ever put back

    @property
    def order(self) -> str:
        """Where it stands among a table's publications: by when its job was made, then by job
        id (two jobs made in one millisecond), as a string that sorts as they do."""
        return f"{round(self.made_at * 1000):016d}#{self.job}"

    def replacing(self, before: Publication | None, *, expires_at: float) -> Publication:
        """This publication as the table keeps it in place of `before` (what the table held, if
        anything), living until `expires_at`. The same generation again (its Finalize tried
        again) replaces what the first try replaced, not itself; an expired one replaces nothing."""
        if before is not None and before.generation == self.generation:
            before = before.replaced
        if before is not None and before.expires_at <= self.published_at:
            before = None
        for depth in range(MAX_REPLACED, -1, -1):  # as deep as one record holds (classes may be many)
            stood = replace(self, expires_at=expires_at, replaced=_cut(before, depth))
            if depth == 0 or len(stood.to_json()) <= MAX_DOC_BYTES:
                return stood
        raise AssertionError("unreachable")

    def admitting(self, earlier: Publication) -> Publication | None:
        """This publication with `earlier` (a job made before this one's, publishing after it:
        `Superseded`) kept in its chain where its order puts it, newest first: what a withdrawal
        of this one (or of any above it) puts back, rather than an older job's answers, or none.
        None where the chain holds it already (its Finalize tried again) or it would fall past
        the chain's depth, or this one's job succeeded (it will never be withdrawn)."""
        chain = self.chain()
        if self.succeeded or earlier.generation == self.generation or any(p.generation == earlier.generation for p in chain):
            return None
        at = next((i for i, p in enumerate(chain) if p.order < earlier.order), len(chain))
        if at >= MAX_REPLACED:
            return None
        chain.insert(at, replace(earlier, replaced=None))
        rest = None
        for p in reversed(chain):
            rest = replace(p, replaced=rest)
        for depth in range(MAX_REPLACED, at, -1):  # as deep as one record holds, `earlier` kept
            stood = replace(self, replaced=_cut(rest, depth))
            if len(stood.to_json()) <= MAX_DOC_BYTES:
                return stood
        return None

    def chain(self) -> list[Publication]:
        """The publications below it (what it would put back, and what that one would), newest first."""
        out, node = [], self.replaced
        while node is not None:
            out.append(node)
            node = node.replaced
        return out

    def settled(self, generation: str) -> Publication | None:
        """Its chain cut below `generation`, whose job succeeded (a succeeded job is never
        withdrawn: what it replaced is never put back), and this one marked `succeeded` where it
        is that job's; None where that changes nothing."""
        if self.generation == generation:
            return None if self.replaced is None and self.succeeded else replace(self, replaced=None, succeeded=True)
        if self.replaced is None:
            return None
        rest = self.replaced.settled(generation)
        return None if rest is None else replace(self, replaced=rest)

    def without(self, generation: str) -> Publication | None:
        """Its chain of replaced publications with `generation` taken out (a job withdrawn while
        this one stands: never put back), or None where the chain does not hold it."""
        if self.replaced is None:
            return None
        if self.replaced.generation == generation:
            return replace(self, replaced=self.replaced.replaced)
        rest = self.replaced.without(generation)
        return None if rest is None else replace(self, replaced=rest)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes, *, expires_at: float | None = None) -> Publication:
        """`expires_at`: as the store keeps it beside the document (that of one written before
        the document held it)."""
        found = cls._of(json.loads(text))
        return found if expires_at is None else replace(found, expires_at=expires_at)

    @classmethod
    def _of(cls, data: dict[str, Any]) -> Publication:
        return cls(
            generation=data["generation"], job=data["job"], deployment=data.get("deployment", ""),
            outputs=list(data.get("outputs") or []), classes=dict(data.get("classes") or {}),
            published_at=float(data.get("published_at") or 0.0), rows=int(data.get("rows") or 0),
            made_at=float(data.get("made_at") or 0.0), expires_at=float(data.get("expires_at") or 0.0),
            replaced=cls._of(data["replaced"]) if data.get("replaced") else None, succeeded=bool(data.get("succeeded")),
        )  # fmt: skip


MAX_REPLACED = 8  # publications a table keeps to put back, newest first (those of jobs not yet succeeded)
MAX_DOC_BYTES = 300 * 1024  # and no deeper than a publication's record then stays within (DynamoDB: 400 KB an item)


class Superseded(Conflict):
    """The table serves the answers of a job made later than the one publishing: they stay."""

    def __init__(self, current: Publication) -> None:
        super().__init__(
            f"not published: the table serves the answers of job '{current.job}', made after this one", field="publish"
        )
        self.current = current


@dataclass(frozen=True, slots=True)
class Stored:
    """One entity's answer: its row (`body`, see `sluice.codecs.stored_rows`), when it was
    computed, and when the store stops holding it (its time to live)."""

    body: bytes
    computed_at: float
    expires_at: float = field(default=math.inf, compare=False)  # the same answer, whenever it expires


class PrecomputedStore(Protocol):
    def publication(self, tenant: str, table: str, *, now: float) -> Publication | None:
        """The table's publication, or None (nothing published, or it expired)."""

    def get_answers(self, tenant: str, table: str, generation: str, entities: Sequence[str], *, now: float) -> dict[str, Stored]:
        """The stored answers of these entities (those that have one), in as few calls as the
        store allows (DynamoDB: one per `MAX_GET` keys)."""

    def put_answers(
        self, tenant: str, table: str, generation: str, rows: Sequence[tuple[str, bytes]], *, computed_at: float, expires_at: float
    ) -> None:
        """Write answers under a generation (one call per `MAX_PUT` rows on DynamoDB); the
        same entity written twice keeps the last (a chunk scored again writes the same)."""

    def describe(self, tenant: str, table: str, publication: Publication, *, expires_at: float) -> None:
        """Say what a generation's answers hold (written by each chunk that writes some, the same
        each time), for the job's success to publish."""

    def described(self, tenant: str, table: str, generation: str) -> Publication | None:
        """What `describe` said of a generation, or None (no chunk wrote an answer)."""

    def publish(self, tenant: str, table: str, publication: Publication, *, expires_at: float) -> Publication | None:
        """Point the table at `publication`'s generation, in one write that also keeps what it
        replaces (`Publication.replacing`); returns that, if anything. `Superseded` where the
        table serves, unexpired at `publication.published_at`, one that comes after it
        (`order`): that one stays, with `publication` kept in its chain (`admitting`), to be put
        back should the later one be withdrawn."""

    def withdraw(self, tenant: str, table: str, generation: str) -> bool:
        """While the table points at `generation`: point it back at what that publication
        replaced, as it was (its own expiry), or at nothing. False, and nothing changed, where
        the table points elsewhere."""

    def retire(self, tenant: str, table: str, generation: str) -> None:
        """Remove a replaced generation's answers, once no container can still be serving them
        (where the store does not let them expire)."""

    def settle(self, tenant: str, table: str, generation: str) -> None:
        """`generation`'s job succeeded: the publication served forgets what it would put back
        below it (`Publication.settled`), so its record holds only what a withdrawal may need;
        the answers of those it forgot are retired (`retire`)."""


def _cut(chain: Publication | None, depth: int) -> Publication | None:
    """A chain of replaced publications at most `depth` long (the oldest let go: withdrawn down
    to there, the table answers live)."""
    if chain is None or depth <= 0:
        return None
    return replace(chain, replaced=_cut(chain.replaced, depth - 1))
