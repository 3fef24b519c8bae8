"""A progressive rollout: a candidate version moved into a deployment step by step, each step
held until its gates pass on the statistics of the deployment's current revision, rolled back
to the stable policy at once when a gate fails. Pure: the parsing and checks of what a rollout
is made of, the policy each step routes by, and what the controller decides from a step's
numbers (`evaluate`). `sluice.services.rollouts` runs it.

Gate metrics, each measured on the counters of the deployment's current revision (a revision
per step, so a step is judged on its own traffic only):

- `agreement`      label agreement of the candidate with the stable answer on the same inputs:
                   `agree / labelled` of the candidate mirrored on requests the stable answered;
- `mean_abs_diff`  the mean absolute difference of probabilities (or values) in that comparison;
- `error_rate`     `errors / requests` of the requests the candidate variant answered;
- `invalid_input_rate`  `invalid_inputs / requests` of those: requests the candidate refused for
                   what they carried (400, 413, 422: a signature the callers do not send);
- `p99_ratio`      the candidate variant's p99 latency over the stable variant's;
- `drift`          the candidate variant's worst column drift against the deployment's baseline
                   (population stability index; `sluice.monitor.checks`), over the step's
                   traffic: no value (the step holds) without a baseline or before the
                   candidate has the rows a monitoring check needs.
- `accuracy`, `precision`, `recall`, `auc` (classifiers), `mae`, `rmse` (regressors): the
                   candidate variant's quality from the labels posted for its predictions
                   (`sluice.monitor.quality`) over the step's revision: no value (the step holds)
                   before `monitor_min_labels` of them are labelled.

A deployment bound to a SageMaker endpoint also has its endpoint's production-variant weights
moved (`EndpointRollout`, `endpoint_weights`): sluice routes its own requests with
`TargetVariant`, the weights steer every other caller of the endpoint and are what SageMaker
shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from sluice.domain.rollout_specs import RATE_COUNTS, Gate, parse_gates

STATES = ("running", "paused", "completed", "rolled_back", "aborted")
ACTIVE = ("running", "paused")
STABLE, CANDIDATE = "stable", "candidate"  # the split's variants, and the candidate's mirror
@dataclass(frozen=True, slots=True)
class EndpointRollout:
    """The endpoint side of a rollout of a deployment bound to a SageMaker endpoint (or its
    local twin). Production variants are named as SageMaker names them."""

    name: str  # the endpoint
    candidate: str  # the production variant that serves the candidate
    candidate_version: int  # the `sagemaker` version bound to that variant: the split's candidate
    stable: dict[str, float]  # each production variant of the stable policy: its share of it (sums to 1)
    before: dict[str, float]  # every variant's weight when the rollout started: what going back restores
    added: bool = False  # the rollout put the candidate's variant on the endpoint (UpdateEndpoint)
    ready: bool = True  # False while that variant is not in service yet: no step has begun
    pending: bool = False  # the weights of the rollout's state are not on the endpoint yet
    waiting_since: float | None = None  # when they began to wait (the endpoint was not InService)
    weights: dict[str, float] = field(default_factory=dict)  # the weights last put on the endpoint


@dataclass(frozen=True, slots=True)
class Rollout:
    """A deployment's rollout, stored with the deployment (one at a time). `stable` is the
    policy the deployment had when it started: what a rollback restores."""

    model: str
    version: int
    stable: dict[str, Any]
    steps: tuple[float, ...]
    every_s: float
    gates: str  # the gate expression, as `parse_gates` reads it
    min_requests: int
    state: str = "running"
    step: int = 0  # index into `steps`
    alarms: tuple[str, ...] = ()
    routing_key: str | None = None
    mirror_percent: float = 100.0
    started_at: float = 0.0
    started_by: str = ""
    step_started_at: float = 0.0
    updated_at: float = 0.0
    reason: str = ""  # the last decision, in words
    decided: dict[str, Any] = field(default_factory=dict)  # the numbers of the last decision
    endpoint: EndpointRollout | None = None  # set when the deployment is bound to an endpoint

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def waiting_for_endpoint(self) -> bool:
        """The candidate's variant is being added to the endpoint: the stable policy routes
        everything, and the first step begins once the variant is in service."""
        return self.endpoint is not None and not self.endpoint.ready

    @property
    def weight(self) -> float:
        return self.steps[self.step]

    @property
    def candidate(self) -> dict[str, Any]:
        """What the split routes the candidate to: the version asked for, or on an endpoint the
        `sagemaker` version bound to the candidate's variant."""
        version = self.endpoint.candidate_version if self.endpoint is not None else self.version
        return {"kind": "single", "model": self.model, "version": version}

    def parsed_gates(self) -> tuple[Gate, ...]:
        return parse_gates(self.gates)

    def step_policy(self) -> dict[str, Any]:
        """The policy of the current step: a split of stable and candidate by the step's
        weight, the candidate also mirrored on what the stable answers (the comparison the
        `agreement` gate reads). The last step (100) is the candidate alone. While the
        candidate's variant is being added to the endpoint, the stable policy alone."""
        if self.waiting_for_endpoint:
            return self.stable
        weight = self.weight
        if weight >= 100:
            return self.candidate
        stable_branch: dict[str, Any] = {
            "kind": "shadow",
            "primary": self.stable,
            "mirrors": [
                {"name": CANDIDATE, "sample_percent": self.mirror_percent, "target": self.candidate}
            ],
        }
        split: dict[str, Any] = {
            "kind": "split",
            "variants": [
                {"name": STABLE, "weight": round(100 - weight, 6), "target": stable_branch},
                {"name": CANDIDATE, "weight": weight, "target": self.candidate},
            ],
        }
        if self.routing_key:
            split["routing_key"] = self.routing_key
        return split


def endpoint_weights(rollout: Rollout) -> dict[str, float] | None:
    """The production-variant weights the endpoint should have in this state of the rollout,
    in percent like the split (SageMaker divides traffic by each weight over their sum); None
    when there is no endpoint, or no step has begun on it.

    Running or paused at `w`%: the candidate's variant `w`, the stable's variants `100 - w`
    shared as the stable policy shares them, every other variant 0. Completed: the candidate
    100 and every other variant 0 (none is removed). Rolled back or aborted: every variant as it
    was when the rollout started, a variant the rollout added at 0."""
    ep = rollout.endpoint
    if ep is None:
        return None
    if rollout.state in ("rolled_back", "aborted"):
        back = dict(ep.before)
        back.setdefault(ep.candidate, 0.0)
        return back
    if not ep.ready:
        return None
    share = 100.0 if rollout.state == "completed" else rollout.weight
    out = dict.fromkeys(ep.before, 0.0)
    out[ep.candidate] = 0.0
    for variant, part in ep.stable.items():
        out[variant] = out.get(variant, 0.0) + round((100.0 - share) * part, 6)
    out[ep.candidate] += share
    return out


@dataclass(frozen=True, slots=True)
class Decision:
    action: str  # hold, advance, complete, rollback; endpoint: the endpoint caught up
    reason: str
    numbers: dict[str, Any]


def evaluate(rollout: Rollout, metrics: dict[str, Any], now: float) -> Decision:
    """What the controller does with these numbers: pure, so every path is tested directly."""
    gates = rollout.parsed_gates()
    results = {
        str(g): {
            "value": metrics.get(g.metric),
            "passes": None if metrics.get(g.metric) is None else g.passes(metrics[g.metric]),
        }
        for g in gates
    }
    numbers = {
        "step": rollout.step,
        "weight": rollout.weight,
        "metrics": metrics,
        "gates": results,
        "min_requests": rollout.min_requests,
    }
    need = rollout.min_requests
    n = metrics["candidate_requests"]
    for g in gates:
        # Failing beyond doubt before the count is reached: more errors (or refused inputs)
        # than the gate allows even if every request still to come up to the minimum succeeded.
        counted = metrics.get(RATE_COUNTS.get(g.metric, ""), 0)
        if g.metric in RATE_COUNTS and g.op in ("<=", "<") and n < need and not g.passes(counted / need):
            results[str(g)]["passes"] = False
            what = "errors" if g.metric == "error_rate" else "refused inputs"
            return Decision(
                "rollback",
                f"gate {g} fails: {counted} {what} already over the {need} requests a step needs",
                numbers,
            )
    # A candidate that answered none of a step's worth of requests, as a variant or as the
    # stable's mirror, is rolled back whatever the gates: none of them (agreement, p99_ratio)
    # ever gets a value from it, and the step would hold with its share of users failing.
    mirrored = metrics.get("mirrored", 0)
    errors, refused = metrics.get("candidate_errors", 0), metrics.get("candidate_invalid_inputs", 0)
    # Its refusals of the inputs are its model's (a caller's bad request is refused before a
    # variant is chosen), unless the stable refused all of its own too: callers sending nothing
    # either could answer.
    stable_answered = metrics.get("stable_requests", 0) > metrics.get("stable_errors", 0)
    none_answered = n >= need and errors >= n and (refused < errors or stable_answered)
    if none_answered or (mirrored >= need and metrics.get("mirror_errors", 0) >= mirrored):
        what = f"{n} requests" if none_answered else f"{mirrored} mirrored requests"
        return Decision("rollback", f"the candidate answered none of its {what}", numbers)
    if n >= need:  # a gate on the candidate's own counts that fails is not waiting for comparisons
        failing = [str(g) for g in gates if g.metric in RATE_COUNTS and results[str(g)]["passes"] is False]
        if failing:
            return Decision("rollback", f"gate {', '.join(failing)} fails", numbers)
    compared_needed = any(g.metric in ("agreement", "mean_abs_diff") for g in gates)
    if n < need or (compared_needed and metrics["compared"] < need):
        have = f"{n} of {need} candidate requests" + (
            f", {metrics['compared']} of {need} comparisons" if compared_needed else ""
        )
        return Decision("hold", f"waiting for traffic: {have}", numbers)
    failed = [name for name, r in results.items() if r["passes"] is False]
    if failed:
        return Decision("rollback", f"gate {', '.join(failed)} fails", numbers)
    undecided = [name for name, r in results.items() if r["passes"] is None]
    if undecided:
        return Decision("hold", f"gate {', '.join(undecided)} has no value yet", numbers)
    left = rollout.every_s - (now - rollout.step_started_at)
    if left > 0:
        return Decision("hold", f"gates pass; the step lasts {left:.0f} s more", numbers)
    if rollout.step + 1 >= len(rollout.steps) or rollout.steps[rollout.step + 1] >= 100:
        return Decision(
            "complete",
            f"gates pass at {rollout.weight:g}%: the candidate takes all traffic",
            numbers,
        )
    return Decision(
        "advance",
        f"gates pass at {rollout.weight:g}%: on to {rollout.steps[rollout.step + 1]:g}%",
        numbers,
    )


def waiting_reason(rollout: Rollout) -> str | None:
    """Why a look holds for the endpoint, or None."""
    ep = rollout.endpoint
    if ep is None:
        return None
    if not ep.ready:
        return f"waiting for endpoint {ep.name} to put variant {ep.candidate} in service"
    if ep.pending:
        return f"waiting for endpoint {ep.name} to be InService to take the weights"
    return None


def paused(rollout: Rollout, reason: str, when: float) -> tuple[Rollout, dict[str, Any]]:
    """The rollout held at its step, and the note of the change that holds it."""
    held = replace(rollout, state="paused", reason=reason, decided={}, updated_at=when)
    return held, {
        "rollout": "paused",
        "reason": reason,
        "step": rollout.step,
        "weight": rollout.weight,
    }


def paused_by_change(rollout: Rollout, subject: str, when: float) -> tuple[Rollout, dict[str, Any]]:
    """A policy change by someone else pauses a running rollout, in the same revision."""
    return paused(rollout, f"paused: the policy was changed by {subject}", when)


def restarted_by_change(rollout: Rollout, subject: str, when: float, note: dict[str, Any] | None) -> tuple[Rollout, dict[str, Any]]:
    """A change of a running rollout's deployment settings alone (batching, capture, cache)
    keeps it running, its step started again from the new revision: statistics are counted
    per revision, so the step is judged on a whole `every` of the new one's traffic."""
    reason = f"step at {rollout.weight:g}% started again: the deployment's settings were changed by {subject}"
    restarted = replace(rollout, step_started_at=when, updated_at=when, reason=reason, decided={})
    return restarted, {**(note or {}), "rollout": "restarted", "reason": reason, "step": rollout.step, "weight": rollout.weight}
