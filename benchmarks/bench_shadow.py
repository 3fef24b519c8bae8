"""Primary latency with a shadow mirror on vs off, over HTTP on the local service: the client
gets the primary's answer before the mirror runs, so a mirror should cost it next to nothing.
Same model and input both ways; requests alternate between the two deployments."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import (
    REPO,
    Goal,
    alternating_latencies,
    figure,
    local_container,
    local_service,
)

ROW = [[5.9, 3.0, 5.1, 1.8]]


def _prepare(home: Path) -> None:
    container, principal = local_container(home)
    models = REPO / "models"
    container.models.push(principal, "iris", (models / "iris.onnx").read_bytes())
    container.models.push(principal, "iris", (models / "iris_forest.onnx").read_bytes())
    single = {"kind": "single", "model": "iris", "version": 1}
    container.deployments.create(principal, "plain", single)
    container.deployments.create(
        principal,
        "shadowed",
        {"kind": "shadow", "primary": single, "mirrors": [{"name": "forest", "target": {"kind": "single", "model": "iris", "version": 2}}]},
    )


def run(quick: bool) -> dict[str, Any]:
    repeats, n = (2, 300) if quick else (5, 1000)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        _prepare(home)
        with local_service(home) as (client, base):
            url = f"{base}/api/v1/predictions"
            p50s, p99s = alternating_latencies(client, url, ("plain", "shadowed"), ROW, repeats=repeats, n=n)
            stats = client.get(f"{base}/api/v1/deployments/shadowed/stats").json()
    compared = stats.get("mirrors", {}).get("forest", {}).get("compared")
    figures = [
        figure(
            "shadow.p50", "iris over HTTP (1 worker, 1 connection): p50 with a shadow mirror vs without", "µs",
            "shadow on", p50s["shadowed"], reference="shadow off", ref_values=p50s["plain"], goal=Goal("<=", 1.05),
            note=f"the mirror (random forest) ran and was compared {compared} times",
        ),
        figure("shadow.p99", "same, p99", "µs", "shadow on", p99s["shadowed"], reference="shadow off", ref_values=p99s["plain"]),
    ]  # fmt: skip
    return {"title": "Shadow mirror on vs off", "figures": figures, "notes": []}


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
