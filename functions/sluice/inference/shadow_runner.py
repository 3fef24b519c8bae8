"""Running one shadow job: the mirror answers, its answer is compared and recorded."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sluice.domain.functions import FOR_MIRROR
from sluice.domain.policy import parse_policy
from sluice.domain.results import InferenceResult
from sluice.inference.compare import compare

if TYPE_CHECKING:
    from sluice.inference.predictions import PredictionService
    from sluice.inference.shadow_jobs import ShadowJob


class ShadowRunner:
    def __init__(self, predictions: PredictionService) -> None:
        self.predictions = predictions

    async def run(self, job: ShadowJob) -> None:
        stats = self.predictions.stats
        key = (job.tenant, job.deployment, job.revision, f"mirror:{job.mirror}")
        started = time.perf_counter()
        mirrored = FOR_MIRROR.set(True)  # its function steps wait on the mirrors' threads, never the primary's
        try:
            answer = await self.predictions.run_node(
                job.tenant, parse_policy(job.node, field="mirror"), job.inputs, budget_s=self.predictions.settings.request_timeout_s
            )
        except Exception:  # every failure is the mirror's error: a refusal, and running past its budget (TimeoutError) too
            stats.request(key, 0.0, ok=False)
            raise
        finally:
            FOR_MIRROR.reset(mirrored)
            if stats.due():
                stats.flush()
        latency_ms = (time.perf_counter() - started) * 1000
        stats.request(key, latency_ms, ok=True)
        primary = InferenceResult(job.primary_outputs, job.primary_classes)
        sums, maxes = compare(job.primary_signature or answer.signature, primary, answer.signature, answer.result)
        if job.primary_latency_ms > 0:
            sums["ratio_sum"] = latency_ms / job.primary_latency_ms
            sums["ratio_n"] = 1
        stats.add(key, sums, maxes)
        self.predictions.telemetry.shadow(
            fields={"deployment": job.deployment, "mirror": job.mirror, "tenant": job.tenant, "request_id": job.request_id},
            agreement=sums["agree"] / sums["labelled"] if sums.get("labelled") else None,
            mean_abs_diff=sums["diff_sum"] / sums["diff_n"] if sums.get("diff_n") else None,
            latency_ratio=sums.get("ratio_sum"),
        )
