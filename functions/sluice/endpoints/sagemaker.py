"""SageMaker endpoints running Triton: the SageMaker adapter of the endpoint control plane
(`sluice.endpoints.control`).

Deploying builds the `sagemaker` flavour Triton repository of each version (one version, or
each variant of a split), uploads it as `model.tar.gz` to the artifact store (SageMaker reads
it from S3), and creates one SageMaker Model per version (network isolated: a Triton
container needs no internet), an endpoint config and the endpoint. The config depends on the
mode: `realtime`, one production variant per version; `async`, one variant and an
AsyncInferenceConfig (output and failure paths under the tenant's results, SNS topics given
or made here, concurrency per instance); `components`, one variant of instances SageMaker
manages (ManagedInstanceScaling, least-outstanding-requests routing, the execution role in
the config) and no model, each version coming in later as an inference component.

Which sluice model version each variant or component serves travels as tags on the endpoint,
and so does what has to wait for the endpoint to be InService (`settle`): Application Auto
Scaling accepts a variant only then, and SageMaker creates inference components only on an
InService endpoint; their copies are registered for autoscaling once each is InService.

A rollout adds a variant for its candidate (`add_variant`): the candidate's model, a new
endpoint config that is the current one plus that variant at weight 0, and `UpdateEndpoint`
with `RetainAllVariantProperties`, so the variants already there keep the weights and
instance counts they have now (set since by `UpdateEndpointWeightsAndCapacities` or
autoscaling) rather than the config's initial ones, and only the new variant takes its
values from the config. The old config stays until undeploy removes it with the others.

Clients come from `sluice.clients.AwsClients`, built on first use.
"""

from __future__ import annotations

import logging
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sluice.domain.errors import Unavailable
from sluice.endpoints.control import (
    Autoscaling,
    DeploySpec,
    DeployTarget,
    EndpointState,
    EndpointWeights,
    VariantChanges,
    VariantState,
    build_variant_repository,
)
from sluice.endpoints.names import config_name, digest, model_name
from sluice.endpoints.repository_check import DEFAULT_MODEL_ENV
from sluice.endpoints.sagemaker_scaling import ScalingCalls
from sluice.endpoints.sagemaker_support import (
    COMPONENT_VARIANT,
    TAG_AUTOSCALING,
    TAG_COMPONENT,
    TAG_COMPUTE,
    TAG_DEPLOYMENT,
    TAG_FALLBACK,
    TAG_TENANT,
    TAG_TOPICS,
    EndpointSpec,
    VariantSpec,
    already_exists,
    aws_error,
    compute_tag,
    described,
    error_code,
    is_missing,
    number,
)
from sluice.endpoints.scaling import (
    BACKLOG,
    COPIES,
    COPY_DIMENSION,
    INSTANCES,
    ROUTING_STRATEGY,
    VARIANT_DIMENSION,
    component_resource,
    variant_resource,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sluice.clients import AwsClients
    from sluice.storage import ArtifactStore

log = logging.getLogger(__name__)

DEFAULT_TRITON_VERSION = "25.09"


class SageMakerEndpoints:
    """The control-plane calls sluice makes on AWS; clients are built on first use."""

    kind: Literal["sagemaker", "local"] = "sagemaker"

    def __init__(
        self,
        store: ArtifactStore | None = None,
        clients: AwsClients | None = None,
        *,
        region: str | None = None,
        role_arn: str | None = None,
        triton_version: str = DEFAULT_TRITON_VERSION,
        triton_image: str | None = None,
        sagemaker: Any | None = None,
        autoscaling: Any | None = None,
        cloudwatch: Any | None = None,
        sns: Any | None = None,
    ) -> None:
        self.store = store
        self._clients = clients
        self._region = region
        self.role_arn = role_arn
        self.triton_version = triton_version
        self.triton_image = triton_image
        self._sagemaker = sagemaker
        self._autoscaling = autoscaling
        self._cloudwatch = cloudwatch
        self._sns = sns

    @property
    def clients(self) -> AwsClients:
        if self._clients is None:
            from sluice.clients import default_clients

            self._clients = default_clients(self._region)
        return self._clients

    @property
    def sagemaker(self) -> Any:
        if self._sagemaker is None:
            self._sagemaker = self.clients.client("sagemaker", region=self._region)
        return self._sagemaker

    @property
    def autoscaling(self) -> Any:
        if self._autoscaling is None:
            self._autoscaling = self.clients.client("application-autoscaling", region=self._region)
        return self._autoscaling

    @property
    def cloudwatch(self) -> Any:
        if self._cloudwatch is None:
            self._cloudwatch = self.clients.client("cloudwatch", region=self._region)
        return self._cloudwatch

    @property
    def sns(self) -> Any:
        if self._sns is None:
            self._sns = self.clients.client("sns", region=self._region)
        return self._sns

    @property
    def scaling(self) -> ScalingCalls:
        return ScalingCalls(self.autoscaling, lambda: self.cloudwatch)

    @property
    def region(self) -> str:
        if self._region is None:
            with suppress(Exception):  # no region configured anywhere: botocore says so when building
                self._region = self.sagemaker.meta.region_name
        if not self._region:
            raise Unavailable("no AWS region is configured for SageMaker; set SLUICE_REGION", field="region")
        return self._region

    # deploy ----------------------------------------------------------------------------------
    def deploy(self, spec: DeploySpec) -> None:
        from sluice.endpoints.image_uris import triton_image_uri

        role = self.role_arn
        if not role:
            raise Unavailable(
                "deploying endpoints needs SLUICE_SAGEMAKER_EXECUTION_ROLE_ARN, the IAM role SageMaker runs the model as",
                field="sagemaker_execution_role_arn",
            )
        image = self.triton_image or triton_image_uri(
            self.region, instance_type=spec.instance_type, version=spec.triton_version or self.triton_version
        )
        variants = self._package(spec, image, role)
        fingerprint = digest(
            spec.instance_type,
            str(spec.instance_count),
            spec.mode,
            repr(spec.asynchronous),
            repr(spec.components),
            *(f"{v.name}={v.model_name}@{v.weight:g}" for v in variants),
        )
        self.create(
            EndpointSpec(
                name=spec.endpoint,
                config_name=config_name(spec.endpoint, fingerprint),
                tenant=spec.tenant,
                deployment=spec.deployment,
                instance_type=spec.instance_type,
                instance_count=spec.instance_count,
                role_arn=role,
                variants=tuple(variants),
                autoscaling=spec.autoscaling,
                mode=spec.mode,
                asynchronous=spec.asynchronous,
                components=spec.components,
            )
        )

    def _package(self, spec: DeploySpec, image: str, role: str) -> list[VariantSpec]:
        """Build and upload each version's `model.tar.gz`; the variants that serve them."""
        from sluice.endpoints.repository import tarball_bytes

        if self.store is None:
            raise Unavailable("deploying endpoints needs an artifact store", field="store")
        variants = []
        with tempfile.TemporaryDirectory(prefix="sluice-endpoint-") as tmp:
            for index, target in enumerate(spec.targets):
                root = Path(tmp) / str(index)
                built = build_variant_repository(
                    root, target.version, self.store, flavour="sagemaker", max_batch_size=spec.max_batch_size, gpu=spec.gpu
                )
                ref = self.store.put(spec.tenant, tarball_bytes(root), suffix=".tar.gz")
                if not ref.uri.startswith("s3://"):
                    raise Unavailable(
                        "SageMaker reads model.tar.gz from S3: deploying endpoints needs an s3:// artifact store (SLUICE_STORE)",
                        field="store",
                    )
                variants.append(
                    VariantSpec(
                        name=target.variant,
                        label=target.label,
                        model=target.version.model,
                        version=target.version.version,
                        max_batch_size=built.max_batch_size,
                        model_name=model_name(spec.endpoint, target.variant, digest(ref.sha256, image, role, built.name)),
                        image=image,
                        model_data_url=ref.uri,
                        triton_model=built.name,
                        weight=target.weight,
                    )
                )
        return variants

    # create ----------------------------------------------------------------------------------
    def create(self, spec: EndpointSpec) -> None:
        """Models, the SNS topics an asynchronous endpoint asks sluice to make, the endpoint
        config, then the endpoint; what this call made is removed again when a later step
        fails."""
        made_models: list[str] = []
        made_topics: list[str] = []
        made_config: str | None = None
        try:
            for variant in spec.variants:
                if self._create_model(spec, variant):
                    made_models.append(variant.model_name)
            topics = None
            if spec.asynchronous is not None and spec.asynchronous.create_topics:
                topics = self._create_topics(spec, made_topics)
            if self._create_config(spec, topics):
                made_config = spec.config_name
            self.sagemaker.create_endpoint(EndpointName=spec.name, EndpointConfigName=spec.config_name, Tags=self._tags(spec))
        except Exception as exc:
            error = aws_error(exc, "create the endpoint")
            if made_config is not None:
                with suppress(Exception):
                    self.sagemaker.delete_endpoint_config(EndpointConfigName=made_config)
            for name in made_models:
                with suppress(Exception):
                    self.sagemaker.delete_model(ModelName=name)
            for arn in made_topics:
                with suppress(Exception):
                    self.sns.delete_topic(TopicArn=arn)
            raise error from None

    @staticmethod
    def _tags(spec: EndpointSpec) -> list[dict[str, str]]:
        """sluice's facts on the endpoint: who it is for, what each variant serves, and what
        waits for InService (autoscaling; for components, the components themselves)."""
        tags = spec.tags() + [v.tag() for v in spec.variants]
        pending = spec.autoscaling.to_tag() if spec.autoscaling is not None else None
        if spec.asynchronous is not None:
            pending = spec.asynchronous.scaling.to_tag()
            if spec.asynchronous.create_topics:
                tags.append({"Key": TAG_TOPICS, "Value": "created"})
        if spec.components is not None:
            pending = spec.components.scaling.to_tag()
            tags.append({"Key": TAG_COMPUTE, "Value": compute_tag(spec.components)})
            for v in spec.variants:
                tags.append({"Key": TAG_COMPONENT + v.name, "Value": f"{v.model_name} {spec.components.copies[v.name]}"})
            if spec.components.fallback:
                tags.append({"Key": TAG_FALLBACK, "Value": spec.components.fallback})
        if pending is not None:
            tags.append({"Key": TAG_AUTOSCALING, "Value": pending})
        return tags

    def _create_topics(self, spec: EndpointSpec, made: list[str]) -> tuple[str, str]:
        """Two topics, `<endpoint>-succeeded` and `<endpoint>-failed`, encrypted with the
        AWS-managed key and refusing publishers without TLS."""
        arns = []
        for suffix in ("succeeded", "failed"):
            arn = self.sns.create_topic(
                Name=f"{spec.name}-{suffix}", Attributes={"KmsMasterKeyId": "alias/aws/sns"}, Tags=spec.tags()
            )["TopicArn"]
            made.append(arn)
            self.sns.set_topic_attributes(TopicArn=arn, AttributeName="Policy", AttributeValue=_tls_only(arn))
            arns.append(arn)
        return arns[0], arns[1]

    def _create_model(self, spec: EndpointSpec, variant: VariantSpec) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.sagemaker.create_model(
                ModelName=variant.model_name,
                ExecutionRoleArn=spec.role_arn,
                PrimaryContainer={
                    "Image": variant.image,
                    "Mode": "SingleModel",
                    "ModelDataUrl": variant.model_data_url,
                    "Environment": {DEFAULT_MODEL_ENV: variant.triton_model},
                },
                # The container needs no internet (model.tar.gz and the image are fetched for it).
                EnableNetworkIsolation=True,
                Tags=[*spec.tags(), {"Key": "sluice:model", "Value": f"{variant.model}:{variant.version}"}],
            )
        except ClientError as exc:
            if already_exists(exc):  # the same name is the same content: left by an earlier try
                return False
            raise
        return True

    def _create_config(self, spec: EndpointSpec, topics: tuple[str, str] | None = None) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.sagemaker.create_endpoint_config(**config_request(spec, topics))
        except ClientError as exc:
            if already_exists(exc):
                return False
            raise
        return True

    # read ------------------------------------------------------------------------------------
    def describe(self, endpoint: str) -> EndpointState | None:
        """The endpoint as SageMaker and Application Auto Scaling see it; None when absent."""
        from sluice.endpoints.sagemaker_state import EndpointReader

        return EndpointReader(self.sagemaker, self.scaling).describe(endpoint)

    def weights(self, endpoint: str) -> EndpointWeights | None:
        """Status and each live variant's desired weight: one DescribeEndpoint."""
        found = described(self.sagemaker.describe_endpoint, "describe the endpoint", EndpointName=endpoint)
        if found is None:
            return None
        return EndpointWeights(
            name=endpoint,
            status=str(found.get("EndpointStatus", "")),
            weights={v["VariantName"]: number(v.get("DesiredWeight")) for v in found.get("ProductionVariants", [])},
            failure_reason=found.get("FailureReason") or None,
        )

    def settle(self, state: EndpointState) -> EndpointState:
        """What waited for the endpoint to be InService: autoscaling asked for at deploy and,
        on an endpoint of components, the components themselves."""
        if state.status != "InService":
            return state
        if state.mode == "components":
            return self._settle_components(state)
        if state.mode == "async" and state.pending_capacity is not None:
            capacity = state.pending_capacity
            try:
                for variant in state.variants:
                    self.scaling.register(
                        BACKLOG,
                        variant_resource(state.name, variant.name),
                        state.name,
                        low=capacity.low,
                        high=capacity.high,
                        target=capacity.target,
                        description=f"Requests wait at {state.name} and no instance runs",
                    )
            except Exception as exc:
                raise aws_error(exc, "register autoscaling") from None
            self.forget_pending_autoscaling(state)
            return self.describe(state.name) or state
        if state.pending_autoscaling is None:
            return state
        for variant in state.variants:
            self.register_autoscaling(state.name, variant.name, state.pending_autoscaling)
        self.forget_pending_autoscaling(state)
        return self.describe(state.name) or state

    def _settle_components(self, state: EndpointState) -> EndpointState:
        """Create the components not made yet; register each InService component's copies for
        autoscaling; once all are, nothing waits any more."""
        capacity = state.pending_capacity
        if capacity is None:
            return state
        changed = False
        try:
            for component in state.components:
                if component.status == "Pending":
                    self._create_component(state, component.name)
                    changed = True
                elif component.status == "InService" and component.autoscaling is None:
                    self.scaling.register(
                        COPIES,
                        component_resource(component.name),
                        component.name,
                        low=capacity.low,
                        high=capacity.high,
                        target=capacity.target,
                        description=f"A request found no copy of {component.name}",
                    )
                    changed = True
        except Exception as exc:
            raise aws_error(exc, "create the inference components and their autoscaling") from None
        if changed:
            state = self.describe(state.name) or state
        if state.components and all(c.status == "InService" and c.autoscaling is not None for c in state.components):
            self.forget_pending_autoscaling(state)
            state = self.describe(state.name) or state
        return state

    def _create_component(self, state: EndpointState, name: str) -> None:
        from botocore.exceptions import ClientError

        try:
            self.sagemaker.create_inference_component(**component_request(state, name))
        except ClientError as exc:
            if not already_exists(exc):  # made by another look meanwhile
                raise

    # change ----------------------------------------------------------------------------------
    def register_autoscaling(self, endpoint: str, variant: str, scaling: Autoscaling) -> None:
        """Register (or update) the variant's scalable target and its target-tracking policy."""
        try:
            self.scaling.register(
                INSTANCES,
                variant_resource(endpoint, variant),
                endpoint,
                low=scaling.min_instances,
                high=scaling.max_instances,
                target=scaling.target_invocations_per_instance,
            )
        except Exception as exc:
            raise aws_error(exc, "register autoscaling") from None

    def forget_pending_autoscaling(self, state: EndpointState) -> None:
        try:
            self.sagemaker.delete_tags(ResourceArn=state.arn, TagKeys=[TAG_AUTOSCALING])
        except Exception as exc:
            raise aws_error(exc, "tag the endpoint") from None

    def change(self, endpoint: str, changes: VariantChanges) -> None:
        """Autoscaling per variant, then weights and instance counts in one
        UpdateEndpointWeightsAndCapacities (a second would meet the endpoint Updating)."""
        for variant, scaling in changes.autoscaling.items():
            self.register_autoscaling(endpoint, variant, scaling)
        updates = []
        for variant in sorted(set(changes.weights) | set(changes.instances)):
            update: dict[str, Any] = {"VariantName": variant}
            if variant in changes.weights:
                update["DesiredWeight"] = changes.weights[variant]
            if variant in changes.instances:
                update["DesiredInstanceCount"] = changes.instances[variant]
            updates.append(update)
        if not updates:
            return
        try:
            self.sagemaker.update_endpoint_weights_and_capacities(EndpointName=endpoint, DesiredWeightsAndCapacities=updates)
        except Exception as exc:
            raise aws_error(exc, "update the endpoint's weights and capacities") from None

    # add a variant -------------------------------------------------------------------------
    def add_variant(self, state: EndpointState, target: DeployTarget, *, like: VariantState) -> VariantState:
        """The candidate's model (the image and role of `like`'s), the current config plus a
        variant for it, and UpdateEndpoint retaining every variant property already there."""
        from sluice.endpoints.image_uris import check_instance_type

        try:
            current = self.sagemaker.describe_endpoint_config(EndpointConfigName=state.config_name)
            container = self.sagemaker.describe_model(ModelName=like.model_name)
        except Exception as exc:
            raise aws_error(exc, "read the endpoint's config") from None
        image = (container.get("PrimaryContainer") or {}).get("Image") or ""
        role = container.get("ExecutionRoleArn") or self.role_arn
        if not image or not role:
            raise Unavailable(f"variant {like.name}'s model names no image or role to run a candidate as", field="endpoint")
        count = like.desired_instances or 1
        deploy = DeploySpec(
            endpoint=state.name,
            tenant=state.tenant,
            deployment=state.deployment,
            instance_type=like.instance_type,
            gpu=check_instance_type(like.instance_type) == "gpu",
            instance_count=count,
            targets=(target,),
        )
        [variant] = self._package(deploy, image, role)
        spec = EndpointSpec(
            name=state.name,
            config_name=config_name(state.name, digest(state.config_name, variant.name, variant.model_name)),
            tenant=state.tenant,
            deployment=state.deployment,
            instance_type=like.instance_type,
            instance_count=count,
            role_arn=role,
            variants=(variant,),
        )
        made_model = made_config = False
        try:
            made_model = self._create_model(spec, variant)
            made_config = self._create_extended_config(spec, current, state)
            self.sagemaker.add_tags(ResourceArn=state.arn, Tags=[variant.tag()])
            self.sagemaker.update_endpoint(
                EndpointName=state.name, EndpointConfigName=spec.config_name, RetainAllVariantProperties=True
            )
        except Exception as exc:
            error = aws_error(exc, "add a variant to the endpoint")
            with suppress(Exception):
                self.sagemaker.delete_tags(ResourceArn=state.arn, TagKeys=[variant.tag()["Key"]])
            if made_config:
                with suppress(Exception):
                    self.sagemaker.delete_endpoint_config(EndpointConfigName=spec.config_name)
            if made_model:
                with suppress(Exception):
                    self.sagemaker.delete_model(ModelName=variant.model_name)
            raise error from None
        return VariantState(
            name=variant.name,
            label=variant.label,
            model=variant.model,
            version=variant.version,
            max_batch_size=variant.max_batch_size,
            model_name=variant.model_name,
            instance_type=like.instance_type,
            desired_weight=variant.weight,
            current_weight=None,
            desired_instances=count,
            current_instances=None,
        )

    def _create_extended_config(self, spec: EndpointSpec, current: dict[str, Any], state: EndpointState) -> bool:
        """`current` again under a new name, each variant at its live weight and count, plus the
        variant of `spec`. Only what CreateEndpointConfig takes is copied (botocore's service
        model says which), so settings sluice does not make itself survive."""
        from botocore.exceptions import ClientError

        model = self.sagemaker.meta.service_model
        takes = set(model.operation_model("CreateEndpointConfig").input_shape.members) - {
            "EndpointConfigName", "ProductionVariants", "Tags"
        }
        variant_takes = set(model.shape_for("ProductionVariant").members)
        variants = []
        for planned in current.get("ProductionVariants", []):
            copied = {k: v for k, v in planned.items() if k in variant_takes and v not in (None, {}, [])}
            live = state.variant(planned["VariantName"])
            if live is not None and live.desired_weight is not None:
                copied["InitialVariantWeight"] = live.desired_weight
            if live is not None and live.desired_instances is not None and "InitialInstanceCount" in copied:
                copied["InitialInstanceCount"] = live.desired_instances
            variants.append(copied)
        [new] = spec.variants
        variants.append(
            {
                "VariantName": new.name,
                "ModelName": new.model_name,
                "InstanceType": spec.instance_type,
                "InitialInstanceCount": spec.instance_count,
                "InitialVariantWeight": new.weight,
            }
        )
        try:
            self.sagemaker.create_endpoint_config(
                EndpointConfigName=spec.config_name,
                ProductionVariants=variants,
                Tags=spec.tags(),
                **{k: v for k, v in current.items() if k in takes and v not in (None, {}, [])},
            )
        except ClientError as exc:
            if already_exists(exc):
                return False
            raise
        return True

    # delete ----------------------------------------------------------------------------------
    def undeploy(self, name: str, state: EndpointState | None) -> dict[str, Any]:
        """Autoscaling (policies, then targets, then the scale-from-zero alarms), the inference
        components, the endpoint, its configs, its models and the topics sluice made for it:
        in that order, each skipped when already gone."""
        deleted: dict[str, Any] = {
            "scaling_policies": [],
            "scalable_targets": [],
            "alarms": [],
            "inference_components": [],
            "endpoint": None,
            "endpoint_configs": [],
            "models": [],
            "topics": [],
        }
        mode = state.mode if state else "realtime"
        try:
            variants = [variant_resource(name, v.name) for v in state.variants] if state and mode != "components" else []
            components = [c.name for c in state.components if c.status != "Pending"] if state else []
            for dimension, resources in ((VARIANT_DIMENSION, variants), (COPY_DIMENSION, [component_resource(c) for c in components])):
                policies, targets = self.scaling.remove(dimension, resources)
                deleted["scaling_policies"] += policies
                deleted["scalable_targets"] += targets
            if mode != "realtime":
                deleted["alarms"] = self.scaling.remove_alarms(name)
            for component in components:
                if self._quietly(self.sagemaker.delete_inference_component, InferenceComponentName=component):
                    deleted["inference_components"].append(component)
            if state is not None and state.status != "Deleting":
                self._quietly(self.sagemaker.delete_endpoint, EndpointName=name)
                deleted["endpoint"] = name
            configs = {state.config_name} if state else set()
            configs |= set(self._owned(name, "list_endpoint_configs", "EndpointConfigs", "EndpointConfigName"))
            for config in sorted(configs):
                if self._quietly(self.sagemaker.delete_endpoint_config, EndpointConfigName=config):
                    deleted["endpoint_configs"].append(config)
            models = {v.model_name for v in state.variants if v.model_name} if state else set()
            models |= {c.model_name for c in state.components if c.model_name} if state else set()
            models |= set(self._owned(name, "list_models", "Models", "ModelName"))
            for model in sorted(models):
                if self._quietly(self.sagemaker.delete_model, ModelName=model):
                    deleted["models"].append(model)
            for arn in state.topics_made if state else ():
                self.sns.delete_topic(TopicArn=arn)  # idempotent: a missing topic is no error
                deleted["topics"].append(arn)
        except Exception as exc:
            raise aws_error(exc, "delete the endpoint") from None
        return deleted

    def _owned(self, endpoint: str, operation: str, key: str, field_name: str) -> Iterator[str]:
        """Names under this endpoint's prefix (the digest in the prefix makes it its own)."""
        prefix = endpoint + "-"
        token = None
        while True:
            page = getattr(self.sagemaker, operation)(NameContains=endpoint, **({"NextToken": token} if token else {}))
            for item in page.get(key, []):
                if item[field_name].startswith(prefix):
                    yield item[field_name]
            token = page.get("NextToken")
            if not token:
                return

    @staticmethod
    def _quietly(call: Any, **params: Any) -> bool:
        """Make a delete call; False when the thing was already gone."""
        from botocore.exceptions import ClientError

        try:
            call(**params)
        except ClientError as exc:
            code, message = error_code(exc)
            if is_missing(exc) or code == "MissingModel" or "could not find" in message.lower():
                return False
            raise
        return True




# the requests -------------------------------------------------------------------------------
def config_request(spec: EndpointSpec, topics: tuple[str, str] | None = None) -> dict[str, Any]:
    """CreateEndpointConfig's parameters in the endpoint's mode; `topics`: the SNS topics
    sluice made for an asynchronous endpoint (success, error)."""
    request: dict[str, Any] = {"EndpointConfigName": spec.config_name, "Tags": spec.tags()}
    if spec.components is not None:
        # The instances are SageMaker's to manage; the models come in as components, which
        # run as the role the config names.
        request["ProductionVariants"] = [
            {
                "VariantName": COMPONENT_VARIANT,
                "InstanceType": spec.instance_type,
                "InitialInstanceCount": spec.instance_count,
                "ManagedInstanceScaling": {
                    "Status": "ENABLED",
                    "MinInstanceCount": spec.components.min_instances,
                    "MaxInstanceCount": spec.components.max_instances,
                },
                "RoutingConfig": {"RoutingStrategy": ROUTING_STRATEGY},
            }
        ]
        request["ExecutionRoleArn"] = spec.role_arn
        return request
    request["ProductionVariants"] = [
        {
            "VariantName": v.name,
            "ModelName": v.model_name,
            "InstanceType": spec.instance_type,
            "InitialInstanceCount": spec.instance_count,
            "InitialVariantWeight": v.weight,
        }
        for v in spec.variants
    ]
    asynchronous = spec.asynchronous
    if asynchronous is not None:
        output: dict[str, Any] = {"S3OutputPath": asynchronous.output_path, "S3FailurePath": asynchronous.failure_path}
        success, error = topics or (asynchronous.success_topic, asynchronous.error_topic)
        notify = {k: v for k, v in (("SuccessTopic", success), ("ErrorTopic", error)) if v}
        if notify:
            output["NotificationConfig"] = notify
        request["AsyncInferenceConfig"] = {
            "ClientConfig": {"MaxConcurrentInvocationsPerInstance": asynchronous.max_concurrent_invocations},
            "OutputConfig": output,
        }
    return request


def component_request(state: EndpointState, name: str) -> dict[str, Any]:
    """CreateInferenceComponent's parameters for one of the endpoint's planned components."""
    component = state.component(name)
    assert component is not None
    return {
        "InferenceComponentName": component.name,
        "EndpointName": state.name,
        "VariantName": COMPONENT_VARIANT,
        "Specification": {"ModelName": component.model_name, "ComputeResourceRequirements": dict(component.compute)},
        "RuntimeConfig": {"CopyCount": component.desired_copies or 0},
        "Tags": [
            {"Key": TAG_TENANT, "Value": state.tenant},
            {"Key": TAG_DEPLOYMENT, "Value": state.deployment},
            {"Key": "sluice:model", "Value": f"{component.model}:{component.version}"},
        ],
    }


def _tls_only(topic_arn: str) -> str:
    import json

    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "PublishOverTlsOnly",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "sns:Publish",
                    "Resource": topic_arn,
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                }
            ],
        }
    )
