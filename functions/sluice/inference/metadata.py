"""What the Open Inference Protocol says about a model (a deployment, resolved as a request
to it would be): its metadata, and whether it is ready. The REST routes
(`sluice.api.routers.v2`) and the gRPC service answer with these."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sluice.domain import Deployment, ModelVersion, Principal
    from sluice.domain.results import Resolved
    from sluice.inference.predictions import PredictionService
    from sluice.runtimes import Runtime

PLATFORMS = {"onnx": "onnxruntime_onnx", "triton": "triton", "sagemaker": "sagemaker_triton"}

# The protocol's extensions served, on both transports (`GET /v2`, gRPC's ServerMetadata), in
# Triton's names: tensors in binary after the JSON, top-k classification of an output, the
# model configuration, statistics and repository (the index; load and unload answered as a
# Triton without explicit model control answers them), and request parameters.
EXTENSIONS = ("binary_tensor_data", "classification", "model_configuration", "model_repository", "parameters", "statistics")


def metadata_of(resolved: Resolved) -> dict[str, Any]:
    """The model's metadata: the deployment's name, the answering version, its tensors (the
    inputs of the policy's first step, the outputs of its answer: a sequence's last step's)."""
    version = resolved.version
    signature = version.signature
    outputs = (resolved.answers or signature).outputs

    def tensors(specs: Any) -> list[dict[str, Any]]:
        return [{"name": s.name, "datatype": s.datatype, "shape": list(s.shape)} for s in specs]

    return {
        "name": resolved.deployment.name,
        "versions": [str(version.version)],
        "platform": PLATFORMS.get(version.runtime, version.runtime),
        "inputs": tensors(signature.inputs),
        "outputs": tensors(outputs),
        "parameters": {"model": version.model, "version": version.version},
    }


async def tensors_of(predictions: PredictionService, principal: Principal, deployment: Deployment) -> dict[str, Any]:
    """What a deployment's policy takes and answers (`inputs`, `outputs`), as its metadata
    shows them: the deployment's GET shows them. Empty when the policy cannot be resolved
    now (a version it names is gone): the deployment is shown all the same."""
    from sluice.domain.errors import SluiceError

    try:
        resolved = await predictions.resolve(principal, deployment.name)
        if resolved.deployment.revision != deployment.revision:  # kept from before a change made elsewhere
            predictions.forget(deployment.tenant, deployment.name)
            resolved = await predictions.resolve(principal, deployment.name)
    except SluiceError:
        return {}
    shown = metadata_of(resolved)
    return {"inputs": shown["inputs"], "outputs": shown["outputs"]}


async def ready_to_answer(runtimes: Mapping[str, Runtime], version: ModelVersion) -> bool:
    """Ready when a runtime of the version's kind is there, which loads it first."""
    runtime = runtimes.get(version.runtime)
    if runtime is None:
        return False
    await runtime.load(version)
    return True
