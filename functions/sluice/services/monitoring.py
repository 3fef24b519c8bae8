"""Model monitoring as the API, the CLI and the rollout gate `drift` read it: a deployment's
baseline (stored with the revision it was taken at), and its traffic's profiles checked
against it per window (`sluice.monitor.checks`). Every read is the caller's tenant's: another
tenant's deployment is not found."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from sluice.domain import now
from sluice.domain.errors import NotFound
from sluice.monitor.checks import Thresholds, check
from sluice.monitor.sketches import Profile

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.domain import Principal
    from sluice.registry import DeploymentRegistry, MonitorRegistry
    from sluice.settings import MonitorSettings

    class Registry(DeploymentRegistry, MonitorRegistry): ...


MAX_WINDOWS = 168


class MonitorService:
    def __init__(self, registry: Registry, settings: MonitorSettings, *, before_read: Callable[[], object] | None = None) -> None:
        """`before_read`: writes what this process holds (its profile recorder's flush)."""
        self.registry = registry
        self.settings = settings
        self.before_read = before_read
        self.limits = Thresholds(
            drift=settings.monitor_drift_threshold, missing=settings.monitor_missing_threshold,
            out_of_range=settings.monitor_range_threshold, min_rows=settings.monitor_min_rows,
        )  # fmt: skip

    # Baselines ----------------------------------------------------------------------------------
    def put_baseline(self, principal: Principal, name: str, profile: Profile, *, source: str) -> dict[str, Any]:
        principal.require("admin")
        dep = self.registry.get_deployment(principal.tenant, name)
        doc = {"deployment": name, "revision": dep.revision, "source": source, "created_at": now(), "created_by": principal.subject, **profile.to_dict()}
        self.registry.put_baseline(principal.tenant, name, doc)
        return _baseline_out(doc, profile)

    def baseline(self, principal: Principal, name: str) -> dict[str, Any]:
        principal.require("admin")
        doc = self._baseline(principal.tenant, name)
        return _baseline_out(doc, Profile.from_dict(doc))

    def _baseline(self, tenant: str, name: str) -> dict[str, Any]:
        self.registry.get_deployment(tenant, name)  # another tenant's, or none: not found
        doc = self.registry.get_baseline(tenant, name)
        if doc is None:
            raise NotFound(f"deployment '{name}' has no baseline: make one with `sluice monitor baseline {name} --data FILE`", field="baseline")
        return doc

    # Checks -------------------------------------------------------------------------------------
    def status(self, principal: Principal, name: str, *, revision: int | None = None, variant: str | None = None, windows: int = 1) -> dict[str, Any]:
        """The latest `windows` windows of the revision (the current one by default) with
        traffic, newest first, each checked against the baseline; `variant`: that variant's
        traffic alone (all of it otherwise)."""
        principal.require("admin")
        dep = self.registry.get_deployment(principal.tenant, name)
        rev = revision or dep.revision
        doc = self._baseline(principal.tenant, name)
        baseline = Profile.from_dict(doc)
        found = self._windows(principal.tenant, name, rev, variant)
        checked = [
            {"window_start": start, "window_end": start + self.settings.monitor_window_s, **check(baseline, profile, self.limits)}
            for start, profile in sorted(found.items(), reverse=True)[:windows]
        ]
        return {
            "deployment": name,
            "revision": rev,
            "variant": variant,
            "baseline": {"revision": doc.get("revision"), "rows": doc.get("rows"), "source": doc.get("source"), "created_at": doc.get("created_at")},
            "window_s": self.settings.monitor_window_s,
            "thresholds": {"drift": self.limits.drift, "missing": self.limits.missing, "out_of_range": self.limits.out_of_range, "min_rows": self.limits.min_rows},
            "verdict": checked[0]["verdict"] if checked else "no_traffic",
            "windows": checked,
        }

    def latest(self, principal: Principal) -> dict[str, dict[str, Any]]:
        """The latest window of every deployment of the tenant that has a baseline and traffic
        at its current revision (what `/metrics` shows as gauges)."""
        out: dict[str, dict[str, Any]] = {}
        if importlib.util.find_spec("datasketches") is None:
            return out  # this process reads no sketch
        for dep in self.registry.list_deployments(principal.tenant):
            if self.registry.get_baseline(principal.tenant, dep.name) is None:
                continue
            windows = self.status(principal, dep.name)["windows"]
            if windows:
                out[dep.name] = windows[0]
        return out

    def drift(self, tenant: str, name: str, revision: int, variant: str) -> float | None:
        """The worst column's drift of one variant's traffic over the whole revision (the rollout
        gate `drift`); None without a baseline, or before the traffic has `min_rows` rows."""
        doc = self.registry.get_baseline(tenant, name)
        if doc is None:
            return None
        merged = Profile()
        for profile in self._windows(tenant, name, revision, variant).values():
            merged.merge(profile)
        if merged.rows < self.limits.min_rows:
            return None
        return check(Profile.from_dict(doc), merged, self.limits)["drift"]

    def _windows(self, tenant: str, name: str, revision: int, variant: str | None) -> dict[int, Profile]:
        if self.before_read is not None:
            self.before_read()
        windows: dict[int, Profile] = {}
        for who, start, doc in self.registry.read_profiles(tenant, name, revision):
            if variant is not None and who != variant:
                continue
            profile = Profile.from_dict(doc)
            if start in windows:
                windows[start].merge(profile)
            else:
                windows[start] = profile
        return windows


def _baseline_out(doc: dict[str, Any], profile: Profile) -> dict[str, Any]:
    fields = ("deployment", "revision", "source", "created_at", "created_by")
    return {**{k: doc.get(k) for k in fields}, **profile.summary()}
