"""A deployment's SageMaker endpoint (admin scope): deploy, status, scale and weights, undeploy.

The calls run on a worker thread: each makes several SageMaker calls, and deploying builds
and uploads Triton repositories. A deploy's options are checked against its `mode` by the
service: an option of another mode, or a combination SageMaker refuses, is a 422 naming it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from pydantic import Field

from sluice.api.deps import AdminDep, EndpointsDep
from sluice.api.responses import MANAGEMENT, JSONResponse, errors
from sluice.codecs.datatypes import INT32_MAX  # Triton's max_batch_size is an int32
from sluice.types.base import WireModel

router = APIRouter(prefix="/api/v1/deployments", tags=["endpoints"], responses=errors(*MANAGEMENT, 502, 503), default_response_class=JSONResponse)


class EndpointCreate(WireModel):
    instance_type: str = Field(description="SageMaker instance type, e.g. ml.g5.xlarge (GPU) or ml.c5.xlarge (CPU image).")
    instance_count: int = Field(1, ge=1, description="Instances per variant at creation.")
    min_instances: int | None = Field(None, ge=0, description="Autoscaling floor per variant (1 or more).")
    max_instances: int | None = Field(None, ge=1, description="Autoscaling ceiling per variant.")
    target_invocations_per_instance: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="Autoscaling target: SageMakerVariantInvocationsPerInstance per minute (default 100)."
    )
    triton_version: str | None = Field(None, description="SageMaker Triton image version (default: the service's).")
    max_batch_size: int | None = Field(
        None, ge=0, le=INT32_MAX, description="Triton max_batch_size (default 64 when the model batches; an int32 in Triton's config)."
    )
    mode: Literal["realtime", "async", "components"] = Field(
        "realtime",
        description="realtime: a production variant per version. async: one version behind SageMaker's queue, scaling to "
        "zero on its backlog. components: each version an inference component, copies and instances scaling to zero.",
    )
    output_path: str | None = Field(None, max_length=512, description="async: s3:// path for answers, under the tenant's results (default: its sagemaker folder).")
    success_topic: str | None = Field(None, description="async: SNS topic ARN told of each answer.")
    error_topic: str | None = Field(None, description="async: SNS topic ARN told of each error.")
    create_topics: bool = Field(False, description="async: make two encrypted SNS topics for it (deleted at undeploy).")
    max_concurrent_invocations: int | None = Field(None, ge=1, le=1000, description="async: requests one instance works on at once (default 4).")
    backlog_per_instance: float | None = Field(None, gt=0, allow_inf_nan=False, description="async autoscaling: ApproximateBacklogSizePerInstance to hold (default 5).")
    copies: int | dict[str, int] | None = Field(
        None, description="components: copies of each version at creation, or by the policy's variant names (default 1)."
    )
    min_copies: int | None = Field(None, ge=0, description="components autoscaling: fewest copies (default 0: scale to zero).")
    max_copies: int | None = Field(None, ge=1, description="components autoscaling: most copies (default: the most asked for).")
    invocations_per_copy: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="components autoscaling: SageMakerInferenceComponentInvocationsPerCopy to hold (default 50)."
    )
    cpus: float | None = Field(None, ge=0.25, allow_inf_nan=False, description="components: CPU cores one copy needs.")
    memory_mb: int | None = Field(None, ge=128, description="components: memory one copy needs (default 4096).")
    gpus: int | None = Field(None, ge=0, description="components: GPUs one copy needs (default 1 on a GPU instance).")
    fallback: Literal["in_process"] | None = Field(
        None, description="components: answer in process from the version's ONNX artifact while a component has no copy."
    )


class EndpointScale(WireModel):
    min_instances: int | None = Field(None, ge=0)
    max_instances: int | None = Field(None, ge=1)
    desired_instances: int | None = Field(None, ge=0, description="Instances now (within the autoscaling range).")
    target_invocations_per_instance: float | None = Field(None, gt=0, allow_inf_nan=False)
    variant: str | None = Field(None, description="Apply capacity changes to this variant only (default: every one).")
    weights: dict[str, Annotated[float, Field(allow_inf_nan=False)]] | None = Field(None, description="New weight per variant, by the policy's variant names.")


def _call(endpoints: EndpointsDep, method: str, *args: Any) -> Any:
    return run_in_threadpool(getattr(endpoints, method), *args)


@router.post("/{name}/endpoint", status_code=202, summary="Deploy the deployment's versions to a SageMaker endpoint")
async def deploy_endpoint(name: str, body: EndpointCreate, principal: AdminDep, endpoints: EndpointsDep) -> JSONResponse:
    from sluice.services.endpoint_requests import DeployRequest

    request = DeployRequest(**body.model_dump())
    return JSONResponse(await _call(endpoints, "deploy", principal, name, request), status_code=202)


@router.get("/{name}/endpoint", summary="The endpoint's status (Creating, InService, Failed with its reason), variants and scaling")
async def endpoint_status(name: str, principal: AdminDep, endpoints: EndpointsDep) -> JSONResponse:
    return JSONResponse(await _call(endpoints, "status", principal, name))


@router.put("/{name}/scale", summary="Change the endpoint's autoscaling range, instance count or variant weights")
async def scale_endpoint(name: str, body: EndpointScale, principal: AdminDep, endpoints: EndpointsDep) -> JSONResponse:
    from sluice.services.endpoint_requests import ScaleRequest

    return JSONResponse(await _call(endpoints, "scale", principal, name, ScaleRequest(**body.model_dump())))


@router.delete("/{name}/endpoint", summary="Route back to the source versions, then delete autoscaling, endpoint, configs and models")
async def undeploy_endpoint(name: str, principal: AdminDep, endpoints: EndpointsDep) -> JSONResponse:
    return JSONResponse(await _call(endpoints, "undeploy", principal, name))
