"""Precomputed answers end to end on the embedded defaults: batch jobs publish the demo
diabetes model's answers into a SQLite table beside the registry (`publish` on the job), a
`precomputed` deployment serves them by user over HTTP, and answers live what the table does
not hold (a new user, a stale answer). A job's answers are served from its success on, never
before, and a job that fails publishes nothing."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import TYPE_CHECKING, Any

import hypothesis
import numpy as np
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from sluice.api.app import create_app
from sluice.batch.plan import JobSpec
from sluice.codecs.stored_rows import encode_rows
from sluice.domain.errors import NotFound, Unprocessable
from sluice.domain.requests import ArrayInputs, PredictionRequest
from sluice.domain.signature import TensorSpec
from sluice.registry.precomputed import Publication
from sluice.settings import Settings
from tests.conftest import MODELS
from tests.integration.batch.jobs import read_errors, read_parts, run_job
from tests.support import single

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.wiring import Container

FEATURES = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]
RECS = {"kind": "precomputed", "table": "recs", "key": "headers.x-user-id", "max_age_s": 3600, "live": single("diabetes", 1)}


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    # Every request reads the table's publication again: a publication is served at once.
    return Settings(mode="local", home=tmp_path / "home", registry="", store="", deployment_cache_ttl_s=0, precomputed_publication_ttl_s=0)


@pytest.fixture
def recs(demo: Container, acme: Principal) -> Container:
    demo.deployments.create(acme, "recs", RECS)
    return demo


def users_csv(path: Path, users: list[str], level: float) -> Path:
    """One row per user, every feature `level` (so two files score differently)."""
    lines = [",".join(["user", *FEATURES])] + [",".join([u, *[str(level + i / 100)] * 10]) for i, u in enumerate(users)]
    path.write_text("\n".join(lines) + "\n")
    return path


def scored(job: Any) -> dict[str, float]:
    """What a job's parts say each user's answer is."""
    table = read_parts(job)
    return dict(zip(table.column("user").to_pylist(), table.column("prediction").to_pylist(), strict=True))


def ask(client: TestClient, key: str, user: str, deployment: str = "recs") -> dict[str, Any]:
    response = client.post(
        "/api/v1/predictions",
        headers={"authorization": f"Bearer {key}", "x-user-id": user},
        json={"deployment": deployment, "inputs": [[0.02] * 10]},
    )
    assert response.status_code == 200, response.text
    return response.json()


def started(c: Container, acme: Principal, path: Path) -> tuple[str, Any]:
    """A job planned and every chunk scored, not finalized: what a running job has written."""
    job, runner, _, _ = scored_job(c, acme, path)
    return job, runner


def scored_job(c: Container, acme: Principal, path: Path) -> tuple[str, Any, JobSpec, list[Any]]:
    """`started`'s job, with its specification and chunks."""
    job = c.batch.submit(
        acme, deployment="diabetes", input_uri=str(path), operator=True, source="cli", start=False,
        output_uri=str(path.with_suffix("")) + "-out", key_columns=["user"], publish={"table": "recs", "key": "user"},
    )  # fmt: skip
    runner = c.batch_runner
    planned = runner.plan(acme.tenant, job.id)
    spec = JobSpec.from_dict(planned["job"])
    chunks = list(runner.chunks(planned))
    for chunk in chunks:
        runner.score(spec, chunk)
    return job.id, runner, spec, chunks


def test_a_job_publishes_its_answers_at_its_success_and_a_failed_one_publishes_nothing(recs: Container, acme: Principal, tmp_path: Path) -> None:
    _, key = recs.keys.create("acme", ["predict"])
    client = TestClient(create_app(recs))
    first = run_job(recs, acme, users_csv(tmp_path / "night1.csv", ["u1", "u2", ""], 0.01), deployment="diabetes", key_columns=["user"], publish={"table": "recs", "key": "user"})
    assert (first.status, first.rows_out, first.rows_failed) == ("SUCCEEDED", 2, 1)
    assert "publish key column 'user' is empty" in read_errors(first)[0]["reason"]  # accounted for, not dropped
    night1 = scored(first)

    answer = ask(client, key, "u1")
    assert answer["source"] == "precomputed" and answer["prediction"] == pytest.approx(night1["u1"])
    assert time.time() - 60 < answer["computed_at"] <= time.time()
    stats = recs.deployments.stats(acme, "recs")
    assert stats["sources"]["precomputed"]["rows"] == 1 and "live" not in stats["sources"]  # the model never ran

    job2, runner = started(recs, acme, users_csv(tmp_path / "night2.csv", ["u1", "u2"], 0.05))
    assert ask(client, key, "u1")["prediction"] == pytest.approx(night1["u1"])  # not before its success
    runner.finalize(acme.tenant, job2)
    night2 = scored(recs.registry.get_job(acme.tenant, job2))
    assert night2["u1"] != pytest.approx(night1["u1"])
    assert ask(client, key, "u1")["prediction"] == pytest.approx(night2["u1"])

    job3, runner = started(recs, acme, users_csv(tmp_path / "night3.csv", ["u1"], 0.09))
    runner.mark_failed(acme.tenant, job3, error="States.TaskFailed")
    assert recs.registry.get_job(acme.tenant, job3).status == "FAILED"
    assert ask(client, key, "u1")["prediction"] == pytest.approx(night2["u1"])  # the failed job's rows are never served

    new_user = ask(client, key, "u9")  # not in the table: the model answers
    live = ask(client, key, "u9", deployment="diabetes")
    assert new_user["source"] == "live" and "computed_at" not in new_user
    assert new_user["prediction"] == live["prediction"]
    sources = recs.deployments.stats(acme, "recs")["sources"]
    assert sources["live"]["rows"] == 1 and sources["live"]["missing"] == 1
    assert recs.deployments.stats(acme, "recs")["fallback_rate"] == pytest.approx(1 / 5)


def test_a_job_made_before_another_that_finishes_after_it_leaves_the_later_ones_answers_served(
    recs: Container, acme: Principal, tmp_path: Path
) -> None:
    """Monday's job, slow, finishes after Tuesday's: it succeeds (its files stand), and the
    table goes on serving Tuesday's answers, never back to Monday's."""
    _, key = recs.keys.create("acme", ["predict"])
    client = TestClient(create_app(recs))
    monday, runner = started(recs, acme, users_csv(tmp_path / "monday.csv", ["u1"], 0.01))
    tuesday, _ = started(recs, acme, users_csv(tmp_path / "tuesday.csv", ["u1"], 0.05))
    runner.finalize(acme.tenant, tuesday)
    answers = scored(recs.registry.get_job(acme.tenant, tuesday))
    assert ask(client, key, "u1")["prediction"] == pytest.approx(answers["u1"])
    runner.finalize(acme.tenant, monday)
    assert recs.registry.get_job(acme.tenant, monday).status == "SUCCEEDED"
    assert scored(recs.registry.get_job(acme.tenant, monday))["u1"] != pytest.approx(answers["u1"])
    assert ask(client, key, "u1")["prediction"] == pytest.approx(answers["u1"])


class CancelledAsItPublishes:
    """The store, but a job is cancelled the moment its answers are published (before its
    Finalize marks it SUCCEEDED): a job that did not succeed after all."""

    def __init__(self, c: Container, acme: Principal) -> None:
        self.store, self.c, self.acme = c.precomputed, c, acme

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def publish(self, tenant: str, table: str, publication: Publication, **kw: Any) -> Any:
        before = self.store.publish(tenant, table, publication, **kw)  # type: ignore[union-attr]
        self.c.batch.cancel(self.acme, publication.job)
        return before


@pytest.mark.parametrize("before", [False, True], ids=["table-empty", "table-serving"])
def test_a_job_cancelled_as_it_publishes_leaves_the_table_as_it_was(recs: Container, acme: Principal, tmp_path: Path, before: bool) -> None:
    """Whether the table served nothing or another job's answers, a job found cancelled once it
    has published is withdrawn: the table serves what it served before, those answers still
    there to serve."""
    _, key = recs.keys.create("acme", ["predict"])
    client = TestClient(create_app(recs))
    served = None
    if before:
        first = run_job(recs, acme, users_csv(tmp_path / "first.csv", ["u1"], 0.01), deployment="diabetes", key_columns=["user"], publish={"table": "recs", "key": "user"})
        served = scored(first)["u1"]
    job, runner = started(recs, acme, users_csv(tmp_path / "cancelled.csv", ["u1"], 0.05))
    runner.precomputed = CancelledAsItPublishes(recs, acme)
    runner.finalize(acme.tenant, job)
    assert recs.registry.get_job(acme.tenant, job).status == "CANCELLED"
    answer = ask(client, key, "u1")
    if served is None:
        assert answer["source"] == "live"
    else:
        assert answer["source"] == "precomputed" and answer["prediction"] == pytest.approx(served)


def test_rows_of_one_request_mix_stored_and_live_answers_in_order(demo: Container, acme: Principal) -> None:
    """Keyed by an input's column, each row is its own entity: stored rows (made unlike any
    the model gives) and live ones come back in the request's order; a stale row is live."""
    rows = np.zeros((4, 10), np.float32)
    rows[:, 0] = [1, 2, 3, 4]  # the age column: entities "1" … "4"
    demo.deployments.create(acme, "by-age", {**RECS, "key": "inputs.input", "column": "age"})
    live = predict(demo, acme, "diabetes", rows).result.outputs["variable"]
    store = demo.precomputed
    assert store is not None
    bodies = encode_rows({"variable": live + 1000}, 4)
    now = time.time()
    store.put_answers("acme", "recs", "g1", [("1", bodies[0]), ("3", bodies[2])], computed_at=now, expires_at=now + 60)
    store.put_answers("acme", "recs", "g1", [("4", bodies[3])], computed_at=now - 7200, expires_at=now + 60)  # older than max_age_s
    outputs = [{"name": "variable", "datatype": "FP32", "shape": [-1, 1]}]
    store.publish("acme", "recs", Publication("g1", "job-1", "diabetes", outputs, published_at=now), expires_at=now + 60)

    answer = predict(demo, acme, "by-age", rows).answer
    assert answer.source == ["precomputed", "live", "precomputed", "live"]
    assert answer.computed_at == [pytest.approx(now, abs=1e-3), None, pytest.approx(now, abs=1e-3), None]
    np.testing.assert_allclose(answer.result.outputs["variable"][:, 0], [live[0, 0] + 1000, live[1, 0], live[2, 0] + 1000, live[3, 0]], rtol=1e-6)
    sources = demo.deployments.stats(acme, "by-age")["sources"]
    assert (sources["precomputed"]["rows"], sources["live"]["rows"], sources["live"]["stale"]) == (2, 2, 1)


def test_an_id_the_inputs_float_type_cannot_hold_exactly_is_answered_live(demo: Container, acme: Principal) -> None:
    """Keyed by an FP32 column: 16,777,217 arrives as 16,777,216 (the input's type rounds it),
    so it would read as that entity and be answered its stored answer; such a row, or a
    fraction, has no entity (answered live), while a whole number the type holds exactly is
    served."""
    rows = np.zeros((4, 10), np.float32)
    rows[:, 0] = [16_777_215, 16_777_217, 2.5, -7]
    demo.deployments.create(acme, "by-age", {**RECS, "key": "inputs.input", "column": "age"})
    live = predict(demo, acme, "diabetes", rows).result.outputs["variable"]
    store = demo.precomputed
    assert store is not None
    now = time.time()
    stored = {entity: encode_rows({"variable": np.full((1, 1), value, np.float32)}, 1)[0] for entity, value in (("16777215", 1.0), ("16777216", 2.0), ("2.5", 3.0), ("-7", 4.0))}
    store.put_answers("acme", "recs", "g1", list(stored.items()), computed_at=now, expires_at=now + 60)
    outputs = [{"name": "variable", "datatype": "FP32", "shape": [-1, 1]}]
    store.publish("acme", "recs", Publication("g1", "job-1", "diabetes", outputs, published_at=now), expires_at=now + 60)

    answer = predict(demo, acme, "by-age", rows).answer
    assert answer.source == ["precomputed", "live", "live", "precomputed"]
    np.testing.assert_allclose(answer.result.outputs["variable"][:, 0], [1.0, live[1, 0], live[2, 0], 4.0], rtol=1e-6)


def test_a_table_that_does_not_fit_the_live_node_is_refused_when_saved(demo: Container, acme: Principal) -> None:
    store = demo.precomputed
    assert store is not None
    outputs = [{"name": "output_label", "datatype": "INT64", "shape": [-1]}]  # an iris classifier's answers
    store.publish("acme", "irises", Publication("g1", "job-9", "iris", outputs, published_at=time.time()), expires_at=time.time() + 60)
    with pytest.raises(Unprocessable, match="published by batch job job-9") as refused:
        demo.deployments.create(acme, "wrong", {**RECS, "table": "irises"})
    assert refused.value.field == "policy.table"
    with pytest.raises(Unprocessable, match="no input 'user'") as refused:
        demo.deployments.create(acme, "wrong", {**RECS, "key": "inputs.user"})
    assert refused.value.field == "policy.key"


def test_stored_answers_that_cannot_be_read_are_answered_live_and_counted_unfit_not_missing(recs: Container, acme: Principal) -> None:
    """Rows the table holds whose stored bodies do not decode under a publication that fits:
    answered live, and the live source's statistics say why — unfit, as the table holds them —
    not missing (they were counted missing, as entities the table does not have)."""
    store = recs.precomputed
    assert store is not None
    now = time.time()
    fitting = [{"name": "variable", "datatype": "FP32", "shape": [-1, 1]}]
    store.put_answers("acme", "recs", "g1", [("u1", b"not an answer"), ("u2", b"nor this")], computed_at=now, expires_at=now + 60)
    store.publish("acme", "recs", Publication("g1", "job-g1", "diabetes", fitting, published_at=now, made_at=1.0), expires_at=now + 60)
    for user in ("u1", "u2", "u3"):
        request = PredictionRequest("recs", ArrayInputs({"input": np.full((1, 10), 0.02, np.float32)}), headers={"x-user-id": user})
        assert run_predict(recs, acme, request).answer.source == "live"
    live = recs.deployments.stats(acme, "recs")["sources"]["live"]
    assert (live["unfit"], live["missing"]) == (2, 1)


def test_a_publication_that_stops_fitting_the_live_node_is_answered_live_until_one_fits(recs: Container, acme: Principal) -> None:
    """Whether a table's answers fit the live node is asked again whenever the publication
    read changes (the answer is kept for the same publication and version): a generation of
    another model's answers is not served, the next fitting one is."""
    store = recs.precomputed
    assert store is not None
    request = PredictionRequest("recs", ArrayInputs({"input": np.full((1, 10), 0.02, np.float32)}), headers={"x-user-id": "u1"})
    live = run_predict(recs, acme, request).answer.result.outputs["variable"]
    now = time.time()
    fitting = [{"name": "variable", "datatype": "FP32", "shape": [-1, 1]}]
    other = [{"name": "output_label", "datatype": "INT64", "shape": [-1]}]
    for generation, outputs, answer in (("g1", fitting, {"variable": live + 1000}), ("g2", other, {"output_label": np.array([7])}), ("g3", fitting, {"variable": live + 2000})):
        store.put_answers("acme", "recs", generation, [("u1", encode_rows(answer, 1)[0])], computed_at=now, expires_at=now + 60)
        made = float(generation[1:])  # made in this order
        store.publish("acme", "recs", Publication(generation, f"job-{generation}", "diabetes", outputs, published_at=now, made_at=made), expires_at=now + 60)
        for _ in range(2):
            got = run_predict(recs, acme, request).answer
            if outputs is other:
                assert got.source == "live"
                np.testing.assert_allclose(got.result.outputs["variable"], live, rtol=1e-6)
            else:
                assert got.source == "precomputed"
                np.testing.assert_allclose(got.result.outputs["variable"], answer["variable"], rtol=1e-6)
    sources = recs.deployments.stats(acme, "recs")["sources"]  # the two unfit reads: the table's errors, their rows not missing
    assert (sources["precomputed"]["errors"], sources["live"]["unfit"], sources["live"]["missing"]) == (2, 2, 1)  # 1: before any publication
    reader = recs.predictions.runner.precomputed
    assert reader is not None
    specs, version = reader.store.publication("acme", "recs", now=time.time()), recs.registry.get_version("acme", "diabetes", 1)
    assert specs is not None
    kept = tuple(TensorSpec.from_dict(d) for d in specs.outputs)
    assert reader.misfit(kept, version.signature.outputs) is None and reader.misfit(kept, version.signature.outputs) is None  # asked, then kept
    assert "output_label" in (reader.misfit(tuple(TensorSpec.from_dict(d) for d in other), version.signature.outputs) or "")  # new specs: asked again


def test_a_tenant_never_reads_another_tenants_table(demo: Container, acme: Principal, globex: Principal, tmp_path: Path) -> None:
    demo.deployments.create(acme, "recs", RECS)
    demo.models.push(globex, "diabetes", (MODELS / "diabetes_mlp.onnx").read_bytes())
    demo.deployments.create(globex, "recs", RECS)  # the same table name, its own table
    run_job(demo, acme, users_csv(tmp_path / "acme.csv", ["u1"], 0.01), deployment="diabetes", key_columns=["user"], publish={"table": "recs", "key": "user"})
    request = PredictionRequest("recs", ArrayInputs({"input": np.full((1, 10), 0.02, np.float32)}), headers={"x-user-id": "u1"})
    assert run_predict(demo, acme, request).answer.source == "precomputed"
    assert run_predict(demo, globex, request).answer.source == "live"
    store = demo.precomputed
    assert store is not None and store.publication("globex", "recs", now=time.time()) is None


def predict(c: Container, principal: Principal, deployment: str, rows: np.ndarray) -> Any:
    return run_predict(c, principal, PredictionRequest(deployment, ArrayInputs({"input": rows})))


def run_predict(c: Container, principal: Principal, request: PredictionRequest) -> Any:
    return asyncio.run(c.predictions.predict(principal, request))


def test_a_schedule_publishes_each_run(demo: Container, acme: Principal, tmp_path: Path) -> None:
    """`publish` on a schedule travels to each run's job: a run here, and the job
    specification EventBridge starts the state machine with on AWS."""
    from sluice.batch.eventbridge import target_input
    from sluice.batch.specs import ExecutionSpec

    users_csv(tmp_path / "users-2026-11-28.csv", ["u1"], 0.01)
    schedule = demo.schedules.create(
        acme, name="nightly", deployment="diabetes", input_uri=str(tmp_path / "users-{date}.csv"), expression="cron(0 2 * * *)",
        operator=True, publish={"table": "recs", "key": "user", "ttl_s": 3600},
    )  # fmt: skip
    job = demo.schedules.start_run(schedule, 1795917600.0)  # 2026-11-28 02:00 UTC
    assert job.publish is not None and (job.publish.table, job.publish.key, job.publish.ttl_s) == ("recs", "user", 3600)
    spec = ExecutionSpec.parse({**target_input(schedule), "scheduled_time": "2026-11-28T02:00:00Z"})
    assert spec.publish == job.publish


def test_a_publishing_schedules_run_on_aws_publishes(demo: Container, acme: Principal) -> None:
    """The scheduler starts the state machine with the schedule's specification; its job is made
    with the admin scope publishing needs, as the schedule was."""
    from sluice.batch.eventbridge import target_input
    from sluice.batch.executions import job_for_execution

    schedule = demo.schedules.create(
        acme, name="nightly", deployment="diabetes", input_uri="inbox/users-{date}.csv", expression="cron(0 2 * * *)",
        publish={"table": "recs", "key": "user"},
    )  # fmt: skip
    spec = {**target_input(schedule), "scheduled_time": "2026-11-28T02:00:00Z"}
    job = job_for_execution(demo.batch, spec, execution="arn:aws:states:eu-west-1:123456789012:execution:sluice-batch:nightly-1")
    assert job.publish is not None and job.publish.table == "recs" and job.status == "PENDING"


def test_publishing_needs_the_admin_scope_a_predict_key_cannot_change_stored_answers(demo: Container, tmp_path: Path) -> None:
    """A predict-only key may run jobs and schedules, not publish: a publication changes what the
    tenant's `precomputed` deployments answer every caller, as a policy change would."""
    from sluice.domain import Principal
    from sluice.domain.errors import Forbidden

    caller = Principal("acme", frozenset({"predict"}), "test-predict")
    path = users_csv(tmp_path / "users.csv", ["u1"], 0.01)
    publish = {"table": "recs", "key": "user"}
    with pytest.raises(Forbidden) as refused:
        demo.batch.submit(caller, deployment="diabetes", input_uri=str(path), key_columns=["user"], publish=publish, start=False)
    assert refused.value.field == "publish"
    with pytest.raises(Forbidden) as refused:
        demo.schedules.create(caller, name="nightly", deployment="diabetes", input_uri="inbox/users-{date}.csv", expression="cron(0 2 * * *)", publish=publish)
    assert refused.value.field == "publish"
    assert demo.schedules.list(caller) == []


def test_a_predict_key_cannot_resume_a_paused_publishing_schedule(demo: Container, acme: Principal) -> None:
    """Resuming a schedule with `publish` makes its runs publish again: it needs the admin scope,
    as making it does, and the schedule stays paused, starting no run."""
    from sluice.domain import Principal
    from sluice.domain.errors import Forbidden

    caller = Principal("acme", frozenset({"predict"}), "test-predict")
    demo.schedules.create(
        acme, name="nightly", deployment="diabetes", input_uri="inbox/users-{date}.csv", expression="rate(1 hour)",
        publish={"table": "recs", "key": "user"}, state="PAUSED",
    )  # fmt: skip
    with pytest.raises(Forbidden) as refused:
        demo.schedules.resume(caller, "nightly")
    assert refused.value.field == "publish"
    schedule = demo.schedules.show(caller, "nightly").schedule
    assert schedule.paused and demo.schedules.run_due(time.time() + 2 * 3600, [schedule]) == []
    assert demo.schedules.resume(acme, "nightly").state == "ENABLED"


def test_a_predict_key_cannot_cancel_a_publishing_job(demo: Container, acme: Principal, tmp_path: Path) -> None:
    """Cancelling a job that publishes may withdraw a publication every caller of the tenant is
    served (a cancel after Finalize published): it needs the admin scope, as publishing does;
    the job runs on. A job that publishes nothing is a predict key's to cancel."""
    from sluice.domain import Principal
    from sluice.domain.errors import Forbidden

    caller = Principal("acme", frozenset({"predict"}), "test-predict")
    path = users_csv(tmp_path / "users.csv", ["u1"], 0.01)
    job = demo.batch.submit(acme, deployment="diabetes", input_uri=str(path), operator=True, source="cli", key_columns=["user"], publish={"table": "recs", "key": "user"}, output_uri=str(tmp_path / "out"), start=False)
    with pytest.raises(Forbidden) as refused:
        demo.batch.cancel(caller, job.id)
    assert refused.value.field == "publish" and demo.batch.get(acme, job.id).status == "PENDING"
    assert demo.batch.cancel(acme, job.id).status == "CANCELLED"
    plain = demo.batch.submit(acme, deployment="diabetes", input_uri=str(path), operator=True, source="cli", output_uri=str(tmp_path / "plain"), start=False)
    assert demo.batch.cancel(caller, plain.id).status == "CANCELLED"


_STATES = st.fixed_dictionaries({str(e): st.sampled_from(["fresh", "stale", "expired", "absent"]) for e in range(1, 7)})
_GENERATIONS = itertools.count()


@hypothesis.settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(states=_STATES, entities=st.lists(st.integers(1, 6), min_size=1, max_size=10))
def test_each_row_is_its_stored_answer_while_fresh_else_live(demo: Container, acme: Principal, states: dict[str, str], entities: list[int]) -> None:
    """For any table (each entity's answer fresh, older than `max_age_s`, past its time to live,
    or not there) and any rows (entities asked again), each row is its stored answer where that
    is fresh, else the live model's, in the request's order, and says which."""
    if "by-age" not in {d.name for d in demo.deployments.list(acme)}:
        demo.deployments.create(acme, "by-age", {**RECS, "key": "inputs.input", "column": "age"})
    rows = np.zeros((len(entities), 10), np.float32)
    rows[:, 0] = entities
    live = predict(demo, acme, "diabetes", rows).result.outputs["variable"][:, 0]
    every = np.zeros((6, 10), np.float32)
    every[:, 0] = range(1, 7)
    stored = encode_rows({"variable": predict(demo, acme, "diabetes", every).result.outputs["variable"] + 1000}, 6)
    store, now, made = demo.precomputed, time.time(), next(_GENERATIONS)
    generation = f"g{made}"
    assert store is not None
    for entity, state in states.items():
        if state != "absent":
            at, until = (now - 7200, now + 60) if state == "stale" else (now, now - 1 if state == "expired" else now + 60)
            store.put_answers("acme", "recs", generation, [(entity, stored[int(entity) - 1])], computed_at=at, expires_at=until)
    outputs = [{"name": "variable", "datatype": "FP32", "shape": [-1, 1]}]
    store.publish("acme", "recs", Publication(generation, f"job-{generation}", "diabetes", outputs, published_at=now, made_at=made), expires_at=now + 60)

    answer = predict(demo, acme, "by-age", rows).answer
    fresh = [states[str(e)] == "fresh" for e in entities]
    sources = ["precomputed" if f else "live" for f in fresh]
    assert answer.source == (sources[0] if len(set(sources)) == 1 else sources)  # one word where all rows agree
    expected = [value + 1000 if f else value for value, f in zip(live, fresh, strict=True)]
    np.testing.assert_allclose(answer.result.outputs["variable"][:, 0], expected, rtol=1e-6)


def test_an_entity_key_is_never_cut_short(recs: Container, acme: Principal, tmp_path: Path) -> None:
    """Two keys alike in their first 1,000 characters are two entities; a key longer than
    1,024 bytes (UTF-8, so 300 four-byte characters are) has no stored answer: its row fails
    alone when published and is answered live when asked, as an empty key is."""
    _, key = recs.keys.create("acme", ["predict"])
    client = TestClient(create_app(recs))
    alice, bob, long, emoji = "u" * 1000 + "-alice", "u" * 1000 + "-bob", "u" * 1025, "\N{GRINNING FACE}" * 300
    job = run_job(recs, acme, users_csv(tmp_path / "long.csv", [alice, long, emoji, "u1"], 0.01), deployment="diabetes", key_columns=["user"], publish={"table": "recs", "key": "user"})
    assert (job.status, job.rows_out, job.rows_failed) == ("SUCCEEDED", 2, 2)
    assert all("longer than 1024 bytes" in e["reason"] for e in read_errors(job))
    assert [ask(client, key, u)["source"] for u in (alice, bob, long, "u1")] == ["precomputed", "live", "live", "precomputed"]


def test_a_replaced_generation_is_served_while_a_container_may_still_point_at_it(tmp_path: Path) -> None:
    """Locally a job's success does not take the answers it replaced from under a container
    that read the table's publication before it: they expire a minute later, then go with the
    next publication."""
    from sluice.registry.precomputed.sqlite import RETIRED_KEPT_S, SqlitePrecomputed

    store = SqlitePrecomputed(tmp_path / "precomputed.db")
    now = time.time()
    for generation, body in (("g1", b"one"), ("g2", b"two")):
        store.put_answers("acme", "recs", generation, [("u1", body)], computed_at=now, expires_at=now + 86400)
        store.publish("acme", "recs", Publication(generation, generation, "diabetes", [], published_at=now, made_at=now), expires_at=now + 86400)
    store.retire("acme", "recs", "g1", now=now)
    assert store.publication("acme", "recs", now=now).generation == "g2"  # type: ignore[union-attr]
    assert store.get_answers("acme", "recs", "g1", ["u1"], now=now + RETIRED_KEPT_S - 1)["u1"].body == b"one"
    assert store.get_answers("acme", "recs", "g1", ["u1"], now=now + RETIRED_KEPT_S) == {}
    later = now + RETIRED_KEPT_S + 1
    store.publish("acme", "recs", Publication("g3", "g3", "diabetes", [], published_at=later, made_at=later), expires_at=later + 86400)
    left = store._conn().execute("SELECT generation FROM answers WHERE tenant = 'acme' AND tbl = 'recs'").fetchall()
    assert left == [("g2",)]  # g1 removed with the expired rows; g3 wrote none


def test_a_key_that_is_a_list_or_a_struct_fails_its_row_alone(recs: Container, acme: Principal, tmp_path: Path) -> None:
    """In Parquet a key column can hold lists or structs: no one entity, so such a row fails (in
    the error file, with its reason) and nothing is published under the value's text."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for kind, keys in (("list", [[1, 2], None, [], [3]]), ("struct", [{"id": 1}, None, {"id": 2}, {"id": 3}])):
        features = {f: pa.array([0.01] * len(keys)) for f in FEATURES}
        path = tmp_path / f"{kind}.parquet"
        pq.write_table(pa.table({"user": pa.array(keys), **features}), path)
        job = run_job(recs, acme, path, deployment="diabetes", key_columns=["user"], publish={"table": "recs", "key": "user"}, output_uri=str(tmp_path / kind))
        assert job.rows_out == 0 and job.rows_failed == 4, (kind, job.status, job.error)
        reasons = read_errors(job)
        assert len(reasons) == 4 and all("is empty on this row, a list or an object" in e["reason"] for e in reasons), reasons
        texts = ["[1, 2]", "[1,2]", "[3]", "{'id': 1}", '{"id": 1}', "[]"]
        assert recs.precomputed.get_answers("acme", "recs", job.id, texts, now=time.time()) == {}


# Answers kept once read --------------------------------------------------------------------
def _publish(c: Container, tenant: str, generation: str, answers: dict[str, float], *, now: float, ttl_s: float = 3600, answers_ttl_s: float | None = None) -> None:
    """`answers` (user: the diabetes model's one output) written as generation `generation` of
    the tenant's `recs` table and published, as a job's finalize does (the answers kept
    `answers_ttl_s`, the publication's time by default)."""
    store = c.precomputed
    assert store is not None
    rows = [(user, encode_rows({"variable": np.full((1, 1), value, np.float32)}, 1)[0]) for user, value in answers.items()]
    store.put_answers(tenant, "recs", generation, rows, computed_at=now, expires_at=now + (ttl_s if answers_ttl_s is None else answers_ttl_s))
    outputs = [{"name": "variable", "datatype": "FP32", "shape": [-1, 1]}]
    store.publish(tenant, "recs", Publication(generation, f"job-{generation}", "diabetes", outputs, published_at=now), expires_at=now + ttl_s)


def test_an_answer_read_once_is_kept_and_served_as_stored_until_it_expires(recs: Container, acme: Principal, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each entity's answer is read of the table once a container (a generation's answers never
    change); kept, it is the stored answer with its own `computed_at`, served until its own
    expiry, after which the row is answered live as an expired stored one is."""
    from sluice.inference import precomputed

    _, key = recs.keys.create("acme", ["predict"])
    client = TestClient(create_app(recs))
    now = time.time()
    _publish(recs, "acme", "g1", {"u1": 11.0, "u2": 22.0}, now=now, ttl_s=7200, answers_ttl_s=600)
    reader = recs.predictions.runner.precomputed
    assert reader is not None and reader.answers_kept == 10_000  # the default
    answers = [ask(client, key, user) for user in ("u1", "u2", "u1", "u1", "u2", "nobody", "nobody")]
    assert [(a["source"], a.get("prediction")) for a in answers[:5]] == [("precomputed", 11.0), ("precomputed", 22.0), ("precomputed", 11.0), ("precomputed", 11.0), ("precomputed", 22.0)]
    assert all(a["computed_at"] == pytest.approx(now, abs=1e-3) for a in answers[:5])
    assert [a["source"] for a in answers[5:]] == ["live", "live"]
    assert reader.reads == 4  # u1 and u2 once each; an entity the table does not hold, every time
    # Past the stored answers' own expiry (not the publication's, nor max_age_s): live, as from the table.
    later = time.time() + 1200

    class Clock:
        perf_counter = staticmethod(time.perf_counter)
        monotonic = staticmethod(time.monotonic)
        time = staticmethod(lambda: later)

    monkeypatch.setattr(precomputed, "time", Clock)
    assert ask(client, key, "u1")["source"] == "live"


def test_a_new_generation_serves_its_own_answers_not_those_kept_of_the_last(recs: Container, acme: Principal, globex: Principal) -> None:
    """Kept answers are the generation's they were read from: a job's new publication is served
    its own answers as soon as the container reads it; another tenant's table of the same
    name and entities is its own."""
    _, key = recs.keys.create("acme", ["predict"])
    recs.models.push(globex, "diabetes", (MODELS / "diabetes_mlp.onnx").read_bytes())
    recs.deployments.create(globex, "recs", RECS)
    _, other = recs.keys.create("globex", ["predict"])
    client = TestClient(create_app(recs))
    now = time.time()
    _publish(recs, "acme", "g1", {"u1": 1.0}, now=now)
    _publish(recs, "globex", "g1", {"u1": 5.0}, now=now)
    assert [ask(client, key, "u1")["prediction"] for _ in range(2)] == [1.0, 1.0]
    assert ask(client, other, "u1")["prediction"] == 5.0
    _publish(recs, "acme", "g2", {"u1": 2.0}, now=now + 1)
    assert [ask(client, key, "u1")["prediction"] for _ in range(2)] == [2.0, 2.0]
    assert ask(client, other, "u1")["prediction"] == 5.0


def test_with_no_answers_kept_every_hit_reads_the_table(demo: Container, acme: Principal, tmp_path: Path) -> None:
    from sluice.wiring import Container as Made

    c = Made.from_settings(Settings(mode="local", home=tmp_path / "none", precomputed_answers_kept=0, precomputed_publication_ttl_s=0))
    c.models.push(acme, "diabetes", (MODELS / "diabetes_mlp.onnx").read_bytes())
    c.deployments.create(acme, "recs", RECS)
    _, key = c.keys.create("acme", ["predict"])
    client = TestClient(create_app(c))
    _publish(c, "acme", "g1", {"u1": 3.0}, now=time.time())
    assert [ask(client, key, "u1")["prediction"] for _ in range(3)] == [3.0, 3.0, 3.0]
    assert c.predictions.runner.precomputed.reads == 3  # type: ignore[union-attr]


def test_a_chunk_try_still_running_after_its_job_ended_writes_nothing_into_the_published_generation(
    recs: Container, acme: Principal, tmp_path: Path
) -> None:
    """A second try of a chunk (a step tried again while its first try ran on) that is still
    scoring when its job's Finalize has published is refused before it writes a piece into the
    table: the generation served, and the answers containers keep of it, stay the job's."""
    from sluice.batch.runner import JobStopped

    _, key = recs.keys.create("acme", ["predict"])
    client = TestClient(create_app(recs))
    job, runner, spec, (chunk,) = scored_job(recs, acme, users_csv(tmp_path / "night.csv", ["u1", "u2"], 0.01))
    runner.finalize(acme.tenant, job)
    assert recs.registry.get_job(acme.tenant, job).status == "SUCCEEDED"
    served = ask(client, key, "u1")
    assert served["source"] == "precomputed"
    with pytest.raises(JobStopped):  # the late try, past `score`'s first look at the job
        runner.scorer.score(spec, chunk, before_writing=lambda: runner._may_write(spec, chunk.index))
    store = recs.precomputed
    assert store is not None
    stored = store.get_answers(acme.tenant, "recs", job, ["u1"], now=time.time())["u1"]
    assert stored.computed_at == pytest.approx(served["computed_at"], abs=1e-6)  # not rewritten
    assert ask(client, key, "u1")["computed_at"] == served["computed_at"]


def test_a_chunk_try_still_running_while_finalize_publishes_writes_nothing_more(
    recs: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finalize seals its job before it checks and publishes: a late try of a chunk that asks to
    write between the publication and SUCCEEDED (still RUNNING then) writes no piece into the
    served generation, no part over the one Finalize checked, and no keys file into the folder
    of a job that succeeded; a try that starts then scores nothing."""
    from sluice.batch import runner as runner_module
    from sluice.batch.publishing import keys_uri
    from sluice.batch.runner import JobStopped

    job, runner, spec, (chunk,) = scored_job(recs, acme, users_csv(tmp_path / "night.csv", ["u1", "u2"], 0.01))
    store = recs.precomputed
    assert store is not None
    written = store.get_answers(acme.tenant, "recs", job, ["u1", "u2"], now=time.time())
    part = runner.registry.get_chunk(acme.tenant, job, chunk.index).part
    part_bytes = runner.files.read_bytes(part)
    publish, late = runner_module.publish_job, []

    def publish_then_a_late_try(*args: Any, **kwargs: Any) -> Any:
        published = publish(*args, **kwargs)
        assert recs.registry.get_job(acme.tenant, job).status == "RUNNING"  # served, not yet SUCCEEDED
        try:
            runner.scorer.score(spec, chunk, before_writing=lambda: runner._may_write(spec, chunk.index))
        except JobStopped as stopped:
            late.append(stopped.status)
        late.append(runner.score(spec, chunk))
        return published

    monkeypatch.setattr(runner_module, "publish_job", publish_then_a_late_try)
    time.sleep(0.01)  # a rewrite would carry a later computed_at
    runner.finalize(acme.tenant, job)
    assert recs.registry.get_job(acme.tenant, job).status == "SUCCEEDED"
    assert late[0] == "FINALIZING"
    assert late[1]["index"] == chunk.index  # recorded before: nothing scored again
    again = store.get_answers(acme.tenant, "recs", job, ["u1", "u2"], now=time.time())
    assert {e: (a.computed_at, a.body) for e, a in again.items()} == {e: (a.computed_at, a.body) for e, a in written.items()}
    assert runner.files.read_bytes(part) == part_bytes
    with pytest.raises(NotFound):
        runner.files.read_bytes(keys_uri(spec.output_uri, chunk.index))


def test_a_late_try_of_a_recorded_chunk_writes_nothing_and_the_job_still_succeeds(recs: Container, acme: Principal, tmp_path: Path) -> None:
    """The usual late try: a step tried again has recorded the chunk, and the first try, still
    running, comes to write before Finalize starts. It is refused at its first write (the
    chunk's recorded files stand), so Finalize finds the files it recorded and succeeds."""
    from sluice.batch.runner import JobStopped

    job, runner, spec, (chunk,) = scored_job(recs, acme, users_csv(tmp_path / "night.csv", ["u1", "u2"], 0.01))
    part = runner.registry.get_chunk(acme.tenant, job, chunk.index).part
    part_bytes = runner.files.read_bytes(part)
    with pytest.raises(JobStopped) as stopped:
        runner.scorer.score(spec, chunk, before_writing=lambda: runner._may_write(spec, chunk.index))
    assert stopped.value.status == "RECORDED"
    runner.finalize(acme.tenant, job)
    assert recs.registry.get_job(acme.tenant, job).status == "SUCCEEDED"
    assert runner.files.read_bytes(part) == part_bytes


def test_a_stored_answer_published_again_keeps_its_own_time(demo: Container, acme: Principal, tmp_path: Path) -> None:
    """A publishing job scored through a precomputed deployment that reads the same table: a
    row answered from the table is published again with the time its answer was computed, not
    the job's, so `max_age_s` still ages it (it would otherwise be served fresh forever); a row
    computed live is published with the job's time."""
    from tests.integration.batch.jobs import run_job

    demo.deployments.create(acme, "by-age", {**RECS, "key": "inputs.input", "column": "age"})
    store = demo.precomputed
    assert store is not None
    old = time.time() - 1000
    body = encode_rows({"variable": np.full((1, 1), 42.0, np.float32)}, 1)[0]
    store.put_answers("acme", "recs", "g1", [("1", body)], computed_at=old, expires_at=old + 86400)
    outputs = [{"name": "variable", "datatype": "FP32", "shape": [-1, 1]}]
    store.publish("acme", "recs", Publication("g1", "job-1", "diabetes", outputs, published_at=old), expires_at=old + 86400)
    path = tmp_path / "ages.csv"
    path.write_text(",".join(FEATURES) + "\n" + "".join(",".join([str(age)] + ["0.01"] * 9) + "\n" for age in (1, 2)))
    started = time.time()
    job = run_job(demo, acme, path, deployment="by-age", publish={"table": "recs", "key": "age"})
    assert job.status == "SUCCEEDED", job.error
    again = store.get_answers("acme", "recs", job.id, ["1", "2"], now=time.time())
    assert again["1"].computed_at == pytest.approx(old, abs=1e-3) and again["1"].body == body
    assert again["2"].computed_at >= started


def test_the_answers_kept_stay_within_their_bytes(tmp_path: Path) -> None:
    """Past `answers_kept_bytes` the kept answers are dropped and read again as asked (never a
    wrong one); a row larger than the whole budget is read each time, never kept."""
    from sluice.inference.precomputed import PrecomputedReader
    from sluice.registry.precomputed.sqlite import SqlitePrecomputed

    store = SqlitePrecomputed(tmp_path / "precomputed.db")
    now = time.time()
    bodies = {"a": b"x" * 400, "b": b"y" * 400, "c": b"z" * 400, "big": b"w" * 5000}
    store.put_answers("t", "recs", "g1", list(bodies.items()), computed_at=now, expires_at=now + 600)
    reader = PrecomputedReader(store, answers_kept=100, answers_kept_bytes=1000)
    for entity in ("a", "b", "a", "b"):  # two fit: read once each
        assert reader.answers_inline("t", "recs", "g1", [entity])[entity].body == bodies[entity]
    assert reader.reads == 2
    assert reader.answers_inline("t", "recs", "g1", ["c"])["c"].body == bodies["c"]  # a third: the keep emptied first
    assert reader.answers_inline("t", "recs", "g1", ["a"])["a"].body == bodies["a"]  # so read again
    assert reader.reads == 4 and reader._kept_bytes <= 1000
    for _ in range(2):
        assert reader.answers_inline("t", "recs", "g1", ["big"])["big"].body == bodies["big"]
    assert reader.reads == 6 and reader._kept_bytes <= 1000


def test_the_bytes_kept_are_counted_exactly_when_threads_share_the_reader() -> None:
    """A batch job's scoring threads share the container's reader: what they keep is counted
    as it is (a count that drifted would empty the keep early, or let it grow past its bytes)."""
    import sys
    import threading

    from sluice.inference.precomputed import PrecomputedReader
    from sluice.registry.precomputed import Stored

    now = time.time()
    reader = PrecomputedReader(object(), answers_kept=10**6, answers_kept_bytes=10**9)  # type: ignore[arg-type]
    stored = {f"e{i}": Stored(b"x" * 100, now, now + 1000) for i in range(40)}
    stop = time.monotonic() + 1.0

    def work(start: int) -> None:
        i = start
        while time.monotonic() < stop:
            entity = f"e{i % 40}"
            reader._keep("t", "recs", "g1", {entity: stored[entity]}, {})
            i += 7

    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switched as often as they may be
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switching)
    assert reader._kept_bytes == sum(len(s.body) for s in reader._answers.values()) == 4000


@pytest.mark.parametrize(("classes", "probabilities"), [(["virginica", "versicolor", "setosa"], [0.0, 0.0, 1.0]), (["setosa", "versicolor"], [1.0, 0.0])])
def test_stored_rows_of_other_classes_than_the_live_answer_are_answered_live_beside_it(demo: Container, acme: Principal, classes: list[str], probabilities: list[float]) -> None:
    """A table published through a classifier whose classes came in another order (or another
    count) than the live model's: a request mixing a stored row with a live one read the stored
    probabilities by the live labels (setosa said, virginica at 1.0) or failed with a 500; the
    stored row is answered live beside the other, counted unfit."""
    rows = np.array([[5, 3, 1, 0], [7, 3, 5, 2]], np.float32)
    name = predict(demo, acme, "iris", rows).answer.signature.inputs[0].name
    live = predict(demo, acme, "iris", rows).answer.result.outputs["output_probability"]
    demo.deployments.create(acme, "irec", {"kind": "precomputed", "table": "recs", "key": f"inputs.{name}", "column": 0, "max_age_s": 3600, "live": single("iris", 1)})
    store = demo.precomputed
    assert store is not None
    now = time.time()
    body = encode_rows({"output_label": np.array(["setosa"], dtype=object), "output_probability": np.array([probabilities], np.float32)}, 1)
    store.put_answers("acme", "recs", "g1", [("5", body[0])], computed_at=now, expires_at=now + 600)
    outputs = [
        {"name": "output_label", "datatype": "BYTES", "shape": [-1], "role": "label"},
        {"name": "output_probability", "datatype": "FP32", "shape": [-1, -1], "role": "probabilities"},
    ]  # fmt: skip
    store.publish("acme", "recs", Publication("g1", "job-1", "iris", outputs, classes={"output_probability": classes}, published_at=now), expires_at=now + 600)
    answer = predict(demo, acme, "irec", rows).answer
    assert answer.source == "live"
    np.testing.assert_allclose(answer.result.outputs["output_probability"], live, rtol=1e-6)
    assert demo.deployments.stats(acme, "irec")["sources"]["live"]["unfit"] == 1
