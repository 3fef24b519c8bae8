"""How a candidate runs and how far it is from the original: p50 latency at batch 1 and 64
with the runtime's own session options, peak memory, and agreement on evaluation rows."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.domain.signature import DYNAMIC
from sluice.stats.verdicts import wilson

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.domain.signature import Signature

BATCHES = (1, 64)


@dataclass(frozen=True, slots=True)
class Timing:
    """How long to measure each batch size: at least `min_runs` runs, then until `budget_s`."""

    budget_s: float = 1.0
    min_runs: int = 5
    warmup: int = 2


def session_for(data: bytes, **options: Any) -> Any:
    """A session as the ONNX runtime builds one (`sluice.runtimes.onnx.build_session`)."""
    from sluice.runtimes.onnx import build_session

    return build_session(data, **options)


def rows_at(rows: dict[str, np.ndarray], batch: int) -> dict[str, np.ndarray]:
    """The first `batch` rows, repeated when there are fewer."""
    out = {}
    for name, array in rows.items():
        reps = -(-batch // len(array))
        out[name] = np.concatenate([array] * reps)[:batch] if reps > 1 else array[:batch]
    return out


def p50_ms(run: Callable[[], Any], timing: Timing) -> float:
    for _ in range(timing.warmup):
        run()
    samples: list[float] = []
    deadline = time.perf_counter() + timing.budget_s
    while len(samples) < timing.min_runs or time.perf_counter() < deadline:
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1000)
        if len(samples) >= 10_000:
            break
    return round(statistics.median(samples), 4)


def latencies(session: Any, rows: dict[str, np.ndarray], timing: Timing) -> dict[str, float]:
    out = {}
    for batch in BATCHES:
        feed = rows_at(rows, batch)
        out[f"p50_ms_b{batch}"] = p50_ms(lambda feed=feed: session.run(None, feed), timing)
    return out


def peak_memory_mb(data: bytes, rows: dict[str, np.ndarray], **options: Any) -> float | None:
    """How far resident memory rises above a fresh process's (numpy and ONNX Runtime imported)
    while it builds a session and runs batch 64. Measured in a child process: in this one,
    memory freed by the previous candidate would be reused and hide the next one's. Linux
    resets the peak (`VmHWM`) on writing 5 to /proc/self/clear_refs; None elsewhere."""
    import json
    import subprocess
    import sys
    import tempfile

    if not Path("/proc/self/clear_refs").exists():
        return None
    with tempfile.TemporaryDirectory(prefix="sluice-memory-") as tmp:
        model, feed = Path(tmp) / "model.onnx", Path(tmp) / "rows.npz"
        model.write_bytes(data)
        # Text as fixed-width Unicode, not objects (which only pickle could carry): the child
        # reads the file without unpickling and gives ONNX Runtime objects again.
        np.savez(feed, **{k: v.astype(str) if v.dtype == object else v for k, v in rows_at(rows, 64).items()})
        done = subprocess.run(
            [sys.executable, "-m", "sluice.optimize.memory", str(model), str(feed), json.dumps(options)],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
    try:
        return float(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def outputs_of(session: Any, rows: dict[str, np.ndarray], batch: int = 256) -> dict[str, np.ndarray]:
    """Every output over all rows, run `batch` rows at a time; ZipMap outputs as arrays."""
    from sluice.runtimes.onnx import as_array

    names = [o.name for o in session.get_outputs()]
    # An output declared without a batch dimension (a scalar, a constant) is the same whole for
    # every batch: kept once, compared as it is; the rest joined row by row.
    whole = {o.name for o in session.get_outputs() if not o.shape or isinstance(o.shape[0], int)}
    n = len(next(iter(rows.values())))
    parts: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for at in range(0, n, batch):
        feed = {k: v[at : at + batch] for k, v in rows.items()}
        for name, value in zip(names, session.run(names, feed), strict=True):
            parts[name].append(as_array(name, value)[0])
    return {name: chunks[0] if name in whole or not chunks[0].ndim else np.concatenate(chunks) for name, chunks in parts.items()}


def agreement(signature: Signature, original: dict[str, np.ndarray], candidate: dict[str, np.ndarray]) -> dict[str, Any]:
    """Label agreement (with a Wilson 95% interval) and the max and mean absolute difference
    of every numeric output. Without a label output, a values output of width > 1 is read as
    scores: the agreement is that of its argmax (top-1). The rows are those of the outputs
    declared with a batch dimension (an output without one is compared whole)."""
    rowed = [original[s.name] for s in signature.outputs if s.name in original and s.shape and s.shape[0] == DYNAMIC and original[s.name].ndim]
    first = next(iter(original.values()))
    n = len(rowed[0]) if rowed else (len(first) if first.ndim else 1)
    # The label: the output whose role says so, or one that names a class a row (integers,
    # booleans or text, one or a few a row; a network that ends in ArgMax has only that). Read
    # by name alone, a single label output measured no agreement and any candidate passed.
    label = next((s.name for s in signature.outputs if s.role == "label"), None) or next(
        (s.name for s in signature.outputs if s.name in original and original[s.name].dtype.kind in "biuOSU" and original[s.name].ndim in (1, 2)),
        None,
    )  # fmt: skip
    diffs: list[np.ndarray] = []
    unlike = 0  # values NaN or infinite in one answer and not the same in the other
    for spec in signature.outputs:
        a, b = original.get(spec.name), candidate.get(spec.name)
        if a is None or b is None or a.dtype.kind not in "fiu":
            continue
        a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
        finite = np.isfinite(a64) & np.isfinite(b64)
        unlike += int(np.count_nonzero(~finite & ~((a64 == b64) | (np.isnan(a64) & np.isnan(b64)))))
        diffs.append(np.abs(a64[finite] - b64[finite]))  # a row the original answers NaN (a NaN input) is no difference
    result: dict[str, Any] = {"rows": n}
    agree: int | None = None
    if label is not None:
        # A row agrees where all its labels do (a multi-label model names several a row: counted
        # by element, its agreement read 3.0 and the interval failed)
        agree = int(np.sum((original[label] == candidate[label]).reshape(n, -1).all(axis=1)))
        result["agreement_of"] = f"label ({label})"
    else:
        scores = next((s.name for s in signature.outputs if original[s.name].ndim == 2 and original[s.name].shape[1] > 1
                       and original[s.name].dtype.kind == "f"), None)  # fmt: skip
        if scores is not None:
            agree = int(np.sum(original[scores].argmax(1) == candidate[scores].argmax(1)))
            result["agreement_of"] = f"argmax of {scores}"
    if agree is not None:
        result["agreement"] = round(agree / n, 6)
        result["agreement_ci95"] = wilson(agree, n)
    if diffs:
        every = np.concatenate(diffs)
        result["max_abs_diff"] = float(every.max()) if every.size else 0.0
        result["mean_abs_diff"] = float(every.mean()) if every.size else 0.0
        if unlike:
            result["unlike_non_finite"] = unlike
    return result
