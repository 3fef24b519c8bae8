"""The bandit choices an ensemble leaves for its request's feedback (`Call.chosen`): every
member's, or where one member's answer is the ensemble's (`first_success`), that member's
alone, whenever the others choose, fail or are stopped. Driven on the real `PolicyRunner` with
runtimes and registry reads that take a given number of turns of the loop, so the members'
choices and answers fall in every order."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.domain import Deployment, ModelVersion
from sluice.domain.errors import BackendError
from sluice.domain.policy import parse_policy
from sluice.domain.results import InferenceResult
from sluice.inference.execution import Call, PolicyRunner
from tests.integration.traffic_fakes import REGRESSOR
from tests.support import single, split_policy

BANDIT = {"algorithm": "epsilon_greedy", "epsilon": 0.5}


def bandit(model: str) -> dict[str, Any]:
    return {**split_policy({"a": (1, single(model, 1)), "b": (1, single(model, 1))}), "bandit": BANDIT}


class Turns:
    """A runtime answering after `turns[model]` turns of the loop (-1: never; -2: fails at once)."""

    kind = "sagemaker"

    def __init__(self, turns: dict[str, int]) -> None:
        self.turns = turns

    async def infer(self, version: ModelVersion, inputs: Any, outputs: Any = None) -> InferenceResult:
        turns = self.turns[version.model]
        if turns == -2:
            raise BackendError(f"{version.model} failed")
        if turns == -1:
            await asyncio.sleep(30)
        for _ in range(turns):
            await asyncio.sleep(0)
        return InferenceResult({"y": np.ones((1, 1), dtype=np.float32)})


class Reads:
    """The registry's reads: a bandit's rewards after `turns` turns; `inner`, a deployment a `ref` names."""

    def __init__(self, turns: int, inner: dict[str, Any] | None = None) -> None:
        self.turns, self.inner = turns, inner

    def cached_version(self, tenant: str, model: str, version: int) -> ModelVersion:
        return ModelVersion(tenant, model, version, "sagemaker", "fake://", "0" * 64, 0, REGRESSOR)

    async def version_of(self, tenant: str, model: str, version: int) -> ModelVersion:
        return self.cached_version(tenant, model, version)

    async def node_of(self, tenant: str, name: str) -> Any:
        return parse_policy(self.inner)

    async def rewards_of(self, dep: Deployment) -> dict[str, tuple[int, float]]:
        for _ in range(self.turns):
            await asyncio.sleep(0)
        return {}


class NoStats:
    def request(self, *args: Any, **kw: Any) -> None:
        pass

    def requests(self, *args: Any, **kw: Any) -> None:
        pass


def run(policy: dict[str, Any], turns: dict[str, int], reads: Reads) -> tuple[list[str], list[str], BaseException | None]:
    """(the choices as the request ends, the same a moment later, what the walk raised)."""

    async def go() -> tuple[list[str], list[str], BaseException | None]:
        runner = PolicyRunner(reads, {"sagemaker": Turns(turns)}, NoStats(), lambda signature, arrays, **kw: arrays)  # type: ignore[arg-type]
        call = Call(Deployment("acme", "d", {}), time.monotonic() + 30, lambda _: None, chosen=[])
        raised = None
        try:
            await runner.run(parse_policy(policy), call, {"x": np.zeros((1, 4), np.float32)})
        except BackendError as exc:
            raised = exc
        at_end = list(call.chosen or [])  # what the request's assignment is written from
        await asyncio.sleep(0.02)  # the stopped members' tasks wind down
        return at_end, list(call.chosen or []), raised

    return asyncio.run(go())


@settings(max_examples=150, deadline=None)
@given(fast=st.integers(0, 6), reads=st.integers(0, 6), wrapped=st.booleans(), through_ref=st.booleans(), fast_bandit=st.booleans())
def test_a_hedge_leaves_the_choices_of_the_member_that_answered_alone(fast: int, reads: int, wrapped: bool, through_ref: bool, fast_bandit: bool) -> None:
    """The slow member holds a hedge of its own whose bandit may choose after the fast member
    answered (its rewards read coming back as it is stopped): that choice is never the request's,
    nor is any the slow member made before; the fast member's bandit's is."""
    inner = {"kind": "ensemble", "aggregator": "first_success", "members": [{"name": "x", "target": bandit("hang")}, {"name": "y", "target": single("hang", 1)}]}
    through_ref = through_ref or wrapped  # a policy nests four levels deep at most: deeper, through a reference
    hedge = {
        "kind": "ensemble", "aggregator": "first_success",
        "members": [{"name": "fast", "target": bandit("fast") if fast_bandit else single("fast", 1)}, {"name": "slow", "target": {"kind": "ref", "deployment": "inner"} if through_ref else inner}],
    }  # fmt: skip
    # Wrapped: the hedge is one member of a mean ensemble, so the request goes on after it answers.
    policy = {"kind": "ensemble", "aggregator": "mean", "members": [{"name": "h", "target": hedge}, {"name": "z", "target": single("z", 1)}]} if wrapped else hedge
    at_end, settled, raised = run(policy, {"fast": fast, "hang": -1, "z": 8}, Reads(reads, inner))
    assert raised is None
    top = "h/" if wrapped else ""
    assert [p for p in at_end if p.startswith(f"{top}fast/")] in (([f"{top}fast/a"], [f"{top}fast/b"]) if fast_bandit else ([],))
    assert not [p for p in settled if p.startswith(f"{top}slow/")], settled
    assert settled == at_end


def test_a_member_that_failed_before_the_answer_leaves_no_choice() -> None:
    policy = {"kind": "ensemble", "aggregator": "first_success", "members": [{"name": "dud", "target": bandit("dud")}, {"name": "ok", "target": bandit("ok")}]}
    at_end, _, raised = run(policy, {"dud": -2, "ok": 3}, Reads(0))
    assert raised is None and at_end in (["ok/a"], ["ok/b"])


def test_where_no_member_answers_every_members_choice_is_kept() -> None:
    """A failed request's feedback may reward its choices (a failure is an outcome too)."""
    policy = {"kind": "ensemble", "aggregator": "first_success", "members": [{"name": "m1", "target": bandit("dud")}, {"name": "m2", "target": bandit("dud")}]}
    at_end, _, raised = run(policy, {"dud": -2}, Reads(0))
    assert isinstance(raised, BackendError)
    assert sorted(p.split("/")[0] for p in at_end) == ["m1", "m2"]


@pytest.mark.parametrize("aggregator", ["mean", "median", "max"])
def test_an_ensemble_of_answers_leaves_every_members_choice_in_the_policys_order(aggregator: str) -> None:
    policy = {"kind": "ensemble", "aggregator": aggregator, "members": [{"name": f"m{i}", "target": bandit("ok")} for i in range(3)]}
    at_end, _, raised = run(policy, {"ok": 2}, Reads(1))
    assert raised is None and [p.split("/")[0] for p in at_end] == ["m0", "m1", "m2"]
