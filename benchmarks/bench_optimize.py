"""`sluice optimize`'s candidates against their original, in process: p50 at batch 1 and 64
with the runtime's session options (1 intra-op thread), and artifact size, for the demo models
and the ~10 MB MLP. Each repeat measures every candidate in turn, so they share the machine's
noise; ratios are candidate / original within the same run. Goal: the MLP's INT8 candidates
at least 1.5x faster at batch 64 and 3x smaller, agreement with the original reported."""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

from benchmarks.common import Goal, figure
from benchmarks.prepare import MODELS, make_models

ROWS = 600


def _rows(name: str, signature: Any) -> dict[str, np.ndarray]:
    from sluice.batch.sample import generated_rows

    rng = np.random.default_rng(5)
    if name == "iris":  # inside the flowers' ranges, so every class turns up
        lows, highs = np.array([4.3, 2.0, 1.0, 0.1]), np.array([7.9, 4.4, 6.9, 2.5])
        return {"input": (lows + rng.random((ROWS, 4)) * (highs - lows)).astype(np.float32)}
    if name == "mlp_large":  # the range of the benchmark's own row
        return {"input": rng.uniform(-0.5, 0.5, (ROWS, 256)).astype(np.float32)}
    rows = generated_rows(signature, ROWS, seed=5)
    return {k: (v * 0.05).astype(v.dtype) for k, v in rows.items()}  # the diabetes features are scaled ~0.05


def run(quick: bool) -> dict[str, Any]:
    from sluice.optimize.candidates import build_candidates
    from sluice.optimize.measure import Timing, agreement, latencies, outputs_of, session_for
    from sluice.services.models import read_signature

    make_models()
    repeats, timing = (3, Timing(budget_s=0.3)) if quick else (5, Timing(budget_s=0.5))
    figures: list[dict[str, Any]] = []
    notes: list[str] = []
    for model in MODELS.values():
        data = model.path.read_bytes()
        signature = read_signature(data)
        rows = _rows(model.name, signature)
        calibration = {k: v[:200] for k, v in rows.items()}
        evaluation = {k: v[200:] for k, v in rows.items()}
        built = build_candidates(data, calibration=calibration)
        skipped = [f"{c.name} ({c.skipped})" for c in built if c.data is None]
        if skipped:
            notes.append(f"{model.name}: skipped " + "; ".join(skipped))
        ready = [c for c in built if c.data is not None]
        sessions = {c.name: session_for(c.data) for c in ready}
        reference = outputs_of(sessions["original"], evaluation)
        agreed = {c.name: agreement(signature, reference, outputs_of(sessions[c.name], evaluation)) for c in ready}
        p50: dict[str, dict[int, list[float]]] = {c.name: {1: [], 64: []} for c in ready}
        for _ in range(repeats):
            for c in ready:
                measured = latencies(sessions[c.name], evaluation, timing)
                p50[c.name][1].append(measured["p50_ms_b1"] * 1000)
                p50[c.name][64].append(measured["p50_ms_b64"] * 1000)
        size = {c.name: len(c.data or b"") for c in ready}
        for c in ready:
            if c.name == "original":
                continue
            a = agreed[c.name]
            said = (f"agreement {a['agreement']:.4f} [{a['agreement_ci95'][0]:.3f}, {a['agreement_ci95'][1]:.3f}] ({a['agreement_of']})"
                    if a.get("agreement") is not None else "no label")  # fmt: skip
            said += f"; max abs diff {a.get('max_abs_diff', 0):.3g}, mean {a.get('mean_abs_diff', 0):.3g} on {a['rows']} rows"
            int8 = model.name == "mlp_large" and c.name.startswith("int8")
            for batch in (1, 64):
                figures.append(figure(
                    f"optimize.{model.name}.{c.name}.p50_b{batch}", f"{model.name}: {c.name} p50 at batch {batch} vs the original",
                    "µs", c.name, p50[c.name][batch], reference="original", ref_values=p50["original"][batch],
                    goal=Goal("<=", round(1 / 1.5, 3)) if int8 and batch == 64 else None,
                    note=said if batch == 64 else None,
                ))  # fmt: skip
            figures.append(figure(
                f"optimize.{model.name}.{c.name}.size", f"{model.name}: {c.name} artifact size vs the original", "bytes",
                c.name, [size[c.name]], reference="original", ref_values=[size["original"]],
                goal=Goal("<=", round(1 / 3, 3)) if int8 else None,
            ))  # fmt: skip
    notes.append("session options as the ONNX runtime's defaults: 1 intra-op and 1 inter-op thread, sequential")
    return {"title": "Optimize: candidates vs the original (in process)", "figures": figures, "notes": notes}


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    for row in result["figures"]:
        ratio = f"{row['ratio']:.3f}x" if row["ratio"] is not None else "-"
        met = "" if row["met"] is None else (" MET" if row["met"] else " MISSED")
        print(f"{row['id']:<40} {row['value']['median']:>12.1f} {row['unit']:<5} vs {row['ref_value']['median']:>12.1f}  {ratio}{met}"
              + (f"  [{row['note']}]" if row.get("note") else ""))  # fmt: skip
    print("\n".join(result["notes"]))
    if "--json" in sys.argv:
        print(json.dumps(result, indent=2))
