"""The bulk call, `score_many`, on real parts: the demo container (SQLite, a folder, ONNX
Runtime), a lookup model that ONNX Runtime itself refuses some codes of, and a Triton-served
variant whose server is down.

Every record ends as a result or an error; a record the model refuses fails alone, found in a
bounded number of calls; a call that fails for a reason that may pass marks only its records
for retry; records are grouped by the route each would take alone."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.domain.errors import InvalidInput, NotFound, Unavailable
from sluice.domain.requests import ArrayInputs, PredictionRequest
from sluice.inference.bulk import Error, Records, Result, score_many
from sluice.inference.loop import run
from sluice.inference.selections import positions_of
from sluice.routing.choose import sticky_pick
from tests.models import LOOKUP_TABLE, lookup_model, total_model
from tests.support import single, split_policy

if TYPE_CHECKING:

    from sluice.domain import Principal
    from sluice.wiring import Container

BAD = 99  # a code the lookup model refuses
IRIS_ROW = [5.1, 3.5, 1.4, 0.2]


@pytest.fixture
def lookup(demo: Container, acme: Principal) -> Container:
    demo.models.push(acme, "lookup", lookup_model())
    demo.deployments.create(acme, "lookup", {"kind": "single", "model": "lookup", "version": 1})
    return demo


class Calls(list):  # type: ignore[type-arg]
    """Each call `score_many` made: (rows, variant, routing key)."""


def spy(container: Container) -> Calls:
    calls = Calls()
    predict = container.predictions.predict

    async def counting(principal: Principal, request: Any) -> Any:
        calls.append((next(iter(request.inputs.arrays.values())).shape[0], request.variant, request.routing_key))
        return await predict(principal, request)

    container.predictions.predict = counting  # type: ignore[method-assign]
    return calls


def codes(rows: list[int], bad: set[int]) -> tuple[Records, list[np.ndarray]]:
    """Records of `rows[i]` rows each; a record in `bad` holds one code the model refuses."""
    rng = np.random.default_rng(len(rows))
    per_record = []
    for i, n in enumerate(rows):
        values = rng.integers(0, 10, size=n)
        if i in bad:
            values[rng.integers(0, n)] = BAD
        per_record.append(values)
    flat = np.concatenate(per_record) if per_record else np.zeros(0, dtype=np.int64)
    return Records({"code": flat.reshape(-1, 1)}, np.asarray(rows, dtype=np.intp)), per_record


def own_outputs(outcome: Result, position: int) -> dict[str, np.ndarray]:
    """The outputs of one record of a result: its own rows of the call's answer."""
    chosen = outcome.records
    positions = list(range(chosen.start, chosen.stop)) if isinstance(chosen, slice) else chosen.tolist()
    return outcome.outputs_of(positions.index(position))


def own_scores(outcome: Result, position: int) -> list[float]:
    """The scores of one record of a result: its own rows of the call's answer."""
    return own_outputs(outcome, position)["score"][:, 0].tolist()


def reference_parts(rows: list[int], max_rows: int) -> list[list[int]]:
    """Records in runs of at most `max_rows` rows, in order, a larger record alone: the
    obvious loop, to hold the bulk call's splitting to."""
    parts: list[list[int]] = []
    current: list[int] = []
    held = 0
    for i, n in enumerate(rows):
        if current and held + n > max_rows:
            parts.append(current)
            current, held = [], 0
        current.append(i)
        held += n
    return [*parts, current] if current else parts


def bisect_bound(n: int, bad: int) -> int:
    """The most calls bisection makes for `bad` refused records among `n`: the first call,
    then two for each refused call above a single record (at most min(2^d, bad) per depth)."""
    depth = math.ceil(math.log2(n)) if n > 1 else 0
    return 1 + 2 * sum(min(2**d, bad) for d in range(depth))


def test_one_refused_record_among_many_fails_alone_in_a_bounded_number_of_calls(lookup: Container, acme: Principal) -> None:
    calls = spy(lookup)
    records, _ = codes([1] * 1000, {417})
    done = run(score_many(lookup.predictions, acme, "lookup", records, max_rows=4096))
    outcomes = done.by_record()
    (error,) = done.errors
    assert isinstance(error, Error) and not error.retry and isinstance(error.error, InvalidInput)
    assert error.error.status == 400 and list(range(*error.records.indices(1000))) == [417]  # type: ignore[union-attr]
    assert sum(len(r) for r in done.results) == 999
    for i, outcome in enumerate(outcomes):
        if i != 417:
            assert isinstance(outcome, Result)
    assert len(calls) == done.calls <= bisect_bound(1000, 1) == 21
    assert calls[0] == (1000, None, None)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(values=st.lists(st.integers(-5, 5), min_size=1, max_size=300), max_rows=st.sampled_from([1, 7, 4096]))
def test_a_record_the_model_fails_on_fails_alone_and_is_not_retried(demo: Container, acme: Principal, values: list[int], max_rows: int) -> None:
    """ONNX Runtime fails a whole call on one record's values (100 // 0): the call is split, the
    records it fails on each fail alone, not for retry (they would fail again, and hold every
    other record of their call with them until given up), and every other record answers."""
    from sluice.domain.errors import ModelFailed
    from tests.models import ratio_model

    if "ratio" not in [d.name for d in demo.registry.list_deployments("acme")]:
        demo.models.push(acme, "ratio", ratio_model())
        demo.deployments.create(acme, "ratio", {"kind": "single", "model": "ratio", "version": 1})
    records = Records({"x": np.asarray(values, np.int64).reshape(-1, 1)})
    done = run(score_many(demo.predictions, acme, "ratio", records, max_rows=max_rows))
    for value, outcome in zip(values, done.by_record(), strict=True):
        if value == 0:
            assert isinstance(outcome, Error) and not outcome.retry and isinstance(outcome.error, ModelFailed), outcome
        else:
            assert isinstance(outcome, Result), outcome
    for result in done.results:  # each record its own row, 100 / x truncated as C++ divides
        got = result.answer.result.outputs["y"][:, 0].tolist()
        assert got == [int(100 / values[i]) for i in positions_of(result.records)]


def test_several_refused_records_each_fail_alone_and_records_of_many_rows_keep_their_rows(lookup: Container, acme: Principal) -> None:
    rows = [1 + i % 3 for i in range(600)]
    bad = {0, 5, 301, 302, 599}
    records, values = codes(rows, bad)
    done = run(score_many(lookup.predictions, acme, "lookup", records, max_rows=4096))
    failed = {int(i) for e in done.errors for i in range(*e.records.indices(600))}  # type: ignore[union-attr]
    assert failed == bad
    assert done.calls <= bisect_bound(600, len(bad))
    for result in done.results:
        for j, position in enumerate(range(*result.records.indices(600))):  # type: ignore[union-attr]
            own = result.outputs_of(j)["score"]
            assert own[:, 0].tolist() == LOOKUP_TABLE[values[position]].tolist()
            assert np.shares_memory(own, result.answer.result.outputs["score"])  # a view, not a copy
    assert sum(len(r) for r in done.results) == 595


def test_calls_hold_at_most_max_rows_and_a_larger_record_goes_alone(lookup: Container, acme: Principal) -> None:
    calls = spy(lookup)
    records, _ = codes([3, 3, 3, 10, 2, 2], set())
    done = run(score_many(lookup.predictions, acme, "lookup", records, max_rows=6))
    assert [rows for rows, _, _ in calls] == [6, 3, 10, 4]
    assert not done.errors and sum(len(r) for r in done.results) == 6


def test_records_are_grouped_by_the_variant_they_ask_for_and_by_the_variant_their_key_picks(demo: Container, acme: Principal) -> None:
    demo.deployments.create(acme, "sticky", split_policy({"a": (50, single("iris", 1)), "b": (50, single("iris", 1))}, routing_key="user"))
    split = run(demo.predictions.node_of("acme", "sticky"))
    users = [f"user-{n}" for n in range(40)]
    keys: list[str | None] = [*users, None, None]
    variants: list[str | None] = [None] * 40 + ["b", "a"]
    records = Records({"input": np.asarray([IRIS_ROW] * 42, dtype=np.float32)}, None, variants, keys)
    calls = spy(demo)
    done = run(score_many(demo.predictions, acme, "sticky", records, max_rows=4096))
    assert not done.errors
    assert sorted(calls) == [(n, v, None) for n, v in sorted([(sum(sticky_pick(split.variants, u).name == v for u in users) + 1, v) for v in "ab"])]  # type: ignore[union-attr]
    for i, outcome in enumerate(done.by_record()):
        assert isinstance(outcome, Result)
        wanted = variants[i] or sticky_pick(split.variants, keys[i]).name  # type: ignore[union-attr,arg-type]
        assert outcome.answer.variant == wanted


def test_a_split_that_routes_by_key_further_down_is_called_once_per_key(demo: Container, acme: Principal) -> None:
    sticky = split_policy({"a": (50, single("iris", 1)), "b": (50, single("iris", 1))}, routing_key="user")
    demo.deployments.create(acme, "nested", {"kind": "ensemble", "aggregator": "mean", "members": [{"name": "only", "target": sticky}]})
    keys = ["u1", "u2", "u1", "u3", "u2"]
    records = Records({"input": np.asarray([IRIS_ROW] * 5, dtype=np.float32)}, keys=keys)
    calls = spy(demo)
    done = run(score_many(demo.predictions, acme, "nested", records, max_rows=4096))
    assert not done.errors
    assert sorted(calls) == sorted([(2, None, "u1"), (2, None, "u2"), (1, None, "u3")])


def test_a_transient_failure_marks_only_that_calls_records_for_retry(half_down: Container, acme: Principal) -> None:
    users = [f"user-{n}" for n in range(30)]
    split = run(half_down.predictions.node_of("acme", "mixed"))
    remote = {n for n, u in enumerate(users) if sticky_pick(split.variants, u).name == "remote"}  # type: ignore[union-attr]
    assert 0 < len(remote) < 30
    records = Records({"input": np.asarray([IRIS_ROW] * 30, dtype=np.float32)}, keys=users)
    done = run(score_many(half_down.predictions, acme, "mixed", records, max_rows=4096))
    assert done.calls == 2  # one per variant; a transient failure is not bisected
    (error,) = done.errors
    assert error.retry and isinstance(error.error, Unavailable) and error.reason.startswith("unavailable: ")
    assert set(error.records.tolist()) == remote  # type: ignore[union-attr]
    for i, outcome in enumerate(done.by_record()):
        assert isinstance(outcome, Error) == (i in remote)
        if isinstance(outcome, Result):
            assert outcome.answer.variant == "local"


def test_after_a_transient_failure_stop_on_retry_makes_no_more_calls(half_down: Container, acme: Principal) -> None:
    users = [f"user-{n}" for n in range(30)]
    split = run(half_down.predictions.node_of("acme", "mixed"))
    remote = [u for u in users if sticky_pick(split.variants, u).name == "remote"]  # type: ignore[union-attr]
    records = Records({"input": np.asarray([IRIS_ROW] * 10, dtype=np.float32)}, keys=[remote[0]] * 10)
    done = run(score_many(half_down.predictions, acme, "mixed", records, max_rows=3, stop_on_retry=True))
    assert done.calls == 1 and len(done.errors) == 4 and all(e.retry for e in done.errors)
    assert sum(len(e) for e in done.errors) == 10


def test_a_deployment_not_found_leaves_every_record_to_retry(demo: Container, acme: Principal) -> None:
    records = Records({"input": np.asarray([IRIS_ROW] * 3, dtype=np.float32)})
    done = run(score_many(demo.predictions, acme, "no-such-deployment", records, max_rows=10))
    (error,) = done.errors
    assert error.retry and isinstance(error.error, NotFound) and len(error) == 3 and done.calls == 0


def test_an_answer_without_a_row_per_row_asked_fails_the_records_it_cannot_answer_alone(demo: Container, acme: Principal) -> None:
    """No record is given another's rows: a model that answers one row for a batch fails the
    call; split, a record of one row is answered, and one of three fails alone, not for retry
    (it would fail again)."""
    from sluice.domain.errors import ModelFailed

    demo.models.push(acme, "total", total_model())
    demo.deployments.create(acme, "total", {"kind": "single", "model": "total", "version": 1})
    records = Records({"x": np.ones((4, 2), dtype=np.float32)}, np.asarray([1, 3]))
    done = run(score_many(demo.predictions, acme, "total", records, max_rows=10))
    (error,) = done.errors
    assert not error.retry and isinstance(error.error, ModelFailed) and list(positions_of(error.records)) == [1]
    (result,) = done.results
    assert list(positions_of(result.records)) == [0] and result.answer.result.outputs["total"].tolist() == [[1.0, 1.0]]


def test_a_policy_node_is_run_for_the_principals_tenant(lookup: Container, acme: Principal) -> None:
    from sluice.domain.policy import parse_policy

    node = parse_policy({"kind": "single", "model": "lookup", "version": 1})
    records, values = codes([2, 1, 3], {1})
    done = run(score_many(lookup.predictions, acme, node, records, max_rows=100))
    assert [len(e) for e in done.errors] == [1] and not done.errors[0].retry
    assert all(r.prediction is None for r in done.results)
    outcomes = done.by_record()
    for i in (0, 2):
        assert own_scores(outcomes[i], i) == LOOKUP_TABLE[values[i]].tolist()  # type: ignore[arg-type]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_every_record_is_answered_with_its_own_rows_or_fails_alone(lookup: Container, acme: Principal, data: st.DataObject) -> None:
    """Whatever the record counts, rows per record, refused records and rows per call: each
    record once; the refused, and only they, fail (not for retry); each other record's rows
    are the model's answer to its own codes (ONNX Runtime against a NumPy lookup); no call
    holds more than `max_rows` rows unless one record does; calls stay within the bound."""
    rows = data.draw(st.lists(st.integers(1, 5), max_size=60), label="rows")
    bad = data.draw(st.sets(st.sampled_from(range(len(rows))), max_size=6) if rows else st.just(set()), label="bad")
    max_rows = data.draw(st.integers(1, 24), label="max_rows")
    records, values = codes(rows, bad)
    calls = spy(lookup)
    done = run(score_many(lookup.predictions, acme, "lookup", records, max_rows=max_rows))
    outcomes = done.by_record()
    assert len(outcomes) == len(rows) == sum(map(len, done.results)) + sum(map(len, done.errors))
    for i, outcome in enumerate(outcomes):
        if i in bad:
            assert isinstance(outcome, Error) and not outcome.retry and isinstance(outcome.error, InvalidInput)
            continue
        assert isinstance(outcome, Result)
        assert own_scores(outcome, i) == LOOKUP_TABLE[values[i]].tolist()
    assert all(n <= max([max_rows, *rows]) for n, _, _ in calls)
    parts = reference_parts(rows, max_rows)
    assert done.calls == len(calls) <= sum(bisect_bound(len(part), len(bad.intersection(part))) for part in parts)
    if not bad:
        assert [n for n, _, _ in calls] == [sum(rows[i] for i in part) for part in parts]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(values=st.lists(st.floats(-1e6, 1e6, width=32), max_size=20), max_rows=st.integers(1, 8), node=st.booleans())
def test_records_of_a_scalar_input_are_each_a_call_of_their_own(demo: Container, acme: Principal, values: list[float], max_rows: int, node: bool) -> None:
    """A model whose input is a scalar (shape []) takes no batch: each record (`scalars`: a
    value per record) is its own call, given its value as a scalar, whatever `max_rows`, and
    its 0-d answer is its one row; every record is answered (through a deployment or a node)."""
    from sluice.domain.policy import parse_policy
    from tests.models import relu_model

    if "scalar" not in {d.name for d in demo.registry.list_deployments(acme.tenant)}:
        demo.models.push(acme, "scalar", relu_model([]))
        demo.deployments.create(acme, "scalar", single("scalar", 1))
    shapes: list[tuple[int, ...]] = []
    predict, run_node = demo.predictions.predict, demo.predictions.run_node

    async def predicting(principal: Principal, request: Any) -> Any:
        shapes.append(request.inputs.arrays["x"].shape)
        return await predict(principal, request)

    async def running(tenant: str, target: Any, arrays: dict[str, np.ndarray], **kw: Any) -> Any:
        shapes.append(arrays["x"].shape)
        return await run_node(tenant, target, arrays, **kw)

    demo.predictions.predict, demo.predictions.run_node = predicting, running  # type: ignore[method-assign]
    try:
        target = parse_policy(single("scalar", 1)) if node else "scalar"
        records = Records({"x": np.asarray(values, dtype=np.float32)}, scalars=frozenset({"x"}))
        done = run(score_many(demo.predictions, acme, target, records, max_rows=max_rows))
    finally:
        demo.predictions.predict, demo.predictions.run_node = predict, run_node  # type: ignore[method-assign]
    assert not done.errors and done.calls == len(values) and shapes == [()] * len(values)
    for i, outcome in enumerate(done.by_record()):
        assert isinstance(outcome, Result)
        (y,) = outcome.outputs_of(0).values()
        assert y.shape == (1,) and y[0] == np.float32(max(values[i], 0.0))


class NoAsync:
    """InvokeEndpointAsync must not be called: a batch job or a stream reads no queued answer."""

    def invoke_endpoint_async(self, **params: Any) -> dict[str, Any]:
        raise AssertionError(f"queued for asynchronous inference: {params}")


def test_calls_too_large_for_a_synchronous_call_are_split_never_queued(demo: Container, acme: Principal) -> None:
    """A version whose large requests go to an asynchronous endpoint (`async_endpoint_name`):
    a batch job's or a stream's call above the synchronous limit was queued there, answered
    202 that nothing reads, retried and failed. It is split until each part fits, every row
    answered in place; the same request through the API is still queued (202)."""
    from sluice.domain.errors import Accepted
    from sluice.domain.requests import ArrayInputs, PredictionRequest
    from sluice.runtimes.sagemaker import SageMakerRuntime
    from sluice.storage.results import results_for
    from tests.integration.traffic_fakes import Echo, add_fake

    echo = Echo()
    echo.invoke_endpoint_async = NoAsync().invoke_endpoint_async  # type: ignore[attr-defined]
    limit = 1024  # InvokeEndpoint's 6 MB, scaled down: about 50 rows of 4 FP32 values, as binary+json
    demo.runtimes["sagemaker"] = SageMakerRuntime(
        echo, endpoint_url="http://127.0.0.1:9", results=results_for(demo.store), max_payload_bytes=limit, binary_threshold_bytes=0
    )
    add_fake(demo.registry, "acme", "big", endpoint_name="big-ep", endpoint_url="http://127.0.0.1:9", async_endpoint_name="big-ep-async")
    demo.deployments.create(acme, "big", {"kind": "single", "model": "big", "version": 1})
    rows = np.arange(100 * 4, dtype=np.float32).reshape(100, 4)

    out = run(score_many(demo.predictions, acme, "big", Records({"input": rows}), max_rows=1000))
    assert out.answered == 100 and out.failed == 0
    assert sum(r.answer.result.outputs["y"].shape[0] for r in out.results) == 100
    assert echo.calls and all(len(c["Body"]) <= limit for c in echo.calls)
    assert sum(json.loads(c["Body"][: int(c["ContentType"].rsplit("=", 1)[1])])["inputs"][0]["shape"][0] for c in echo.calls) == 100

    with pytest.raises(Accepted):  # the API's caller polls its result: queued as before
        run(demo.predictions.predict(acme, PredictionRequest("big", ArrayInputs({"input": rows}))))


def test_records_whose_switch_cases_answer_other_classes_are_called_again_in_runs_of_one_case(demo: Container, acme: Principal) -> None:
    """A call whose rows took switch cases of other classes is refused (as one request of them
    is); its records are called again in runs of one case each, in order, so each answers as
    it would alone, in one call more per run; a record whose own rows took both fails alone,
    for good (a retry is refused the same way)."""
    from sluice.domain.errors import CasesApart
    from tests.models import iris_of_classes

    demo.models.push(acme, "other", iris_of_classes())
    short = {"field": "inputs.input", "column": "petal_length", "op": "<", "value": 2.5}
    demo.deployments.create(acme, "mixed", {"kind": "switch", "cases": [{"name": "short", "when": short, "target": single("other", 1)}], "default": single("iris", 1)})
    s, v = IRIS_ROW, [6.7, 3.0, 5.2, 2.3]
    records = [[s], [s], [v], [v], [s, v], [v], [s]]
    rows = np.asarray([r for record in records for r in record], np.float32)
    calls = spy(demo)
    done = run(score_many(demo.predictions, acme, "mixed", Records({"input": rows}, np.asarray([len(r) for r in records])), max_rows=100))
    assert [c[0] for c in calls] == [8, 2, 2, 2, 1, 1]  # the whole; then s s | v v | s v (refused) | v | s
    outcomes = done.by_record()
    labels = [own_outputs(outcome, i)["output_label"].tolist() if isinstance(outcome, Result) else None for i, outcome in enumerate(outcomes)]
    assert labels == [["A"], ["A"], ["virginica"], ["virginica"], None, ["virginica"], ["A"]]
    refused = outcomes[4]
    assert isinstance(refused, Error) and isinstance(refused.error, CasesApart) and not refused.retry


def _nested(policy_of: str) -> dict[str, Any]:
    if policy_of == "an unkeyed split below, its names the top's":  # its `a` weighs nothing: never drawn alone
        inner = split_policy({"a": (0, single("iris", 2)), "z": (100, single("iris", 1))})
    else:
        inner_names = ("a", "b") if policy_of == "same names" else ("x", "y")
        inner = split_policy({inner_names[0]: (20, single("iris", 1)), inner_names[1]: (80, single("iris", 2))}, routing_key="user")
    return split_policy({"a": (50, inner), "b": (50, single("iris", 1))}, routing_key="user")


@pytest.mark.parametrize("shape", ["same names", "other names", "an unkeyed split below, its names the top's", "through a reference"])
def test_a_record_goes_the_way_it_would_go_alone_through_nested_sticky_splits_and_references(
    demo: Container, acme: Principal, shape: str
) -> None:
    """Every record of a bulk call (a batch chunk, a stream's micro-batch) is answered by the
    variant its key reaches as a request of its own: a split nested below another draws by its
    own place, and a referenced deployment's top split as asked directly."""
    from tests.conftest import MODELS

    demo.models.push(acme, "iris", (MODELS / "iris_forest.onnx").read_bytes())
    if shape == "through a reference":
        demo.deployments.create(acme, "fraud", split_policy({"stable": (50, single("iris", 1)), "candidate": (50, single("iris", 2))}, routing_key="user"))
        demo.deployments.create(acme, "nest", {"kind": "ref", "deployment": "fraud"})
    else:
        demo.deployments.create(acme, "nest", _nested(shape))
    users = [f"user-{n}" for n in range(120)]
    row = [5.1, 3.5, 1.4, 0.2]
    alone = {u: run(demo.predictions.predict(acme, PredictionRequest("nest", ArrayInputs({"input": np.asarray([row], np.float32)}), routing_key=u))).answer.variant for u in users}  # fmt: skip
    if shape == "through a reference":
        direct = {u: run(demo.predictions.predict(acme, PredictionRequest("fraud", ArrayInputs({"input": np.asarray([row], np.float32)}), routing_key=u))).answer.variant for u in users}  # fmt: skip
        assert alone == direct  # a referenced deployment's top split draws as asked directly
    records = Records({"input": np.asarray([row] * len(users), dtype=np.float32)}, keys=users)
    done = run(score_many(demo.predictions, acme, "nest", records, max_rows=4096))
    assert not done.errors
    assert {u: outcome.answer.variant for u, outcome in zip(users, done.by_record(), strict=True)} == alone  # type: ignore[union-attr]


def test_a_stopped_ensemble_members_late_counts_stand_after_its_call(demo: Container, acme: Principal, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `first_success` member stopped once the other answered counts its finished steps on
    its way out, after the bulk call of two records has settled its counts: they are counted
    (not left in the call's held list), once."""
    import asyncio

    from tests.integration.test_graphs import CHAIN, ROWS
    from tests.models import embed_model, score_model

    demo.models.push(acme, "embed", embed_model())
    demo.models.push(acme, "scorez", score_model("z"))
    demo.deployments.create(acme, "hedge", {"kind": "ensemble", "aggregator": "first_success", "members": [{"name": "fast", "target": CHAIN}, {"name": "slow", "target": CHAIN}]})
    runner = type(demo.predictions.runner)
    real = runner.run
    embedded: list[asyncio.Event] = []  # set once the slow member's first step has answered

    async def slowed(self: Any, node: Any, call: Any, arrays: Any, depth: int = 0) -> Any:
        slow, model = "slow" in str(getattr(call, "path", "")), getattr(node, "model", None)
        if model == "scorez" and slow:
            await asyncio.sleep(60)  # stopped here, once the fast member answers
        if model == "scorez" and not slow:
            await embedded[0].wait()  # the fast member answers once the slow one's step has
        answer = await real(self, node, call, arrays, depth)
        if model == "embed" and slow:
            embedded[0].set()
        return answer

    monkeypatch.setattr(runner, "run", slowed)

    async def scored() -> Any:
        embedded.append(asyncio.Event())
        done = await score_many(demo.predictions, acme, "hedge", Records({"input": np.asarray([ROWS[0]] * 2, dtype=np.float32)}), max_rows=16)
        for _ in range(20):  # the stopped member's way out
            await asyncio.sleep(0.01)
        return done

    assert not run(scored()).errors
    demo.predictions.stats.flush()
    steps = demo.deployments.stats(acme, "hedge")["steps"]
    assert steps["slow/embed"]["requests"] == 1 and steps["fast/embed"]["requests"] == 1


def test_an_unexpected_failure_of_a_streams_call_is_a_failed_request(demo: Container, acme: Principal, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a SluiceError (a bug in a runtime): the call's records are retried, and the call is
    counted as a failed request, in the statistics and the failures' metrics, as any other."""
    from sluice.capture.held import RecordAt
    from sluice.stats import held

    async def broken(self: Any, node: Any, call: Any, arrays: Any, depth: int = 0) -> Any:
        raise RuntimeError("a runtime bug")

    monkeypatch.setattr(type(demo.predictions.runner), "run", broken)
    telemetry = demo.predictions.telemetry
    errors = telemetry.errors
    records = Records({"input": np.asarray([[5.1, 3.5, 1.4, 0.2]] * 2, dtype=np.float32)}, ids=[RecordAt(i, f"r{i}") for i in range(2)])

    async def streamed() -> Any:  # as a stream's micro-batch holds its counts (`sluice.stream.run.process`)
        counts: list[Any] = []
        token = held.HELD.set(counts)
        try:
            return await score_many(demo.predictions, acme, "iris", records, max_rows=8)
        finally:
            held.HELD.reset(token)
            held.count_held(counts, [False, False])

    done = run(streamed())
    assert [e.retry for e in done.errors] == [True]
    demo.predictions.stats.flush()
    overall = demo.deployments.stats(acme, "iris")["overall"]
    assert (overall["requests"], overall["errors"], telemetry.errors - errors) == (1, 1, 1)


def test_a_streams_answers_lines_are_written_as_their_statistics_count_them(demo: Container, acme: Principal) -> None:
    """In a stream, an answer's line and metrics wait with its statistics: a call whose records
    will come again writes neither (a computed answer or a prediction cache hit alike); one whose
    records' answers stand writes both, once."""
    from sluice.capture.held import RecordAt
    from sluice.stats import held

    demo.deployments.create(acme, "cached", single("iris", 1), cache={"ttl_s": 60, "max_entries": 100})
    telemetry = demo.predictions.telemetry
    records = Records({"input": np.asarray([[5.1, 3.5, 1.4, 0.2], [5.9, 3.0, 5.1, 1.8]], dtype=np.float32)}, ids=[RecordAt(i, f"r{i}") for i in range(2)])

    def streamed(stand: bool) -> tuple[int, int]:
        async def scored() -> None:
            counts: list[Any] = []
            token = held.HELD.set(counts)
            try:
                await score_many(demo.predictions, acme, "cached", records, max_rows=8)
            finally:
                held.HELD.reset(token)
                held.count_held(counts, [stand, stand])

        lines, requests = telemetry.predictions, demo.deployments.stats(acme, "cached")["overall"]["requests"]
        run(scored())
        demo.predictions.stats.flush()
        return telemetry.predictions - lines, demo.deployments.stats(acme, "cached")["overall"]["requests"] - requests

    assert streamed(False) == (0, 0)  # computed, its records to come again
    assert streamed(False) == (0, 0)  # a cache hit, its records to come again
    assert streamed(True) == (1, 1)  # a cache hit that stands


def test_a_policy_is_walked_through_its_references_as_pinned(demo: Container, acme: Principal) -> None:
    """`walk_through` follows a reference at the revision a batch job pinned, not as it stands:
    a job's `variant` column, its answers-in-place check and its rows per call read the policy
    its chunks are scored by (a split referenced, then made a single after Plan, left the job's
    rows without the column)."""
    from sluice.domain.policy import walk

    demo.deployments.create(acme, "ab", split_policy({"a": (50, single("iris", 1)), "b": (50, single("iris", 1))}))
    demo.deployments.create(acme, "front", {"kind": "ref", "deployment": "ab"})
    front = run(demo.predictions.resolve(acme, "front")).node
    pinned = run(demo.predictions.pin_refs(acme.tenant, front))
    demo.deployments.update(acme, "ab", single("iris", 1))  # after the pins (the deployment cache holds nothing here: TTL 0)

    def kinds(refs: Any) -> set[str]:
        return {n.kind for n in run(demo.predictions.walk_through(acme.tenant, front, refs=refs))}

    assert "split" in kinds(pinned) and "split" not in kinds(None)  # as pinned; as it stands now
    assert [n.kind for n in walk(front)] == ["ref"]


def test_a_stream_checks_its_policy_again_once_a_reference_is_read_anew(demo: Container, acme: Principal, monkeypatch: pytest.MonkeyPatch) -> None:
    """The answers-in-place check (an asynchronous endpoint refused) runs once per policy read,
    its references' too: a long-lived scorer (`sluice stream`) whose referenced deployment moved
    to an asynchronous endpoint wrote error records instead of sending them back for retry."""
    import asyncio
    import json

    import sluice.stream.core as core
    from sluice.stream.records import StreamRecord

    checked: list[str] = []
    real = core.check_answers_in_place

    async def counting(predictions: Any, tenant: str, node: Any, **kw: Any) -> None:
        checked.append(node.kind)
        await real(predictions, tenant, node, **kw)

    monkeypatch.setattr(core, "check_answers_in_place", counting)
    demo.deployments.create(acme, "target", single("iris", 1))
    demo.deployments.create(acme, "front", {"kind": "ref", "deployment": "target"})
    scorer = core.StreamScorer(demo.predictions, acme.tenant, "front")
    record = StreamRecord(json.dumps({"inputs": [[5.1, 3.5, 1.4, 0.2]]}), "kafka:t", 0, {"offset": 0})
    for _ in range(2):
        asyncio.run(scorer.score([record]))
    assert len(checked) == 1  # once per policy read, not per batch
    demo.deployments.update(acme, "target", single("iris", 1))  # a new revision: read anew (the cache's TTL is 0 here)
    asyncio.run(scorer.score([record]))
    assert len(checked) == 2


@pytest.mark.parametrize("max_rows", [1, 2, 4096])
def test_outputs_not_one_value_per_row_are_shared_whole_to_every_record(demo: Container, acme: Principal, max_rows: int) -> None:
    """A model answering a constant ([3]) and a scalar beside its rows: every record of a bulk
    call (a batch job's chunk, a stream's batch) is answered, its own `y` and the whole `bias`
    and `mean` of its call (each record failed "output 'bias' has 3 rows for 1 asked")."""
    from tests.models import BIAS, with_constants_model

    demo.models.push(acme, "constants", with_constants_model())
    demo.deployments.create(acme, "constants", {"kind": "single", "model": "constants", "version": 1})
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    done = run(score_many(demo.predictions, acme, "constants", Records({"x": x}), max_rows=max_rows))
    assert all(isinstance(outcome, Result) for outcome in done.by_record()), done.by_record()
    for result in done.results:
        outputs = result.answer.result.outputs
        taken = x[positions_of(result.records)]
        assert outputs["y"].tolist() == (taken + BIAS).tolist()
        assert outputs["bias"].tolist() == [BIAS.tolist()] * len(taken)
        assert outputs["mean"].tolist() == pytest.approx([float(taken.mean())] * len(taken))
