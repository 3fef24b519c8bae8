"""A prediction: resolve the deployment, check the input, run it within its budget."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.caching import TTLCache
from sluice.errors import DeadlineExceeded, SluiceError, Unavailable
from sluice.routing import parse_policy, pick_target
from sluice.validation import check_inputs

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import numpy as np

    from sluice.domain import Deployment, ModelVersion, Principal
    from sluice.observability import Telemetry
    from sluice.registry import Registry
    from sluice.runtimes import InferenceResult, Runtime
    from sluice.settings import Settings


@dataclass(frozen=True, slots=True)
class Resolved:
    """The deployment a request named and the version that will answer it."""

    deployment: Deployment
    version: ModelVersion


@dataclass(slots=True)
class Prediction:
    resolved: Resolved
    result: InferenceResult
    latency_ms: float


class PredictionService:
    def __init__(
        self,
        registry: Registry,
        runtimes: Mapping[str, Runtime],
        settings: Settings,
        telemetry: Telemetry,
    ) -> None:
        self.registry = registry
        self.runtimes = runtimes
        self.settings = settings
        self.telemetry = telemetry
        self._deployments: TTLCache[tuple[str, str], Deployment] = TTLCache(settings.deployment_cache_ttl_s)
        self._versions: TTLCache[tuple[str, str, int], ModelVersion] = TTLCache(60.0)

    def forget(self, tenant: str, name: str) -> None:
        """Drop a cached deployment so this process sees a change at once."""
        self._deployments.pop((tenant, name))

    def deployment(self, tenant: str, name: str) -> Deployment:
        key = (tenant, name)
        found = self._deployments.get(key)
        return found if found is not None else self._deployments.put(key, self.registry.get_deployment(tenant, name))

    def version(self, tenant: str, model: str, number: int) -> ModelVersion:
        key = (tenant, model, number)
        found = self._versions.get(key)
        return found if found is not None else self._versions.put(key, self.registry.get_version(tenant, model, number))

    def resolve(self, principal: Principal, deployment: str, *, version: int | None = None) -> Resolved:
        principal.require("predict")
        dep = self.deployment(principal.tenant, deployment)
        target = pick_target(parse_policy(dep.policy), version=version)
        return Resolved(dep, self.version(principal.tenant, target.model, target.version))

    def check(
        self, resolved: Resolved, arrays: dict[str, np.ndarray], *, datatypes: dict[str, str] | None = None, field: str = "inputs"
    ) -> dict[str, np.ndarray]:
        return check_inputs(
            resolved.version.signature,
            arrays,
            max_elements=self.settings.max_tensor_elements,
            datatypes=datatypes,
            field=field,
        )

    async def infer(
        self,
        resolved: Resolved,
        arrays: dict[str, np.ndarray],
        *,
        outputs: Sequence[str] | None = None,
        log_fields: dict[str, Any] | None = None,
    ) -> Prediction:
        started = time.perf_counter()
        version = resolved.version
        runtime = self.runtimes.get(version.runtime)
        fields = {
            **(log_fields or {}),
            "deployment": resolved.deployment.name,
            "model": version.model,
            "version": version.version,
        }
        try:
            if runtime is None:
                raise Unavailable(f"runtime '{version.runtime}' is not configured here", field="runtime")
            async with asyncio.timeout(self.settings.request_timeout_s):
                result = await runtime.infer(version, arrays, outputs)
        except TimeoutError:
            error = DeadlineExceeded(f"no answer within {self.settings.request_timeout_s:g} s")
            self.telemetry.failure(fields=fields, status=error.status, code=error.code)
            raise error from None
        except SluiceError as error:
            self.telemetry.failure(fields=fields, status=error.status, code=error.code)
            raise
        latency_ms = round((time.perf_counter() - started) * 1000, 3)
        rows = next(iter(arrays.values())).shape[0] if arrays else 0
        self.telemetry.prediction(fields=fields, latency_ms=latency_ms, rows=rows)
        return Prediction(resolved, result, latency_ms)
