"""Batch schedules: due runs on a synthetic clock, templated inputs, skip or queue while a run
is going, the API (validation, tenancy) and the CLI's verbs, on the local registry."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.batch.schedules import ScheduleService
from sluice.batch.service import BatchService
from sluice.batch.uris import local_path
from sluice.domain.errors import BadRequest
from sluice.domain.schedules import aws_expression, latest_fire, normalize_expression
from tests.integration.batch.inputs import iris_rows, write_input
from tests.integration.conftest import auth
from tests.support import Clock, cli_environment

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.domain import Principal
    from sluice.domain.jobs import BatchJob
    from sluice.wiring import Container


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


class Recorded:
    """An orchestrator that only records what it was asked to start: its jobs stay PENDING,
    that is, still going, until a test finishes them."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def start(self, job: BatchJob) -> str | None:
        self.started.append(job.id)
        return None

    def cancel(self, job: BatchJob) -> None:
        pass


@pytest.fixture
def clock() -> Clock:
    return Clock(at("2026-11-25T12:00:00+00:00"))


@pytest.fixture
def recorded() -> Recorded:
    return Recorded()


@pytest.fixture
def schedules(batch: Container, recorded: Recorded, clock: Clock) -> ScheduleService:
    service = BatchService(batch.registry, recorded, batch.batch.paths)
    return ScheduleService(batch.registry, service, clock=clock)


def inbox_template(batch: Container, tenant: str = "acme") -> str:
    return batch.batch.paths.inbox(tenant) + "iris/dt={date}/hour={hour}/events.csv"


@pytest.fixture
def hourly(batch: Container, schedules: ScheduleService, acme: Principal) -> None:
    """acme's schedule `hourly`: iris every hour, on the inbox template."""
    schedules.create(acme, name="hourly", deployment="iris", input_uri=inbox_template(batch), expression="rate(1 hour)")


def test_a_schedule_runs_when_due_once_per_scheduled_time_with_its_input_templated(
    batch: Container, schedules: ScheduleService, clock: Clock, acme: Principal, recorded: Recorded
) -> None:
    schedule = schedules.create(
        acme, name="nightly", deployment="iris", input_uri=inbox_template(batch),
        expression="0 2 * * *", timezone="Europe/Paris", key_columns=["id"],
    )  # fmt: skip
    assert schedule.expression == "cron(0 2 * * *)" and schedule.state == "ENABLED"
    assert schedules.run_due(at("2026-11-26T00:59:00+00:00")) == []  # 01:59 in Paris
    (job,) = schedules.run_due(at("2026-11-26T01:00:30+00:00"))  # 02:00:30 in Paris
    assert job.schedule == "nightly" and job.source == "schedule" and job.key_columns == ("id",)
    assert job.scheduled_for == at("2026-11-26T01:00:00+00:00")
    assert job.input_uri == batch.batch.paths.inbox("acme") + "iris/dt=2026-11-26/hour=02/events.csv"
    assert recorded.started == [job.id]
    # Looking again, the same night or after the job ended, starts nothing more.
    assert schedules.run_due(at("2026-11-26T01:05:00+00:00")) == []
    batch.registry.update_job("acme", job.id, status="FAILED")
    assert schedules.run_due(at("2026-11-26T23:00:00+00:00")) == []
    (second,) = schedules.run_due(at("2026-11-27T01:00:00+00:00"))
    assert second.input_uri.endswith("dt=2026-11-27/hour=02/events.csv") and second.id != job.id
    view = schedules.show(acme, "nightly")
    assert [r.id for r in view.runs] == [second.id, job.id]
    assert view.next_run_at == at("2026-11-28T01:00:00+00:00")


def test_a_schedule_stored_before_the_key_column_bound_still_runs_with_its_columns(
    batch: Container, schedules: ScheduleService, acme: Principal
) -> None:
    """A key column named by more than KEY_COLUMN_CHARS, as schedules made before the bound
    held: its runs go on (and its spec, as EventBridge sends it, still reads); a schedule made
    now with it is refused naming the field."""
    from dataclasses import replace

    from sluice.batch.specs import ExecutionSpec
    from sluice.domain.jobs import KEY_COLUMN_CHARS

    long = "customer_" + "x" * KEY_COLUMN_CHARS
    made = schedules.create(acme, name="old", deployment="iris", input_uri=inbox_template(batch), expression="rate(1 hour)", key_columns=["id"])
    batch.registry.delete_schedule("acme", "old")
    batch.registry.create_schedule(replace(made, key_columns=(long,)))  # as an older release stored it
    (job,) = schedules.run_due(at("2026-11-25T13:00:00+00:00"))
    assert job.key_columns == (long,)
    spec = {"tenant": "acme", "deployment": "iris", "input_uri": job.input_uri, "key_columns": [long], "schedule": "old"}
    assert ExecutionSpec.parse(spec).key_columns == (long,)
    with pytest.raises(BadRequest) as refused:
        schedules.create(acme, name="new", deployment="iris", input_uri=inbox_template(batch), expression="rate(1 hour)", key_columns=[long])
    assert refused.value.field == "key_columns"
    with pytest.raises(BadRequest) as refused:
        ExecutionSpec.parse({**spec, "schedule": None})  # a workflow's own execution: the bound holds
    assert refused.value.field == "key_columns"


@pytest.mark.usefixtures("hourly")
def test_runs_missed_while_the_scheduler_was_down_collapse_into_one(schedules: ScheduleService) -> None:
    (job,) = schedules.run_due(at("2026-11-25T17:30:00+00:00"))
    assert job.scheduled_for == at("2026-11-25T17:00:00+00:00")


@pytest.mark.usefixtures("hourly")
def test_a_run_due_while_the_last_one_is_going_is_skipped(batch: Container, schedules: ScheduleService) -> None:
    (first,) = schedules.run_due(at("2026-11-25T13:00:00+00:00"))
    assert schedules.run_due(at("2026-11-25T14:00:00+00:00")) == []  # first is still PENDING
    skipped = batch.registry.get_schedule("acme", "hourly")
    assert skipped.skipped == 1 and skipped.last_skipped_at == at("2026-11-25T14:00:00+00:00")
    batch.registry.update_job("acme", first.id, status="RUNNING")
    batch.registry.update_job("acme", first.id, status="SUCCEEDED")
    assert schedules.run_due(at("2026-11-25T14:30:00+00:00")) == []  # 14:00 was skipped, not owed
    (next_run,) = schedules.run_due(at("2026-11-25T15:00:00+00:00"))
    assert next_run.scheduled_for == at("2026-11-25T15:00:00+00:00")


@pytest.mark.usefixtures("hourly")
def test_a_schedule_created_again_under_a_deleted_ones_name_has_none_of_its_runs(
    batch: Container, schedules: ScheduleService, acme: Principal, clock: Clock
) -> None:
    """The old schedule's run still going neither holds the new one's first run back nor shows
    among its runs: a schedule's runs are the jobs it started."""
    (old,) = schedules.run_due(at("2026-11-25T13:00:00+00:00"))  # still PENDING
    clock.now = at("2026-11-25T13:20:00+00:00")
    time.sleep(0.002)  # jobs are stamped in milliseconds: the schedule is made again in a later one (`Schedule.ran`)
    schedules.delete(acme, "hourly")
    again = schedules.create(acme, name="hourly", deployment="iris", input_uri=inbox_template(batch), expression="rate(1 hour)")
    assert schedules.runs(again) == []
    (first,) = schedules.run_due(at("2026-11-25T14:20:00+00:00"))
    assert first.id != old.id and [j.id for j in schedules.runs(again)] == [first.id]
    assert batch.registry.get_schedule("acme", "hourly").skipped == 0


@pytest.mark.usefixtures("hourly")
def test_a_run_going_holds_the_next_back_however_many_jobs_the_tenant_made_since(
    batch: Container, schedules: ScheduleService
) -> None:
    from dataclasses import replace

    from sluice.batch.eventbridge import target_input
    from sluice.batch.executions import RunSkipped

    (first,) = schedules.run_due(at("2026-11-25T13:00:00+00:00"))  # still PENDING
    for i in range(1001):  # a pipeline's uploads meanwhile
        batch.registry.create_job(replace(
            first, id=f"up-{i:05d}", schedule=None, scheduled_for=None, source="upload", status="SUCCEEDED",
            output_uri=f"{first.output_uri}up-{i:05d}/", created_at=first.created_at + 1 + i,
        ))  # fmt: skip
    assert schedules.run_due(at("2026-11-25T14:00:00+00:00")) == []  # here
    schedule = batch.registry.get_schedule("acme", "hourly")
    spec = target_input(schedule) | {"scheduled_time": "2026-11-25T15:00:00Z"}
    with pytest.raises(RunSkipped) as skipped:  # on AWS
        schedules.batch.create_for_execution(spec, execution="arn:aws:states:eu-west-1:1:execution:m:hourly-15")
    assert skipped.value.running == first.id
    assert batch.registry.get_schedule("acme", "hourly").skipped == 2
    assert [j.id for j in schedules.runs(schedule)] == [first.id]


def test_a_queued_run_starts_as_soon_as_the_last_one_ends(
    batch: Container, schedules: ScheduleService, acme: Principal
) -> None:
    schedules.create(
        acme, name="hourly", deployment="iris", input_uri=inbox_template(batch),
        expression="rate(1 hour)", overlap="queue",
    )  # fmt: skip
    (first,) = schedules.run_due(at("2026-11-25T13:00:00+00:00"))
    assert schedules.run_due(at("2026-11-25T14:00:00+00:00")) == []
    assert schedules.run_due(at("2026-11-25T15:10:00+00:00")) == []
    assert batch.registry.get_schedule("acme", "hourly").skipped == 0
    batch.registry.update_job("acme", first.id, status="CANCELLED")
    (queued,) = schedules.run_due(at("2026-11-25T15:20:00+00:00"))
    assert queued.scheduled_for == at("2026-11-25T15:00:00+00:00")  # one run, for the latest time
    assert schedules.run_due(at("2026-11-25T15:30:00+00:00")) == []


@pytest.mark.usefixtures("hourly")
def test_a_run_refused_makes_no_job_is_counted_and_logged_once_and_the_schedule_moves_on(
    client: TestClient, keys: dict[str, str], batch: Container, schedules: ScheduleService, recorded: Recorded,
    acme: Principal, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """Its deployment deleted, a schedule's due run makes no job (as CreateJob refuses it at
    SpecRejected on AWS): it is counted on the schedule saying why, logged once naming the
    tenant, and the next scheduled time is the next to run (the same time was retried at every
    poll, unseen)."""
    batch.registry.delete_deployment("acme", "iris")
    with caplog.at_level("WARNING", logger="sluice.batch.schedules"):
        polls = [schedules.run_due(at("2026-11-25T13:00:00+00:00") + 5 * poll) for poll in range(3)]
    assert polls == [[], [], []] and recorded.started == []
    assert batch.registry.list_jobs("acme") == []
    (line,) = caplog.records
    assert (line.tenant, line.schedule, line.error) == ("acme", "hourly", "deployment 'iris' not found")  # type: ignore[attr-defined]
    counted = batch.registry.get_schedule("acme", "hourly")
    assert counted.last_fire == at("2026-11-25T13:00:00+00:00")
    assert (counted.refused, counted.last_error, counted.last_refused_at) == (1, "deployment 'iris' not found", at("2026-11-25T13:00:00+00:00"))
    shown = client.get("/api/v1/batch-schedules/hourly", headers=auth(keys["acme"])).json()
    assert shown["runs"] == [] and (shown["refused"], shown["last_error"]) == (1, "deployment 'iris' not found")
    assert schedules.show(acme, "hourly").next_run_at == at("2026-11-25T14:00:00+00:00")  # on the test's clock
    assert schedules.run_due(at("2026-11-25T14:00:10+00:00")) == []  # the next time, refused in turn: counted
    counted = batch.registry.get_schedule("acme", "hourly")
    assert (counted.refused, counted.last_error, counted.last_refused_at) == (2, "deployment 'iris' not found", at("2026-11-25T14:00:00+00:00"))
    assert batch.registry.list_jobs("acme") == []


def test_a_schedule_refused_every_minute_counts_on_itself_and_leaves_the_tenants_jobs_listed(
    client: TestClient, keys: dict[str, str], batch: Container, schedules: ScheduleService, recorded: Recorded,
    acme: Principal,
) -> None:  # fmt: skip
    """Two hours of a rate(1 minute) schedule whose deployment was deleted made 120 FAILED jobs,
    which filled the tenant's job list (the API's, the CLI's, the console's newest 100) and hid
    its own job. Now a refused run makes no job (as on AWS) and is counted on the schedule:
    the list keeps the tenant's job, and the schedule says how many runs were refused and why.
    A run made again ends the row; the next refusal starts a new one."""
    real = schedules.batch.submit(acme, deployment="diabetes", input_uri=batch.batch.paths.inbox("acme") + "real.csv")
    schedules.create(acme, name="minutely", deployment="iris", input_uri=inbox_template(batch), expression="rate(1 minute)")
    iris = batch.registry.get_deployment("acme", "iris")
    batch.registry.delete_deployment("acme", "iris")
    start = at("2026-11-25T12:00:30+00:00")
    made = [job for minute in range(1, 121) for job in schedules.run_due(start + 60 * minute)]
    assert made == []
    listed = client.get("/api/v1/batch-jobs", headers=auth(keys["acme"])).json()
    listed = listed["jobs"] if isinstance(listed, dict) else listed
    assert [j["id"] for j in listed] == [real.id]
    shown = client.get("/api/v1/batch-schedules/minutely", headers=auth(keys["acme"])).json()
    assert (shown["refused"], shown["last_error"]) == (120, "deployment 'iris' not found")
    assert shown["last_refused_at"] == at("2026-11-25T14:00:00+00:00")
    assert shown["runs"] == []
    (listed_schedule,) = client.get("/api/v1/batch-schedules", headers=auth(keys["acme"])).json()
    assert listed_schedule["refused"] == 120

    batch.registry.create_deployment(iris)  # made again: the next time runs, and the row is over
    (ran,) = schedules.run_due(start + 60 * 121)
    assert recorded.started[-1] == ran.id and ran.status == "PENDING"
    again = batch.registry.get_schedule("acme", "minutely")
    assert (again.refused, again.last_error, again.last_refused_at) == (0, None, at("2026-11-25T14:00:00+00:00"))
    batch.registry.update_job("acme", ran.id, status="CANCELLED")  # ended: it holds no run back
    batch.registry.delete_deployment("acme", "iris")  # a new row, counted from 1
    assert schedules.run_due(start + 60 * 122) == []
    assert batch.registry.get_schedule("acme", "minutely").refused == 1
    assert schedules.run_due(start + 60 * 123) == []
    assert batch.registry.get_schedule("acme", "minutely").refused == 2
    assert [j.id for j in batch.registry.list_jobs("acme", schedule="minutely")] == [ran.id]


@settings(max_examples=15, deadline=None)
@given(present=st.lists(st.booleans(), min_size=1, max_size=8))
def test_refused_runs_make_no_job_whatever_the_order(tmp_path_factory: pytest.TempPathFactory, present: list[bool]) -> None:
    """Whatever order the deployment is there or gone at each scheduled time: one job per run
    made, none for a run refused, and the schedule counts the row of refusals it is in."""
    from sluice.demo import install_demo
    from sluice.domain import Principal
    from sluice.settings import Settings
    from sluice.wiring import Container
    from tests.conftest import MODELS

    acme = Principal("acme", frozenset({"admin", "predict"}), "test-acme")
    container = Container.from_settings(Settings(mode="local", home=tmp_path_factory.mktemp("home"), deployment_cache_ttl_s=0))
    install_demo(container, acme, MODELS)
    service = ScheduleService(container.registry, BatchService(container.registry, Recorded(), container.batch.paths),
                              clock=Clock(at("2026-11-25T12:00:00+00:00")))  # fmt: skip
    service.create(acme, name="hourly", deployment="iris", input_uri=inbox_template(container), expression="rate(1 hour)")
    iris = container.registry.get_deployment("acme", "iris")
    there, jobs = True, 0
    for hour, wanted in enumerate(present, start=1):
        if wanted != there:
            if wanted:
                container.registry.create_deployment(iris)
            else:
                container.registry.delete_deployment("acme", "iris")
            there = wanted
        made = service.run_due(at("2026-11-25T12:00:10+00:00") + 3600 * hour)
        for job in made:  # a run made ends before the next time (it never holds one back)
            assert job.status == "PENDING"
            container.registry.update_job("acme", job.id, status="CANCELLED")
        jobs += len(made)
    assert jobs == present.count(True)
    assert len(container.registry.list_jobs("acme", schedule="hourly")) == jobs
    trailing = len(present) - len("".join("x" if p else "-" for p in present).rstrip("-"))
    assert container.registry.get_schedule("acme", "hourly").refused == trailing


@pytest.mark.usefixtures("hourly")
def test_two_schedulers_refusing_the_same_run_count_and_log_it_once(
    batch: Container, schedules: ScheduleService, caplog: pytest.LogCaptureFixture
) -> None:
    """Two workers of `sluice serve` polling at once, both refused: no job, one count, and
    one log line (each logged it)."""
    import threading

    other = ScheduleService(batch.registry, BatchService(batch.registry, Recorded(), batch.batch.paths), clock=schedules.clock)
    batch.registry.delete_deployment("acme", "iris")
    both = threading.Barrier(2)
    looked_up = batch.registry.get_deployment

    def together(tenant: str, name: str) -> Any:
        both.wait(5)  # both have read the schedule, and both are refused
        return looked_up(tenant, name)

    batch.registry.get_deployment = together  # type: ignore[method-assign]
    returned: dict[str, list[BatchJob]] = {}
    with caplog.at_level("WARNING", logger="sluice.batch.schedules"):
        threads = [threading.Thread(target=lambda s=s, k=k: returned.__setitem__(k, s.run_due(at("2026-11-25T13:00:05+00:00"))))
                   for k, s in (("a", schedules), ("b", other))]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert returned == {"a": [], "b": []}
    assert [r.getMessage() for r in caplog.records] == ["schedule run refused"]
    assert batch.registry.get_schedule("acme", "hourly").refused == 1
    assert batch.registry.list_jobs("acme", schedule="hourly") == []


@pytest.mark.usefixtures("hourly")
def test_on_aws_a_refused_run_is_counted_on_its_schedule_as_locally(batch: Container, schedules: ScheduleService) -> None:
    """CreateJob refusing a scheduled run (its deployment deleted) makes no job and counts it on
    the schedule as the local scheduler does, and fails the execution (SpecRejected); the same
    time delivered twice counts once; a run made ends the row."""
    from sluice.batch.eventbridge import target_input
    from sluice.domain.errors import NotFound

    schedule = batch.registry.get_schedule("acme", "hourly")
    iris = batch.registry.get_deployment("acme", "iris")
    batch.registry.delete_deployment("acme", "iris")
    arn = "arn:aws:states:eu-west-1:1:execution:m:"
    for hour, name in ((13, "a"), (13, "a-again"), (14, "b")):
        spec = target_input(schedule) | {"scheduled_time": f"2026-11-25T{hour}:00:00Z"}
        with pytest.raises(NotFound, match="deployment 'iris' not found"):
            schedules.batch.create_for_execution(spec, execution=arn + name)
    counted = batch.registry.get_schedule("acme", "hourly")
    assert (counted.refused, counted.last_error) == (2, "deployment 'iris' not found")
    assert batch.registry.list_jobs("acme", schedule="hourly") == []
    batch.registry.create_deployment(iris)
    spec = target_input(schedule) | {"scheduled_time": "2026-11-25T15:00:00Z"}
    made = schedules.batch.create_for_execution(spec, execution=arn + "c")
    assert made.status == "PENDING"
    assert batch.registry.get_schedule("acme", "hourly").refused == 0


@pytest.mark.usefixtures("hourly")
def test_on_aws_createjob_retried_after_a_refusal_refuses_again_and_counts_once(
    batch: Container, schedules: ScheduleService
) -> None:
    """Step Functions retries CreateJob (a Lambda service fault) after it refused a scheduled
    run: the retry is refused with the same reason, so the execution fails at SpecRejected
    saying why. The first try had left a FAILED job that the retry returned, and the
    execution went on to Plan, to fail with JobNotRunning."""
    from sluice.batch.eventbridge import target_input
    from sluice.domain.errors import NotFound

    schedule = batch.registry.get_schedule("acme", "hourly")
    batch.registry.delete_deployment("acme", "iris")
    spec = target_input(schedule) | {"scheduled_time": "2026-11-25T13:00:00Z"}
    for _ in range(3):
        with pytest.raises(NotFound, match="deployment 'iris' not found"):
            schedules.batch.create_for_execution(spec, execution="arn:aws:states:eu-west-1:1:execution:m:a")
    assert batch.registry.list_jobs("acme") == []
    assert batch.registry.get_schedule("acme", "hourly").refused == 1


@pytest.mark.parametrize("deliveries", [["t13"], ["t13", "t13"], ["t13", "t13", "t13-again"], ["t13-again", "t13"]])
def test_on_aws_a_skipped_time_is_counted_once_however_often_it_is_delivered(batch: Container, clock: Clock, acme: Principal, deliveries: list[str]) -> None:
    """EventBridge Scheduler delivers a time at least once (each delivery an execution), and
    Step Functions retries CreateJob: a time skipped (noon's run still going) counts once, as
    locally, where the time is the schedule's `last_fire`."""
    from sluice.batch.eventbridge import target_input
    from sluice.batch.executions import RunSkipped

    class Going(Recorded):  # Step Functions, every run's execution still going
        keeps_heartbeat = False

        def ended(self, job: BatchJob) -> None:
            return None

    service = ScheduleService(batch.registry, BatchService(batch.registry, Going(), batch.batch.paths), clock=clock)
    service.create(acme, name="hourly", deployment="iris", input_uri=inbox_template(batch), expression="rate(1 hour)", overlap="skip")
    spec = lambda hour: target_input(batch.registry.get_schedule("acme", "hourly")) | {"scheduled_time": f"2026-11-25T{hour}:00:00Z"}  # noqa: E731
    arn = "arn:aws:states:eu-west-1:1:execution:m:"
    service.batch.create_for_execution(spec(12), execution=arn + "t12")
    for execution in deliveries:
        with pytest.raises(RunSkipped):
            service.batch.create_for_execution(spec(13), execution=arn + execution)
    counted = batch.registry.get_schedule("acme", "hourly")
    assert counted.skipped == 1 and counted.last_skipped_at == at("2026-11-25T13:00:00+00:00")
    with pytest.raises(RunSkipped):  # the next time skipped counts too
        service.batch.create_for_execution(spec(14), execution=arn + "t14")
    assert batch.registry.get_schedule("acme", "hourly").skipped == 2
    # two times skipped at once, the later one's count written first: both counted
    from sluice.batch.executions import _skip_counted

    read = batch.registry.get_schedule("acme", "hourly")
    _skip_counted(batch.registry, read, at("2026-11-25T16:00:00+00:00"))
    _skip_counted(batch.registry, read, at("2026-11-25T15:00:00+00:00"))  # its read is stale: read again, counted
    assert batch.registry.get_schedule("acme", "hourly").skipped == 4


def _refusals_unwritable(batch: Container, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Make every write of a schedule's refusal count (or its clearing) meet a fault that may
    pass; the writes tried are returned as they come."""
    from sluice.domain.errors import Unavailable

    tried: list[dict[str, Any]] = []
    real = batch.registry.update_schedule

    def flaky(tenant: str, name: str, **fields: Any) -> Any:
        if "refused" in fields:
            tried.append(fields)
            raise Unavailable("the registry is unavailable; try again")
        return real(tenant, name, **fields)

    monkeypatch.setattr(batch.registry, "update_schedule", flaky)
    return tried


@pytest.mark.usefixtures("hourly")
def test_on_aws_a_fault_while_counting_never_changes_what_createjob_does(
    batch: Container, schedules: ScheduleService, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The registry unavailable while CreateJob counts a refusal: the execution still fails
    with the real reason (NotFound), not Unavailable. While it ends a row of refusals: the run
    it made is its job (it failed the execution at SpecRejected, although the job existed);
    the row ends when CreateJob is tried again."""
    from sluice.batch.eventbridge import target_input
    from sluice.domain.errors import NotFound

    schedule = batch.registry.get_schedule("acme", "hourly")
    iris = batch.registry.get_deployment("acme", "iris")
    batch.registry.delete_deployment("acme", "iris")
    arn = "arn:aws:states:eu-west-1:1:execution:m:"
    spec = target_input(schedule) | {"scheduled_time": "2026-11-25T13:00:00Z"}
    with pytest.raises(NotFound):
        schedules.batch.create_for_execution(spec, execution=arn + "a")  # counted: the row's first
    batch.registry.create_deployment(iris)
    with monkeypatch.context() as patched, caplog.at_level("WARNING", logger="sluice.batch.schedules"):
        tried = _refusals_unwritable(batch, patched)
        made = schedules.batch.create_for_execution(target_input(schedule) | {"scheduled_time": "2026-11-25T14:00:00Z"}, execution=arn + "b")
    assert made.status == "PENDING" and tried == [{"refused": 0, "last_error": None}]
    assert batch.registry.get_schedule("acme", "hourly").refused == 1  # as the first try left it
    again = schedules.batch.create_for_execution(target_input(schedule) | {"scheduled_time": "2026-11-25T14:00:00Z"}, execution=arn + "b")
    assert again.id == made.id  # CreateJob retried finds its job, and ends the row
    assert batch.registry.get_schedule("acme", "hourly").refused == 0

    batch.registry.update_job("acme", made.id, status="CANCELLED")  # ended: it holds no run back
    batch.registry.delete_deployment("acme", "iris")
    with monkeypatch.context() as patched, caplog.at_level("WARNING", logger="sluice.batch.schedules"):
        tried = _refusals_unwritable(batch, patched)
        with pytest.raises(NotFound, match="deployment 'iris' not found"):
            schedules.batch.create_for_execution(target_input(schedule) | {"scheduled_time": "2026-11-25T15:00:00Z"}, execution=arn + "c")
    assert len(tried) == 1 and tried[0]["last_error"] == "deployment 'iris' not found"
    logged = ["schedule run refused", "schedule refusals not cleared", "schedule run refused, not counted"]
    assert [r.getMessage() for r in caplog.records] == logged
    assert all(r.tenant == "acme" and r.schedule == "hourly" for r in caplog.records)  # type: ignore[attr-defined]
    assert [j.id for j in batch.registry.list_jobs("acme", schedule="hourly")] == [made.id]


@pytest.mark.usefixtures("hourly")
def test_locally_a_fault_while_counting_or_clearing_refusals_never_changes_the_run(
    batch: Container, schedules: ScheduleService, recorded: Recorded, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """The registry unavailable while the scheduler counts a refusal: logged, no job, and the
    schedule moves on to its next time (the count is best effort). While it ends a row: the run
    made stands, and the row ends when a scheduler next finds that run, even one whose poll
    failed after it was made."""
    from sluice.domain.errors import Unavailable

    iris = batch.registry.get_deployment("acme", "iris")
    batch.registry.delete_deployment("acme", "iris")
    with monkeypatch.context() as patched, caplog.at_level("WARNING", logger="sluice.batch.schedules"):
        tried = _refusals_unwritable(batch, patched)
        assert schedules.run_due(at("2026-11-25T13:00:05+00:00")) == []
    assert len(tried) == 1 and [r.getMessage() for r in caplog.records] == ["schedule run refused, not counted"]
    after = batch.registry.get_schedule("acme", "hourly")
    assert after.last_fire == at("2026-11-25T13:00:00+00:00") and after.refused == 0  # moved on, uncounted
    assert schedules.run_due(at("2026-11-25T14:00:05+00:00")) == []  # the next refusal is counted
    assert batch.registry.get_schedule("acme", "hourly").refused == 1
    assert batch.registry.list_jobs("acme") == [] and recorded.started == []

    batch.registry.create_deployment(iris)
    real = batch.registry.update_schedule

    def down(tenant: str, name: str, **fields: Any) -> Any:  # every schedule write, this poll
        raise Unavailable("the registry is unavailable; try again")

    monkeypatch.setattr(batch.registry, "update_schedule", down)
    assert schedules.run_due(at("2026-11-25T15:00:05+00:00")) == []  # made, then its poll failed
    (made,) = batch.registry.list_jobs("acme", schedule="hourly")
    assert recorded.started == [made.id] and batch.registry.get_schedule("acme", "hourly").refused == 1
    monkeypatch.setattr(batch.registry, "update_schedule", real)
    assert schedules.run_due(at("2026-11-25T15:00:10+00:00")) == [made]  # found, not made again
    assert recorded.started == [made.id]
    ended = batch.registry.get_schedule("acme", "hourly")
    assert (ended.refused, ended.last_error, ended.last_fire) == (0, None, at("2026-11-25T15:00:00+00:00"))


@pytest.mark.usefixtures("hourly")
def test_a_fault_that_may_pass_leaves_the_run_due_for_the_next_poll(
    batch: Container, schedules: ScheduleService, recorded: Recorded, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    from sluice.domain.errors import Unavailable

    def down(tenant: str, name: str) -> None:
        raise Unavailable("the registry is unavailable")

    with monkeypatch.context() as patched, caplog.at_level("WARNING", logger="sluice.batch.schedules"):
        patched.setattr(batch.registry, "get_deployment", down)
        assert schedules.run_due(at("2026-11-25T13:00:00+00:00")) == []
    (line,) = caplog.records
    assert (line.tenant, line.schedule) == ("acme", "hourly")  # type: ignore[attr-defined]
    assert batch.registry.get_schedule("acme", "hourly").last_fire is None
    assert schedules.runs(batch.registry.get_schedule("acme", "hourly")) == []
    (job,) = schedules.run_due(at("2026-11-25T13:00:05+00:00"))  # back: the same time runs
    assert job.scheduled_for == at("2026-11-25T13:00:00+00:00") and recorded.started == [job.id]


@pytest.mark.usefixtures("hourly")
def test_a_paused_schedule_does_not_run_and_a_resumed_one_skips_what_it_missed(
    schedules: ScheduleService, clock: Clock, acme: Principal
) -> None:
    assert schedules.pause(acme, "hourly").state == "PAUSED"
    assert schedules.run_due(at("2026-11-25T15:00:00+00:00")) == []
    assert schedules.show(acme, "hourly").next_run_at is None
    clock.now = at("2026-11-25T15:30:00+00:00")
    assert schedules.resume(acme, "hourly").state == "ENABLED"
    assert schedules.run_due(at("2026-11-25T15:45:00+00:00")) == []
    assert len(schedules.run_due(at("2026-11-25T16:00:00+00:00"))) == 1


def test_a_due_schedule_runs_its_job_to_the_manifest_on_the_local_orchestrator(
    batch: Container, acme: Principal, clock: Clock
) -> None:
    schedules = ScheduleService(batch.registry, batch.batch, clock=clock)
    day = local_path(batch.batch.paths.inbox("acme")) / "iris" / "dt=2026-11-25"
    day.mkdir(parents=True)
    write_input(day / "events.csv", iris_rows(900))
    schedules.create(
        acme, name="daily", deployment="iris", expression="cron(30 12 * * *)",
        input_uri=batch.batch.paths.inbox("acme") + "iris/dt={date}/events.csv",
    )  # fmt: skip
    (job,) = schedules.run_due(at("2026-11-25T12:30:00+00:00"))
    batch.batch.orchestrator.wait(job.id, 30)  # type: ignore[union-attr]
    done = batch.registry.get_job("acme", job.id)
    assert done.status == "SUCCEEDED", done.error
    assert (done.rows_in, done.rows_out) == (900, 900) and done.schedule == "daily"
    assert (local_path(done.output_uri) / "_SUCCESS").exists()


def test_expressions_are_checked_and_translated_for_eventbridge() -> None:
    assert normalize_expression("rate(1 hours)") == "rate(1 hour)"
    assert normalize_expression(" rate( 15  minutes ) ") == "rate(15 minutes)"
    assert normalize_expression("*/15 8-18 * * MON-FRI") == "cron(*/15 8-18 * * MON-FRI)"
    assert aws_expression("cron(0 2 * * *)") == "cron(0 2 * * ? *)"
    assert aws_expression("cron(0 6 * * 1-5)") == "cron(0 6 ? * 2-6 *)"
    assert aws_expression("cron(0 6 * * 0,6)") == "cron(0 6 ? * 1,7 *)"
    assert aws_expression("rate(5 minutes)") == "rate(5 minutes)"
    for bad in ("cron(0 2 * *)", "0 25 * * *", "rate(0 hours)", "rate(1 fortnight)", "every day", ""):
        with pytest.raises(BadRequest) as caught:
            normalize_expression(bad)
        assert caught.value.field == "expression", bad
    with pytest.raises(BadRequest, match="not both"):
        aws_expression("cron(0 2 1 * MON)")


@settings(max_examples=300, deadline=None)
@given(n=st.one_of(st.integers(0, 20_000_000), st.integers(0, 10**400)), unit=st.sampled_from(["minutes", "hours", "days"]))
def test_a_rate_is_accepted_up_to_the_horizon_and_every_accepted_one_has_a_time_that_shows(n: int, unit: str) -> None:
    """A rate from 1 unit to HORIZON_YEARS is accepted, and its next time is a date (the CLI,
    the API and the console all show it); a longer one is refused naming `expression`,
    however many digits it has (10**400 days made show, the API and the scheduler fail)."""
    from sluice.domain.schedules import HORIZON_YEARS, MAX_RATE_S, Schedule, next_fire

    period = n * {"minutes": 60, "hours": 3600, "days": 86400}[unit]
    if not 1 <= period <= MAX_RATE_S:
        with pytest.raises(BadRequest) as refused:
            normalize_expression(f"rate({n} {unit})")
        assert refused.value.field == "expression"
        assert ("at least" if n == 0 else f"{HORIZON_YEARS} years") in refused.value.message
        return
    expression = normalize_expression(f"rate({n} {unit})")
    made = at("2026-11-25T12:00:00+00:00")
    schedule = Schedule("acme", "s", "iris", "x", expression, created_at=made)
    assert schedule.invalid is None
    upcoming = next_fire(schedule, made)
    assert upcoming == made + period
    assert datetime.fromtimestamp(upcoming, UTC).year <= 2026 + HORIZON_YEARS


def stored_before_the_bound(batch: Container, schedules: ScheduleService, acme: Principal, *, name: str = "huge") -> None:
    """acme's schedule `name`, as an older release stored it: a rate of 10**30 days."""
    from dataclasses import replace

    made = schedules.create(acme, name=name, deployment="iris", input_uri=inbox_template(batch), expression="rate(1 day)")
    batch.registry.delete_schedule("acme", name)
    batch.registry.create_schedule(replace(made, expression="rate(" + "9" * 30 + " days)"))


def test_a_schedule_stored_with_a_rate_past_the_bound_is_shown_as_invalid_and_never_runs(
    client: TestClient, keys: dict[str, str], batch: Container, schedules: ScheduleService, acme: Principal,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    stored_before_the_bound(batch, schedules, acme)
    with caplog.at_level("WARNING", logger="sluice.batch.schedules"):
        for hours in (1, 24, 24 * 365):
            assert schedules.run_due(at("2026-11-25T12:00:00+00:00") + hours * 3600) == []
    assert caplog.records == []  # no traceback at every poll
    view = schedules.show(acme, "huge")
    assert view.next_run_at is None and view.runs == []
    assert view.schedule.invalid is not None and "30 years" in view.schedule.invalid
    a = auth(keys["acme"])
    shown = client.get("/api/v1/batch-schedules/huge", headers=a)
    assert shown.status_code == 200, shown.text
    assert shown.json()["next_run_at"] is None and "at most 10950 days" in shown.json()["invalid"]
    (listed,) = client.get("/api/v1/batch-schedules", headers=a).json()
    assert listed["invalid"] == shown.json()["invalid"]
    assert client.post("/api/v1/batch-schedules/huge/pause", headers=a).status_code == 200
    assert client.delete("/api/v1/batch-schedules/huge", headers=a).status_code == 204


def test_a_cron_schedule_follows_its_time_zone_across_a_clock_change(batch: Container, acme: Principal) -> None:
    from sluice.domain.schedules import Schedule

    schedule = Schedule("acme", "s", "iris", "x", "cron(0 2 * * *)", timezone="Europe/Paris",
                        created_at=at("2026-10-23T12:00:00+00:00"))  # fmt: skip
    # 02:00 in Paris is 00:00 UTC in summer time, and 01:00 UTC once the clocks go back (25 October).
    assert latest_fire(schedule, at("2026-10-24T00:30:00+00:00")) == at("2026-10-24T00:00:00+00:00")
    assert latest_fire(schedule, at("2026-10-26T01:00:00+00:00")) == at("2026-10-26T01:00:00+00:00")
    assert latest_fire(schedule, at("2026-10-26T00:59:00+00:00")) != at("2026-10-26T00:00:00+00:00")


# Over HTTP -------------------------------------------------------------------------------
def body(batch: Container, **changes: Any) -> dict[str, Any]:
    return {
        "name": "nightly", "deployment": "iris", "input_uri": inbox_template(batch),
        "expression": "cron(0 2 * * *)", "timezone": "Europe/Paris",
    } | changes  # fmt: skip


def test_schedules_over_http_create_list_show_pause_resume_delete(
    client: TestClient, keys: dict[str, str], batch: Container
) -> None:
    a = auth(keys["acme"])
    r = client.post("/api/v1/batch-schedules", json=body(batch, overlap="queue", key_columns=["id", "k" * 128]), headers=a)
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["expression"] == "cron(0 2 * * *)" and created["overlap"] == "queue"
    assert created["state"] == "ENABLED" and created["skipped"] == 0 and created["key_columns"] == ["id", "k" * 128]
    assert client.post("/api/v1/batch-schedules", json=body(batch), headers=a).status_code == 409
    assert [s["name"] for s in client.get("/api/v1/batch-schedules", headers=a).json()] == ["nightly"]
    shown = client.get("/api/v1/batch-schedules/nightly", headers=a).json()
    assert shown["runs"] == [] and shown["next_run_at"] > 0
    assert client.post("/api/v1/batch-schedules/nightly/pause", headers=a).json()["state"] == "PAUSED"
    assert client.get("/api/v1/batch-schedules/nightly", headers=a).json()["next_run_at"] is None
    assert client.post("/api/v1/batch-schedules/nightly/resume", headers=a).json()["state"] == "ENABLED"
    assert client.delete("/api/v1/batch-schedules/nightly", headers=a).status_code == 204
    assert client.get("/api/v1/batch-schedules/nightly", headers=a).status_code == 404
    assert client.get("/api/v1/batch-schedules", headers=a).json() == []


@pytest.mark.parametrize(
    ("changes", "status", "field"),
    [
        ({"expression": "cron(0 2 * *)"}, 422, "expression"),
        ({"expression": "0 25 * * *"}, 422, "expression"),
        ({"expression": "rate(2 weeks)"}, 422, "expression"),
        ({"expression": "rate(10951 days)"}, 422, "expression"),  # past HORIZON_YEARS
        ({"expression": "rate(" + "9" * 400 + " days)"}, 422, "expression"),
        ({"expression": "rate(" + "9" * 5000 + " minutes)"}, 422, "expression"),  # past int's own digit limit
        ({"timezone": "Mars/Olympus_Mons"}, 422, "timezone"),
        ({"input_uri": "inbox/acme/iris/dt={day_of_year}/x.csv"}, 422, "input_uri"),
        ({"input_uri": "inbox/acme/iris/dt={date/x.csv"}, 422, "input_uri"),
        ({"overlap": "both"}, 422, "overlap"),
        ({"name": "Not a name"}, 400, "name"),
        ({"deployment": "nope"}, 404, "deployment"),
        ({"input_uri": "/etc/dt={date}/passwd"}, 403, "input_uri"),
        ({"key_columns": ["k" * 129]}, 400, "key_columns"),  # a column's name, as `publish.key`: DynamoDB keeps 400 KB an item
        ({"key_columns": [f"k{i}" for i in range(17)]}, 400, "key_columns"),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_field(
    client: TestClient, keys: dict[str, str], batch: Container, changes: dict[str, Any], status: int, field: str
) -> None:
    r = client.post("/api/v1/batch-schedules", json=body(batch, **changes), headers=auth(keys["acme"]))
    assert r.status_code == status, r.text
    assert r.json()["field"] == field
    assert batch.registry.list_schedules("acme") == []


@pytest.mark.parametrize(
    ("template", "changes", "field"),
    [
        ("iris/{date}/events.csv.gz", {}, "input_uri"),  # compressed: cannot be split
        ("iris/{date}/events", {}, "format"),  # no name that says a format
        ("iris/dt={date}/", {"format": "csv"}, "format"),  # a prefix's format comes from its objects
    ],
)
def test_a_schedule_every_run_of_which_would_be_refused_is_refused_when_made(
    client: TestClient, keys: dict[str, str], batch: Container, template: str, changes: dict[str, Any], field: str
) -> None:
    """A job of its rendered input is refused naming the field; the schedule was taken (201),
    and then each of its runs refused."""
    job = {"deployment": "iris", "input_uri": batch.batch.paths.inbox("acme") + template.replace("{date}", "2026-11-25"), **changes}
    refused = client.post("/api/v1/batch-jobs", json=job, headers=auth(keys["acme"]))
    made = client.post("/api/v1/batch-schedules", json=body(batch, input_uri=batch.batch.paths.inbox("acme") + template, **changes), headers=auth(keys["acme"]))
    assert (refused.status_code, refused.json()["field"]) == (made.status_code, made.json()["field"]) == (400, field), made.text
    assert batch.registry.list_schedules("acme") == []


def test_another_tenant_sees_none_of_a_tenants_schedules_or_their_runs(
    client: TestClient, keys: dict[str, str], batch: Container, acme: Principal, clock: Clock
) -> None:
    assert client.post("/api/v1/batch-schedules", json=body(batch), headers=auth(keys["acme"])).status_code == 201
    g = auth(keys["globex"])
    assert client.get("/api/v1/batch-schedules", headers=g).json() == []
    for call in (client.get, client.delete):
        assert call("/api/v1/batch-schedules/nightly", headers=g).status_code == 404
    for verb in ("pause", "resume"):
        assert client.post(f"/api/v1/batch-schedules/nightly/{verb}", headers=g).status_code == 404
    # globex cannot aim a schedule of its own at acme's inbox either.
    r = client.post("/api/v1/batch-schedules", json=body(batch, deployment="iris"), headers=g)
    assert r.status_code in (403, 404) and r.json()["field"] in ("input_uri", "deployment")
    assert batch.registry.get_schedule("acme", "nightly").state == "ENABLED"


def _as_acme(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str]]:
    """`sluice ARGS` as tenant acme, in this process: (exit code, what it printed)."""
    from sluice import cli

    def sluice(*args: str) -> tuple[int, str]:
        code = cli.main(["--tenant", "acme", *args])
        out, err = capsys.readouterr()
        return code, out + err

    return sluice


def _iris_deployed(sluice: Callable[..., tuple[int, str]]) -> None:
    from tests.conftest import MODELS

    assert sluice("models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0
    assert sluice("deployments", "create", "iris", "--model", "iris")[0] == 0


def test_the_cli_manages_schedules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from sluice.wiring import get_container

    sluice = _as_acme(capsys)
    with cli_environment(monkeypatch, tmp_path / "home"):
        _iris_deployed(sluice)
        template = str(tmp_path / "lake" / "dt={date}" / "x.csv")
        code, out = sluice("batch", "schedule", "create", "nightly", "--deployment", "iris", "--input", template,
                           "--cron", "0 2 * * *", "--timezone", "Europe/Paris", "--overlap", "queue")  # fmt: skip
        assert code == 0, out
        registry = get_container().registry
        created = registry.get_schedule("acme", "nightly")
        rendered = created.input_uri.replace("{date}", "2026-11-26")
        assert local_path(rendered) == (tmp_path / "lake").resolve() / "dt=2026-11-26" / "x.csv"
        assert created.operator and created.overlap == "queue" and created.expression == "cron(0 2 * * *)"
        code, out = sluice("batch", "schedule", "list")
        assert code == 0 and "nightly" in out and "cron(0 2 * * *)" in out
        assert sluice("batch", "schedule", "pause", "nightly")[0] == 0
        assert registry.get_schedule("acme", "nightly").paused
        assert sluice("batch", "schedule", "resume", "nightly")[0] == 0
        code, out = sluice("batch", "schedule", "show", "nightly")
        assert code == 0 and "no runs yet" in out and '"state": "ENABLED"' in out
        code, out = sluice("batch", "schedule", "create", "other", "--deployment", "iris", "--input", template, "--cron", "0 2 * *")
        assert code != 0 and "expression" in out
        for flag, given, stored in (("--cron", "cron(0 3 * * *)", "cron(0 3 * * *)"), ("--rate", " rate(1 hour) ", "rate(1 hour)")):  # as the API writes them: wrapped once
            code, out = sluice("batch", "schedule", "create", f"whole-{flag[2:]}", "--deployment", "iris", "--input", template, flag, given)
            assert code == 0 and registry.get_schedule("acme", f"whole-{flag[2:]}").expression == stored, out
            assert sluice("batch", "schedule", "delete", f"whole-{flag[2:]}")[0] == 0
        code, out = sluice("batch", "schedule", "create", "other", "--deployment", "iris", "--input", template,
                           "--rate", "1 hour", "--timezone", "Nowhere/Land")  # fmt: skip
        assert code != 0 and "timezone" in out
        assert sluice("--tenant", "globex", "batch", "schedule", "show", "nightly")[0] != 0
        refused_at = datetime(2026, 11, 26, 1, tzinfo=UTC).timestamp()  # its runs refused, as the scheduler counts them
        registry.update_schedule("acme", "nightly", refused=3, last_error="deployment 'iris' not found", last_refused_at=refused_at)
        code, out = sluice("batch", "schedule", "show", "nightly")
        refusals = "3 runs refused in a row, the latest for 2026-11-26 01:00 UTC: deployment 'iris' not found"
        assert code == 0 and f'"refused": "{refusals}"' in out
        code, out = sluice("batch", "schedule", "list")
        assert code == 0 and f"schedule nightly: {refusals}" in out
        assert sluice("batch", "schedule", "delete", "nightly")[0] == 0
        assert registry.list_schedules("acme") == []
        assert sluice("batch", "schedule", "show", "nightly")[0] != 0


def test_the_cli_refuses_a_rate_past_the_bound_and_shows_one_stored_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--rate '999…9 days'` exits 2 naming `expression`; one stored by an older release is
    listed and shown, saying it never runs, where show died with an OverflowError."""
    from dataclasses import replace

    from sluice.wiring import get_container

    sluice = _as_acme(capsys)
    with cli_environment(monkeypatch, tmp_path / "home"):
        _iris_deployed(sluice)
        template = str(tmp_path / "lake" / "dt={date}" / "x.csv")
        code, out = sluice("batch", "schedule", "create", "huge", "--deployment", "iris", "--input", template, "--rate", "9" * 30 + " days")
        assert code == 2 and "expression" in out and "at most 10950 days" in out and "Traceback" not in out
        assert sluice("batch", "schedule", "create", "huge", "--deployment", "iris", "--input", template, "--rate", "10950 days")[0] == 0
        registry = get_container().registry
        made = registry.get_schedule("acme", "huge")
        registry.delete_schedule("acme", "huge")
        registry.create_schedule(replace(made, expression="rate(" + "9" * 30 + " days)"))  # as an older release stored it
        code, out = sluice("batch", "schedule", "show", "huge")
        assert code == 0, out
        assert '"next_run": "-"' in out and '"invalid": "expression: a rate is at most 10950 days (30 years)"' in out
        code, out = sluice("batch", "schedule", "list")
        assert code == 0 and "schedule huge never runs: expression: a rate is at most 10950 days" in out


@pytest.mark.usefixtures("hourly")
def test_the_local_scheduler_thread_starts_due_runs(
    batch: Container, schedules: ScheduleService, clock: Clock, recorded: Recorded
) -> None:
    import time

    from sluice.batch.schedules import LocalScheduler

    clock.now = at("2026-11-25T13:00:01+00:00")
    scheduler = LocalScheduler(schedules, interval_s=0.01)
    scheduler.start()
    try:
        deadline = time.monotonic() + 30
        while not recorded.started and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        scheduler.stop()
    (job_id,) = recorded.started
    assert batch.registry.get_job("acme", job_id).scheduled_for == at("2026-11-25T13:00:00+00:00")


def test_a_job_with_a_catalog_table_keeps_the_hive_layout_locally(
    client: TestClient, keys: dict[str, str], batch: Container
) -> None:
    import time

    path = local_path(batch.batch.paths.inbox("acme")) / "iris" / "day.csv"
    path.parent.mkdir(parents=True)
    write_input(path, iris_rows(800))
    a = auth(keys["acme"])
    catalog = {"database": "lake", "table": "iris_scores"}
    r = client.post("/api/v1/batch-jobs", json={"deployment": "iris", "input_uri": path.as_uri(), "catalog": catalog}, headers=a)
    assert r.status_code == 202, r.text
    created = r.json()
    assert created["catalog"] == catalog and created["output_format"] == "parquet"
    assert created["output_uri"] == f"outbox/tables/iris_scores/job={created['id']}/"
    deadline = time.monotonic() + 30
    while client.get(f"/api/v1/batch-jobs/{created['id']}", headers=a).json()["status"] in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    folder = local_path(batch.batch.paths.root + f"outbox/acme/tables/iris_scores/job={created['id']}/")
    assert (folder / "_SUCCESS").exists() and sorted(p.name for p in folder.glob("part-*.parquet"))
    bad = client.post("/api/v1/batch-jobs", json={"deployment": "iris", "input_uri": path.as_uri(),
                                                  "catalog": {"database": "Lake!", "table": "t"}}, headers=a)  # fmt: skip
    assert bad.status_code == 422 and bad.json()["field"].startswith("catalog")
    csv = client.post("/api/v1/batch-jobs", json={"deployment": "iris", "input_uri": path.as_uri(), "catalog": catalog,
                                                  "output_format": "csv"}, headers=a)  # fmt: skip
    assert csv.status_code == 400 and csv.json()["field"] == "output_format"


def test_a_schedules_runs_carry_its_catalog_table(
    batch: Container, schedules: ScheduleService, acme: Principal
) -> None:
    from sluice.batch.eventbridge import target_input

    schedule = schedules.create(
        acme, name="hourly", deployment="iris", input_uri=inbox_template(batch), expression="rate(1 hour)",
        catalog={"database": "lake", "table": "iris_scores"},
    )  # fmt: skip
    assert target_input(schedule)["catalog"] == {"database": "lake", "table": "iris_scores"}
    (job,) = schedules.run_due(at("2026-11-25T13:00:00+00:00"))
    assert job.catalog is not None and job.catalog.table == "iris_scores" and job.output_format == "parquet"
    assert "/outbox/acme/tables/iris_scores/job=" in job.output_uri
    with pytest.raises(BadRequest) as refused:
        schedules.create(
            acme, name="csv", deployment="iris", input_uri=inbox_template(batch), expression="rate(1 hour)",
            output_format="csv", catalog={"database": "lake", "table": "t"},
        )  # fmt: skip
    assert refused.value.field == "output_format"


@pytest.mark.parametrize("overlap", ["queue", "skip"])
def test_on_aws_a_scheduled_time_runs_once_and_never_after_a_later_one(batch: Container, acme: Principal, clock: Clock, overlap: str) -> None:
    """EventBridge Scheduler delivers a time at least once, each delivery an execution of its
    own, and queued executions wake in no set order: a second delivery of a time is skipped
    naming the run it made, and a time older than a run already made (13:00 waking after
    14:00's run) is skipped too, never run after it (publishing, its older answers would
    replace the newer in the table)."""
    from sluice.batch.eventbridge import target_input
    from sluice.batch.executions import RunQueued, RunSkipped

    class Running(Recorded):
        def ended(self, job: object) -> None:  # each run's execution still going: settled by its status alone
            return None

    service = ScheduleService(batch.registry, BatchService(batch.registry, Running(), batch.batch.paths), clock=clock)
    service.create(acme, name="hourly", deployment="iris", input_uri=inbox_template(batch), expression="rate(1 hour)", overlap=overlap)
    schedule = batch.registry.get_schedule("acme", "hourly")
    arn = "arn:aws:states:eu-west-1:1:execution:m:"

    def create(hour: int, name: str) -> Any:
        spec = target_input(schedule) | {"scheduled_time": f"2026-11-25T{hour}:00:00Z"}
        return service.batch.create_for_execution(spec, execution=arn + name)

    def ran(job: Any) -> None:
        batch.registry.update_job("acme", job.id, status="RUNNING")
        batch.registry.update_job("acme", job.id, status="SUCCEEDED")

    noon = create(12, "t12")
    if overlap == "queue":
        for hour in (13, 14):  # due while noon's run goes: both wait (WaitForRun)
            with pytest.raises(RunQueued):
                create(hour, f"t{hour}")
    ran(noon)
    later = create(14, "t14")  # 14:00's execution wakes first
    ran(later)
    with pytest.raises(RunSkipped) as older:
        create(13, "t13")
    assert older.value.running == later.id and "a later time" in older.value.reason
    with pytest.raises(RunSkipped) as again:
        create(14, "t14-delivered-again")
    assert again.value.running == later.id and "this time" in again.value.reason
    assert create(14, "t14").id == later.id  # the same execution's CreateJob retried finds its run
    runs = sorted((j.scheduled_for, j.id) for j in batch.registry.list_jobs("acme", schedule="hourly"))
    assert [when for when, _ in runs] == [at("2026-11-25T12:00:00+00:00"), at("2026-11-25T14:00:00+00:00")]
    assert batch.registry.get_schedule("acme", "hourly").skipped == 1  # 13:00, not run: counted; 14:00 again is not


def test_on_aws_two_deliveries_of_a_time_asking_at_once_make_one_run(batch: Container, acme: Principal, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both deliveries of one time pass the schedule's checks before either has made its job:
    the job's id is the schedule's and the time's, so the registry makes one, and the other
    delivery is skipped naming it."""
    from sluice.batch import executions
    from sluice.batch.eventbridge import target_input
    from sluice.batch.executions import RunSkipped

    service = ScheduleService(batch.registry, BatchService(batch.registry, Recorded(), batch.batch.paths), clock=clock)
    service.create(acme, name="hourly", deployment="iris", input_uri=inbox_template(batch), expression="rate(1 hour)")
    spec = target_input(batch.registry.get_schedule("acme", "hourly")) | {"scheduled_time": "2026-11-25T14:00:00Z"}
    arn = "arn:aws:states:eu-west-1:1:execution:m:"
    real, other = executions._check_overlap, []

    def interleaved(*args: Any, **kwargs: Any) -> Any:
        checked = real(*args, **kwargs)
        if not other:  # the other delivery's CreateJob runs now, after this one's checks, before its job
            other.append("b")
            other.append(service.batch.create_for_execution(spec, execution=arn + "b"))
        return checked

    monkeypatch.setattr(executions, "_check_overlap", interleaved)
    with pytest.raises(RunSkipped) as first:  # "b" made the time's job in between: "a" finds it
        service.batch.create_for_execution(spec, execution=arn + "a")
    (made,) = batch.registry.list_jobs("acme", schedule="hourly")
    assert first.value.running == made.id == other[1].id and made.execution == arn + "b"


@pytest.mark.parametrize("woken", [(13, 14), (14, 13)])
def test_on_aws_times_due_during_a_run_fold_into_the_latest_as_locally(batch: Container, acme: Principal, clock: Clock, woken: tuple[int, int]) -> None:
    """`overlap: queue`: 13:00 and 14:00 fall due while noon's run goes. Locally one run follows,
    14:00's; on AWS each waiting time ran in turn (13:00, then 14:00 behind it), a backlog a
    schedule whose runs outlast its period never caught up."""
    from sluice.batch.eventbridge import target_input
    from sluice.batch.executions import RunQueued, RunSkipped

    class Running(Recorded):
        def ended(self, job: object) -> None:
            return None

    def finish(job: Any) -> None:
        batch.registry.update_job("acme", job.id, status="RUNNING")
        batch.registry.update_job("acme", job.id, status="SUCCEEDED")

    service = ScheduleService(batch.registry, BatchService(batch.registry, Running(), batch.batch.paths), clock=clock)
    service.create(acme, name="hourly", deployment="iris", input_uri=inbox_template(batch), expression="rate(1 hour)", overlap="queue")
    # Locally, from the clock's noon
    (first,) = service.run_due(clock() + 3600)
    assert service.run_due(clock() + 2 * 3600) == [] == service.run_due(clock() + 3 * 3600)
    finish(first)
    local = [j.scheduled_for for j in service.run_due(clock() + 3 * 3600 + 60)]
    # On AWS, each time an execution of its own
    service.create(acme, name="on-aws", deployment="iris", input_uri=inbox_template(batch), expression="rate(1 hour)", overlap="queue")
    schedule = batch.registry.get_schedule("acme", "on-aws")

    def create(hour: int) -> Any:
        spec = target_input(schedule) | {"scheduled_time": f"2026-11-25T{hour}:00:00Z"}
        return service.batch.create_for_execution(spec, execution=f"arn:aws:states:eu-west-1:1:execution:m:t{hour}")

    noon = create(12)
    for hour in (13, 14):
        with pytest.raises(RunQueued):
            create(hour)
    finish(noon)
    runs = []
    for hour in woken:  # their WaitForRun wakes, in either order
        try:
            runs.append(create(hour).scheduled_for)
        except RunSkipped as skipped:
            assert hour == 13 and ("folds into it" in skipped.reason or "a later time" in skipped.reason)
    assert runs == [at("2026-11-25T14:00:00+00:00")]
    assert local == [clock() + 3 * 3600]  # locally too: one run, the latest time due (15:00 of 14:00 and 15:00)


def test_an_operators_file_url_template_is_read_as_a_jobs_input_is(schedules: ScheduleService, acme: Principal, tmp_path: Path) -> None:
    """`FILE:///x` and RFC 8089's `file:/x` name /x, as `sluice batch submit` reads them (they were
    made paths under the working folder: `<cwd>/FILE:/x`); `./file:x` is a path."""
    for n, typed in enumerate((f"FILE://{tmp_path}/in-{{date}}.csv", f"file:{tmp_path}/in-{{date}}.csv")):
        made = schedules.create(acme, name=f"url{n}", deployment="iris", input_uri=typed, expression="rate(1 hour)", operator=True)
        assert made.input_uri == f"file://{tmp_path}/in-{{date}}.csv", made.input_uri
    with pytest.raises(BadRequest) as refused:
        schedules.create(acme, name="host", deployment="iris", input_uri="file://server/in-{date}.csv", expression="rate(1 hour)", operator=True)
    assert refused.value.field == "input_uri"
