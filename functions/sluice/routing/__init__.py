"""Deployment policies: which model version answers a request. Pure: no I/O of its own."""

from sluice.routing.policy import Single, Target, parse_policy, pick_target, referenced_versions

__all__ = ["Single", "Target", "parse_policy", "pick_target", "referenced_versions"]
