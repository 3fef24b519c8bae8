"""Deployment policies: which model versions answer a request, and how answers combine.
Pure: no I/O of its own."""

from sluice.routing.policy import (
    Ensemble,
    Member,
    Mirror,
    Ref,
    Shadow,
    Single,
    Split,
    Target,
    Variant,
    parse_policy,
    primary_single,
    referenced_deployments,
    referenced_versions,
    walk,
)

__all__ = [
    "Ensemble",
    "Member",
    "Mirror",
    "Ref",
    "Shadow",
    "Single",
    "Split",
    "Target",
    "Variant",
    "parse_policy",
    "primary_single",
    "referenced_deployments",
    "referenced_versions",
    "walk",
]
