"""Model monitoring as the API, the CLI and the rollout gates read it: a deployment's
baseline (stored with the revision it was taken at), and its traffic's profiles checked
against it per window (`sluice.monitor.checks`); ground truth posted by request id, joined to
the predictions kept for it (`sluice.monitor.kept`), and the model's quality per window and
variant (`sluice.monitor.quality`). Every read is the caller's tenant's: another tenant's
deployment is not found, another tenant's request ids are never found."""

from __future__ import annotations

import importlib.util
import math
from typing import TYPE_CHECKING, Any

from sluice.domain import now
from sluice.domain.errors import InvalidInput, NotFound, SluiceError
from sluice.domain.signature import Signature
from sluice.monitor.checks import Thresholds, check, gate_drift
from sluice.monitor.quality import CLASS, MAX_LABEL, Outcomes, class_word, finite, merged
from sluice.monitor.sketches import Profile, merged_by

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Protocol

    from sluice.capture.reader import CaptureReader
    from sluice.domain import Principal
    from sluice.registry import DeploymentRegistry, ModelRegistry, MonitorRegistry
    from sluice.settings import MonitorSettings

    class Registry(ModelRegistry, DeploymentRegistry, MonitorRegistry, Protocol): ...


# Labels joined to their kept predictions (request id, row, the label as compared, the kept
# record), and the revision the deployment now under the name was made at (`_joined`).
Joined = tuple[list[tuple[str, int, Any, dict[str, Any]]], int]
MAX_WINDOWS = 168
PROFILES, CAPTURE = "profiles", "capture"
QUALITY_METRICS = ("accuracy", "precision", "recall", "auc", "mae", "rmse")


class MonitorService:
    def __init__(
        self, registry: Registry, settings: MonitorSettings, *, before_read: Callable[[], object] | None = None,
        capture: CaptureReader | None = None,
    ) -> None:  # fmt: skip
        """`before_read`: writes what this process holds (its profile recorder's flush);
        `capture`: where captured requests are read back (None: capture is off here)."""
        self.registry = registry
        self.settings = settings
        self.before_read = before_read
        self.capture = capture
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

    def baseline_from_capture(self, principal: Principal, name: str, *, since: Any, until: Any = None, outputs: bool = True) -> dict[str, Any]:
        """The deployment's baseline from its captured requests between `since` and `until`
        (as `parse_time` reads them, `2h` ago included; `until` None is now), every revision
        and variant, with the outputs they were answered (`outputs`), as its baseline."""
        from sluice.capture.reader import capture_window
        from sluice.domain.values import isoformat

        principal.require("admin")
        self.registry.get_deployment(principal.tenant, name)  # another tenant's, or none: not found
        start, end = capture_window(since, until, now=now(), what="a baseline", field="capture.")
        profile, counts = self._captured(principal.tenant, name, start, end, outputs=outputs)
        if not profile.rows:
            raise InvalidInput(f"no captured request of '{name}' from {isoformat(start)} to {isoformat(end)} could be read", field="capture")
        out = self.put_baseline(principal, name, profile, source=f"capture {isoformat(start)} to {isoformat(end)}")
        return {**out, "capture": counts}

    def _captured(self, tenant: str, name: str, since: float, until: float, **kw: Any) -> tuple[Profile, dict[str, int]]:
        from sluice.capture.reader import deployment_records
        from sluice.services.monitor_capture import profile_of_capture

        if self.capture is None:
            raise InvalidInput("data capture is off here: there are no captured requests to read", field="capture")

        leading = self._leading(tenant, name)

        def signature_of(model: str, version: int) -> Any:
            """What the live profiles name the columns by: the captured version's outputs, and
            the inputs the deployment reads (a graph's leading transform's, not its model's)."""
            signature = self.registry.get_version(tenant, model, version).signature
            return signature if leading is None else Signature(leading.input_specs(), signature.outputs, signature.metadata)

        records = deployment_records(self.capture, self.registry, tenant, name, since, until)
        return profile_of_capture(records, signature_of, max_columns=self.settings.monitor_max_columns, **kw)

    def _leading(self, tenant: str, name: str) -> Any:
        """The step before the model that reads the deployment's inputs (a transform, a lookup,
        a function), or None: the model reads them."""
        from sluice.domain.policy import parse_policy
        from sluice.services.graph_checks import leading_transform

        def resolve(ref: str) -> Any:
            return parse_policy(self.registry.get_deployment(tenant, ref).policy)

        try:
            return leading_transform(parse_policy(self.registry.get_deployment(tenant, name).policy), resolve)
        except SluiceError:  # a reference gone meanwhile: named by the model, as before
            return None

    def _baseline(self, tenant: str, name: str) -> dict[str, Any]:
        self.registry.get_deployment(tenant, name)  # another tenant's, or none: not found
        doc = self.registry.get_baseline(tenant, name)
        if doc is None:
            raise NotFound(f"deployment '{name}' has no baseline: make one with `sluice monitor baseline {name} --data FILE`", field="baseline")
        return doc

    # Checks -------------------------------------------------------------------------------------
    def status(
        self, principal: Principal, name: str, *, revision: int | None = None, variant: str | None = None, windows: int = 1,
        source: str = PROFILES,
    ) -> dict[str, Any]:  # fmt: skip
        """The latest `windows` windows of the revision (the current one by default) with
        traffic, newest first, each checked against the baseline; `variant`: that variant's
        traffic alone (all of it otherwise). `source` `capture`: each of the latest `windows`
        windows (the open one first) recomputed from the captured requests, every row
        sketched (`sluice.services.monitor_capture`)."""
        principal.require("admin")
        if variant == "default":  # the traffic of a deployment without a split, as `quality` names it
            variant = ""
        dep = self.registry.get_deployment(principal.tenant, name)
        rev = revision or dep.revision
        quality = self.quality(principal.tenant, name, rev, variant=variant)[:windows]
        doc = self.registry.get_baseline(principal.tenant, name)
        checked: list[dict[str, Any]] = []
        if doc is None and not quality:
            doc = self._baseline(principal.tenant, name)  # not found, saying how to make one
        if doc is not None:
            baseline = Profile.from_dict(doc)
            if source == CAPTURE:
                found = self._captured_windows(principal.tenant, name, rev, variant, windows)
                hidden = set(dep.capture.redact) if dep.capture is not None else set()
                if hidden:  # not captured, so never in a window from capture: not checked either
                    kept = {k: c for k, c in baseline.columns.items() if k not in hidden and k.partition("[")[0] not in hidden}
                    baseline = Profile(baseline.rows, kept)
            else:
                found = self._windows(principal.tenant, name, rev, variant)
            checked = [
                {"window_start": start, "window_end": start + self.settings.monitor_window_s, **check(baseline, profile, self.limits)}
                for start, profile in sorted(found.items(), reverse=True)[:windows]
            ]
        return {
            "deployment": name,
            "revision": rev,
            "variant": variant,
            "source": source,
            "baseline": None if doc is None else {k: doc.get(k) for k in ("revision", "rows", "source", "created_at")},
            "window_s": self.settings.monitor_window_s,
            "thresholds": {"drift": self.limits.drift, "missing": self.limits.missing, "out_of_range": self.limits.out_of_range, "min_rows": self.limits.min_rows},
            "verdict": "no_baseline" if doc is None else checked[0]["verdict"] if checked else "no_traffic",
            "windows": checked,
            "quality": quality,
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

    def window_before(self, at: float) -> int:
        """The start of the last window closed at `at`."""
        return (int(at) // self.settings.monitor_window_s - 1) * self.settings.monitor_window_s

    def closed(self, tenant: str, name: str, *, at: float) -> dict[str, Any] | None:
        """The last window closed at `at` (the one before the window `at` falls in) of the
        deployment's current revision, as the scheduled check reports it: the window checked
        against the baseline (None where this process reads no sketch, or the window had no
        traffic) and its quality, all variants together (None without labels). None when the
        deployment or its baseline is gone."""
        try:
            dep = self.registry.get_deployment(tenant, name)
        except NotFound:
            return None
        doc = self.registry.get_baseline(tenant, name)
        if doc is None:
            return None
        start = self.window_before(at)
        checked = None
        if importlib.util.find_spec("datasketches") is not None:
            window = Profile()
            for _, begun, profile in self.registry.read_profiles(tenant, name, dep.revision, since=start):
                if begun == start:
                    window.merge(Profile.from_dict(profile))
            if window.rows:
                checked = check(Profile.from_dict(doc), window, self.limits)
        quality = next((q for q in self.quality(tenant, name, dep.revision) if q["window_start"] == start), None)
        return {"deployment": name, "revision": dep.revision, "window_start": start, "check": checked, "quality": quality}

    def drift(self, tenant: str, name: str, revision: int, variant: str) -> float | None:
        """The worst column's drift of one variant's traffic over the whole revision (the rollout
        gate `drift`); None without a baseline, before the traffic has `min_rows` rows, or where
        this process reads no sketch (a runtime without DataSketches: the gate holds)."""
        doc = self.registry.get_baseline(tenant, name)
        if doc is None or importlib.util.find_spec("datasketches") is None:
            return None
        merged = Profile()
        for profile in self._windows(tenant, name, revision, variant).values():
            merged.merge(profile)
        if merged.rows < self.limits.min_rows:
            return None
        return gate_drift(check(Profile.from_dict(doc), merged, self.limits))

    # Ground truth -------------------------------------------------------------------------------
    def add_labels(
        self, principal: Principal, name: str, labels: list[tuple[str, int, Any]], *, named: Callable[[int], str] | None = None,
        checked: Joined | None = None,
    ) -> dict[str, Any]:
        """Join (request id, row, label) to the predictions kept for those request ids, each
        labelled row once, and count them in the window and variant of their prediction. An
        id with no kept prediction (unknown, expired, another tenant's) is `unmatched`; a row
        labelled before is a `duplicate`; a matched row whose prediction was not a finite
        number (a regressor's NaN or infinity) is also `not_comparable`, in no figure; a label
        its prediction cannot be compared with is refused, naming it (`named(i)`: the i-th
        label's field, `labels[i].label` by default), before anything is counted. `checked`:
        what `check_labels` gave for these labels (their predictions not read again)."""
        tenant = principal.tenant
        joined, made = checked if checked is not None else self._joined(principal, name, labels, named)
        claimed = self.registry.claim_labels(
            tenant, name, [(rid, row) for rid, row, _, _ in joined], expires_at=now() + self.settings.monitor_keep_ttl_s, made=made
        )
        counts: dict[tuple[int, int], dict[str, Outcomes]] = {}
        not_comparable = 0
        for (_, row, label, record), first in zip(joined, claimed, strict=True):
            if not first:
                continue
            said = record["predicted"][row]
            if record["kind"] != CLASS and not finite(said):
                # A prediction of NaN or an infinity: the row is matched (and claimed, so a
                # label posted again is a duplicate) but in no figure, which it would make NaN.
                not_comparable += 1
                continue
            variants = counts.setdefault((int(record["revision"]), int(record["window"])), {})
            out = variants.setdefault(record["variant"], Outcomes(record["kind"]))
            if record["kind"] == CLASS:
                scores, each = record.get("scores"), record.get("class_scores")
                by_class = dict(zip(record["classes"], each[row], strict=False)) if each and record.get("classes") else None
                out.add_class(label, said, scores[row] if scores else None, record.get("positive"), class_scores=by_class)
            else:
                out.add_value(label, float(said))
        written: set[tuple[int, int]] = set()
        try:
            for (revision, window), variants in sorted(counts.items()):
                self.registry.add_outcomes(tenant, name, revision, window, {v: o.to_dict() for v, o in variants.items()})
                written.add((revision, window))
        except Exception:
            # The rows whose counts were not written are let go: posted again, they count
            # (kept claimed, a retry would call them duplicates, and they would never count).
            unwritten = [
                (rid, row) for (rid, row, _, record), first in zip(joined, claimed, strict=True)
                if first and (int(record["revision"]), int(record["window"])) not in written
            ]  # fmt: skip
            self.registry.release_labels(tenant, name, unwritten)
            raise
        matched = sum(claimed)
        return {
            "deployment": name, "received": len(labels), "matched": matched,
            "unmatched": len(labels) - len(joined), "duplicate": len(joined) - matched, "not_comparable": not_comparable,
            "windows": [{"revision": r, "window_start": w, "rows": sum(o.rows for o in v.values())} for (r, w), v in sorted(counts.items())],
        }  # fmt: skip

    def check_labels(
        self, principal: Principal, name: str, labels: list[tuple[str, int, Any]], *, named: Callable[[int], str] | None = None
    ) -> Joined:
        """Refuse, as `add_labels` would, a label its prediction cannot be compared with,
        counting and claiming nothing: what posts labels in several parts (a file) checks them
        all first, so that a bad label in a late part is refused before an early part counts.
        What it gives is `add_labels`'s `checked` for the same labels."""
        return self._joined(principal, name, labels, named)

    def _joined(self, principal: Principal, name: str, labels: list[tuple[str, int, Any]], named: Callable[[int], str] | None) -> Joined:
        """The labels joined to their kept predictions (request id, row, the label as it is
        compared, the kept record), a label that cannot be compared refused; and the revision
        the deployment under the name was made at."""
        principal.require("predict")
        tenant = principal.tenant
        self.registry.get_deployment(tenant, name)  # another tenant's, or none: not found
        if self.before_read is not None:
            self.before_read()  # what this process holds, kept first
        kept = self.registry.find_predictions(tenant, name, [rid for rid, _, _ in labels], now=now())
        made = 0
        if kept:  # a prediction (or a label's claim) made before the deployment now under the name was made was another's
            from sluice.domain.objects import made_at_revision

            made = made_at_revision(self.registry.deployment_history(tenant, name))
            kept = {rid: record for rid, record in kept.items() if int(record["revision"]) >= made}
        joined = []
        for i, (rid, row, label) in enumerate(labels):
            record = kept.get(rid)
            if record is not None and row < len(record["predicted"]):
                joined.append((rid, row, _label(record["kind"], label, named(i) if named is not None else f"labels[{i}].label"), record))
        return joined, made

    def quality(self, tenant: str, name: str, revision: int, *, variant: str | None = None) -> list[dict[str, Any]]:
        """Each window of the revision with labels, newest first: the quality of all its
        labelled predictions and of each variant's (`variant`: that variant's alone)."""
        docs: dict[int, list[dict[str, Any]]] = {}
        for window, doc in self.registry.read_outcomes(tenant, name, revision):
            docs.setdefault(window, []).append(doc if variant is None else {k: v for k, v in doc.items() if k == variant})
        out = []
        for window, found in sorted(docs.items(), reverse=True):
            variants = merged(found)
            if not variants:
                continue
            everything = Outcomes(next(iter(variants.values())).kind)
            for each in variants.values():
                everything.merge(each)
            out.append({
                "window_start": window, "window_end": window + self.settings.monitor_window_s, **everything.metrics(),
                "variants": {v or "default": o.metrics() for v, o in sorted(variants.items())},
            })  # fmt: skip
        return out

    def quality_gate(self, tenant: str, name: str, revision: int, variant: str) -> dict[str, float | None]:
        """The rollout gates' quality metrics of one variant over the whole revision; None
        each before `monitor_min_labels` of its predictions are labelled."""
        total: Outcomes | None = None
        for _, doc in self.registry.read_outcomes(tenant, name, revision):
            part = doc.get(variant)
            if part is None:
                continue
            found = Outcomes.from_dict(part)
            if total is None:
                total = found
            else:
                total.merge(found)
        if total is None or total.rows < self.settings.monitor_min_labels:
            return dict.fromkeys(QUALITY_METRICS)
        metrics = total.metrics()
        return {m: metrics.get(m) for m in QUALITY_METRICS}

    def latest_quality(self, principal: Principal) -> dict[str, dict[str, Any]]:
        """The latest window with labels of every deployment of the tenant, at its current
        revision (what `/metrics` shows as gauges)."""
        out: dict[str, dict[str, Any]] = {}
        for dep in self.registry.list_deployments(principal.tenant):
            windows = self.quality(principal.tenant, dep.name, dep.revision)
            if windows:
                out[dep.name] = windows[0]
        return out

    def _captured_windows(self, tenant: str, name: str, revision: int, variant: str | None, windows: int) -> dict[int, Profile]:
        """The latest `windows` windows, the open one first, from capture; those with rows."""
        size = self.settings.monitor_window_s
        latest = int(now()) // size * size
        out: dict[int, Profile] = {}
        for start in range(latest, latest - windows * size, -size):
            profile, _ = self._captured(tenant, name, start, start + size, revision=revision, variant=variant)
            if profile.rows:
                out[start] = profile
        return out

    def _windows(self, tenant: str, name: str, revision: int, variant: str | None) -> dict[int, Profile]:
        if self.before_read is not None:
            self.before_read()
        found = self.registry.read_profiles(tenant, name, revision)
        return merged_by((start, Profile.from_dict(doc)) for who, start, doc in found if variant is None or who == variant)


def _baseline_out(doc: dict[str, Any], profile: Profile) -> dict[str, Any]:
    fields = ("deployment", "revision", "source", "created_at", "created_by")
    return {**{k: doc.get(k) for k in fields}, **profile.summary()}


def _label(kind: str, label: Any, field: str) -> Any:
    """A label as its prediction is compared with it: a class as text (a whole number as one
    is written), a value as a finite number of at most `MAX_LABEL` either way."""
    if kind == CLASS:
        if isinstance(label, bool | dict | list) or label is None:
            raise InvalidInput(f"a classifier's label is a class (text or a number), not {type(label).__name__}", field=field)
        if isinstance(label, float) and not math.isfinite(label):  # NaN or infinity: no class (it was the class "nan")
            raise InvalidInput(f"a classifier's label is a class (text or a number), not {label}", field=field)
        return class_word(label)
    try:
        value = float(label)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a whole number past float's range
        raise InvalidInput(f"a regressor's label is a number, not {label!r:.40}", field=field) from None
    if isinstance(label, bool) or not abs(value) <= MAX_LABEL:  # NaN and infinities too
        raise InvalidInput(f"a regressor's label is a number from -{MAX_LABEL:g} to {MAX_LABEL:g}, not {label!r:.40}", field=field)
    return value
