"""Reading a SageMaker endpoint back: SageMaker's and Application Auto Scaling's answers,
and sluice's tags on the endpoint, as one `EndpointState`.

The mode is read from the endpoint config itself: an AsyncInferenceConfig makes it
asynchronous, a production variant without a model (its models come as inference
components) makes it an endpoint of components. Only then are the inference components
listed: one per `sluice:component:` tag, `Pending` until created."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.endpoints.control import (
    Autoscaling,
    Capacity,
    ComponentState,
    EndpointState,
    Mode,
    VariantState,
)
from sluice.endpoints.names import component_name
from sluice.endpoints.sagemaker_support import (
    Tag,
    aws_error,
    compute_from_tag,
    described,
    integer,
    is_missing,
    number,
    tags_of,
    timestamp,
    variant_tag,
)
from sluice.endpoints.scaling import (
    BACKLOG,
    COPIES,
    INSTANCES,
    component_resource,
    variant_resource,
)

if TYPE_CHECKING:
    from sluice.endpoints.sagemaker_scaling import ScalingCalls


def mode_of(config: dict[str, Any]) -> Mode:
    variants = config.get("ProductionVariants") or []
    if config.get("AsyncInferenceConfig"):
        return "async"
    if variants and all(not v.get("ModelName") for v in variants):
        return "components"
    return "realtime"


class EndpointReader:
    """The describe and list calls of one look at an endpoint."""

    def __init__(self, sagemaker: Any, scaling: ScalingCalls) -> None:
        self.sagemaker = sagemaker
        self.scaling = scaling

    def describe(self, name: str) -> EndpointState | None:
        """The endpoint as SageMaker and Application Auto Scaling see it; None when absent."""
        endpoint = described(self.sagemaker.describe_endpoint, "describe the endpoint", EndpointName=name)
        if endpoint is None:
            return None
        try:
            tags = tags_of(self.sagemaker, endpoint["EndpointArn"])
            config = self._config(endpoint["EndpointConfigName"])
            mode = mode_of(config)
            names = [v["VariantName"] for v in config.get("ProductionVariants", [])]
            kind = BACKLOG if mode == "async" else INSTANCES
            scaling = {} if mode == "components" else self.scaling.read(kind, {v: variant_resource(name, v) for v in names})
            components = self._components(name, tags) if mode == "components" else ()
            models = [v["ModelName"] for v in config.get("ProductionVariants", []) if v.get("ModelName")]
            images = self._images(models + [c.model_name for c in components])
        except Exception as exc:
            raise aws_error(exc, "describe the endpoint") from None
        live = {v["VariantName"]: v for v in endpoint.get("ProductionVariants", [])}
        variants = []
        for planned in config.get("ProductionVariants", []):
            vname = planned["VariantName"]
            model, version, max_batch, label = variant_tag(tags.get(Tag.VARIANT + vname), vname)
            if mode == "components":
                model, version, max_batch, label = "", 0, 0, vname  # the instances: the components serve
            now = live.get(vname, {})
            variants.append(
                VariantState(
                    name=vname,
                    label=label,
                    model=model,
                    version=version,
                    max_batch_size=max_batch,
                    model_name=planned.get("ModelName", ""),
                    instance_type=planned.get("InstanceType", ""),
                    desired_weight=number(now.get("DesiredWeight", planned.get("InitialVariantWeight"))),
                    current_weight=number(now.get("CurrentWeight")),
                    desired_instances=integer(now.get("DesiredInstanceCount", planned.get("InitialInstanceCount"))),
                    current_instances=integer(now.get("CurrentInstanceCount")),
                    autoscaling=scaling.get(vname),
                )
            )
        pending = tags.get(Tag.AUTOSCALING)
        asynchronous = _async(config.get("AsyncInferenceConfig"))
        return EndpointState(
            name=name,
            arn=endpoint["EndpointArn"],
            status=str(endpoint.get("EndpointStatus", "")),
            failure_reason=endpoint.get("FailureReason") or None,
            config_name=endpoint["EndpointConfigName"],
            tenant=tags.get(Tag.TENANT, ""),
            deployment=tags.get(Tag.DEPLOYMENT, ""),
            variants=tuple(variants),
            pending_autoscaling=Autoscaling.from_tag(pending) if pending and mode == "realtime" else None,
            created_at=timestamp(endpoint.get("CreationTime")),
            updated_at=timestamp(endpoint.get("LastModifiedTime")),
            images=images,
            mode=mode,
            asynchronous=asynchronous,
            components=components,
            pending_capacity=Capacity.from_tag(pending) if mode != "realtime" else None,
            fallback=tags.get(Tag.FALLBACK) if mode == "components" else None,
            topics_made=tuple(
                t for t in (asynchronous or {}).get("topics", {}).values() if t and tags.get(Tag.TOPICS) == "created"
            ),
        )

    def _components(self, endpoint: str, tags: dict[str, str]) -> tuple[ComponentState, ...]:
        """One per version, as planned in the endpoint's tags, with what SageMaker and
        Application Auto Scaling say of it once it exists."""
        from botocore.exceptions import ClientError

        live = set()
        token = None
        while True:
            page = self.sagemaker.list_inference_components(EndpointNameEquals=endpoint, **({"NextToken": token} if token else {}))
            live |= {c["InferenceComponentName"] for c in page.get("InferenceComponents", [])}
            token = page.get("NextToken")
            if not token:
                break
        compute = compute_from_tag(tags.get(Tag.COMPUTE))
        planned = sorted(key.removeprefix(Tag.COMPONENT) for key in tags if key.startswith(Tag.COMPONENT))
        names = {variant: component_name(endpoint, variant) for variant in planned}
        scaling = self.scaling.read(COPIES, {n: component_resource(n) for n in names.values() if n in live})
        out = []
        for variant in planned:
            name = names[variant]
            model, version, max_batch, label = variant_tag(tags.get(Tag.VARIANT + variant), variant)
            model_name, _, copies = tags[Tag.COMPONENT + variant].partition(" ")
            state = ComponentState(
                name=name, variant=variant, label=label, model=model, version=version, max_batch_size=max_batch,
                model_name=model_name, status="Pending", desired_copies=int(copies) if copies.isdigit() else None,
                compute=compute,
            )  # fmt: skip
            if name in live:
                try:
                    found = self.sagemaker.describe_inference_component(InferenceComponentName=name)
                except ClientError as exc:
                    if not is_missing(exc):
                        raise
                    found = None
                if found is not None:
                    runtime = found.get("RuntimeConfig") or {}
                    spec = found.get("Specification") or {}
                    state = ComponentState(
                        name=name, variant=variant, label=label, model=model, version=version, max_batch_size=max_batch,
                        model_name=spec.get("ModelName") or model_name,
                        status=str(found.get("InferenceComponentStatus", "")),
                        failure_reason=found.get("FailureReason") or None,
                        desired_copies=integer(runtime.get("DesiredCopyCount")),
                        current_copies=integer(runtime.get("CurrentCopyCount")),
                        compute=spec.get("ComputeResourceRequirements") or compute,
                        autoscaling=scaling.get(name),
                    )  # fmt: skip
            out.append(state)
        return tuple(out)

    def _config(self, name: str) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        try:
            return self.sagemaker.describe_endpoint_config(EndpointConfigName=name)
        except ClientError as exc:
            if is_missing(exc):  # deleted under the endpoint: report what is left
                return {}
            raise

    def _images(self, models: list[str]) -> tuple[str, ...]:
        from botocore.exceptions import ClientError

        images = []
        for model_name in dict.fromkeys(models):
            try:
                model = self.sagemaker.describe_model(ModelName=model_name)
            except ClientError as exc:
                if is_missing(exc):
                    continue
                raise
            image = (model.get("PrimaryContainer") or {}).get("Image")
            if image and image not in images:
                images.append(image)
        return tuple(images)


def _async(config: dict[str, Any] | None) -> dict[str, Any] | None:
    """An asynchronous endpoint's output and failure paths, topics and concurrency."""
    if not config:
        return None
    output = config.get("OutputConfig") or {}
    notify = output.get("NotificationConfig") or {}
    return {
        "output_path": output.get("S3OutputPath"),
        "failure_path": output.get("S3FailurePath"),
        "topics": {"success": notify.get("SuccessTopic"), "error": notify.get("ErrorTopic")},
        "max_concurrent_invocations": (config.get("ClientConfig") or {}).get("MaxConcurrentInvocationsPerInstance"),
    }
