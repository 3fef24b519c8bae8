"""Running a `precomputed` node: the rows whose entity has a fresh answer in the table are
answered from it, every other row by the live node, in one call for the request.

Per request: the table's publication (kept `precomputed_publication_ttl_s` per container, so
a new publication is served within that much of its job's success), then one read of the
request's entities (`PrecomputedStore.get_answers`), then, where rows are left, one run of the
live node on those rows alone. Rows answered both ways are put back in the request's order.
The answer says where each row came from (`source`: `precomputed` or `live`, a list per row
when a request mixes them) and when each stored answer was computed (`computed_at`, epoch
seconds; null for a live row). Statistics count the rows of each source
(`source:precomputed`, `source:live`, the latter with why: `missing` or `stale`), and
a failure to read the table, or stored answers that do not fit the publication, is counted
and answered live (the table is a shortcut, never the only way to an answer).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.caching import TTLCache
from sluice.codecs.datatypes import exact_integers_below
from sluice.codecs.stored_rows import decode_rows
from sluice.domain.errors import RowInvalid, Unavailable
from sluice.domain.policy import MAX_DEPTH, first_branch
from sluice.domain.precomputed import entity_of, fits
from sluice.domain.requests import header_of
from sluice.domain.results import Answer, InferenceResult, Part, put_together
from sluice.domain.signature import Signature, TensorSpec
from sluice.inference.graphs import MAX_REFS, answer_signature, input_signature
from sluice.observability import get_logger

if TYPE_CHECKING:
    from sluice.domain import ModelVersion
    from sluice.domain.policy import Node
    from sluice.domain.precomputed import Precomputed
    from sluice.inference.execution import Call, PolicyRunner
    from sluice.registry.precomputed import PrecomputedStore, Publication, Stored


class PrecomputedReader:
    """The store, each table's publication kept briefly (a miss too), and the answers read kept
    (at most `answers_kept` of them and `answers_kept_bytes` of their rows, by tenant, table,
    generation and entity): a published generation's answers do not change (a job writes its
    own generation, and publishes it once written; a try of its chunk is refused before each
    piece it would write once another try recorded the chunk or Finalize sealed the job,
    `BatchRunner._may_write`, though a piece it began writing before both may still land: its
    job's answers all the same), so a kept answer is one its job wrote, served until its own
    expiry; an entity the store does not hold is asked again each time (a later job's generation
    may). Reads go to a thread
    (DynamoDB: a network call), or run inline where the store says they never wait (SQLite in
    WAL mode: a read never waits on a writer, and takes microseconds; a thread hop would
    cost more than the read)."""

    def __init__(self, store: PrecomputedStore, *, publication_ttl_s: float = 5.0, answers_kept: int = 0, answers_kept_bytes: int = 0) -> None:
        self.store = store
        self.inline = bool(getattr(store, "reads_inline", False))
        self._publications: TTLCache[tuple[str, str], tuple[Publication | None, tuple[TensorSpec, ...]]] = TTLCache(publication_ttl_s)
        self._fit: tuple[Any, Any, str | None] = ((), (), None)  # the last (stored specs, live outputs, why they do not fit)
        self.answers_kept = answers_kept if answers_kept_bytes > 0 else 0
        self.answers_kept_bytes = answers_kept_bytes
        self._answers: dict[tuple[str, str, str, str], Stored] = {}
        self._kept_bytes = 0  # the kept answers' rows, as stored
        self._lock = threading.Lock()  # over `_answers` and `_kept_bytes` as they are kept
        self.reads = 0  # reads of answers made of the store (what the kept ones spare), counted on the caller's thread

    def misfit(self, specs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]) -> str | None:
        """`fits(specs, outputs)`, asked again only when either changes (a publication's specs
        are kept with it, a version's signature with the version: the same objects request
        after request)."""
        kept_specs, kept_outputs, why = self._fit
        if kept_specs is specs and kept_outputs is outputs:
            return why
        why = fits(specs, outputs)
        self._fit = (specs, outputs, why)
        return why

    def kept(self, tenant: str, table: str) -> tuple[Publication | None, tuple[TensorSpec, ...]] | None:
        """The table's publication (and its outputs' specs) as this container holds it; None
        when it holds none or its time is up (`publication` reads it)."""
        return self._publications.get((tenant, table))

    async def publication(self, tenant: str, table: str) -> tuple[Publication | None, tuple[TensorSpec, ...]]:
        kept = self.kept(tenant, table)
        if kept is None:
            found = await self._read(self.store.publication, tenant, table, now=time.time())
            specs = tuple(TensorSpec.from_dict(d) for d in found.outputs) if found is not None else ()
            kept = self._publications.put((tenant, table), (found, specs))
        return kept

    async def answers(self, tenant: str, table: str, generation: str, entities: list[str]) -> dict[str, Stored]:
        now = time.time()
        found, missing = self._kept(tenant, table, generation, entities, now)
        if missing:
            self.reads += 1
            read = await self._read(self.store.get_answers, tenant, table, generation, missing, now=now)
            self._keep(tenant, table, generation, read, found)
        return found

    def answers_inline(self, tenant: str, table: str, generation: str, entities: list[str]) -> dict[str, Stored]:
        """The stored answers of `entities` in the table's `generation`, kept or read on this
        thread (where the store's reads never wait, `reads_inline`: what `answers` awaits there)."""
        now = time.time()
        found, missing = self._kept(tenant, table, generation, entities, now)
        if missing:
            self.reads += 1
            self._keep(tenant, table, generation, self.store.get_answers(tenant, table, generation, missing, now=now), found)
        return found

    def _kept(self, tenant: str, table: str, generation: str, entities: list[str], now: float) -> tuple[dict[str, Stored], list[str]]:
        """The answers kept of `entities` that have not expired, and the entities to read."""
        kept = self._answers
        if not kept:
            return {}, entities
        found: dict[str, Stored] = {}
        missing: list[str] = []
        for entity in entities:
            stored = kept.get((tenant, table, generation, entity))
            if stored is not None and stored.expires_at > now:
                found[entity] = stored
            else:
                missing.append(entity)
        return found, missing

    def _keep(self, tenant: str, table: str, generation: str, read: dict[str, Stored], found: dict[str, Stored]) -> None:
        """`read` added to `found`, and kept: a keep full by count or by bytes is emptied first
        (the rule of `caching.keep`), never a wrong answer, only reads made again; a row larger
        than the whole budget is not kept."""
        found.update(read)
        if self.answers_kept <= 0:
            return
        with self._lock:  # a batch job's threads share the reader
            self._put(tenant, table, generation, read)

    def _put(self, tenant: str, table: str, generation: str, read: dict[str, Stored]) -> None:
        kept = self._answers
        for entity, stored in read.items():
            size = len(stored.body)
            if size > self.answers_kept_bytes:
                continue
            key = (tenant, table, generation, entity)
            before = kept.pop(key, None)
            if before is not None:
                self._kept_bytes -= len(before.body)
            if len(kept) >= self.answers_kept or self._kept_bytes + size > self.answers_kept_bytes:
                kept.clear()
                self._kept_bytes = 0
            kept[key] = stored
            self._kept_bytes += size

    async def _read(self, call: Any, *args: Any, **kw: Any) -> Any:
        return call(*args, **kw) if self.inline else await asyncio.to_thread(call, *args, **kw)


async def run_precomputed(runner: PolicyRunner, node: Precomputed, call: Call, arrays: dict[str, np.ndarray], depth: int) -> Answer:
    first = next(iter(arrays.values()), None)
    rows = 0 if first is None or first.ndim == 0 else int(first.shape[0])
    entities = _request_entities(node, call, rows) if node.source != "inputs" else await _input_entities(runner, node, call, arrays, rows)
    dep = call.deployment
    started = time.perf_counter()
    stored: dict[str, Stored] = {}
    publication: Publication | None = None
    specs: tuple[TensorSpec, ...] = ()
    reader = runner.precomputed
    wanted = [e for e in entities if e is not None]
    if reader is not None and wanted:
        try:
            kept = reader.kept(call.tenant, node.table)
            publication, specs = kept if kept is not None else await reader.publication(call.tenant, node.table)
            if publication is not None:
                if reader.inline:  # a read that never waits: no coroutine around it
                    stored = reader.answers_inline(call.tenant, node.table, publication.generation, wanted)
                else:
                    stored = await reader.answers(call.tenant, node.table, publication.generation, wanted)
        except Exception as exc:  # the table is a shortcut: its failure answers live
            get_logger().warning("precomputed table unreadable: answering live", extra={"table": node.table, "error": str(exc)[:200]})
            runner.stats.request((dep.tenant, dep.name, dep.revision, "source:precomputed"), 0.0, ok=False)
            publication, stored = None, {}
    unfit = 0  # rows the table holds answers for that do not fit the live node (answered live)
    signature, version = (_known_signature(runner, node.live, call.tenant) or await _live_signature(runner, node.live, call.tenant)) if publication is not None else (None, None)
    if publication is not None and signature is not None and reader is not None and reader.misfit(specs, signature.outputs) is not None:
        get_logger().warning("precomputed table does not fit its live node: answering live", extra={"table": node.table})
        runner.stats.request((dep.tenant, dep.name, dep.revision, "source:precomputed"), 0.0, ok=False)  # as a table unread
        stored, unfit = {}, rows  # its rows are not missing from the table: it cannot serve them
    at: list[int] = []  # the rows answered from the table, in order
    stale = 0
    if stored:
        now, max_age = time.time(), node.max_age_s
        for i, entity in enumerate(entities):
            found = stored.get(entity) if entity is not None else None  # type: ignore[arg-type]
            if found is not None:
                if now - found.computed_at <= max_age:
                    at.append(i)
                else:
                    stale += 1
    kept_entities = [entities[i] for i in at]
    outputs: dict[str, np.ndarray] = {}
    if at:
        try:
            outputs = decode_rows(specs, [stored[e].body for e in kept_entities])  # type: ignore[index]
        except Exception as exc:  # rows that do not fit their publication (a job whose model changed as it ran): answered live
            get_logger().warning("precomputed answers do not fit their publication: answering live", extra={"table": node.table, "error": str(exc)[:200]})
            runner.stats.request((dep.tenant, dep.name, dep.revision, "source:precomputed"), 0.0, ok=False)
            unfit += len(at)  # held by the table, so not missing from it: answered live as unfit
            at, kept_entities = [], []
    hits = len(at)
    if hits:
        runner.stats.request((dep.tenant, dep.name, dep.revision, "source:precomputed"), (time.perf_counter() - started) * 1000, ok=True, rows=hits)
        if hits == rows:
            assert signature is not None and version is not None and publication is not None
            return _stored_answer(signature, version, outputs, publication, call, [stored[e].computed_at for e in kept_entities])  # type: ignore[index]
    hit = [False] * rows
    for i in at:
        hit[i] = True
    misses = [i for i, h in enumerate(hit) if not h]
    live_key = (dep.tenant, dep.name, dep.revision, "source:live")
    started = time.perf_counter()
    feed = arrays if not hits else {k: a[misses] for k, a in arrays.items()}
    try:
        answer = await runner.run(node.live, call, feed, depth + 1)
    except RowInvalid as exc:  # a row of the live ones: named as the request's row
        runner.stats.request(live_key, 0.0, ok=False)
        if not hits or not 0 <= exc.row < len(misses):
            raise
        raise exc.at(misses[exc.row]) from None
    except Exception:
        runner.stats.request(live_key, 0.0, ok=False)
        raise
    runner.stats.request(live_key, (time.perf_counter() - started) * 1000, ok=True, rows=len(misses))
    runner.stats.add(live_key, {"stale": stale, "unfit": unfit, "missing": len(misses) - stale - unfit} if unfit else {"stale": stale, "missing": len(misses) - stale})
    if hits and not _joinable(answer.result, outputs, publication.classes if publication else {}):
        # The table's rows say other classes (or another count of them) than the live node's
        # answer: put beside it they would be read by its labels (a wrong answer) or not fit (a
        # 500). Answered live with the rest, counted unfit, as a publication that does not fit is.
        started = time.perf_counter()
        answer = await runner.run(node.live, call, arrays, depth + 1)
        runner.stats.request(live_key, (time.perf_counter() - started) * 1000, ok=True, rows=hits)
        runner.stats.add(live_key, {"unfit": hits})
        runner.stats.request((dep.tenant, dep.name, dep.revision, "source:precomputed"), 0.0, ok=False)
        hits = 0
    if not hits:  # live, or where the live node's own answer says (a precomputed node inside it)
        answer.source = "live" if answer.source is None else answer.source
        return answer
    answer.result = _merged(rows, np.asarray(misses), answer.result, np.asarray(at), outputs, publication.classes if publication else {})
    # Each row's case, version and source in the rows' order: the live ones as the live node said
    # them (a switch's cases, a precomputed node's inside it), the table's with their own times.
    assert version is not None
    parts = [Part(np.asarray(misses), answer), Part(np.asarray(at), stored=[stored[e].computed_at for e in kept_entities])]  # type: ignore[index]
    said = put_together(rows, parts, version)
    answer.case, answer.source, answer.computed_at = said["case"], said["source"], said["computed_at"]
    answer.models = said["models"] if len(set(said["models"])) > 1 else None  # per row where versions differ
    if hit[0]:  # the answer names its first row's version, as a switch's does: the table's rows name the live node's
        answer.version = version
    return answer


def _request_entities(node: Precomputed, call: Call, rows: int) -> list[str | None]:
    """Each row's entity where the key is the request's (its routing key, a header): one for every row."""
    if not rows:
        return []
    request = call.request
    if node.source == "routing_key":
        return [entity_of(request.routing_key if request is not None else None)] * rows
    return [entity_of(header_of(request.headers, node.name) if request is not None else None)] * rows


async def _input_entities(runner: PolicyRunner, node: Precomputed, call: Call, arrays: dict[str, np.ndarray], rows: int) -> list[str | None]:
    """Each row's entity where the key is an input's: a row's value in the key's column."""
    array = arrays.get(node.name)
    if not rows or array is None:
        return [None] * rows
    column = node.column
    if isinstance(column, str):
        signature = await input_signature(runner, node.live, call.tenant)
        spec = signature.input(node.name)
        names = list(spec.feature_names or ()) if spec is not None else []
        column = names.index(column) if column in names else None
        if column is None:
            return [None] * rows
    values = array.reshape(rows, -1)[:, column] if column is not None else array.reshape(rows, -1)[:, 0]
    if values.dtype.kind == "f":
        return _float_entities(values)
    return [entity_of(v) for v in values.tolist()]


def _float_entities(values: np.ndarray) -> list[str | None]:
    """The entities of a floating input's values, as the model's input type holds them: a whole
    number below the type's exact-integer bound (FP16 2,048; FP32 16,777,216; FP64 2^53), or
    none (answered live). Past that bound, or with a fraction, the input may have been
    rounded to its type (16,777,217 arrives as FP32 16,777,216): two ids would then read as one,
    and a row be answered another entity's stored answer."""
    bound = exact_integers_below(values.dtype)
    exact = np.isfinite(values) & (np.abs(values) < bound) & (values == np.trunc(values))
    return [entity_of(int(v)) if ok else None for v, ok in zip(values.tolist(), exact.tolist(), strict=True)]


def _known_signature(runner: PolicyRunner, node: Node, tenant: str) -> tuple[Signature, ModelVersion] | None:
    """`_live_signature`'s answer with no wait, where the live node is a model whose version this
    container holds (the usual case); None otherwise."""
    if node.kind == "single":
        version = runner.lookups.cached_version(tenant, node.model, node.version)  # type: ignore[union-attr]
        if version is not None:
            return version.signature, version
    return None


async def _live_signature(runner: PolicyRunner, node: Node, tenant: str) -> tuple[Signature, ModelVersion]:
    """What the live node answers, and the version that describes it (a stored answer's `model`)."""
    version = None
    current = node
    for _ in range(MAX_REFS * MAX_DEPTH):
        if current.kind == "single":
            version = runner.lookups.cached_version(tenant, current.model, current.version)  # type: ignore[union-attr]
            if version is None:
                version = await runner.lookups.version_of(tenant, current.model, current.version)  # type: ignore[union-attr]
            break
        current = await runner.lookups.node_of(tenant, current.deployment) if current.kind == "ref" else first_branch(current)  # type: ignore[union-attr]
    if version is None:
        raise Unavailable("deployment references nest too deep to find a model version", field="policy")
    if node.kind == "single":  # its version says what it answers (`answer_signature` would say None)
        return version.signature, version
    return (await answer_signature(runner, node, tenant) or version.signature), version


def _stored_answer(
    signature: Signature, version: ModelVersion, outputs: dict[str, np.ndarray], publication: Publication, call: Call, times: list[float]
) -> Answer:
    if call.outputs:
        outputs = {k: v for k, v in outputs.items() if k in call.outputs}
        signature = Signature(signature.inputs, tuple(s for s in signature.outputs if s.name in outputs), signature.metadata)
    classes = {k: v for k, v in publication.classes.items() if k in outputs} if publication.classes else {}
    answer = Answer(signature, InferenceResult(outputs, classes), version)
    answer.source = "precomputed"
    answer.computed_at = times[0] if len(times) == 1 or len(set(times)) == 1 else times  # type: ignore[assignment]
    return answer


def _joinable(live: InferenceResult, stored: dict[str, np.ndarray], classes: dict[str, list[Any]]) -> bool:
    """Whether the table's rows can stand beside the live rows in one answer: each output of
    the same shape past the rows, and of the same classes where both say them."""
    for name, array in live.outputs.items():
        kept = stored.get(name)
        if kept is not None and kept.ndim and array.ndim and tuple(kept.shape[1:]) != tuple(array.shape[1:]):
            return False
        said, theirs = live.classes.get(name), classes.get(name)
        if said is not None and theirs is not None and [str(c) for c in said] != [str(c) for c in theirs]:
            return False
    return True


def _merged(
    rows: int, misses: np.ndarray, live: InferenceResult, hits: np.ndarray, stored: dict[str, np.ndarray], classes: dict[str, list[Any]]
) -> InferenceResult:
    """The live rows and the stored ones, back in the request's order."""
    outputs: dict[str, np.ndarray] = {}
    for name, array in live.outputs.items():
        kept = stored.get(name)
        if kept is None or array.ndim == 0:
            raise Unavailable(f"the table's answers have no output '{name}'", field="policy.table")
        dtype = np.result_type(array, kept) if array.dtype.kind not in "OUS" and kept.dtype.kind not in "OUS" else np.dtype(object)
        out = np.empty((rows, *array.shape[1:]), dtype=dtype)
        out[misses] = array
        out[hits] = kept.reshape((len(hits), *array.shape[1:]))
        outputs[name] = out
    return InferenceResult(outputs, dict(live.classes) or {k: v for k, v in classes.items() if k in outputs})
