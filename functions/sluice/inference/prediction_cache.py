"""The prediction cache, opt-in per deployment (`Deployment.cache`).

An answer is kept under a key made of the tenant, the deployment and its policy revision, the
route that would answer (every version on it, the variant a sticky split picks for the request,
the revision of every referenced deployment, a sequence's every step, the case a switch takes
or the request-level values its conditions read), the outputs asked for, and a hash of the
decoded input tensors (bytes, dtype, shape). A new revision (a changed step, a new version a
step runs) or a new version therefore never meets an old answer. Only a deterministic route
has a key (`route_of`; a graph's steps answer `domain.graphs.deterministic`); anything else is
computed live.

Two tiers: a per-container LRU with a time to live (cachetools' TLRUCache: each answer its own expiry, under a lock), and,
where the wiring gives one, a shared tier (`SharedAnswers`: the registry's table of answers,
SQLite locally, DynamoDB items with a TTL attribute on AWS) that other containers fill.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import threading
import time
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from sluice.codecs.datatypes import answer_dtypes, v2_of_numpy
from sluice.domain.graphs import deterministic
from sluice.domain.results import Answer, InferenceResult
from sluice.domain.signature import Signature
from sluice.observability import get_logger
from sluice.routing.choose import sticky_pick

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from cachetools import TLRUCache

    from sluice.domain import CacheSettings, Deployment, ModelVersion
    from sluice.domain.policy import Node, Switch
    from sluice.inference.execution import Call

Route = tuple[Any, ...]
MAX_ROUTE_DEPTH = 32  # deeper than any valid policy with its references


class SharedAnswers(Protocol):
    """The shared tier: answers by key, readable by every container until they expire."""

    def get_cached_answer(self, tenant: str, deployment: str, key: str, *, now: float) -> bytes | None: ...
    def put_cached_answer(self, tenant: str, deployment: str, key: str, body: bytes, *, expires_at: float) -> None: ...


async def route_of(
    node: Node, call: Call, deployment_of: Callable[[str, str], Awaitable[tuple[Deployment, Node]]],
    refused: Callable[[Node], bool] | None = None,
) -> Route | None:
    """What would answer this request, or None when that is left to chance (a split without
    the request's routing key, a bandit, a hedged ensemble): such a request is not cached. A
    function step the tenant may no longer run (`refused`: taken off its allowlist) is not
    answered from the cache either: the policy runs, and refuses it by name."""
    if node.kind == "single":  # most deployments: no walk
        return ((node.model, node.version),)  # type: ignore[union-attr]
    parts: list[Any] = []

    async def visit(n: Node, depth: int, top: bool = False) -> bool:
        """`top`: the policy's root, or reached from it through shadows' primaries alone (a
        split there draws its keys unsalted: `sticky_pick`)."""
        if depth > MAX_ROUTE_DEPTH:
            return False
        kind = n.kind
        if kind == "single":
            parts.append((n.model, n.version))  # type: ignore[union-attr]
            return True
        if kind == "shadow":
            return await visit(n.primary, depth + 1, top)  # type: ignore[union-attr]
        if kind == "ref":
            dep, child = await deployment_of(call.tenant, n.deployment)  # type: ignore[union-attr]
            parts.append(("ref", dep.name, dep.revision))
            return await visit(child, depth + 1)
        if kind == "split":
            variants = n.variants  # type: ignore[union-attr]
            chosen = next((v for v in variants if v.name == call.variant), None)
            if chosen is None:
                if n.bandit is not None:  # type: ignore[union-attr]
                    return False
                live = [v for v in variants if v.weight > 0]
                if len(live) == 1:
                    chosen = live[0]
                else:
                    key = call.routing(n.routing_key) if n.routing_key else None  # type: ignore[union-attr]
                    if not key or not top:
                        return False  # routed at random this time; or by a nested split's own draw (its path's)
                    chosen = sticky_pick(variants, key)
            parts.append(("variant", chosen.name))
            return await visit(chosen.target, depth + 1)
        if kind == "ensemble":
            members = n.members  # type: ignore[union-attr]
            if n.aggregator == "first_success" or (n.min_members or len(members)) < len(members):  # type: ignore[union-attr]
                return False
            parts.append(("ensemble", n.aggregator, len(members)))  # type: ignore[union-attr]
            for member in members:
                if not await visit(member.target, depth + 1):
                    return False
            return True
        if kind == "switch":
            return await visit_switch(n, depth)  # type: ignore[arg-type]
        if not deterministic(n):  # a step that may answer otherwise next time
            return False
        if kind == "function" and refused is not None and refused(n):  # checked on every call, as when it runs
            return False
        # A sequence's steps, a transform (its ops are the policy's, under the revision in
        # the key): every step's route.
        parts.append((kind,))
        for child in n.children():
            if not await visit(child, depth + 1):
                return False
        return True

    async def visit_switch(n: Switch, depth: int) -> bool:
        """The case the request takes when no condition reads its inputs; else every case's
        route, with the request-level values the conditions read (the inputs, which decide
        the rest, are in the key already)."""
        from sluice.domain.conditions import comparisons, reads_inputs
        from sluice.domain.graphs import DEFAULT_CASE
        from sluice.routing.conditions import Facts, decide, request_value

        request = call.request
        facts = Facts(
            rows=1,
            routing_key=request.routing_key if request is not None else None,
            headers=request.headers if request is not None else {},
            arrays={},
            feature_names={},
            parameters=(request.parameters or {}) if request is not None else {},
        )
        if not any(reads_inputs(case.when) for case in n.cases):
            index = int(decide([case.when for case in n.cases], facts)[0])
            name, target = (n.cases[index].name, n.cases[index].target) if index < len(n.cases) else (DEFAULT_CASE, n.default)
            parts.append(("case", name))
            return await visit(target, depth + 1)
        read = sorted({(c.field, _fact(request_value(c, facts))) for case in n.cases for c, _ in comparisons(case.when) if c.source != "inputs"})
        parts.append(("switch", tuple(read)))
        for child in n.children():
            if not await visit(child, depth + 1):
                return False
        return True

    return tuple(parts) if await visit(node, 0, True) else None


def held_bytes(outputs: Mapping[str, np.ndarray], limit: int) -> int:
    """The memory an answer's outputs hold, as the cache's byte bounds count it: an array's
    buffer and, for a string (object) output, each element's own object too. NumPy's `nbytes`
    counts an object array's pointers alone, 8 bytes for a string of a megabyte, so text
    answers would pass any bound. `sys.getsizeof` reads a string's or bytes' size without
    walking its text, and the count stops once over `limit` (such an answer is not kept), so
    no more elements are read than an answer within it can hold (each string is 49 bytes or
    more): this runs for every answer the cache is offered."""
    total = sum(int(array.nbytes) for array in outputs.values())
    for array in outputs.values():
        if array.dtype != object:
            continue
        flat = array.ravel()
        for start in range(0, flat.size, 4096):
            if total > limit:
                return total
            total += sum(map(sys.getsizeof, flat[start : start + 4096].tolist()))
    return total


def _fact(value: Any) -> str:
    from sluice.routing.conditions import OTHER

    return "(a list or an object)" if value is OTHER else repr(value)


def answer_key(
    dep: Deployment, route: Route, outputs: Sequence[str] | None, arrays: Mapping[str, np.ndarray]
) -> str:
    """The cache key: who, which revision and route, which outputs, and the inputs' bytes."""
    h = hashlib.blake2b(digest_size=20)
    h.update(repr((dep.tenant, dep.name, dep.revision, route, tuple(outputs) if outputs else None)).encode())
    for name in sorted(arrays):
        array = arrays[name]
        h.update(f"\x00{name}\x00{array.dtype.str}\x00{array.shape}\x00".encode())
        if array.dtype.kind == "O":  # strings: their values, each with its length
            for item in array.ravel():
                data = item if isinstance(item, bytes) else str(item).encode()
                h.update(len(data).to_bytes(8, "big"))
                h.update(data)
        else:
            h.update(np.ascontiguousarray(array))
    return h.hexdigest()


@dataclass(eq=False, slots=True)
class PredictionCache:
    """The per-container tier, one TLRUCache per deployment (at most its `max_entries`), all of
    them together at most `max_bytes` of outputs; and the optional shared tier. `timer` is the
    local tier's clock (monotonic), `wall` the shared tier's (epoch seconds, what DynamoDB's
    time to live reads)."""

    shared: SharedAnswers | None = None
    _: KW_ONLY
    max_entry_bytes: int = 1 << 20
    max_bytes: int = 128 << 20
    timer: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    # Values are (answer, bytes, expiry on `timer`): each tier's `currsize` is the bytes it
    # holds, and each answer goes at its own expiry (one read from the shared tier at what is
    # left of its time there, not a time to live of its own).
    _tiers: dict[tuple[str, str], tuple[CacheSettings, TLRUCache[str, tuple[Answer, int, float]]]] = field(
        default_factory=dict, init=False, repr=False
    )

    def _tier(self, dep: Deployment) -> TLRUCache[str, tuple[Answer, int, float]]:
        assert dep.cache is not None
        found = self._tiers.get((dep.tenant, dep.name))
        if found is None or found[0] != dep.cache:
            from cachetools import TLRUCache

            tier: TLRUCache[str, tuple[Answer, int, float]] = TLRUCache(
                maxsize=self.max_bytes, ttu=lambda _key, kept, _now: kept[2], timer=self.timer, getsizeof=lambda kept: kept[1]
            )
            found = self._tiers[(dep.tenant, dep.name)] = (dep.cache, tier)
        return found[1]

    def get(self, dep: Deployment, key: str) -> Answer | None:
        with self._lock:
            kept = self._tier(dep).get(key)
        return None if kept is None else kept[0]

    def put(self, dep: Deployment, key: str, answer: Answer, *, expires_at: float | None = None) -> bool:
        """Keep `answer` here, for the deployment's time to live or until `expires_at` (wall
        clock: an answer of the shared tier's, kept there until then); False when it is too big
        to keep, or the container's budget is held by other deployments' answers."""
        assert dep.cache is not None
        left = dep.cache.ttl_s if expires_at is None else min(dep.cache.ttl_s, expires_at - self.wall())
        if left <= 0:
            return False
        outputs = answer.result.outputs
        size = max(held_bytes(outputs, self.max_entry_bytes), 1)
        if size > self.max_entry_bytes:
            return False
        for name, array in outputs.items():
            if array.base is not None:  # a view (its rows of a joined call) keeps its whole buffer alive: keep what is counted
                outputs[name] = array = array.copy()
            array.flags.writeable = False  # shared by every hit from now on
        with self._lock:
            tier = self._tier(dep)
            tier.expire()
            tier.pop(key, None)
            while len(tier) >= dep.cache.max_entries:
                tier.popitem()  # the least recently used
            while len(tier) and self._held() + size > self.max_bytes:
                tier.popitem()
            if self._held() + size > self.max_bytes:
                return False
            tier[key] = (answer, size, self.timer() + left)
        return True

    def _held(self) -> int:
        return sum(int(tier.currsize) for _, tier in self._tiers.values())

    def drop(self, tenant: str, name: str) -> None:
        """Forget a deployment's answers (it changed or went)."""
        with self._lock:
            self._tiers.pop((tenant, name), None)

    async def get_shared(
        self, dep: Deployment, key: str, version_of: Callable[[str, str, int], Awaitable[ModelVersion]]
    ) -> Answer | None:
        """An answer another container kept, copied into this one's tier."""
        if self.shared is None:
            return None
        try:
            body = await asyncio.to_thread(self.shared.get_cached_answer, dep.tenant, dep.name, key, now=self.wall())
            if body is None:
                return None
            header, outputs = load_answer(body)
            expires_at = header.get("expires_at")
            if not isinstance(expires_at, float | int) or isinstance(expires_at, bool):
                expires_at = None
            elif expires_at <= self.wall():
                # Past its own time to live, whatever the tier kept it for (DynamoDB's is whole
                # seconds): never served, as `put` would not keep it either.
                return None
            version = await version_of(dep.tenant, header["model"], header["version"])
        except Exception:  # the shared tier is an optimization: never fail a request for it
            get_logger().warning("prediction cache: shared read failed", exc_info=True, extra={"deployment": dep.name})
            return None
        signature = header.get("signature")
        answer = Answer(
            version.signature if signature is None else Signature.from_dict(signature),
            InferenceResult(outputs, {k: list(v) for k, v in header["classes"].items()}),
            version,
            variant=header.get("variant"),
            members=header.get("members"),
            steps=header.get("steps"),
            case=header.get("case"),
            models=header.get("models"),
        )
        self.put(dep, key, answer, expires_at=expires_at)
        return answer

    async def put_shared(self, dep: Deployment, key: str, answer: Answer) -> None:
        if self.shared is None or dep.cache is None:
            return
        try:
            expires_at = self.wall() + dep.cache.ttl_s
            body = dump_answer(answer, expires_at=expires_at)
            await asyncio.to_thread(self.shared.put_cached_answer, dep.tenant, dep.name, key, body, expires_at=expires_at)
        except Exception:
            get_logger().warning("prediction cache: shared write failed", exc_info=True, extra={"deployment": dep.name})


# The shared tier's form of an answer: a JSON header (who answered, each output's v2 datatype
# and shape; string outputs' values; a graph's steps, case and answer signature), then the
# numeric outputs' bytes, little-endian, in header order. An output is named by its v2 datatype,
# read back through the one table (`sluice.codecs.datatypes`): NumPy's own name of a dtype it
# does not know (BF16's, `ml_dtypes.bfloat16`) would read back as raw bytes.
def dump_answer(answer: Answer, *, expires_at: float | None = None) -> bytes:
    specs: list[dict[str, Any]] = []
    tail: list[bytes] = []
    for name, array in answer.result.outputs.items():
        little = array.dtype.newbyteorder("<")
        datatype = v2_of_numpy(little)  # a dtype with no v2 name: not shared (the caller logs it)
        spec: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if datatype == "BYTES":
            spec["values"] = [v.decode() if isinstance(v, bytes) else str(v) for v in array.ravel().tolist()]
        else:
            tail.append(np.ascontiguousarray(array, dtype=little).tobytes())
        specs.append(spec)
    header = {
        "model": answer.version.model,
        "version": answer.version.version,
        "variant": answer.variant,
        "members": answer.members,
        "classes": answer.result.classes,
        "outputs": specs,
    }
    if expires_at is not None:  # when the shared tier lets it go: a container that copies it keeps it no longer
        header["expires_at"] = expires_at
    if answer.steps is not None or answer.case is not None:  # a graph's: who answered, and what it answers
        header.update(steps=answer.steps, case=answer.case, models=answer.models)
    if answer.signature != answer.version.signature:  # a sequence's last step, a transform, what it exposes
        header["signature"] = answer.signature.to_dict()
    head = json.dumps(header, separators=(",", ":")).encode()
    return len(head).to_bytes(4, "big") + head + b"".join(tail)


def load_answer(body: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    size = int.from_bytes(body[:4], "big")
    header = json.loads(body[4 : 4 + size])
    at = 4 + size
    outputs: dict[str, np.ndarray] = {}
    for spec in header["outputs"]:
        shape = tuple(spec["shape"])
        if spec.get("datatype", spec.get("dtype")) in ("BYTES", "O"):
            outputs[spec["name"]] = np.array(spec["values"], dtype=object).reshape(shape)
            continue
        dtype = _stored_dtype(spec)
        count = int(np.prod(shape, dtype=np.int64))
        outputs[spec["name"]] = np.frombuffer(body, dtype=dtype, count=count, offset=at).reshape(shape)
        at += count * dtype.itemsize
    return header, outputs


def _stored_dtype(spec: dict[str, Any]) -> np.dtype:
    """An output's dtype as the entry names it: a v2 datatype, little-endian; or, in an entry an
    earlier release wrote, NumPy's name, read where it is a number's or a bool's. Anything else
    (that release's raw bytes for BF16) raises: the entry is read as a miss, never served."""
    if "datatype" in spec:
        return answer_dtypes()[spec["datatype"]].newbyteorder("<")
    dtype = np.dtype(spec["dtype"])
    if dtype.kind not in "biuf":
        raise ValueError(f"a shared answer stored as {spec['dtype']!r}: no v2 datatype")
    return dtype
