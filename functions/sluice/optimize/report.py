"""The verdict: which candidate to take under the user's accuracy budget, and what the GPU
path (Triton's ONNX Runtime backend with TensorRT) should use. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Below this, a "faster" candidate is within the noise of a shared machine.
MIN_SPEEDUP = 1.1
COLUMNS = ("candidate", "size_bytes", "size_ratio", "p50_ms_b1", "p50_ms_b64", "speedup_b64", "peak_mem_mb",
           "agreement", "agreement_ci95", "max_abs_diff", "mean_abs_diff", "within_budget", "note")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Budget:
    min_agreement: float = 0.99  # label (or top-1) agreement with the original
    max_abs_diff: float | None = None  # on every numeric output; None: not checked

    def misses(self, row: dict[str, Any]) -> str | None:
        """Why a measured candidate is outside the budget, or None."""
        agreement = row.get("agreement")
        if agreement is None and self.max_abs_diff is None:  # nothing bounds it: none is within a budget
            return "no label or scores to measure its agreement on: give a max abs diff to bound its values"
        if agreement is not None and agreement < self.min_agreement:
            return f"agreement {agreement:.4f} < {self.min_agreement}"
        diff = row.get("max_abs_diff")
        if self.max_abs_diff is not None and diff is not None and not diff <= self.max_abs_diff:  # NaN: never within
            return f"max abs diff {diff:.3g} > {self.max_abs_diff}"
        if row.get("unlike_non_finite"):
            return f"{row['unlike_non_finite']} values NaN or infinite in one answer and not in the other"
        return None


def judge(rows: list[dict[str, Any]], budget: Budget) -> dict[str, Any]:
    """Mark each row within budget or not; recommend the fastest at batch 64 that is within
    budget and at least `MIN_SPEEDUP` times faster than the original, or keep the original."""
    original = next(r for r in rows if r["candidate"] == "original")
    for row in rows:
        if row.get("skipped"):
            row["within_budget"] = None
            continue
        row["size_ratio"] = round(original["size_bytes"] / row["size_bytes"], 3) if row["size_bytes"] else None
        row["speedup_b64"] = round(original["p50_ms_b64"] / row["p50_ms_b64"], 3) if row["p50_ms_b64"] else None
        miss = None if row["candidate"] == "original" else budget.misses(row)
        row["within_budget"] = miss is None
        if miss:
            row["note"] = miss
    eligible = [r for r in rows if r["candidate"] != "original" and r.get("within_budget")
                and (r.get("speedup_b64") or 0) >= MIN_SPEEDUP]  # fmt: skip
    if not eligible:
        return {
            "candidate": "original",
            "why": f"no candidate within the budget is {MIN_SPEEDUP}x or more faster than the original at batch 64",
        }
    best = min(eligible, key=lambda r: r["p50_ms_b64"])
    why = (
        f"{best['speedup_b64']}x faster at batch 64 and {best['size_ratio']}x smaller than the original, "
        f"within the budget (min agreement {budget.min_agreement}"
        + (f", max abs diff {budget.max_abs_diff})" if budget.max_abs_diff is not None else ")")
    )
    return {"candidate": best["candidate"], "why": why}


def triton_advice(rows: list[dict[str, Any]], budget: Budget, ref: str = "MODEL:VERSION") -> dict[str, Any]:
    """What a GPU endpoint's Triton repository should use. FP16 on a GPU is what the fp16
    candidate predicts (its CPU timing says nothing about a GPU); INT8 under TensorRT needs
    the calibration the static candidate did, which the repository builder does not carry."""
    by_name = {r["candidate"]: r for r in rows}
    choices = (  # (the advice, its candidate, why to use it, why not)
        ("tensorrt_fp16", "fp16",
         "the FP16 candidate is within the budget: build the repository with "
         f"`sluice triton repo {ref} --flavour sagemaker --tensorrt-fp16 --out model.tar.gz`",
         "FP16 misses the budget"),
        ("tensorrt_int8", "int8-static",
         "static INT8 is within the budget: push the int8-static (QDQ) candidate as its own version; "
         "TensorRT runs its Q/DQ nodes as explicit INT8, with no calibration table to carry",
         "static INT8 misses the budget"),
    )  # fmt: skip
    advice: dict[str, Any] = {}
    for key, candidate, use, miss in choices:
        row = by_name.get(candidate, {})
        if row.get("skipped"):
            advice[key] = {"use": False, "why": row["skipped"]}
        elif row:  # tried
            ok = row.get("within_budget") is True
            advice[key] = {"use": ok, "why": use if ok else f"{miss}: {row.get('note')}"}
    return advice


def table_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The report's rows as strings, for the CLI's table."""
    shown = []
    for row in rows:
        if row.get("skipped"):
            shown.append({"candidate": row["candidate"], "note": f"skipped: {row['skipped']}"})
            continue
        out = {c: row.get(c) for c in COLUMNS}
        ci = row.get("agreement_ci95")
        out["agreement_ci95"] = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-"
        for key in ("max_abs_diff", "mean_abs_diff"):
            out[key] = f"{row[key]:.3g}" if row.get(key) is not None else "-"
        shown.append({k: ("-" if v is None else v) for k, v in out.items()})
    return shown
