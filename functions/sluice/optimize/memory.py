"""The child process `peak_memory_mb` runs: `python -m sluice.optimize.memory MODEL ROWS OPTIONS`
prints the MB its resident memory rose while building a session and running the rows."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def main(model: str, rows: str, options: str) -> None:
    import numpy as np
    import onnxruntime  # noqa: F401  (imported before the baseline: every process has it)

    from sluice.runtimes.onnx import build_session

    feed = {k: v.astype(object) if v.dtype.kind == "U" else v for k, v in np.load(rows).items()}  # text: objects again
    data = Path(model).read_bytes()
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_kb("VmRSS")
    session = build_session(data, **json.loads(options))
    session.run(None, feed)
    print(round(max(_status_kb("VmHWM") - before, 0) / 1024, 2))


if __name__ == "__main__":
    main(*sys.argv[1:4])
