"""Models and their versions: push an artifact, read its signature, keep it."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from sluice.domain import Model, ModelVersion, check_name
from sluice.errors import BadRequest, Conflict, Forbidden, NotFound, PayloadTooLarge, Unprocessable
from sluice.routing import parse_policy, referenced_versions

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.domain import Principal
    from sluice.registry import Registry
    from sluice.storage import ArtifactStore

MAX_ARTIFACT_BYTES = 2 * 1024**3


def read_signature(data: bytes, feature_names: list[str] | None = None) -> Any:
    from sluice.runtimes.onnx import build_session
    from sluice.signature import signature_from_session

    return signature_from_session(build_session(data), feature_names)


class ModelService:
    def __init__(self, registry: Registry, store: ArtifactStore, *, import_prefixes: Callable[[str], list[str]] | None = None) -> None:
        self.registry = registry
        self.store = store
        self._import_prefixes = import_prefixes or (lambda tenant: [])

    def push(
        self,
        principal: Principal,
        name: str,
        data: bytes,
        *,
        runtime: str = "onnx",
        feature_names: list[str] | None = None,
        description: str = "",
    ) -> ModelVersion:
        """Store an ONNX artifact as the model's next version, creating the model if new."""
        principal.require("admin")
        check_name(name, field="name")
        if runtime != "onnx":
            raise BadRequest(f"runtime {runtime!r} is not available; use 'onnx'", field="runtime")
        if not data:
            raise BadRequest("the artifact is empty", field="artifact")
        if len(data) > MAX_ARTIFACT_BYTES:
            raise PayloadTooLarge("artifacts above 2 GiB are not supported", field="artifact")
        signature = read_signature(data, feature_names)
        ref = self.store.put(principal.tenant, data, suffix=".onnx")
        with contextlib.suppress(Conflict):  # the first push creates the model
            self.registry.create_model(
                Model(principal.tenant, name, description=description, created_by=principal.subject)
            )
        return self.registry.add_version(
            ModelVersion(
                tenant=principal.tenant,
                model=name,
                version=0,
                runtime="onnx",
                artifact_uri=ref.uri,
                sha256=ref.sha256,
                size_bytes=ref.size_bytes,
                signature=signature,
                created_by=principal.subject,
            )
        )

    def push_uri(self, principal: Principal, name: str, uri: str, **options: Any) -> ModelVersion:
        """Copy an artifact from a URI the tenant may import from (its own store prefix, or
        a configured import prefix for it) into the store, then push it."""
        principal.require("admin")
        allowed = self._import_prefixes(principal.tenant)
        segments = uri.split("/")
        if ".." in segments or "." in segments[3:]:
            raise BadRequest("artifact_uri must not contain '.' or '..' segments", field="artifact_uri")
        if not self.store.owns(principal.tenant, uri) and not any(uri.startswith(p) for p in allowed):
            raise Forbidden(
                "artifact_uri is outside what this tenant may import from: "
                + (", ".join(allowed) if allowed else "its own artifacts"),
                field="artifact_uri",
            )
        return self.push(principal, name, self.store.read_external(principal.tenant, uri), **options)

    def list_models(self, principal: Principal) -> list[Model]:
        return self.registry.list_models(principal.tenant)

    def get_model(self, principal: Principal, name: str) -> Model:
        return self.registry.get_model(principal.tenant, name)

    def list_versions(self, principal: Principal, name: str) -> list[ModelVersion]:
        return self.registry.list_versions(principal.tenant, name)

    def get_version(self, principal: Principal, name: str, version: int | str) -> ModelVersion:
        if version == "latest":
            return self.registry.latest_version(principal.tenant, name)
        try:
            number = int(version)
        except (TypeError, ValueError):
            raise BadRequest("version must be a number or 'latest'", field="version") from None
        return self.registry.get_version(principal.tenant, name, number)

    def delete_model(self, principal: Principal, name: str) -> None:
        principal.require("admin")
        self.registry.get_model(principal.tenant, name)
        self._refuse_if_deployed(principal.tenant, name, None)
        self.registry.delete_model(principal.tenant, name)

    def delete_version(self, principal: Principal, name: str, version: int) -> None:
        principal.require("admin")
        self.registry.get_version(principal.tenant, name, version)
        self._refuse_if_deployed(principal.tenant, name, version)
        self.registry.delete_version(principal.tenant, name, version)

    def _refuse_if_deployed(self, tenant: str, model: str, version: int | None) -> None:
        for deployment in self.registry.list_deployments(tenant):
            for target in referenced_versions(parse_policy(deployment.policy)):
                if target.model == model and version in (None, target.version):
                    what = f"version {version} of '{model}'" if version else f"model '{model}'"
                    raise Conflict(
                        f"{what} is used by deployment '{deployment.name}'; point it elsewhere first",
                        field="model",
                    )


def require_found(getter: Any, *args: Any, field: str) -> Any:
    """Turn a NotFound on a referenced object into a 422 that names the referring field."""
    try:
        return getter(*args)
    except NotFound as exc:
        raise Unprocessable(exc.message, field=field) from None
