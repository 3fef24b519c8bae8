"""Primary latency with data capture at 100% vs off, over HTTP on the local service: every
request of `captured` is queued for the capture thread, which writes JSON Lines under the
home; the answer must not wait on it. Same model and input both ways; requests alternate
between the two deployments. Reports, never asserts.

    python -m benchmarks.bench_capture [--quick]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
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
    container.models.push(principal, "iris", (REPO / "models" / "iris.onnx").read_bytes())
    single = {"kind": "single", "model": "iris", "version": 1}
    container.deployments.create(principal, "plain", single)
    container.deployments.create(
        principal, "captured", single, capture={"sample_percent": 100, "include": ["inputs", "outputs"], "redact": ["petal_width"]}
    )


def run(quick: bool) -> dict[str, Any]:
    repeats, n = (2, 300) if quick else (5, 1000)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        _prepare(home)
        with local_service(home) as (client, base):
            url = f"{base}/api/v1/predictions"
            p50s, p99s = alternating_latencies(client, url, ("plain", "captured"), ROW, repeats=repeats, n=n)
            time.sleep(1.0)  # the capture thread's last batch
        written = sum(len(f.read_text().splitlines()) for f in (home / "capture").rglob("*.jsonl"))
    sent = 50 + repeats * n
    figures = [
        figure(
            "capture.p50", "iris over HTTP (1 worker, 1 connection): p50 with data capture at 100% vs off", "µs",
            "capture on", p50s["captured"], reference="capture off", ref_values=p50s["plain"], goal=Goal("<=", 1.05),
            note=f"{written} of {sent} captured requests written as JSON Lines",
        ),
        figure("capture.p99", "same, p99", "µs", "capture on", p99s["captured"], reference="capture off", ref_values=p99s["plain"]),
    ]  # fmt: skip
    return {"title": "Data capture at 100% vs off", "figures": figures, "notes": []}


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
