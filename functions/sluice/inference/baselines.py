"""A deployment's baseline profile from rows of its training data: the inputs as given, and
the outputs its primary version answers for them, scored in batches straight through the
version's runtime (no statistics, no profiles, no mirrors: this is not traffic). A policy
whose callers send what its primary version does not take (a leading transform step) gets a
baseline of its inputs alone."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.domain.results import rows_of
from sluice.monitor.sketches import Profile

if TYPE_CHECKING:
    import numpy as np

    from sluice.domain import Principal
    from sluice.inference.predictions import PredictionService

BATCH_ROWS = 4096


async def baseline_profile(
    service: PredictionService, principal: Principal, name: str, arrays: dict[str, np.ndarray], *, max_columns: int, outputs: bool = True
) -> Profile:
    resolved = await service.resolve(principal, name)
    signature = resolved.version.signature
    checked = service._check(signature, arrays)
    version = await service.version_of(principal.tenant, resolved.version.model, resolved.version.version)
    runtime = service.runtimes.get(version.runtime)
    scored = outputs and runtime is not None and version.signature.inputs == signature.inputs
    n = rows_of(checked)
    profile = Profile()
    for start in range(0, n, BATCH_ROWS):
        part = {k: v[start : start + BATCH_ROWS] for k, v in checked.items()}
        if scored:
            result = await runtime.infer(version, part)  # type: ignore[union-attr]
            profile.add_rows(part, result.outputs, signature, result.classes, max_columns=max_columns)
        else:
            profile.add_rows(part, None, signature, max_columns=max_columns)
    return profile
