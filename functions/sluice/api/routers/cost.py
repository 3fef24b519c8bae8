"""A deployment's cost per million predictions on each runtime it could use (admin scope)."""

from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool

from sluice.api.deps import AdminDep, CostDep
from sluice.api.responses import MANAGEMENT, JSONResponse, errors

router = APIRouter(prefix="/api/v1/deployments", tags=["deployments"], responses=errors(*MANAGEMENT), default_response_class=JSONResponse)


@router.get("/{name}/cost", summary="$ per million predictions on each runtime, and the cheapest meeting a p99 target")
async def deployment_cost(
    name: str,
    principal: AdminDep,
    cost: CostDep,
    rps: float = Query(1.0, ge=1e-6, le=1e7, description="Mean traffic, predictions per second."),
    p99_ms: float | None = Query(None, gt=0, le=3.6e6, description="Recommend the cheapest runtime with a p99 at or under this."),
    region: str = Query("us-east-1", description="The price file's region."),
    instance_type: str = Query("ml.g5.xlarge", description="SageMaker instance type of the endpoint options."),
    memory_mb: int = Query(2048, ge=128, le=10240, description="The API function's memory."),
    instance_rps: float | None = Query(None, ge=1e-3, le=1e7, description="One instance's capacity (default: 4 in flight / p50)."),
    onnx_p50_ms: float | None = Query(None, ge=1e-3, le=3.6e6, description="ONNX latency from a benchmark, instead of the statistics."),
    onnx_p99_ms: float | None = Query(None, ge=1e-3, le=3.6e6),
    sagemaker_p50_ms: float | None = Query(None, ge=1e-3, le=3.6e6, description="Endpoint latency from a benchmark."),
    sagemaker_p99_ms: float | None = Query(None, ge=1e-3, le=3.6e6),
    cpu_ms: float | None = Query(None, ge=1e-3, le=3.6e6, description="CPU a request uses on managed instances (default: the ONNX p50)."),
    managed_instance_type: str | None = Query(None, max_length=32, description="Lambda Managed Instances' EC2 type (default c7i.xlarge)."),
) -> JSONResponse:
    from sluice.cost.service import CostRequest, given_latencies

    latencies = given_latencies(onnx=(onnx_p50_ms, onnx_p99_ms), sagemaker=(sagemaker_p50_ms, sagemaker_p99_ms))
    request = CostRequest(
        rps=rps, p99_ms=p99_ms, region=region, instance_type=instance_type, memory_mb=memory_mb,
        instance_rps=instance_rps, latencies=latencies, cpu_ms=cpu_ms, managed_instance_type=managed_instance_type,
    )  # fmt: skip
    return JSONResponse(await run_in_threadpool(cost.estimate, principal, name, request))
