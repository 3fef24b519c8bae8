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
the config) and no model, each version coming in later as an inference component. Each call's
parameters are `sluice.endpoints.sagemaker_requests`'.

Which sluice model version each variant or component serves travels as tags on the endpoint,
and so does what has to wait for the endpoint to be InService (`settle`,
`sluice.endpoints.sagemaker_settle`). A rollout adds a variant for its candidate
(`add_variant`, `sluice.endpoints.sagemaker_variant`); undeploying removes all of it
(`sluice.endpoints.sagemaker_teardown`); reading it back is `sluice.endpoints.sagemaker_state`.

Clients come from `sluice.clients.AwsClients`, built on first use.
"""

from __future__ import annotations

import logging
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sluice.clients import lazy_client
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
from sluice.endpoints.sagemaker_requests import (
    config_request,
    endpoint_tags,
    model_request,
    tls_only,
)
from sluice.endpoints.sagemaker_scaling import ScalingCalls
from sluice.endpoints.sagemaker_support import (
    EndpointSpec,
    Tag,
    VariantSpec,
    aws_error,
    create_once,
    described,
    number,
)
from sluice.endpoints.scaling import INSTANCES, variant_resource

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Unpack

    from sluice.clients import AwsSource
    from sluice.storage import ArtifactStore

log = logging.getLogger(__name__)

DEFAULT_TRITON_VERSION = "25.09"
# The clients the adapter calls: the name it keeps each under, and the service.
SERVICES = {"sagemaker": "sagemaker", "autoscaling": "application-autoscaling", "cloudwatch": "cloudwatch", "sns": "sns"}


class SageMakerEndpoints:
    """The control-plane calls sluice makes on AWS; clients are built on first use."""

    kind: Literal["sagemaker", "local"] = "sagemaker"

    def __init__(
        self,
        store: ArtifactStore | None = None,
        *,
        role_arn: str | None = None,
        triton_version: str = DEFAULT_TRITON_VERSION,
        triton_image: str | None = None,
        ready: Mapping[str, Any] | None = None,
        **aws: Unpack[AwsSource],
    ) -> None:
        self.store = store
        self._region = aws.get("region")
        self.role_arn = role_arn
        self.triton_version = triton_version
        self.triton_image = triton_image
        # The clients in `ready` by the names of `SERVICES` (a test's), else the factory's, each
        # asked for on first use.
        given = ready or {}
        self._sagemaker, self._autoscaling, self._cloudwatch, self._sns = (
            lazy_client(service, aws, given=given.get(name), region=self._region) for name, service in SERVICES.items()
        )

    sagemaker = property(lambda self: self._sagemaker())
    autoscaling = property(lambda self: self._autoscaling())
    cloudwatch = property(lambda self: self._cloudwatch())
    sns = property(lambda self: self._sns())

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
        variants = self.package(spec, image, role)
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

    def package(self, spec: DeploySpec, image: str, role: str) -> list[VariantSpec]:
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
                if create_once(self.sagemaker.create_model, **model_request(spec, variant)):
                    made_models.append(variant.model_name)
            topics = None
            if spec.asynchronous is not None and spec.asynchronous.create_topics:
                topics = self._create_topics(spec, made_topics)
            if create_once(self.sagemaker.create_endpoint_config, **config_request(spec, topics)):
                made_config = spec.config_name
            self.sagemaker.create_endpoint(EndpointName=spec.name, EndpointConfigName=spec.config_name, Tags=endpoint_tags(spec))
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

    def _create_topics(self, spec: EndpointSpec, made: list[str]) -> tuple[str, str]:
        """Two topics, `<endpoint>-succeeded` and `<endpoint>-failed`, encrypted with the
        AWS-managed key and refusing publishers without TLS."""
        arns = []
        for suffix in ("succeeded", "failed"):
            arn = self.sns.create_topic(
                Name=f"{spec.name}-{suffix}", Attributes={"KmsMasterKeyId": "alias/aws/sns"}, Tags=spec.tags()
            )["TopicArn"]
            made.append(arn)
            self.sns.set_topic_attributes(TopicArn=arn, AttributeName="Policy", AttributeValue=tls_only(arn))
            arns.append(arn)
        return arns[0], arns[1]

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
        from sluice.endpoints.sagemaker_settle import settle

        return settle(self, state)

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
            self.sagemaker.delete_tags(ResourceArn=state.arn, TagKeys=[Tag.AUTOSCALING])
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

    # add a variant, delete -------------------------------------------------------------------
    def add_variant(self, state: EndpointState, target: DeployTarget, *, like: VariantState) -> VariantState:
        """The candidate's model (the image and role of `like`'s), the current config plus a
        variant for it, and UpdateEndpoint retaining every variant property already there."""
        from sluice.endpoints.sagemaker_variant import add_variant

        return add_variant(self, state, target, like=like)

    def undeploy(self, name: str, state: EndpointState | None) -> dict[str, Any]:
        """Autoscaling, the inference components, the endpoint, its configs, its models and
        the topics sluice made for it: in that order, each skipped when already gone."""
        from sluice.endpoints.sagemaker_teardown import undeploy

        return undeploy(self, name, state)
