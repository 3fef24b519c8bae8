"""`sluice cost` and `GET /api/v1/deployments/{name}/cost`: the deployment's measured latency,
priced on every runtime it could use, and the cheapest that meets a p99 target."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from sluice.cost import breakeven, model
from sluice.cost.prices import about, load_prices
from sluice.domain.errors import BadRequest, Unprocessable
from sluice.domain.policy import parse_policy, referenced_versions

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.registry import Registry
    from sluice.services.deployments import DeploymentService

# Which latency a runtime's price is read from: a triton version runs on a Triton server, as a
# SageMaker endpoint does.
KIND = {"onnx": "onnx", "sagemaker": "sagemaker", "triton": "sagemaker"}
CURVE_RATES = [10 ** (e / 4) for e in range(-16, 17)]  # 1e-4 .. 1e4 req/s, 4 a decade
# The workload's fields left out of a report when unset (each has a default the model derives).
OPTIONAL_WORK = ("batch_row_ms", "cpu_ms", "managed_instance_type")


@dataclass(frozen=True, slots=True)
class CostRequest:
    rps: float = 1.0
    p99_ms: float | None = None
    region: str = "us-east-1"
    instance_type: str = "ml.g5.xlarge"
    memory_mb: int = 2048
    architecture: str = "x86_64"
    instance_rps: float | None = None
    latencies: dict[str, tuple[float, float]] | None = None  # kind -> (p50, p99) given by the caller
    batch_row_ms: float | None = None
    sources: dict[str, str] | None = None  # kind -> where a given latency comes from (default "given")
    cpu_ms: float | None = None  # CPU a request uses, for managed instances (default: the onnx p50)
    managed_instance_type: str | None = None  # default: c7i.xlarge (x86_64) or c7g.xlarge (arm64)

    def check(self) -> None:
        if not 1e-6 <= self.rps <= 1e7:
            raise BadRequest("rps must be between 1e-6 and 1e7 predictions per second", field="rps")
        if self.p99_ms is not None and not 0 < self.p99_ms <= 3.6e6:
            raise BadRequest("p99_ms must be above 0 and at most an hour", field="p99_ms")
        if self.architecture not in ("x86_64", "arm64"):
            raise BadRequest("architecture is x86_64 or arm64", field="architecture")
        if not 128 <= self.memory_mb <= 10240:
            raise BadRequest("memory_mb is Lambda's: 128 to 10240", field="memory_mb")
        if self.instance_rps is not None and not 1e-3 <= self.instance_rps <= 1e7:
            raise BadRequest("instance_rps must be between 0.001 and 1e7", field="instance_rps")
        if self.cpu_ms is not None and not 1e-3 <= self.cpu_ms <= 3.6e6:
            raise BadRequest("cpu_ms must be between 0.001 and 3600000", field="cpu_ms")
        if self.batch_row_ms is not None and not 1e-3 <= self.batch_row_ms <= 3.6e6:
            raise BadRequest("batch_row_ms must be between 0.001 and 3600000", field="batch_row_ms")
        if self.managed_instance_type is not None:
            model.instance_vcpus(self.managed_instance_type)  # a C, M or R type, or a 400 naming it
        for kind, (p50, p99) in (self.latencies or {}).items():
            if kind not in ("onnx", "sagemaker"):
                raise BadRequest(f"latencies are given for onnx or sagemaker, not {kind!r}", field="latency")
            if not 1e-3 <= p50 <= p99 <= 3.6e6:
                raise BadRequest(f"latency of {kind}: need 0.001 <= p50 <= p99 <= 3600000 ms", field="latency")


class CostService:
    def __init__(self, registry: Registry, deployments: DeploymentService) -> None:
        self.registry = registry
        self.deployments = deployments

    def estimate(
        self, principal: Principal, name: str, request: CostRequest, *, prices_path: str | Path | None = None
    ) -> dict[str, Any]:
        principal.require("admin")
        request.check()
        dep = self.registry.get_deployment(principal.tenant, name)
        prices = load_prices(request.region, prices_path)
        stats = self.deployments.stats(principal, name)["overall"]
        kinds = sorted({KIND.get(self._runtime(principal.tenant, s.model, s.version), "onnx")
                        for s in referenced_versions(parse_policy(dep.policy))})  # fmt: skip
        latencies = self._latencies(name, kinds, stats, request.latencies or {}, request.sources or {})
        work = model.Workload(
            rps=request.rps, memory_mb=request.memory_mb, architecture=request.architecture,
            instance_type=request.instance_type, instance_rps=request.instance_rps, batch_row_ms=request.batch_row_ms,
            cpu_ms=request.cpu_ms, managed_instance_type=request.managed_instance_type,
        )  # fmt: skip
        found = model.options(prices, work, latencies)
        by_rate = breakeven.ranges(breakeven.cheapest_at(prices, work, latencies, request.p99_ms))
        best = model.recommend(found, request.p99_ms)
        chosen = None
        if best is not None:
            chosen = {"runtime": best.runtime, "usd_per_million": round(best.usd_per_million or 0, 4), "p99_ms": best.p99_ms}
        return {
            "deployment": name,
            "revision": dep.revision,
            "runs_on": kinds,
            "prices": about(prices),
            "workload": {k: v for k, v in asdict(work).items() if v is not None or k not in OPTIONAL_WORK},
            "latency": {kind: asdict(m) for kind, m in latencies.items()},
            "p99_target_ms": request.p99_ms,
            "options": [o.to_dict() for o in sorted(found, key=lambda o: o.usd_per_million or math.inf)],
            "recommendation": chosen,
            "why": _why(best, request.p99_ms),
            "cheapest_by_rate": by_rate,
        }

    def curves(
        self, principal: Principal, name: str, request: CostRequest, *, prices_path: str | Path | None = None
    ) -> tuple[list[float], dict[str, list[float]], dict[str, Any]]:
        """The same estimate over a range of traffic: rates, $ per million by runtime, the estimate."""
        report = self.estimate(principal, name, request, prices_path=prices_path)
        prices = load_prices(request.region, prices_path)
        latencies = {kind: model.Measured(**m) for kind, m in report["latency"].items()}
        work = model.Workload(**report["workload"])
        return CURVE_RATES, model.curves(prices, work, latencies, CURVE_RATES), report

    def _runtime(self, tenant: str, model_name: str, version: int) -> str:
        return self.registry.get_version(tenant, model_name, version).runtime

    @staticmethod
    def _latencies(
        name: str,
        kinds: list[str],
        stats: dict[str, Any],
        given: dict[str, tuple[float, float]],
        sources: dict[str, str],
    ) -> dict[str, model.Measured]:
        out = {kind: model.Measured(p50, p99, sources.get(kind, "given")) for kind, (p50, p99) in given.items()}
        measured = stats.get("latency_ms", {})
        if len(kinds) == 1 and stats.get("requests") and measured.get("p50") is not None and kinds[0] not in out:
            source = f"statistics: {stats['requests']} requests"
            out[kinds[0]] = model.Measured(float(measured["p50"]), float(measured["p99"]), source)
        if not out:
            raise Unprocessable(
                f"deployment '{name}' has no measured latency (no requests in this revision, or several runtimes mixed): "
                "send it traffic, or give latencies (onnx=P50/P99, sagemaker=P50/P99 in ms)",
                field="latency",
            )
        for kind in ("onnx", "sagemaker"):
            if kind not in out:
                known = next(iter(out.values()))
                other = next(k for k in out)
                out[kind] = model.Measured(known.p50_ms, known.p99_ms, f"assumed: {other}'s figure (none measured for {kind})")
        return out


def given_latencies(**pairs: tuple[float | None, float | None]) -> dict[str, tuple[float, float]]:
    """`kind=(p50, p99)` pairs as given (p99 defaults to p50; a p99 alone is refused)."""
    out: dict[str, tuple[float, float]] = {}
    for kind, (p50, p99) in pairs.items():
        if p50 is None and p99 is not None:
            raise BadRequest(f"{kind}_p99_ms needs {kind}_p50_ms", field=f"{kind}_p50_ms")
        if p50 is not None:
            out[kind] = (p50, p99 if p99 is not None else p50)
    return out


def _why(best: model.Option | None, p99_ms: float | None) -> str:
    if best is None:
        return f"no interactive runtime meets a p99 of {p99_ms:g} ms at these latencies" if p99_ms else "nothing to price"
    target = f" with a p99 at or under {p99_ms:g} ms" if p99_ms is not None else ""
    return f"{best.runtime} is the cheapest interactive runtime{target} at this traffic"
