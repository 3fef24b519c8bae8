"""A rollout driven by any sequence of what happens to it: traffic to either variant (with
errors, slow or not), time passing, the controller's looks (one, or two at once as the serve
thread and a scheduled invocation may make), pause, resume, abort, a manual policy change, and
a new rollout started over an old one. After every step the deployment must say what a user
was promised (docs/rollouts.md):

- a look advances or completes only a step whose time is up, whose candidate had its
  `min_requests` in this step, and whose gates all pass on this step's traffic; it rolls back
  at once when a gate fails on the step's numbers (errors beyond doubt before the count); it
  holds otherwise, writing nothing;
- a running or paused rollout routes by its step's split (a manual change excepted, which
  pauses it; a change of its settings alone does not); a completed one by the candidate, a
  rolled back or aborted one by the stable policy; an ended one never moves again;
- two looks at once move the rollout one step at most: the loser is refused, never applied
  twice;
- pause, resume and abort are refused (409) in a state they do not apply to, and change
  nothing then.

Real SQLite, a real deployment and its statistics; the clock is the test's."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from sluice.domain.errors import Conflict
from sluice.services.rollouts import RolloutService
from tests.conftest import MODELS
from tests.support import Clock

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.wiring import Container

EVERY_S = 600.0
GATES = "error_rate<=0.1,p99_ratio<=2"
STABLE = {"kind": "single", "model": "iris", "version": 1}
CANDIDATE = {"kind": "single", "model": "iris", "version": 2}
FAST_MS, SLOW_MS = 2.0, 9.0
STEPS = st.lists(st.sampled_from([1.0, 5.0, 10.0, 25.0, 50.0, 75.0]), min_size=1, max_size=4, unique=True).map(lambda s: (*sorted(s), 100.0))


@dataclass
class Step:
    """What this revision's traffic was (statistics are kept per revision)."""

    requests: int = 0
    errors: int = 0
    stable: int = 0
    slow: bool | None = None  # the candidate's latency this revision: all slow or none


@dataclass
class Model:
    state: str | None = None
    steps: tuple[float, ...] = ()
    step: int = 0
    min_requests: int = 1
    step_started_at: float = 0.0
    manual: bool = False  # changed by hand since: the policy is that change's
    traffic: Step = field(default_factory=Step)

    @property
    def active(self) -> bool:
        return self.state in ("running", "paused")

    def expected(self, now: float) -> str:
        """What a look at a running rollout must do with this step's numbers."""
        t, need = self.traffic, self.min_requests
        if t.requests < need:
            return "rollback" if t.errors / need > 0.1 else "hold"
        if t.errors / t.requests > 0.1:
            return "rollback"
        if t.stable == 0:
            return "hold"  # p99_ratio has no value yet
        if t.slow:
            return "rollback"
        if now - self.step_started_at < EVERY_S:
            return "hold"
        return "complete" if self.step + 1 >= len(self.steps) or self.steps[self.step + 1] >= 100 else "advance"


def _machine(demo: Container, acme: Principal) -> type[RuleBasedStateMachine]:
    names = iter(range(1_000_000))

    class Rollouts(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.clock = Clock()
            self.service = RolloutService(demo.registry, demo.deployments, clock=self.clock)
            self.name = f"r{next(names)}"
            demo.deployments.create(acme, self.name, STABLE)
            self.model = Model()

        # What the test reads -------------------------------------------------------------
        def deployment(self) -> Any:
            return demo.deployments.get(acme, self.name)

        def changes(self) -> int:
            return len(demo.deployments.history(acme, self.name))

        def moved(self) -> None:
            """A new revision: the step's numbers start afresh."""
            self.model.traffic = Step()

        # Rules ----------------------------------------------------------------------------
        @initialize(steps=STEPS, min_requests=st.integers(1, 12))
        def first(self, steps: tuple[float, ...], min_requests: int) -> None:
            self.start(steps, min_requests)

        @rule(steps=STEPS, min_requests=st.integers(1, 12))
        def start(self, steps: tuple[float, ...], min_requests: int) -> None:
            plan = {"to": "iris:2", "steps": ",".join(f"{s:g}" for s in steps), "every": EVERY_S, "gates": GATES, "min_requests": min_requests}
            if self.model.active:
                with pytest.raises(Conflict):
                    self.service.start(acme, self.name, **plan)
                return
            if self.deployment().policy == CANDIDATE:  # completed before: it routes to the candidate already
                return
            self.service.start(acme, self.name, **plan)
            self.model = Model("running", steps, 0, min_requests, self.clock.now)

        @precondition(lambda self: self.model.active)
        @rule(variant=st.sampled_from(["stable", "candidate"]), n=st.integers(1, 15), errors=st.integers(0, 15), slow=st.booleans())
        def traffic(self, variant: str, n: int, errors: int, slow: bool) -> None:
            errors = min(errors, n)
            t = self.model.traffic
            if variant == "candidate":
                t.slow = slow if t.slow is None else t.slow
                ms = SLOW_MS if t.slow else FAST_MS
                t.requests, t.errors = t.requests + n, t.errors + errors
            else:
                ms, errors = FAST_MS, 0
                t.stable += n
            key = ("acme", self.name, self.deployment().revision, f"variant:{variant}")
            for i in range(n):
                demo.predictions.stats.request(key, ms, ok=i >= errors)

        @precondition(lambda self: self.model.active)
        @rule(n=st.integers(1, 15))
        def clean_traffic(self, n: int) -> None:
            """Both variants answered well, the candidate as fast as the stable (gates pass)."""
            if self.model.traffic.slow is None:
                self.model.traffic.slow = False
            self.traffic("stable", n, 0, False)
            self.traffic("candidate", n, 0, False)

        @rule(seconds=st.sampled_from([1.0, EVERY_S / 2, EVERY_S, 3 * EVERY_S]))
        def wait(self, seconds: float) -> None:
            self.clock.now += seconds

        @rule()
        def look(self) -> None:
            before, m = self.changes(), self.model
            expected = m.expected(self.clock.now) if m.state == "running" else None
            decision = self.service.tick("acme", self.name)
            if expected is None:
                assert decision is None and self.changes() == before  # nothing to look at
                return
            assert decision is not None and decision.action == expected, (decision, m)
            self._apply(expected, before)

        @precondition(lambda self: self.model.state == "running")
        @rule()
        def two_looks_at_once(self) -> None:
            before, expected = self.changes(), self.model.expected(self.clock.now)
            together = threading.Barrier(2)
            outcomes: list[Any] = []

            def look() -> None:
                together.wait()
                try:
                    outcomes.append(self.service.tick("acme", self.name))
                except Conflict as exc:  # the other look wrote first
                    outcomes.append(exc)

            threads = [threading.Thread(target=look) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            decisions = [o for o in outcomes if not isinstance(o, Conflict)]
            assert any(d is not None and d.action == expected for d in decisions), (outcomes, self.model)
            self._apply(expected, before)  # one move, however the looks interleaved

        def _apply(self, action: str, before: int) -> None:
            m = self.model
            if action == "hold":
                assert self.changes() == before  # holding writes nothing
                return
            assert self.changes() == before + 1
            if action == "advance":
                m.step, m.step_started_at = m.step + 1, self.clock.now
            else:
                m.state = {"rollback": "rolled_back", "complete": "completed"}[action]
            self.moved()

        @rule()
        def pause(self) -> None:
            self._command(self.service.pause, ("running",), "paused")

        @rule()
        def resume(self) -> None:
            if self._command(self.service.resume, ("paused",), "running"):
                self.model.step_started_at, self.model.manual = self.clock.now, False

        @rule()
        def abort(self) -> None:
            self._command(self.service.abort, ("running", "paused"), "aborted")

        def _command(self, verb: Any, states: tuple[str, ...], after: str) -> bool:
            before = self.changes()
            if self.model.state not in states:
                with pytest.raises(Conflict):
                    verb(acme, self.name)
                assert self.changes() == before
                return False
            verb(acme, self.name)
            self.model.state = after
            self.moved()
            return True

        @rule()
        def manual_change(self) -> None:
            demo.deployments.update(acme, self.name, STABLE)
            if self.model.state == "running":
                self.model.state = "paused"
            self.model.manual = True  # what it routes by until a resume or a new rollout
            self.moved()

        @rule(batching=st.sampled_from([None, {"max_batch_size": 8, "max_delay_us": 100}]))
        def settings_change(self, batching: dict[str, Any] | None) -> None:
            """A change of the deployment's settings, not of its policy: a running rollout goes
            on, its step started again (judged on a whole `every` of the traffic from here, a
            revision of its own); a paused or ended one stays as it was."""
            demo.deployments.update(acme, self.name, None, batching=batching)
            if self.model.state == "running":
                self.model.step_started_at = self.clock.now
            self.moved()

        # What must hold after every step ----------------------------------------------------
        @invariant()
        def routes_as_its_state_says(self) -> None:
            dep, m = self.deployment(), self.model
            rollout = dep.rollout
            if m.state is None:
                assert rollout is None
                return
            assert rollout is not None and rollout.state == m.state
            assert demo.registry.running_rollouts().count(("acme", self.name)) == (m.state == "running")
            if m.manual:
                assert dep.policy == STABLE
            elif m.state == "completed":
                assert dep.policy == CANDIDATE
            elif m.state in ("rolled_back", "aborted"):
                assert dep.policy == STABLE
            else:
                assert rollout.step == m.step and rollout.weight == m.steps[m.step]
                weights = {v["name"]: v["weight"] for v in dep.policy["variants"]}
                assert weights == {"stable": 100 - m.steps[m.step], "candidate": m.steps[m.step]}

    return Rollouts


def test_a_rollout_moves_only_as_its_verdicts_say(demo: Container, acme: Principal) -> None:
    demo.models.push(acme, "iris", (MODELS / "iris.onnx").read_bytes())  # iris:2, the candidate
    run_state_machine_as_test(
        _machine(demo, acme),
        settings=settings(max_examples=50, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]),
    )
