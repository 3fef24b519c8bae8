"""GPU endpoints the endpoints stack makes: SageMaker running NVIDIA Triton."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from infra.config.base import TENANT, Section, names_unique

_SAGEMAKER_NAME = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,47}$"


class EndpointVariant(Section):
    name: str = Field("primary", pattern=_SAGEMAKER_NAME)
    model_data_key: str = Field(
        pattern=r"^[^/].*model\.tar\.gz$",
        description="Key of the Triton model repository archive in the artifacts bucket.",
    )
    model_name: str = Field(description="SAGEMAKER_TRITON_DEFAULT_MODEL_NAME: the model to serve.")
    instance_type: str = Field(pattern=r"^ml\.[a-z0-9]+\.[a-z0-9]+$")
    initial_instance_count: int = Field(1, ge=1)
    weight: float = Field(1.0, ge=0)
    min_instances: int = Field(1, ge=0, description="0 only on an asynchronous endpoint.")
    max_instances: int = Field(1, ge=1)
    target_invocations_per_instance: float = Field(
        100, gt=0, description="Auto scaling target for SageMakerVariantInvocationsPerInstance."
    )
    environment: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _bounds(self) -> EndpointVariant:
        if not self.min_instances <= self.initial_instance_count <= self.max_instances:
            raise ValueError("need min_instances <= initial_instance_count <= max_instances")
        return self


class AsyncInference(Section):
    """SageMaker asynchronous inference: requests queue, inputs and answers travel through S3."""

    tenant: str = Field(
        pattern=TENANT,
        description="The tenant whose versions use this endpoint: answers and errors land "
        "under its results prefix (artifacts/results/tenants/<tenant>/), where sluice reads them.",
    )
    max_concurrent_invocations_per_instance: int = Field(
        4, ge=1, le=1000, description="Requests a single instance works on at once."
    )
    notifications: bool = Field(
        True, description="SNS topics (encrypted) told of each success and each error."
    )
    backlog_per_instance: float = Field(
        5,
        gt=0,
        description="Auto scaling target for ApproximateBacklogSizePerInstance (queued requests).",
    )


class InferenceComponents(Section):
    """Serve the variant as a SageMaker inference component on instances SageMaker manages: the
    component's copies scale to zero, and the instances with them."""

    min_instances: int = Field(
        0, ge=0, description="ManagedInstanceScaling floor (0: scale to zero)."
    )
    max_instances: int = Field(1, ge=1)
    copies: int = Field(1, ge=0, description="Copies of the model at creation.")
    min_copies: int = Field(0, ge=0)
    max_copies: int = Field(1, ge=1)
    memory_mb: int = Field(4096, ge=128, description="Memory one copy needs.")
    accelerators: int = Field(1, ge=0, description="GPUs one copy needs (0 on CPU instances).")
    target_invocations_per_copy: float = Field(
        50,
        gt=0,
        description="Auto scaling target for SageMakerInferenceComponentInvocationsPerCopy.",
    )

    @model_validator(mode="after")
    def _bounds(self) -> InferenceComponents:
        if not self.min_copies <= self.copies <= self.max_copies:
            raise ValueError("need min_copies <= copies <= max_copies")
        if self.min_instances > self.max_instances:
            raise ValueError("need min_instances <= max_instances")
        return self


class EndpointConfig(Section):
    name: str = Field(
        pattern=_SAGEMAKER_NAME, description="Endpoint name, prefixed with the app name."
    )
    triton_version: str = Field("25.09", description="Version of the SageMaker Triton image.")
    variants: Annotated[
        tuple[EndpointVariant, ...], names_unique("variant names must be unique within an endpoint")
    ] = Field(min_length=1, max_length=10)
    asynchronous: AsyncInference | None = Field(
        None,
        description="Make it an asynchronous endpoint (one variant; min_instances may be 0: it "
        "scales to zero when its queue is empty and back up when requests wait).",
    )
    inference_components: InferenceComponents | None = Field(
        None,
        description="Serve the one variant as an inference component that scales to zero "
        "(copies and instances), starting a copy when a request finds none.",
    )

    @model_validator(mode="after")
    def _async(self) -> EndpointConfig:
        if self.asynchronous is not None and len(self.variants) != 1:
            raise ValueError("an asynchronous endpoint has exactly one variant")
        if self.inference_components is not None and len(self.variants) != 1:
            raise ValueError("an endpoint of inference components has exactly one variant here")
        if self.inference_components is not None and self.asynchronous is not None:
            raise ValueError(
                "an endpoint is asynchronous or built from inference components, not both"
            )
        if self.asynchronous is None and any(v.min_instances < 1 for v in self.variants):
            raise ValueError(
                "min_instances 0 needs an asynchronous endpoint: real-time variants keep 1"
            )
        return self
