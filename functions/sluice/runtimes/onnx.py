"""ONNX Runtime in process, with sessions kept in an LRU bounded by artifact bytes."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import chain
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.domain.errors import (
    BackendError,
    InvalidInput,
    ModelFailed,
    Overloaded,
    PayloadTooLarge,
)
from sluice.domain.results import InferenceResult
from sluice.owner_only import no_external_data
from sluice.runtimes.onnx_categories import encoder_inputs, unknown_category

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sluice.domain import ModelVersion
    from sluice.domain.signature import Signature
    from sluice.settings import OnnxSettings
    from sluice.storage import ArtifactStore


log = logging.getLogger(__name__)

INLINE_CALL_NS = 5_000_000  # a small input's call runs on the event loop where the model's calls take at most this (5 ms)


def build_session(
    data: bytes, *, intra_op_threads: int = 1, inter_op_threads: int = 1, execution_mode: str = "sequential"
) -> Any:
    import onnxruntime as ort  # heavy: imported on first load, not at cold start

    from sluice.runtimes.onnx_constants import check_constant_sizes

    check_constant_sizes(data)  # before ORT folds the constants: a model of a few bytes may make gigabytes of them
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = inter_op_threads
    options.execution_mode = (
        ort.ExecutionMode.ORT_PARALLEL if execution_mode == "parallel" else ort.ExecutionMode.ORT_SEQUENTIAL
    )
    try:
        return ort.InferenceSession(data, no_external_data(options), providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own untyped errors for bad graphs (and for weights naming a file)
        if "external data" in str(exc).lower() or "external tensorproto" in str(exc).lower():  # a subgraph's say the latter
            raise InvalidInput("not a loadable ONNX model: its weights name a file (external data); send the model with its weights inside", field="artifact") from None
        raise InvalidInput(f"not a loadable ONNX model: {ort_words(exc)}", field="artifact") from None


_ORT_PREFIX = re.compile(r"\[ONNXRuntimeError\] : \d+ : \w+ : |status\.IsOK\(\) was false\.\s*")
_ORT_SOURCE = re.compile(r"/onnxruntime_src/\S+:\d+ ")
_ORT_SHORT_SOURCE = re.compile(r"(?<!\S)(?:\S*/)?\w+\.(?:cc|cpp|h):\d+ (?:[\w:~]+ )?")  # `tensorprotoutils.cc:1730 CopySparseData `
MAX_ORT_WORDS = 300


def ort_words(exc: Exception) -> str:
    """What ONNX Runtime says is wrong with a model, in its words without its own (its status
    code, the C++ source line and function that raised): `Opset 99 is under development…`,
    `Duplicate definition-site for (x)`, `tensor(complex64) is not currently registered`; its
    error's class name where it says nothing. (A model is loaded from bytes: no path of this
    machine's is in them.)"""
    text = _ORT_PREFIX.sub("", str(exc))
    source = _ORT_SOURCE.search(text)
    if source is not None:  # `<file>:<line> <C++ signature>) <the message>`
        rest = text[source.end() :]
        cut = rest.find(") ")
        text = rest[cut + 2 :] if cut >= 0 else rest
    text = " ".join(_ORT_SHORT_SOURCE.sub("", text).split())
    if not text:
        return type(exc).__name__
    return text if len(text) <= MAX_ORT_WORDS else f"{text[:MAX_ORT_WORDS]}…"


@dataclass(slots=True)
class _Entry:
    session: Any
    size: int
    output_names: list[str]
    options: dict[str, Any] = field(default_factory=dict)  # the session options it was built with
    ns_per_element: float | None = None  # what its calls have taken, per input element (a moving average)
    # What a call has taken, whatever its size: up at once with a slow call, down slowly (None:
    # no call yet). A model slow at any size (its cost fixed, or set by its inputs' values) never
    # runs on the event loop, where it would hold every other request of the worker.
    ns_per_call: float | None = None
    # Its OneHotEncoder nodes by name, with the graph inputs each reads from: read from the
    # model's bytes on the first call one of them refuses a category (`onnx_categories`).
    encoders: dict[str, tuple[str, ...]] | None = None

    def timed(self, ns: int, elements: int) -> None:
        known_call = self.ns_per_call
        self.ns_per_call = ns if known_call is None or ns > known_call else known_call + (ns - known_call) * 0.25
        if not elements:  # an empty input's call is the session's fixed cost: no rate per element
            return
        rate = ns / elements
        known = self.ns_per_element
        self.ns_per_element = rate if known is None else known + (rate - known) * 0.25

    def small_and_quick(self, elements: int, most_elements: int, most_ns: float) -> bool:
        """Whether a small input's call may run on the event loop: its calls so far took at
        most `most_ns` (unknown before the first, which runs on a thread)."""
        known = self.ns_per_call
        return elements <= most_elements and known is not None and known <= most_ns

    def quick(self, elements: int, budget_us: float) -> bool:
        """Whether a call on `elements` input values should take at most `budget_us`, as its
        calls have taken so far (unknown before the first)."""
        known = self.ns_per_element
        return known is not None and known * elements <= budget_us * 1000


class SessionCache:
    """LRU of sessions keyed by artifact checksum, bounded by the artifacts' total bytes.

    Safe under concurrent use: one load per key at a time, sessions shared (ORT's `run` is
    thread-safe). An entry larger than the bound is refused rather than evicting everything.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._loading: dict[str, list[Any]] = {}  # key -> [its lock, the calls holding or waiting on it]

    @property
    def bytes_used(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def loaded(self, key: str) -> _Entry | None:
        """The entry if loaded, not counted as a hit (a look before a call that counts one)."""
        return self._entries.get(key)

    def peek(self, key: str) -> _Entry | None:
        """The entry if loaded, counted as a hit; None (not counted) otherwise."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.hits += 1
            return entry

    def get_or_load(self, key: str, size: int, load: Callable[[], _Entry]) -> tuple[_Entry, bool]:
        """The entry, and whether this call loaded it (a miss) rather than found it (a hit):
        each call's own lookup, which telemetry counts with the prediction that made it."""
        entry = self.peek(key)
        if entry is not None:
            return entry, False
        if size > self.max_bytes:
            raise PayloadTooLarge(
                f"model artifact is {size} bytes, above the session cache bound of {self.max_bytes}",
                field="artifact",
            )
        with self._lock:  # the key's lock, held by each call that loads or waits to (a failed load leaves none behind)
            slot = self._loading.get(key)
            if slot is None:
                slot = self._loading[key] = [threading.Lock(), 0]
            slot[1] += 1
        try:
            with slot[0]:
                entry = self.peek(key)
                if entry is not None:
                    return entry, False
                entry = load()  # a failure leaves the next caller (waiting or new) to load afresh, one at a time
                with self._lock:
                    self.misses += 1
                    before = self._entries.pop(key, None)  # never there (loaded under the key's one lock): sized as it is all the same
                    if before is not None:
                        self._bytes -= before.size
                    self._entries[key] = entry
                    self._bytes += entry.size
                    while self._bytes > self.max_bytes and len(self._entries) > 1:
                        _, old = self._entries.popitem(last=False)
                        self._bytes -= old.size
                        self.evictions += 1
                return entry, True
        finally:
            with self._lock:
                slot[1] -= 1
                if not slot[1] and self._loading.get(key) is slot:
                    del self._loading[key]

    def adopt(self, other: SessionCache) -> None:
        """Takes the sessions `other` holds (a container rebuilt after a SnapStart restore keeps
        the models its predecessor loaded: a session holds no connection)."""
        with self._lock, other._lock:
            for key, entry in other._entries.items():
                if key not in self._entries:
                    self._entries[key] = entry
                    self._bytes += entry.size

    def discard(self, key: str) -> None:
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is not None:
                self._bytes -= entry.size

    def stats(self) -> dict[str, int]:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
            "sessions": len(self._entries),
            "bytes": self._bytes,
            "max_bytes": self.max_bytes,
        }


def as_array(name: str, value: Any) -> tuple[np.ndarray, list[int | str] | None]:
    """ORT gives tensors as arrays and ZipMap outputs as a list of {label: probability}."""
    if isinstance(value, np.ndarray):
        return value, None
    if isinstance(value, list) and (not value or isinstance(value[0], dict)):
        labels = list(value[0].keys()) if value else []
        # ZipMap gives every row the same keys in the same order: read the values straight
        # into one buffer rather than building a list per row.
        flat = np.fromiter(chain.from_iterable(map(dict.values, value)), dtype=np.float32, count=len(value) * len(labels))
        return flat.reshape(len(value), len(labels)), labels
    raise BackendError(f"output '{name}' has a type sluice cannot return")


class OnnxRuntime:
    """Runs ONNX versions in this process."""

    kind = "onnx"
    runs_in_line = True  # no client of its own: its waits are threads (`sluice.inline`)

    def __init__(self, store: ArtifactStore, settings: OnnxSettings) -> None:
        self.store = store
        self.settings = settings
        self.cache = SessionCache(settings.model_cache_bytes)
        # The calls that run on threads (asyncio's own default: min(32, CPUs + 4)), and how many
        # of them a tenant's abandoned calls may hold: half.
        self.threads = min(32, (os.cpu_count() or 1) + 4)
        self.abandoned_limit = max(1, self.threads // 2)
        self._abandoned: dict[str, int] = {}
        self._lock = threading.Lock()
        self._pool: Any = None

    def session_options(self, version: ModelVersion) -> dict[str, Any]:
        """The options a version loads with: those tuned for it at this machine's size, or the
        settings' threads."""
        from sluice.domain.objects import pick_tuning

        tuned = pick_tuning(version.session_options, machine_vcpus(self.settings)) if self.settings.ort_tuned_sessions else None
        if tuned is not None:
            return {
                "intra_op_threads": tuned.intra_op_threads,
                "inter_op_threads": tuned.inter_op_threads,
                "execution_mode": tuned.execution_mode,
            }
        return {
            "intra_op_threads": self.settings.ort_intra_op_threads,
            "inter_op_threads": self.settings.ort_inter_op_threads,
            "execution_mode": "sequential",
        }

    def _load_entry(self, version: ModelVersion) -> _Entry:
        data = self.store.get(version.artifact_uri, sha256=version.sha256)
        options = self.session_options(version)
        session = build_session(data, **options)
        return _Entry(session, len(data), [o.name for o in session.get_outputs()], options=options)

    def _entry(self, version: ModelVersion) -> tuple[_Entry, bool]:
        return self.cache.get_or_load(version.sha256, version.size_bytes, lambda: self._load_entry(version))

    def _run(
        self, version: ModelVersion, inputs: dict[str, np.ndarray], outputs: Sequence[str] | None, elements: int
    ) -> InferenceResult:
        entry, loaded = self._entry(version)
        names = list(outputs) if outputs else entry.output_names
        started = perf_counter_ns()
        try:
            raw = entry.session.run(names, inputs)
        except Exception as exc:
            node = unknown_category(exc)
            raise (_runtime_error(exc) if node is None else self._unknown_category(node, version, entry)) from None
        entry.timed(perf_counter_ns() - started, elements)
        result = InferenceResult({}, loaded=loaded)
        for name, value in zip(names, raw, strict=True):
            array, labels = as_array(name, value)
            result.outputs[name] = array
            if labels is not None:
                result.classes[name] = labels
                result.maps[name] = value
        return result

    def _unknown_category(self, node: str, version: ModelVersion, entry: _Entry) -> InvalidInput:
        """A category the model's one-hot encoder `node` never saw: the caller's value, a 400
        naming the input it came in where one alone feeds the encoder."""
        if entry.encoders is None:
            try:
                data = self.store.get(version.artifact_uri, sha256=version.sha256)
            except Exception:  # unread: the answer names no input rather than failing
                log.warning("model bytes unread to name an input", exc_info=True)
                data = b""
            entry.encoders = encoder_inputs(data)
        fed = entry.encoders.get(node) or tuple(i.name for i in entry.session.get_inputs())
        if len(fed) == 1:
            return InvalidInput(
                f"input '{fed[0]}' holds a category the model never saw in training (its one-hot encoder takes none other)",
                field=f"inputs.{fed[0]}",
            )
        return InvalidInput("an input holds a category the model never saw in training (its one-hot encoder takes none other)", field="inputs")

    async def load(self, version: ModelVersion) -> None:
        if version.sha256 not in self.cache:
            await asyncio.to_thread(self._entry, version)

    async def infer(
        self,
        version: ModelVersion,
        inputs: dict[str, np.ndarray],
        outputs: Sequence[str] | None = None,
    ) -> InferenceResult:
        # A call that takes little runs on the loop: a thread hop costs more than the model (some
        # 100-300 µs of CPU and two context switches). Small inputs do, and large ones of a model
        # whose calls have been quick for their size (a 1 MiB tensor summed: ~60 µs). Anything
        # else goes to a thread, where ONNX Runtime computes without the GIL.
        elements = sum(a.size for a in inputs.values())
        entry = self.cache.loaded(version.sha256)
        if entry is not None and (
            entry.small_and_quick(elements, self.settings.inline_infer_elements, INLINE_CALL_NS) or entry.quick(elements, self.settings.inline_infer_us)
        ):  # fmt: skip
            return self._run(version, inputs, outputs, elements)
        return await self._in_thread(version, inputs, outputs, elements)

    async def _in_thread(self, version: ModelVersion, inputs: dict[str, np.ndarray], outputs: Sequence[str] | None, elements: int) -> InferenceResult:
        """The call on one of the runtime's own threads (reads of the registry, on the loop's
        default threads, never wait behind models). A call whose request gave up (its budget
        spent) runs on to its end, as ONNX Runtime cannot be stopped: while a tenant has
        `abandoned_limit` such calls still running, its next call that needs a thread is
        refused (503, `Retry-After`) rather than queued behind them, so that a tenant's slow
        model holds at most that many of the threads every tenant's calls share."""
        import contextvars

        tenant = version.tenant
        held = self._abandoned.get(tenant, 0)
        if held >= self.abandoned_limit:
            raise Overloaded(
                f"{held} calls of this tenant's models that ran past their requests' budget are still running here: try again later",
                retry_after_s=1,
            )
        future = self._threads().submit(contextvars.copy_context().run, self._run, version, inputs, outputs, elements)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if not future.done():
                with self._lock:
                    self._abandoned[tenant] = self._abandoned.get(tenant, 0) + 1
                future.add_done_callback(lambda _: self._ended(tenant))
            raise

    def _ended(self, tenant: str) -> None:
        with self._lock:
            left = self._abandoned.get(tenant, 0) - 1
            if left > 0:
                self._abandoned[tenant] = left
            else:
                self._abandoned.pop(tenant, None)

    def _threads(self) -> Any:
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="sluice-onnx")
        return self._pool

    async def unload(self, version: ModelVersion) -> None:
        self.cache.discard(version.sha256)

    async def metadata(self, version: ModelVersion) -> Signature:
        from sluice.runtimes.onnx_signature import signature_from_session

        entry, _ = await asyncio.to_thread(self._entry, version)
        return signature_from_session(entry.session)


def machine_vcpus(settings: OnnxSettings) -> int:
    """The vCPUs this process may use: set, or Lambda's share for its memory, or the CPU count."""
    import os

    from sluice.domain.objects import vcpus_for_memory
    from sluice.settings import lambda_memory_mb

    if settings.ort_vcpus:
        return settings.ort_vcpus
    memory = lambda_memory_mb()
    if memory is not None:
        return vcpus_for_memory(memory)
    return os.cpu_count() or 1


def _runtime_error(exc: Exception) -> Exception:
    # ORT's pybind errors carry the class name of the failure; bad shapes and types are the
    # caller's fault, everything else is the backend's. The raw text stays in the logs.
    kind = type(exc).__name__
    log.warning("onnxruntime run failed", extra={"error_type": kind, "error": str(exc)[:500]})
    if kind == "InvalidArgument":
        return InvalidInput("the model rejected the input (shape or type)", field="inputs")
    if kind in ("Fail", "RuntimeException"):  # the graph failed on these values: again if tried again
        return ModelFailed(f"the ONNX runtime failed ({kind})")
    return BackendError(f"the ONNX runtime failed ({kind})")
