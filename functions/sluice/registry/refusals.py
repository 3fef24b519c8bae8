"""The registry's refusals, in the same words from every backend (one contract suite runs
them all): what is not there, what is there already, and fields an update may not change."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.domain.errors import Conflict, NotFound, StaleRead, UnknownDeployment

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sluice.registry.ports import ModelRegistry


def no_model(name: str) -> NotFound:
    return NotFound(f"model '{name}' not found", field="model")


def no_version(model: str, version: int) -> NotFound:
    return NotFound(f"model '{model}' has no version {version}", field="version")


def no_versions(model: str) -> NotFound:
    return NotFound(f"model '{model}' has no versions", field="version")


def missing_version(models: ModelRegistry, tenant: str, model: str, refusal: NotFound) -> NotFound:
    """What a version not found answers: the model's own NotFound where the model is missing
    too (`get_model` raises it), else `refusal`."""
    models.get_model(tenant, model)
    return refusal


def no_deployment(name: str) -> UnknownDeployment:
    return UnknownDeployment(name)


def no_job(job_id: str) -> NotFound:
    return NotFound(f"batch job '{job_id}' not found", field="job")


def no_optimize_job(job_id: str) -> NotFound:
    return NotFound(f"optimize job '{job_id}' not found", field="job_id")


def no_schedule(name: str) -> NotFound:
    return NotFound(f"schedule '{name}' not found", field="schedule")


def schedule_moved(name: str, fields: Iterable[str]) -> StaleRead:
    """An update of schedule `name` that expected `fields` as it read them, and found another
    writer had changed one (two schedulers recording the same run): not made."""
    return StaleRead(f"schedule '{name}' changed meanwhile ({', '.join(sorted(fields))})", field="schedule")


def no_follow(deployment: str) -> NotFound:
    return NotFound(f"deployment '{deployment}' follows no registry", field="deployment")


def follow_moved(deployment: str, revision: int, expected: int) -> Conflict:
    """A binding written meanwhile by another poller or command: decide again from a fresh read."""
    if revision == expected:  # the same revision of another binding: this one was removed and made again
        return Conflict(f"the binding of deployment '{deployment}' was removed and made again meanwhile", field="revision")
    return Conflict(f"the binding of deployment '{deployment}' is at revision {revision}, not {expected}", field="revision")


def not_at_revision(name: str, revision: int, expected: int) -> Conflict:
    """An update of deployment `name` that expected another revision than the stored one."""
    return Conflict(f"deployment '{name}' is at revision {revision}, not {expected}", field="revision")


def taken(what: str, name: str, *, field: str) -> Conflict:
    """A create whose key is taken: `model 'iris' already exists`."""
    return Conflict(f"{what} '{name}' already exists", field=field)


def check_updatable(what: str, fields: Iterable[str], updatable: frozenset[str] | set[str]) -> None:
    """Refuse (as a programming error) an update of fields that are not to change."""
    unknown = set(fields) - updatable
    if unknown:
        raise ValueError(f"cannot update {what} fields {sorted(unknown)}")
