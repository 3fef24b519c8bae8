"""Plain-dict forms of the domain objects, shared by the SQLite and DynamoDB registries."""

from __future__ import annotations

from typing import Any

from sluice.domain import ApiKey, Deployment, DeploymentChange, Model, ModelVersion
from sluice.domain.jobs import BatchJob
from sluice.domain.signature import Signature


def version_to_dict(v: ModelVersion) -> dict[str, Any]:
    return {
        "tenant": v.tenant,
        "model": v.model,
        "version": v.version,
        "runtime": v.runtime,
        "artifact_uri": v.artifact_uri,
        "sha256": v.sha256,
        "size_bytes": v.size_bytes,
        "signature": v.signature.to_dict(),
        "config": v.config,
        "created_at": v.created_at,
        "created_by": v.created_by,
    }


def version_from_dict(d: dict[str, Any]) -> ModelVersion:
    return ModelVersion(
        tenant=d["tenant"],
        model=d["model"],
        version=int(d["version"]),
        runtime=d["runtime"],
        artifact_uri=d["artifact_uri"],
        sha256=d["sha256"],
        size_bytes=int(d["size_bytes"]),
        signature=Signature.from_dict(d["signature"]),
        config=dict(d.get("config") or {}),
        created_at=float(d["created_at"]),
        created_by=d.get("created_by", ""),
    )


def model_to_dict(m: Model) -> dict[str, Any]:
    return {
        "tenant": m.tenant,
        "name": m.name,
        "description": m.description,
        "created_at": m.created_at,
        "created_by": m.created_by,
    }


def model_from_dict(d: dict[str, Any]) -> Model:
    return Model(
        tenant=d["tenant"],
        name=d["name"],
        description=d.get("description", ""),
        created_at=float(d["created_at"]),
        created_by=d.get("created_by", ""),
    )


def deployment_to_dict(dep: Deployment) -> dict[str, Any]:
    return {
        "tenant": dep.tenant,
        "name": dep.name,
        "policy": dep.policy,
        "revision": dep.revision,
        "description": dep.description,
        "created_at": dep.created_at,
        "updated_at": dep.updated_at,
        "updated_by": dep.updated_by,
    }


def deployment_from_dict(d: dict[str, Any]) -> Deployment:
    return Deployment(
        tenant=d["tenant"],
        name=d["name"],
        policy=d["policy"],
        revision=int(d["revision"]),
        description=d.get("description", ""),
        created_at=float(d["created_at"]),
        updated_at=float(d["updated_at"]),
        updated_by=d.get("updated_by", ""),
    )


def key_to_dict(k: ApiKey) -> dict[str, Any]:
    return {
        "key_id": k.key_id,
        "tenant": k.tenant,
        "secret_hash": k.secret_hash,
        "scopes": sorted(k.scopes),
        "name": k.name,
        "created_at": k.created_at,
        "revoked_at": k.revoked_at,
    }


def key_from_dict(d: dict[str, Any]) -> ApiKey:
    revoked = d.get("revoked_at")
    return ApiKey(
        key_id=d["key_id"],
        tenant=d["tenant"],
        secret_hash=d["secret_hash"],
        scopes=frozenset(d["scopes"]),
        name=d.get("name", ""),
        created_at=float(d["created_at"]),
        revoked_at=float(revoked) if revoked is not None else None,
    )


def change_to_dict(change: DeploymentChange) -> dict[str, Any]:
    return {
        "tenant": change.tenant,
        "name": change.name,
        "revision": change.revision,
        "at": change.at,
        "by": change.by,
        "old_policy": change.old_policy,
        "new_policy": change.new_policy,
    }


def change_from_dict(d: dict[str, Any]) -> DeploymentChange:
    return DeploymentChange(
        tenant=d["tenant"],
        name=d["name"],
        revision=int(d["revision"]),
        at=float(d["at"]),
        by=d.get("by", ""),
        old_policy=d.get("old_policy"),
        new_policy=d.get("new_policy"),
    )


# The progress counters of a job; stored apart from the rest so they can be added to in place.
JOB_COUNTERS = ("chunks_done", "rows_in", "rows_out", "rows_failed")


def job_to_dict(job: BatchJob) -> dict[str, Any]:
    return job.to_dict()


def job_from_dict(d: dict[str, Any]) -> BatchJob:
    return BatchJob.from_dict(d)
