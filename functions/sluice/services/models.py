"""Models and their versions: push an artifact, read its signature, keep it."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from typing import TYPE_CHECKING, Any

from sluice.domain import Model, ModelVersion, check_name
from sluice.domain.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    SluiceError,
    Unprocessable,
)
from sluice.domain.locations import Location, Root, Roots, confine
from sluice.domain.objects import check_description
from sluice.domain.origins import check_origin
from sluice.domain.signature import check_feature_names
from sluice.domain.values import parse_version_or_latest
from sluice.registry.guards import decided_again

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.domain import Principal, SessionTuning
    from sluice.domain.origins import Allowed
    from sluice.registry import Registry
    from sluice.storage import ArtifactStore

MAX_ARTIFACT_BYTES = 2 * 1024**3
_MADE_BY_SLUICE = re.compile(r"sluice-[a-z0-9-]*-[0-9a-f]{8}(?:-|\Z)")  # `endpoint_names.endpoint_name`'s, and what hangs off it
MAX_SIGNATURE_BYTES = 256 * 1024  # a version's signature as JSON: what every registry's record holds (a DynamoDB item: 400 KB)


def check_signature_size(signature: Any) -> None:
    """Refuse a signature no registry record can hold, before anything is written."""
    import json

    size = len(json.dumps(signature.to_dict(), separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_SIGNATURE_BYTES:
        raise PayloadTooLarge(
            f"the model's signature (its inputs' and outputs' names, shapes and feature names) is {size:,} bytes as JSON; at most {MAX_SIGNATURE_BYTES:,}",
            field="artifact",
        )


def read_signature(data: bytes, feature_names: list[str] | None = None) -> Any:
    from sluice.runtimes.onnx import build_session
    from sluice.runtimes.onnx_signature import check_ranked, signature_from_session

    signature = signature_from_session(build_session(data), feature_names)
    if not signature.inputs or not signature.outputs:  # every prediction would be refused, blaming the caller's inputs
        from sluice.domain.errors import InvalidInput

        raise InvalidInput(f"the model declares no {'inputs' if not signature.inputs else 'outputs'}: nothing could be asked of it or answered", field="artifact")
    check_ranked(data, signature)
    return with_graph_classes(data, signature)


def with_graph_classes(data: bytes, signature: Any) -> Any:
    """`signature` with its probabilities output's column labels where the graph's classifier
    says them (`classifier_labels`: a classifier exported without ZipMap answers a bare
    [rows, classes] tensor) and the output is as wide as they are many."""
    import dataclasses

    from sluice.domain.signature import DYNAMIC
    from sluice.runtimes.onnx_signature import classifier_labels

    labels = classifier_labels(data)
    if labels is None:
        return signature
    outputs = tuple(
        dataclasses.replace(spec, classes=tuple(labels))
        if spec.role == "probabilities" and len(spec.shape) == 2 and spec.shape[1] in (DYNAMIC, len(labels))
        else spec
        for spec in signature.outputs
    )  # fmt: skip
    return dataclasses.replace(signature, outputs=outputs)


class ModelService:
    def __init__(
        self,
        registry: Registry,
        store: ArtifactStore,
        *,
        roots: Callable[[str], Roots] | None = None,
        triton_servers: tuple[Allowed, ...] = (),
    ) -> None:
        self.registry = registry
        self.store = store
        # A tenant's roots (`sluice.domain.locations`): push by URI reads from `store` and `imports`.
        self.roots = roots or (lambda tenant: Roots((Root.of("store", store.tenant_root(tenant)),)))
        self.triton_servers = triton_servers

    def create(self, principal: Principal, name: str, description: str = "") -> Model:
        """A model with no version yet (Conflict where the name is taken)."""
        principal.require("admin")
        check_name(name, field="name")
        return self.registry.create_model(
            Model(principal.tenant, name, description=check_description(description), created_by=principal.subject)
        )

    def push(
        self,
        principal: Principal,
        name: str,
        data: bytes,
        *,
        runtime: str = "onnx",
        config: dict[str, Any] | None = None,
        feature_names: list[str] | None = None,
        description: str = "",
        derived_from: str | None = None,
        optimization: dict[str, Any] | None = None,
        session_options: tuple[SessionTuning, ...] = (),
        source: dict[str, Any] | None = None,
    ) -> ModelVersion:
        """Store an ONNX artifact as the model's next version, creating the model if new.

        Runtime `onnx` runs it in process; `sagemaker` serves it from the endpoint named in
        `config` (the artifact still gives the signature, and builds the endpoint's Triton
        repository). `triton` versions are registered from their server: `register_triton`."""
        principal.require("admin")
        check_name(name, field="name")
        check_description(description)
        if runtime == "triton":
            raise BadRequest(
                "a triton version is registered from its server (URL and model name), not from a file",
                field="runtime",
            )
        if runtime not in ("onnx", "sagemaker"):
            raise BadRequest(f"runtime {runtime!r} is not available; use 'onnx', 'sagemaker' or 'triton'", field="runtime")
        config = sagemaker_config(config) if runtime == "sagemaker" else _no_config(config)
        if runtime == "sagemaker":
            self._refuse_others_endpoints(principal.tenant, config)
        if not data:
            raise BadRequest("the artifact is empty", field="artifact")
        if len(data) > MAX_ARTIFACT_BYTES:
            raise PayloadTooLarge("artifacts above 2 GiB are not supported", field="artifact")
        signature = read_signature(data, feature_names)
        check_signature_size(signature)
        ref = self.store.put(principal.tenant, data, suffix=".onnx")
        with contextlib.suppress(Conflict):  # the first push creates the model
            self.create(principal, name, description)
        return self.registry.add_version(
            ModelVersion(
                tenant=principal.tenant,
                model=name,
                version=0,
                runtime=runtime,  # type: ignore[arg-type]
                artifact_uri=ref.uri,
                sha256=ref.sha256,
                size_bytes=ref.size_bytes,
                signature=signature,
                config=config,
                created_by=principal.subject,
                derived_from=derived_from,
                optimization=optimization,
                session_options=session_options,
                source=source,
            )
        )

    def record_session_options(
        self, principal: Principal, version: ModelVersion, session_options: tuple[SessionTuning, ...]
    ) -> ModelVersion:
        """Keep the session options tuned for a version; the ONNX runtime loads it with them."""
        principal.require("admin")
        if version.tenant != principal.tenant:
            raise NotFound(f"model '{version.model}' not found", field="model")
        return self.registry.replace_version(dataclasses.replace(version, session_options=session_options))

    def import_location(self, principal: Principal, uri: str, *, field: str = "artifact_uri") -> Location:
        """Where push by URI (and the optimizer's data) may read: the tenant's own artifacts
        (`store/…`) or a configured import prefix of its own (`imports/…`), parsed once and
        confined (see `sluice.domain.locations`); read `Location.uri`, nothing else."""
        roots = self.roots(principal.tenant)
        try:
            return confine(uri, roots.named("store", "imports"), field=field)
        except Forbidden:
            raise Forbidden(
                f"{field} is outside what this tenant may import from: {roots.describe(('store', 'imports'))}",
                field=field,
            ) from None

    def read_import(self, principal: Principal, location: Location, *, field: str = "artifact_uri", max_bytes: int = MAX_ARTIFACT_BYTES) -> bytes:
        """The bytes at a confined location, refused past `max_bytes` before they are read; a
        message about it names it as the tenant sees it."""
        try:
            return self.store.read_external(principal.tenant, location.uri, max_bytes)
        except SluiceError as exc:
            exc.message = self.roots(principal.tenant).scrub(exc.message) or exc.message
            exc.field = field
            exc.args = (exc.message,)
            raise

    async def register_triton(
        self,
        principal: Principal,
        name: str,
        url: str,
        *,
        model_name: str | None = None,
        model_version: str = "",
        feature_names: list[str] | None = None,
        description: str = "",
        protocol: str = "http",
    ) -> ModelVersion:
        """Register a model a Triton server serves as the next version of `name`; its
        signature is read from the server (`TritonRuntime.metadata`)."""
        import contextlib
        import dataclasses

        from sluice.domain.signature import Signature
        from sluice.runtimes.triton import (
            TritonRuntime,
            TritonTarget,
            check_model_name,
            check_model_version,
            check_protocol,
        )

        principal.require("admin")
        check_name(name, field="name")
        check_description(description)
        origin = check_origin(url, self.triton_servers, field="triton_url")  # scheme, host, port; no user info
        config = {
            "url": origin.url(),
            "model_name": check_model_name(model_name or name),
            "model_version": check_model_version(str(model_version or "")),
        }
        if check_protocol(protocol) != "http":  # http, the default, stays unwritten as before
            config["protocol"] = protocol
        probe = ModelVersion(principal.tenant, name, 0, "triton", "", "", 0, Signature((), ()), config=config)
        target = TritonTarget.of(probe)
        runtime = TritonRuntime(timeout_s=10.0, allowed=self.triton_servers)  # its own connections, closed on this loop
        try:
            signature = await runtime.metadata(probe)
        finally:
            await runtime.close()
        if not signature.inputs or not signature.outputs:
            raise Unprocessable(f"model '{target.model}' on that server declares no inputs or no outputs", field="model_name")
        from sluice.codecs.datatypes import V2_TO_NUMPY

        untaken = next((spec for spec in signature.inputs if spec.datatype not in V2_TO_NUMPY), None)
        if untaken is not None:  # no request could reach it: each was a 400 or, with numbers given, a 500
            raise Unprocessable(
                f"model '{target.model}' on that server takes input '{untaken.name}' as {untaken.datatype}, which sluice "
                "does not send: serve it with an input of another datatype",
                field="model_name",
            )
        if feature_names is not None:
            if len(signature.inputs) != 1:
                raise BadRequest("feature_names fit a model with exactly one input", field="feature_names")
            signature = dataclasses.replace(
                signature, inputs=(dataclasses.replace(signature.inputs[0], feature_names=check_feature_names(feature_names)),)
            )
        check_signature_size(signature)
        scheme = "https" if target.ssl else "http"
        with contextlib.suppress(Conflict):
            self.create(principal, name, description)
        return self.registry.add_version(
            dataclasses.replace(
                probe,
                artifact_uri=f"{scheme}://{target.url}/v2/models/{target.model}"
                + (f"/versions/{target.model_version}" if target.model_version else ""),
                signature=signature,
                created_by=principal.subject,
            )
        )

    def push_uri(self, principal: Principal, name: str, uri: str, **options: Any) -> ModelVersion:
        """Copy an artifact from a URI the tenant may import from (its own store prefix, or
        a configured import prefix for it) into the store, then push it."""
        principal.require("admin")
        location = self.import_location(principal, uri)
        return self.push(principal, name, self.read_import(principal, location), **options)

    def list_models(self, principal: Principal) -> list[Model]:
        return self.registry.list_models(principal.tenant)

    def get_model(self, principal: Principal, name: str) -> Model:
        return self.registry.get_model(principal.tenant, name)

    def list_versions(self, principal: Principal, name: str) -> list[ModelVersion]:
        return self.registry.list_versions(principal.tenant, name)

    def get_version(self, principal: Principal, name: str, version: int | str) -> ModelVersion:
        number = parse_version_or_latest(version, field="version")
        if number == "latest":
            return self.registry.latest_version(principal.tenant, name)
        return self.registry.get_version(principal.tenant, name, number)

    def delete_model(self, principal: Principal, name: str) -> None:
        principal.require("admin")

        def delete() -> None:
            catalog = self.registry.catalog_read(principal.tenant)  # before the check (`sluice.registry.guards`)
            self.registry.get_model(principal.tenant, name)
            self._refuse_if_deployed(principal.tenant, name, None)
            self.registry.delete_model(principal.tenant, name, catalog=catalog)

        decided_again(delete)

    def delete_version(self, principal: Principal, name: str, version: int) -> None:
        principal.require("admin")

        def delete() -> None:
            catalog = self.registry.catalog_read(principal.tenant)  # before the check (`sluice.registry.guards`)
            self.registry.get_version(principal.tenant, name, version)
            self._refuse_if_deployed(principal.tenant, name, version)
            self.registry.delete_version(principal.tenant, name, version, catalog=catalog)

        decided_again(delete)

    def _refuse_others_endpoints(self, tenant: str, config: dict[str, Any]) -> None:
        """A version may name an endpoint of its own making (the operator's), or one sluice
        made for a deployment of its tenant; never one sluice made for another tenant's
        (`sluice.endpoints.names`: predictable from its tenant's and deployment's names, and the
        API's role may invoke every one of them). Names are compared as SageMaker tells them
        apart, ignoring case: it makes endpoint names unique that way."""
        from sluice.endpoints.names import endpoint_name, shaped_for

        own: set[str] | None = None
        for key in ("endpoint_name", "async_endpoint_name", "inference_component"):
            name = config.get(key)
            if not isinstance(name, str) or not _MADE_BY_SLUICE.match(name.lower()):
                continue
            if own is None:
                own = {endpoint_name(tenant, d.name) for d in self.registry.list_deployments(tenant)}
            lowered = name.lower()  # sluice's own names are lower case
            # An endpoint is its own name exactly; a component, exactly the shape sluice gives one
            # on it (`component_name`). A name that merely begins with an endpoint's and a hyphen
            # may be another tenant's endpoint (its tenant's and deployment's names extending these).
            if key == "inference_component":
                mine = any(shaped_for(made, lowered, model=True) for made in own)
            else:
                mine = lowered in own
            if not mine:
                raise Forbidden(f"config.{key} '{name}' is an endpoint sluice made for a deployment of another tenant, or none", field=f"config.{key}")

    def _refuse_if_deployed(self, tenant: str, model: str, version: int | None) -> None:
        # The policy schema, imported for deletes alone: `sluice models` commands otherwise never read it.
        from sluice.domain.policy import parse_policy, referenced_versions

        what = f"version {version} of '{model}'" if version else f"model '{model}'"
        if version is not None:  # the version an endpoint's binding points a deployment back at when it is undeployed
            bound = next((v for v in self.registry.list_versions(tenant, model) if v.runtime == "sagemaker" and v.config.get("source_version") == version), None)
            if bound is not None:
                raise Conflict(
                    f"{what} is what version {bound.version} (served by endpoint {bound.config.get('endpoint_name')}) stands for: "
                    "undeploying that endpoint points its deployment back at it; undeploy it first",
                    field="model",
                )
        for deployment in self.registry.list_deployments(tenant):
            for target in referenced_versions(parse_policy(deployment.policy)):
                if target.model == model and version in (None, target.version):
                    raise Conflict(f"{what} is used by deployment '{deployment.name}'; point it elsewhere first", field="model")
            rollout = deployment.rollout
            if rollout is not None and rollout.active:  # what its rollback restores, and what it moves in
                held = [(t.model, t.version) for t in referenced_versions(parse_policy(rollout.stable))] + [(rollout.model, rollout.version)]
                if any(m == model and version in (None, v) for m, v in held):
                    raise Conflict(f"{what} is held by the {rollout.state} rollout of deployment '{deployment.name}'; finish or abort it first", field="model")


SAGEMAKER_CONFIG_KEYS = (
    "endpoint_name", "target_model", "variant", "max_batch_size", "invocation", "async_endpoint_name", "inference_component", "fallback",
)


def sagemaker_config(config: dict[str, Any] | None) -> dict[str, Any]:
    """A `sagemaker` version's config: the endpoint it is served from, checked."""
    from sluice.endpoints.names import SAGEMAKER_NAME

    config = dict(config or {})
    unknown = sorted(set(config) - set(SAGEMAKER_CONFIG_KEYS))
    if unknown:
        raise BadRequest(f"unknown config keys {unknown}; a sagemaker version takes {list(SAGEMAKER_CONFIG_KEYS)}", field="config")
    for key in ("endpoint_name", "variant", "async_endpoint_name", "inference_component"):
        value = config.get(key)
        if (key == "endpoint_name" or value is not None) and not (isinstance(value, str) and SAGEMAKER_NAME.match(value)):
            raise BadRequest(f"config.{key} must be a SageMaker name: 1-63 letters, digits or '-'", field=f"config.{key}")
    target = config.get("target_model")
    if target is not None and (not isinstance(target, str) or not target):
        raise BadRequest("config.target_model must be a non-empty string", field="config.target_model")
    if config.get("fallback", "in_process") != "in_process":
        raise BadRequest("config.fallback is in_process: the version's ONNX artifact answers while the component has no copy", field="config.fallback")
    if config.get("invocation", "sync") not in ("sync", "async"):
        raise BadRequest("config.invocation is sync (InvokeEndpoint) or async (InvokeEndpointAsync)", field="config.invocation")
    batch = config.get("max_batch_size")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 0):
        raise BadRequest("config.max_batch_size must be 0 or more", field="config.max_batch_size")
    return config


def _no_config(config: dict[str, Any] | None) -> dict[str, Any]:
    if config:
        raise BadRequest("an onnx version takes no config", field="config")
    return {}


def require_found(getter: Any, *args: Any, field: str) -> Any:
    """Turn a NotFound on a referenced object into a 422 that names the referring field."""
    try:
        return getter(*args)
    except NotFound as exc:
        raise Unprocessable(exc.message, field=field) from None
