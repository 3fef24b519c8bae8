"""A 3-member ensemble against its slowest member alone, in process through the prediction
service (the same code the API runs). Members are float MLPs of different widths that take
the same input: the slowest is the ~10 MB one, so a concurrent fan-out costs about the
slowest member, and a sequential one would cost the sum."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, Goal, figure, percentile, rotate

WIDTHS = {"wide": 1024, "mid": 256, "narrow": 64}
BATCH = 64


def _setup(home: Path) -> Any:
    sys.path.insert(0, str(REPO / "scripts"))
    from make_demo_models import large_mlp

    from sluice.domain import Principal
    from sluice.settings import Settings
    from sluice.wiring import Container

    container = Container.from_settings(Settings(mode="local", home=home, log_level="WARNING"))
    principal = Principal("bench", frozenset({"admin", "predict"}), "bench")
    for name, width in WIDTHS.items():
        version = container.models.push(principal, name, large_mlp(width=width))
        container.deployments.create(principal, name, {"kind": "single", "model": name, "version": version.version})
    members = [{"name": n, "target": {"kind": "single", "model": n, "version": 1}} for n in WIDTHS]
    container.deployments.create(principal, "ensemble", {"kind": "ensemble", "aggregator": "mean", "members": members})
    return container, principal


def _timings(container: Any, principal: Any, deployment: str, rows: Any, n: int) -> list[float]:
    from sluice.domain.requests import ArrayInputs, PredictionRequest

    service = container.predictions
    request = PredictionRequest(deployment, ArrayInputs({"input": rows}))

    async def go() -> list[float]:
        out = []
        for _ in range(n):
            started = time.perf_counter()
            await service.predict(principal, request)  # the one call every entry point makes
            out.append((time.perf_counter() - started) * 1e6)
        return out

    return asyncio.run(go())


def run(quick: bool) -> dict[str, Any]:
    import numpy as np

    repeats, n = (2, 100) if quick else (5, 300)
    rows = np.random.default_rng(0).normal(size=(BATCH, 256)).astype(np.float32)
    with tempfile.TemporaryDirectory() as home:
        container, principal = _setup(Path(home))
        for name in ("wide", "ensemble"):
            _timings(container, principal, name, rows, 20)  # load and warm
        results: dict[str, list[float]] = {"wide": [], "ensemble": []}
        for r in range(repeats):
            for name in rotate(["wide", "ensemble"], r):
                results[name].append(percentile(_timings(container, principal, name, rows, n), 50))
    row = figure(
        "ensemble.vs_slowest",
        f"3-member ensemble (mean of MLPs 1024/256/64 wide), batch {BATCH}: p50",
        "µs", "ensemble", results["ensemble"], reference="its slowest member alone", ref_values=results["wide"],
        goal=Goal("<=", 1.2), note="in process through PredictionService; members run concurrently on ORT threads",
    )  # fmt: skip
    return {"title": "Ensemble vs its slowest member", "figures": [row], "notes": []}


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
