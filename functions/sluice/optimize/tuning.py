"""Sweep ONNX Runtime's thread settings and execution mode for each Lambda size.

Lambda gives CPU in proportion to memory: 1 vCPU at 1769 MB, 2 at 3538, 3 at 5307, 4 at 7076,
5 at 8845 and 6 at 10240 MB (the maximum). For each size the sweep tries intra-op threads up to
its vCPUs, sequential and parallel execution (inter-op threads 1 or 2), at batch 64, and keeps
the fastest. A size with more vCPUs than this machine has cores cannot be measured here: it
takes the largest measured size's best, with intra-op threads scaled to its vCPUs when that
best used every core, and says on which core count it was measured.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sluice.domain.objects import MAX_VCPUS, MB_PER_VCPU, SessionTuning
from sluice.optimize.measure import Timing, p50_ms, rows_at, session_for

if TYPE_CHECKING:
    import numpy as np

MAX_MEMORY_MB = 10240


def lambda_sizes(max_vcpus: int = MAX_VCPUS) -> list[tuple[int, int]]:
    """(vCPUs, memory MB) for each whole vCPU Lambda gives."""
    return [(v, min(v * MB_PER_VCPU, MAX_MEMORY_MB)) for v in range(1, max_vcpus + 1)]


def settings_for(vcpus: int) -> list[tuple[int, int, str]]:
    """(intra-op threads, inter-op threads, execution mode) worth trying on `vcpus`."""
    tries = [(intra, 1, "sequential") for intra in sorted({1, 2, 4, vcpus}) if intra <= vcpus]
    if vcpus >= 2:
        tries.append((max(1, vcpus // 2), 2, "parallel"))
    return tries


def sweep(
    data: bytes, rows: dict[str, np.ndarray], *, timing: Timing, cores: int | None = None, batch: int = 64
) -> tuple[SessionTuning, ...]:
    cores = cores or os.cpu_count() or 1
    feed = rows_at(rows, batch)
    measured: dict[tuple[int, int, str], float] = {}
    best: list[SessionTuning] = []
    for vcpus, memory in lambda_sizes():
        if vcpus > cores:
            top = best[-1]
            scaled = vcpus if top.intra_op_threads >= top.vcpus else top.intra_op_threads
            best.append(SessionTuning(vcpus, memory, scaled, top.inter_op_threads, top.execution_mode, None, cores))
            continue
        results = []
        for intra, inter, mode in settings_for(vcpus):
            key = (intra, inter, mode)
            if key not in measured:  # the same setting measures the same on a larger size here
                session = session_for(data, intra_op_threads=intra, inter_op_threads=inter, execution_mode=mode)
                measured[key] = p50_ms(lambda s=session: s.run(None, feed), timing)
            results.append((measured[key], intra, inter, mode))
        p50, intra, inter, mode = min(results)
        best.append(SessionTuning(vcpus, memory, intra, inter, mode, p50, cores))  # type: ignore[arg-type]
    return tuple(best)
