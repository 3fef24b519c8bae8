"""The batch state machine the CDK app synthesizes, executed in moto: an S3 upload event starts
a job, Step Functions runs Plan, a distributed Map of Score over the chunk list in S3, and
Finalize, each task a sluice handler called in process, on DynamoDB and S3 in moto. The moto
accounts, the demo and the functions are the module's (`world`); each test runs its own state
machine and puts the accounts back as it found them (`cloud`).

Lambda invokes are dispatched here with Lambda's own error contract: a handler that raises
answers 200 with `FunctionError: Unhandled` and `{errorType, errorMessage}`, which is what
the state machine's Retry and Catch match on. moto waits out each Retry interval for real;
here the waits are recorded instead of slept.
"""

from __future__ import annotations

import io
import itertools
import json
import time
import zipfile
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto import mock_aws
from moto.stepfunctions.parser.utils import TMP_THREADS

from sluice.batch.eventbridge import schedule_name
from sluice.batch.files import Files
from sluice.batch.orchestrators import TRANSIENT_ERRORS, StepFunctionsOrchestrator
from sluice.batch.score import ChunkScorer
from sluice.registry.dynamodb import DynamoRegistry, create_table
from sluice.settings import Settings
from sluice.storage.s3 import S3Store
from sluice.wiring import Container, build_runtimes
from tests.conftest import EVENTS, MODELS
from tests.infra.state_machines import PSEUDO_PARAMETERS, state_machine_definition
from tests.infra.synth import function_by_handler
from tests.support import (
    LambdaContext,
    OneCallAtATime,
    fail_chunks,
    fake_aws_credentials,
    hold_chunks,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from tests.infra.synth import Synthesized

REGION = "eu-west-1"
ACCOUNT = "123456789012"
BUCKET = f"sluice-batch-{ACCOUNT}-{REGION}"
ARTIFACTS = f"sluice-artifacts-{ACCOUNT}-{REGION}"
TABLE = "sluice-registry"
TASKS = ("create_job", "plan", "score", "finalize", "mark_failed", "on_upload")


@dataclass(slots=True)
class World:
    """What the module's tests share, built once: moto's AWS with both buckets, the registry
    table holding the demo, a role, the six batch functions dispatched to the handlers in
    process (each invoke recorded), the synthesized definition, and Retry waits recorded. Each
    test gets its own state machine and container on it (`cloud`), and leaves the AWS accounts
    as the demo left them (`reset`)."""

    s3: Any
    dynamodb: Any
    sfn: Any
    glue: Any
    scheduler: Any
    role: str
    definition: str
    invocations: dict[str, list[dict[str, Any]]]
    retry_waits: list[float]
    items: list[dict[str, Any]]  # the table's items once the demo was installed
    artifacts: set[str]  # the artifact bucket's keys then

    def reset(self) -> None:
        """The AWS accounts as the demo left them: the table's items, both buckets' objects,
        no Glue databases and no schedule groups of a test's."""
        table = self.table()
        for item in table:
            if item not in self.items:
                self.dynamodb.delete_item(TableName=TABLE, Key={"pk": item["pk"], "sk": item["sk"]})
        for item in self.items:
            if item not in table:
                self.dynamodb.put_item(TableName=TABLE, Item=item)
        for bucket, kept in ((BUCKET, set()), (ARTIFACTS, self.artifacts)):
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                extra = [{"Key": o["Key"]} for o in page.get("Contents", []) if o["Key"] not in kept]
                if extra:
                    self.s3.delete_objects(Bucket=bucket, Delete={"Objects": extra})
        for database in self.glue.get_databases()["DatabaseList"]:
            self.glue.delete_database(Name=database["Name"])
        for group in self.scheduler.list_schedule_groups()["ScheduleGroups"]:
            if group["Name"] != "default":
                self.scheduler.delete_schedule_group(Name=group["Name"])

    def table(self) -> list[dict[str, Any]]:
        """Every item of the registry table."""
        pages = self.dynamodb.get_paginator("scan").paginate(TableName=TABLE)
        return [item for page in pages for item in page["Items"]]


@dataclass(slots=True)
class Cloud:
    container: Container
    s3: Any
    dynamodb: Any
    sfn: Any
    state_machine: str
    invocations: dict[str, list[dict[str, Any]]]
    retry_waits: list[float]

    def scored(self, chunk: int) -> int:
        """How many times Score was invoked for one chunk."""
        return sum(
            1 for e in self.invocations["sluice-batch-score"] if e["chunk"]["index"] == chunk
        )

    def upload(self, key: str, body: bytes, **metadata: str) -> dict[str, Any]:
        """Put an object and return the S3 event the bucket notification would send."""
        etag = self.s3.put_object(Bucket=BUCKET, Key=key, Body=body, Metadata=metadata)[
            "ETag"
        ].strip('"')
        event = json.loads((EVENTS / "s3_put_inbox.json").read_text())
        obj = event["Records"][0]["s3"]["object"]
        obj.update(key=key, size=len(body), eTag=etag)
        return event

    def start(self, key: str, body: bytes) -> dict[str, Any]:
        """Put an object and hand its event to on_upload: the one job it started."""
        from sluice.handlers import batch as handlers

        (job,) = handlers.on_upload(self.upload(key, body), LambdaContext())["jobs"]
        return job

    def finish(self, job_id: str, timeout_s: float = 60) -> dict[str, Any]:
        """The execution named `job_id` (the job's, or any other name), once it has ended."""
        arn = self.state_machine.replace(":stateMachine:", ":execution:") + f":{job_id}"
        deadline = time.monotonic() + timeout_s
        while True:
            execution = self.sfn.describe_execution(executionArn=arn)
            if execution["status"] != "RUNNING" or time.monotonic() > deadline:
                return execution
            time.sleep(0.1)

    def read(self, key: str) -> bytes:
        return self.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def _dispatch(
    monkeypatch: pytest.MonkeyPatch,
    routes: dict[str, Callable[[dict[str, Any], Any], Any]],
    invocations: dict[str, list[dict[str, Any]]],
) -> None:
    from moto.awslambda_simple.models import LambdaSimpleBackend

    def invoke(
        self: Any,
        function_name: str,
        qualifier: Any,
        body: Any,
        headers: Any,
        response_headers: Any,
    ) -> bytes:
        name = function_name.split(":")[-1]
        event = json.loads(body or "{}")
        invocations[name].append(event)
        try:
            result = routes[name](event, LambdaContext(function_name=name))
        except Exception as exc:  # what the Lambda runtime does with an unhandled error
            response_headers["x-amz-function-error"] = "Unhandled"
            return json.dumps({"errorType": type(exc).__name__, "errorMessage": str(exc)}).encode()
        return json.dumps(result).encode()

    monkeypatch.setattr(LambdaSimpleBackend, "invoke", invoke)


def _validate_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto checks a new state machine's definition by parsing it with its ASL grammar (~70 ms of
    ANTLR) and keeps nothing of the parse; each test creates one of the same definition, so a
    definition found valid is not parsed again to be found valid. A definition not seen yet, or
    one found invalid, is checked (and refused) as moto does; executions parse their own."""
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    validate = StepFunctionsParserBackend._validate_definition
    valid: set[str] = set()

    def validate_once(definition: str) -> None:
        if definition not in valid:
            validate(definition=definition)
            valid.add(definition)

    monkeypatch.setattr(StepFunctionsParserBackend, "_validate_definition", staticmethod(validate_once))


def _container(home: Path, state_machine: str, s3: Any, dynamodb: Any, sfn: Any) -> Container:
    """A container on moto's AWS whose orchestrator starts `state_machine`."""
    settings = Settings(
        mode="aws", home=home, registry=f"dynamodb://{TABLE}", store=f"s3://{ARTIFACTS}/artifacts",
        orchestrator=f"stepfunctions://{state_machine}", batch_bucket=BUCKET, region=REGION,
        batch_chunk_bytes=64 * 1024, batch_chunk_rows=700, deployment_cache_ttl_s=0,
    )  # fmt: skip
    store = S3Store(ARTIFACTS, "artifacts", client=s3)
    registry = DynamoRegistry(TABLE, client=OneCallAtATime(dynamodb))  # type: ignore[arg-type]
    return Container(
        settings, registry, store, build_runtimes(settings, store),
        orchestrator=StepFunctionsOrchestrator(state_machine, client=sfn), files=Files(s3_client=s3),
    )  # fmt: skip


@pytest.fixture(scope="module")
def world(default_app: Synthesized, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

    from sluice.demo import install_demo
    from sluice.domain import Principal
    from sluice.handlers import batch as handlers

    definition = state_machine_definition(
        default_app.json("batch"), pseudo=PSEUDO_PARAMETERS | {"AWS::Region": REGION, "AWS::AccountId": ACCOUNT}
    )
    with pytest.MonkeyPatch.context() as monkeypatch, mock_aws(
        config={"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}
    ):
        fake_aws_credentials(monkeypatch, REGION)
        s3 = boto3.client("s3", region_name=REGION)
        for bucket in (BUCKET, ARTIFACTS):
            s3.create_bucket(
                Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION}
            )
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        create_table(dynamodb, TABLE)
        iam = boto3.client("iam", region_name=REGION)
        role = iam.create_role(RoleName="sluice-test", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        sfn = boto3.client("stepfunctions", region_name=REGION)
        home = tmp_path_factory.mktemp("demo")
        install_demo(
            _container(home, f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:unused", s3, dynamodb, sfn),
            Principal("acme", frozenset({"admin", "predict"}), "test"), MODELS,
        )  # fmt: skip

        code = io.BytesIO()
        with zipfile.ZipFile(code, "w") as z:
            z.writestr("index.py", "def handler(event, context):\n    return event\n")
        lambdas = boto3.client("lambda", region_name=REGION)
        routes: dict[str, Callable[[dict[str, Any], Any], Any]] = {}
        invocations: dict[str, list[dict[str, Any]]] = {}
        for task in TASKS:
            _, props = function_by_handler(
                default_app.template("batch"), f"sluice.handlers.batch.{task}"
            )
            lambdas.create_function(FunctionName=props["FunctionName"], Runtime="python3.12", Role=role,
                                    Handler="index.handler", Code={"ZipFile": code.getvalue()})  # fmt: skip
            routes[props["FunctionName"]] = getattr(handlers, task)
            invocations[props["FunctionName"]] = []
        _dispatch(monkeypatch, routes, invocations)
        _validate_once(monkeypatch)
        retry_waits: list[float] = []
        monkeypatch.setattr(retrier_decl, "time", SimpleNamespace(sleep=retry_waits.append))
        world = World(
            s3, dynamodb, sfn, boto3.client("glue", region_name=REGION), boto3.client("scheduler", region_name=REGION),
            role, json.dumps(definition), invocations, retry_waits, items=[], artifacts=set(),
        )  # fmt: skip
        world.items = world.table()
        world.artifacts = {o["Key"] for o in s3.list_objects_v2(Bucket=ARTIFACTS)["Contents"]}
        yield world


_machines = itertools.count(1)


@pytest.fixture
def cloud(world: World, tmp_path: Path) -> Iterator[Cloud]:
    """A state machine of the synthesized definition, of this test's own (so executions' names
    and lists are the test's), and a container on it that the handlers use."""
    from sluice.handlers import batch as handlers

    machine = world.sfn.create_state_machine(
        name=f"sluice-batch-{next(_machines)}", definition=world.definition, roleArn=world.role
    )["stateMachineArn"]
    container = _container(tmp_path / "home", machine, world.s3, world.dynamodb, world.sfn)
    for calls in world.invocations.values():
        calls.clear()
    world.retry_waits.clear()
    threads = len(TMP_THREADS)  # where Step Functions in moto lists the threads it starts
    saved = handlers._container
    handlers._container = container
    try:
        yield Cloud(container, world.s3, world.dynamodb, world.sfn, machine, world.invocations, world.retry_waits)
    finally:
        # The test's executions have ended before the next test's begin (a stopped one
        # finishes the state it was in), on the accounts as the demo left them.
        for thread in TMP_THREADS[threads:]:
            thread.join(timeout=30)
        handlers._container = saved
        world.sfn.delete_state_machine(stateMachineArn=machine)
        world.reset()
    assert not any(t.is_alive() for t in TMP_THREADS[threads:]), "an execution of the test still runs"


def _csv(rows: int, *, bad_every: int = 0) -> bytes:
    lines = ["id,sepal_length,sepal_width,petal_length,petal_width"]
    for i in range(rows):
        width = "x" if bad_every and i % bad_every == 0 else f"{2.0 + (i % 20) / 10:.1f}"
        lines.append(
            f"r{i:05d},{4.5 + (i % 30) / 10:.1f},{width},{1.0 + (i % 50) / 10:.1f},{0.1 + (i % 24) / 10:.1f}"
        )
    return ("\n".join(lines) + "\n").encode()


def test_an_upload_runs_the_synthesized_state_machine_to_the_manifest(cloud: Cloud) -> None:
    from sluice.handlers import batch as handlers

    event = cloud.upload(
        "inbox/acme/iris/2026-11-21/flowers.csv",
        _csv(6000, bad_every=1000),
        **{"sluice-key-columns": "id"},
    )
    started = handlers.on_upload(event, LambdaContext(function_name="sluice-batch-on-upload"))
    (job,) = started["jobs"]
    assert job["status"] == "PENDING" and job["tenant"] == "acme" and job["deployment"] == "iris"
    # S3 delivers events at least once: the same event again starts nothing new.
    assert (
        handlers.on_upload(event, LambdaContext(function_name="sluice-batch-on-upload")) == started
    )
    records = cloud.dynamodb.query(
        TableName=TABLE, KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": handlers.IDEMPOTENCY_KEY}},
    )["Items"]  # fmt: skip
    assert (
        len(records) == 1
        and records[0]["status"]["S"] == "COMPLETED"
        and "expires_at" in records[0]
    )

    execution = cloud.finish(job["job_id"])
    assert execution["status"] == "SUCCEEDED", execution
    assert len(cloud.sfn.list_executions(stateMachineArn=cloud.state_machine)["executions"]) == 1
    record = cloud.container.registry.get_job("acme", job["job_id"])
    assert record.status == "SUCCEEDED" and record.execution == execution["executionArn"]
    assert (record.rows_in, record.rows_out, record.rows_failed) == (6000, 5994, 6)
    assert record.chunks_total == record.chunks_done and record.chunks_total >= 3
    out = f"outbox/acme/{job['job_id']}/"
    manifest = json.loads(cloud.read(out + "_manifest.json"))
    assert manifest["status"] == "SUCCEEDED" and manifest["counts"]["rows_in"] == 6000
    assert len(manifest["parts"]) == record.chunks_total and cloud.read(out + "_SUCCESS") == b""
    errors = [
        json.loads(line)
        for e in manifest["errors"]
        for line in cloud.read(e["uri"].split(f"{BUCKET}/")[1]).splitlines()
    ]
    assert sorted(e["row"] for e in errors) == [0, 1000, 2000, 3000, 4000, 5000]
    part = cloud.read(manifest["parts"][0]["uri"].split(f"{BUCKET}/")[1]).decode().splitlines()
    assert part[0].startswith('"id","prediction","probability_setosa"') and part[1].startswith(
        '"r00001",'
    )
    scored = cloud.invocations["sluice-batch-score"]
    assert len(scored) == record.chunks_total and all(set(e) == {"job", "chunk"} for e in scored)
    assert not cloud.invocations["sluice-batch-mark-failed"]


def test_a_chunk_that_fails_marks_the_job_failed_saying_which(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sluice.domain.errors import Unavailable
    from sluice.handlers import batch as handlers

    fail_chunks(monkeypatch, Unavailable, "the endpoint is overloaded", chunks={1})
    event = cloud.upload("inbox/acme/iris/broken.csv", _csv(6000))
    (job,) = handlers.on_upload(event, LambdaContext())["jobs"]
    execution = cloud.finish(job["job_id"])
    assert execution["status"] == "FAILED"
    # Unavailable is transient: the state machine tried the chunk again, with backoff, first.
    assert cloud.scored(1) == 4 and len(cloud.retry_waits) == 3
    record = cloud.container.registry.get_job("acme", job["job_id"])
    assert record.status == "FAILED" and "chunks not scored: 1" in (record.error or ""), (
        record.error
    )
    manifest = json.loads(cloud.read(f"outbox/acme/{job['job_id']}/_manifest.json"))
    assert manifest["status"] == "FAILED" and 1 not in [p["chunk"] for p in manifest["parts"]]
    assert len(cloud.invocations["sluice-batch-mark-failed"]) == 1


@pytest.mark.parametrize("error", TRANSIENT_ERRORS)
def test_a_transient_error_in_score_is_retried_and_the_job_succeeds(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch, error: str
) -> None:

    raised = _error_named(error)
    real = ChunkScorer.score
    failed: set[int] = set()

    def flaky(self: ChunkScorer, spec: Any, chunk: Any, **kw: Any) -> Any:
        if chunk.index == 0 and chunk.index not in failed:
            failed.add(chunk.index)
            raise raised
        return real(self, spec, chunk, **kw)

    monkeypatch.setattr(ChunkScorer, "score", flaky)
    job = cloud.start("inbox/acme/iris/flaky.csv", _csv(2000))
    execution = cloud.finish(job["job_id"])
    assert execution["status"] == "SUCCEEDED", execution
    assert cloud.scored(0) == 2 and len(cloud.retry_waits) == 1
    assert cloud.container.registry.get_job("acme", job["job_id"]).rows_in == 2000


def test_an_error_that_is_not_transient_fails_the_chunk_at_once(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sluice.domain.errors import Forbidden

    fail_chunks(monkeypatch, Forbidden, "access denied to the input")
    _fails_at_once_without_retries(cloud, "inbox/acme/iris/denied.csv")


def test_a_malformed_chunk_fails_at_once_without_retries(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes that do not parse into the records Plan counted parse the same way next time."""
    from sluice.batch.pieces import ChunkMalformed

    fail_chunks(monkeypatch, ChunkMalformed, "chunk 0: the CSV parser read 3 records where 2 were counted")
    _fails_at_once_without_retries(cloud, "inbox/acme/iris/quotes.csv")


def _fails_at_once_without_retries(cloud: Cloud, key: str) -> None:
    job = cloud.start(key, _csv(100))
    assert cloud.finish(job["job_id"])["status"] == "FAILED"
    assert cloud.scored(0) == 1 and cloud.retry_waits == []


def _error_named(name: str) -> Exception:
    """An instance of the sluice exception class a TRANSIENT_ERRORS name stands for."""
    from sluice.batch import readers
    from sluice.domain import errors

    cls = getattr(errors, name, None) or getattr(readers, name)
    return cls(f"{name} in the test")


def test_an_upload_outside_a_deployment_of_its_tenant_starts_nothing_that_runs(
    cloud: Cloud,
) -> None:
    from sluice.handlers import batch as handlers

    # globex has no deployment 'iris': the key names the tenant, so acme's cannot be reached.
    job = cloud.start("inbox/globex/iris/steal.csv", _csv(10))
    assert job["status"] == "FAILED" and job["tenant"] == "globex"
    assert (
        cloud.container.registry.get_job("globex", job["job_id"]).error
        == "deployment 'iris' not found"
    )
    assert handlers.on_upload(cloud.upload("inbox/acme/loose.csv", _csv(10)), LambdaContext()) == {
        "jobs": []
    }
    assert cloud.sfn.list_executions(stateMachineArn=cloud.state_machine)["executions"] == []


def test_a_job_cancelled_while_its_chunks_run_stays_cancelled(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sluice.domain import Principal

    planned, gate = hold_chunks(monkeypatch)
    cloud.s3.put_object(Bucket=BUCKET, Key="inbox/acme/iris/c.csv", Body=_csv(3000))
    acme = Principal("acme", frozenset({"predict"}), "test")
    job = cloud.container.batch.submit(
        acme, deployment="iris", input_uri=f"s3://{BUCKET}/inbox/acme/iris/c.csv"
    )
    assert job.execution is not None and job.output_uri == f"s3://{BUCKET}/outbox/acme/{job.id}/"
    assert planned.wait(30)
    cancelled = cloud.container.batch.cancel(acme, job.id)  # the record, then StopExecution
    gate.set()
    assert cancelled.status == "CANCELLED"
    assert cloud.finish(job.id)["status"] != "RUNNING"
    record = cloud.container.registry.get_job("acme", job.id)
    assert record.status == "CANCELLED" and record.chunks_done == 0 and record.rows_in == 0
    assert "Contents" not in cloud.s3.list_objects_v2(
        Bucket=BUCKET, Prefix=f"outbox/acme/{job.id}/_SUCCESS"
    )


def test_finalize_fails_a_job_whose_part_was_removed_after_score(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sluice.batch.runner import BatchRunner
    from sluice.handlers import batch as handlers

    real = BatchRunner.finalize

    def after_a_part_is_removed(self: BatchRunner, tenant: str, job_id: str) -> Any:
        cloud.s3.delete_object(Bucket=BUCKET, Key=f"outbox/{tenant}/{job_id}/part-00001.csv")
        return real(self, tenant, job_id)

    monkeypatch.setattr(BatchRunner, "finalize", after_a_part_is_removed)
    event = cloud.upload("inbox/acme/iris/parts.csv", _csv(6000))
    (job,) = handlers.on_upload(event, LambdaContext())["jobs"]
    execution = cloud.finish(job["job_id"])
    assert execution["status"] == "FAILED", execution
    record = cloud.container.registry.get_job("acme", job["job_id"])
    assert record.status == "FAILED" and record.chunks_done == record.chunks_total
    assert "part-00001.csv (chunk 1, " in (record.error or "") and "is missing" in (record.error or ""), record.error
    out = f"outbox/acme/{job['job_id']}/"
    assert "Contents" not in cloud.s3.list_objects_v2(Bucket=BUCKET, Prefix=out + "_SUCCESS")
    assert json.loads(cloud.read(out + "_manifest.json"))["status"] == "FAILED"
    assert len(cloud.invocations["sluice-batch-mark-failed"]) == 1


def test_a_job_whose_execution_ended_without_markfailed_reads_as_failed(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An execution stopped (or timed out) skips MarkFailed: the job's record stays RUNNING
    until a read asks Step Functions about its execution."""
    from sluice.domain import Principal

    planned, gate = hold_chunks(monkeypatch)
    cloud.s3.put_object(Bucket=BUCKET, Key="inbox/acme/iris/s.csv", Body=_csv(3000))
    acme = Principal("acme", frozenset({"predict"}), "test")
    job = cloud.container.batch.submit(acme, deployment="iris", input_uri=f"s3://{BUCKET}/inbox/acme/iris/s.csv")
    assert planned.wait(30)
    cloud.sfn.stop_execution(executionArn=job.execution, error="Operator", cause="stopped by hand")
    gate.set()
    assert cloud.finish(job.id)["status"] == "ABORTED"
    assert cloud.container.registry.get_job("acme", job.id).status == "RUNNING"  # MarkFailed never ran
    seen = cloud.container.batch.get(acme, job.id)
    assert seen.status == "FAILED" and "execution ended (ABORTED)" in (seen.error or ""), seen.error
    assert cloud.container.registry.get_job("acme", job.id).status == "FAILED"
    assert not cloud.invocations["sluice-batch-mark-failed"]


def test_the_end_of_an_execution_stopped_from_outside_marks_its_job_failed_with_no_read(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same stop, and the event EventBridge then delivers (the sample's envelope, the
    execution as Step Functions describes it): the job is FAILED, its manifest says why, and no
    read had to ask."""
    from sluice.domain import Principal
    from sluice.handlers import batch as handlers

    planned, gate = hold_chunks(monkeypatch)
    cloud.s3.put_object(Bucket=BUCKET, Key="inbox/acme/iris/s.csv", Body=_csv(3000))
    job = cloud.container.batch.submit(
        Principal("acme", frozenset({"predict"}), "test"), deployment="iris", input_uri=f"s3://{BUCKET}/inbox/acme/iris/s.csv"
    )
    assert planned.wait(30)
    cloud.sfn.stop_execution(executionArn=job.execution, error="Operator", cause="stopped by hand")
    gate.set()
    execution = cloud.finish(job.id)
    assert execution["status"] == "ABORTED"
    event = json.loads((EVENTS / "batch_execution_aborted.json").read_text())
    event["resources"] = [execution["executionArn"]]
    fields = ("executionArn", "stateMachineArn", "name", "status", "input", "error", "cause")
    event["detail"].update({name: execution.get(name) for name in fields})
    assert handlers.execution_ended(event, LambdaContext())["status"] == "FAILED"
    record = cloud.container.registry.get_job("acme", job.id)
    assert record.status == "FAILED" and "execution ended (ABORTED" in (record.error or ""), record.error
    out = f"outbox/acme/{job.id}/"
    assert json.loads(cloud.read(out + "_manifest.json"))["status"] == "FAILED"
    assert "Contents" not in cloud.s3.list_objects_v2(Bucket=BUCKET, Prefix=out + "_SUCCESS")


def _spec(**fields: Any) -> dict[str, Any]:
    return {"tenant": "acme", "deployment": "iris", "input_uri": f"s3://{BUCKET}/inbox/acme/iris/spec.csv"} | fields


def test_an_execution_started_with_a_job_specification_creates_its_job_and_runs_to_the_manifest(
    cloud: Cloud,
) -> None:
    from sluice.handlers import batch as handlers

    cloud.s3.put_object(Bucket=BUCKET, Key="inbox/acme/iris/spec.csv", Body=_csv(2000, bad_every=500))
    spec = _spec(key_columns=["id"], output_format="jsonl")
    started = cloud.sfn.start_execution(
        stateMachineArn=cloud.state_machine, name="nightly-2026-11-26", input=json.dumps(spec)
    )
    execution = cloud.finish("nightly-2026-11-26")
    assert execution["status"] == "SUCCEEDED", execution
    summary = json.loads(execution["output"])  # the job's summary, nothing else
    job_id = summary["job_id"]
    assert summary == {
        "job_id": job_id, "status": "SUCCEEDED", "rows_in": 2000, "rows_out": 1996, "rows_failed": 4,
        "output_uri": f"s3://{BUCKET}/outbox/acme/{job_id}/", "error": None,
        "manifest_uri": f"s3://{BUCKET}/outbox/acme/{job_id}/_manifest.json",
    }  # fmt: skip
    record = cloud.container.registry.get_job("acme", job_id)
    assert record.source == "execution" and record.execution == started["executionArn"]
    assert record.key_columns == ("id",) and record.output_format == "jsonl"
    manifest = json.loads(cloud.read(f"outbox/acme/{job_id}/_manifest.json"))
    assert manifest["status"] == "SUCCEEDED" and manifest["counts"]["rows_in"] == 2000
    assert len(cloud.invocations["sluice-batch-create-job"]) == 1

    # CreateJob tried again for the same execution (a retry after a timeout) finds the job.
    again = handlers.create_job(
        {"spec": spec, "execution": started["executionArn"]}, LambdaContext()
    )
    assert again == {"job_id": job_id, "tenant": "acme"}
    assert [j.id for j in cloud.container.registry.list_jobs("acme")] == [job_id]
    # Step Functions refuses a second execution of the same name: never a second job.
    with pytest.raises(cloud.sfn.exceptions.ExecutionAlreadyExists):
        cloud.sfn.start_execution(
            stateMachineArn=cloud.state_machine, name="nightly-2026-11-26",
            input=json.dumps(spec | {"key_columns": ["other"]}),
        )  # fmt: skip
    assert len(cloud.container.registry.list_jobs("acme")) == 1


def test_the_job_id_input_still_starts_an_existing_job_and_outputs_its_summary(cloud: Cloud) -> None:
    from sluice.domain import Principal

    cloud.s3.put_object(Bucket=BUCKET, Key="inbox/acme/iris/spec.csv", Body=_csv(300))
    acme = Principal("acme", frozenset({"predict"}), "test")
    job = cloud.container.batch.submit(acme, deployment="iris", input_uri=_spec()["input_uri"])
    execution = cloud.finish(job.id)
    assert execution["status"] == "SUCCEEDED"
    assert json.loads(execution["output"])["rows_in"] == 300
    assert cloud.invocations["sluice-batch-create-job"] == []


@pytest.mark.parametrize(
    ("spec", "error", "cause"),
    [
        (_spec(tenant="globex"), "NotFound", "deployment 'iris' not found"),
        (_spec(input_uri=f"s3://{BUCKET}/inbox/globex/iris/theirs.csv"), "Forbidden", "batch inputs must lie in your inbox"),
        (_spec(input_uri=f"s3://{BUCKET}/inbox/acme/iris/../../globex/x.csv"), "BadRequest", "input_uri is not an S3 key sluice reads"),
        (_spec(input_uri="s3://someone-elses-bucket/data.csv"), "Forbidden", "batch inputs must lie in your inbox"),
        (_spec(tenant="Not A Tenant"), "BadRequest", "tenant must be"),
        (_spec(output_format="xlsx"), "BadRequest", "output_format must be one of"),
        (_spec(output_uri="s3://elsewhere/"), "BadRequest", "unknown field 'output_uri'"),
        ({"tenant": "acme", "input_uri": "s3://x/y.csv"}, "BadRequest", "deployment is required"),
    ],
    ids=["another-tenant", "another-inbox", "dot-dot", "another-bucket", "bad-tenant", "bad-format", "output-uri", "no-deployment"],
)
def test_a_job_specification_that_is_refused_fails_the_execution_saying_why(
    cloud: Cloud, spec: dict[str, Any], error: str, cause: str
) -> None:
    cloud.sfn.start_execution(stateMachineArn=cloud.state_machine, name="refused", input=json.dumps(spec))
    execution = cloud.finish("refused")
    assert execution["status"] == "FAILED"
    assert execution["error"] == error
    assert cause in json.loads(execution["cause"])["errorMessage"]
    assert cloud.invocations["sluice-batch-plan"] == [] and cloud.invocations["sluice-batch-mark-failed"] == []
    assert cloud.container.registry.list_jobs(spec.get("tenant", "acme") if spec.get("tenant") != "Not A Tenant" else "acme") == []


def _fired(target_input: str, scheduled_time: str) -> str:
    """What EventBridge Scheduler sends: the target input with its context attribute filled in."""
    return target_input.replace("<aws.scheduler.scheduled-time>", scheduled_time)


def test_a_schedule_is_an_eventbridge_schedule_whose_runs_are_jobs_of_the_state_machine(
    cloud: Cloud,
) -> None:
    from sluice.batch.eventbridge import EventBridgeSchedules
    from sluice.batch.schedules import ScheduleService
    from sluice.domain import Principal

    scheduler = boto3.client("scheduler", region_name=REGION)
    scheduler.create_schedule_group(Name="sluice-batch")
    role = f"arn:aws:iam::{ACCOUNT}:role/sluice-batch-scheduler"
    timer = EventBridgeSchedules(
        group="sluice-batch", role_arn=role, state_machine_arn=cloud.state_machine, client=scheduler
    )
    schedules = ScheduleService(cloud.container.registry, cloud.container.batch, timer)
    acme = Principal("acme", frozenset({"predict"}), "test")
    template = f"s3://{BUCKET}/inbox/acme/iris/dt={{date}}/events.csv"
    schedules.create(
        acme, name="nightly", deployment="iris", input_uri=template, expression="cron(0 2 * * 1-5)",
        timezone="Europe/Paris", key_columns=["id"],
    )  # fmt: skip
    made = scheduler.get_schedule(Name=schedule_name("acme", "nightly"), GroupName="sluice-batch")
    assert made["ScheduleExpression"] == "cron(0 2 ? * 2-6 *)"
    assert made["ScheduleExpressionTimezone"] == "Europe/Paris" and made["State"] == "ENABLED"
    assert made["Target"]["Arn"] == cloud.state_machine and made["Target"]["RoleArn"] == role
    spec = json.loads(made["Target"]["Input"])
    assert spec["scheduled_time"] == "<aws.scheduler.scheduled-time>" and spec["schedule"] == "nightly"
    schedules.pause(acme, "nightly")
    assert scheduler.get_schedule(Name=schedule_name("acme", "nightly"), GroupName="sluice-batch")["State"] == "DISABLED"
    schedules.resume(acme, "nightly")

    # A run: Scheduler starts an execution with the target input, the time filled in.
    cloud.s3.put_object(Bucket=BUCKET, Key="inbox/acme/iris/dt=2026-11-26/events.csv", Body=_csv(900))
    cloud.sfn.start_execution(
        stateMachineArn=cloud.state_machine, name="run-1",
        input=_fired(made["Target"]["Input"], "2026-11-26T01:00:00Z"),
    )  # fmt: skip
    execution = cloud.finish("run-1")
    assert execution["status"] == "SUCCEEDED", execution
    summary = json.loads(execution["output"])
    job = cloud.container.registry.get_job("acme", summary["job_id"])
    assert job.schedule == "nightly" and job.source == "schedule" and job.rows_in == 900
    assert job.input_uri == f"s3://{BUCKET}/inbox/acme/iris/dt=2026-11-26/events.csv"
    assert [r.id for r in schedules.show(acme, "nightly").runs] == [job.id]

    schedules.delete(acme, "nightly")
    with pytest.raises(scheduler.exceptions.ResourceNotFoundException):
        scheduler.get_schedule(Name=schedule_name("acme", "nightly"), GroupName="sluice-batch")
    assert cloud.container.registry.list_schedules("acme") == []


def test_a_scheduled_run_due_while_the_last_is_going_is_skipped_by_the_state_machine(
    cloud: Cloud,
) -> None:
    from sluice.domain import Principal
    from sluice.domain.schedules import Schedule

    template = f"s3://{BUCKET}/inbox/acme/iris/dt={{date}}/events.csv"
    cloud.container.registry.create_schedule(
        Schedule("acme", "hourly", "iris", template, "rate(1 hour)")
    )
    cloud.s3.put_object(Bucket=BUCKET, Key="inbox/acme/iris/dt=2026-11-26/events.csv", Body=_csv(50))
    acme = Principal("acme", frozenset({"predict"}), "test")
    going = cloud.container.batch.submit(
        acme, deployment="iris", input_uri=template.format(date="2026-11-26"), start=False, schedule="hourly"
    )
    spec = {"tenant": "acme", "deployment": "iris", "input_uri": template, "schedule": "hourly",
            "scheduled_time": "2026-11-26T02:00:00Z"}  # fmt: skip
    cloud.sfn.start_execution(stateMachineArn=cloud.state_machine, name="run-2", input=json.dumps(spec))
    execution = cloud.finish("run-2")
    assert execution["status"] == "SUCCEEDED", execution
    assert json.loads(execution["output"]) == {
        "status": "SKIPPED", "schedule": "hourly", "reason": f"run {going.id} is still PENDING", "running": going.id,
    }  # fmt: skip
    assert cloud.container.registry.get_schedule("acme", "hourly").skipped == 1
    assert [j.id for j in cloud.container.registry.list_jobs("acme")] == [going.id]
    assert cloud.invocations["sluice-batch-plan"] == []

    # Once it has ended, the next run goes ahead; a paused schedule's run is skipped.
    cloud.container.registry.update_job("acme", going.id, status="CANCELLED")
    cloud.sfn.start_execution(stateMachineArn=cloud.state_machine, name="run-3", input=json.dumps(spec))
    assert cloud.finish("run-3")["status"] == "SUCCEEDED"
    assert len(cloud.invocations["sluice-batch-plan"]) == 1
    cloud.container.registry.update_schedule("acme", "hourly", state="PAUSED")
    later = {**spec, "scheduled_time": "2026-11-26T03:00:00Z"}
    cloud.sfn.start_execution(stateMachineArn=cloud.state_machine, name="run-4", input=json.dumps(later))
    assert json.loads(cloud.finish("run-4")["output"])["reason"] == "the schedule is paused"


def test_a_scheduled_run_whose_execution_was_stopped_does_not_hold_back_the_next(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sluice.domain.schedules import Schedule

    planned, gate = hold_chunks(monkeypatch)
    template = f"s3://{BUCKET}/inbox/acme/iris/dt={{date}}/events.csv"
    cloud.container.registry.create_schedule(Schedule("acme", "daily", "iris", template, "rate(1 day)"))
    for day in ("2026-11-26", "2026-11-27"):
        cloud.s3.put_object(Bucket=BUCKET, Key=f"inbox/acme/iris/dt={day}/events.csv", Body=_csv(50))
    spec = {"tenant": "acme", "deployment": "iris", "input_uri": template, "schedule": "daily"}
    first = cloud.sfn.start_execution(
        stateMachineArn=cloud.state_machine, name="day-1", input=json.dumps(spec | {"scheduled_time": "2026-11-26T02:00:00Z"})
    )["executionArn"]
    assert planned.wait(30)
    cloud.sfn.stop_execution(executionArn=first, error="Operator", cause="stopped by hand")  # MarkFailed never runs
    gate.set()
    assert cloud.finish("day-1")["status"] == "ABORTED"
    (going,) = cloud.container.registry.list_jobs("acme")
    assert going.status == "RUNNING"

    cloud.sfn.start_execution(
        stateMachineArn=cloud.state_machine, name="day-2", input=json.dumps(spec | {"scheduled_time": "2026-11-27T02:00:00Z"})
    )
    execution = cloud.finish("day-2")
    assert execution["status"] == "SUCCEEDED" and json.loads(execution["output"])["status"] == "SUCCEEDED", execution
    assert cloud.container.registry.get_schedule("acme", "daily").skipped == 0
    assert cloud.container.registry.get_job("acme", going.id).status == "FAILED"


def test_a_job_with_a_catalog_table_becomes_a_partition_athena_can_query(cloud: Cloud) -> None:
    glue = boto3.client("glue", region_name=REGION)
    glue.create_database(DatabaseInput={"Name": "sluice_batch"})
    cloud.s3.put_object(Bucket=BUCKET, Key="inbox/acme/iris/spec.csv", Body=_csv(1500, bad_every=500))
    spec = _spec(key_columns=["id"], catalog={"database": "sluice_batch", "table": "iris_scores"})
    summaries = []
    for name in ("day-1", "day-2"):  # one after the other: moto's Glue makes a table without a lock (two
        # first publishes at once can both pass its existence check, the second table losing the first's partition)
        cloud.sfn.start_execution(stateMachineArn=cloud.state_machine, name=name, input=json.dumps(spec))
        summaries.append(json.loads(cloud.finish(name)["output"]))
    table_root = f"s3://{BUCKET}/outbox/acme/tables/iris_scores/"
    for summary in summaries:
        assert summary["status"] == "SUCCEEDED", summary
        assert summary["output_uri"] == f"{table_root}job={summary['job_id']}/"  # Hive-style
        assert summary["catalog"] == {
            "database": "sluice_batch", "table": "acme__iris_scores", "partition": f"job={summary['job_id']}",
        }  # fmt: skip
    table = glue.get_table(DatabaseName="sluice_batch", Name="acme__iris_scores")["Table"]
    assert table["StorageDescriptor"]["Location"] == table_root
    assert table["PartitionKeys"] == [{"Name": "job", "Type": "string"}]
    columns = {c["Name"]: c["Type"] for c in table["StorageDescriptor"]["Columns"]}
    assert columns["id"] == "string" and columns["prediction"] == "string"
    assert columns["probability_setosa"] in ("float", "double")
    assert "ParquetHiveSerDe" in table["StorageDescriptor"]["SerdeInfo"]["SerializationLibrary"]
    partitions = glue.get_partitions(DatabaseName="sluice_batch", TableName="acme__iris_scores")["Partitions"]
    assert sorted(p["Values"][0] for p in partitions) == sorted(s["job_id"] for s in summaries)
    assert {p["StorageDescriptor"]["Location"] for p in partitions} == {s["output_uri"] for s in summaries}
    record = cloud.container.registry.get_job("acme", summaries[0]["job_id"])
    assert record.output_format == "parquet" and record.catalog is not None  # a catalog table is Parquet


def test_a_first_job_of_no_rows_leaves_the_table_its_columns_to_come(cloud: Cloud) -> None:
    """A header-only file succeeds with no rows and no part to read columns from: the table it
    makes has none, and the first job with rows gives it its columns (every query reads them)."""
    glue = boto3.client("glue", region_name=REGION)
    glue.create_database(DatabaseInput={"Name": "sluice_batch"})
    for name, rows in (("empty", 0), ("day", 20)):
        cloud.s3.put_object(Bucket=BUCKET, Key=f"inbox/acme/iris/{name}.csv", Body=_csv(rows))
        spec = {**_spec(key_columns=["id"], catalog={"database": "sluice_batch", "table": "late"}), "input_uri": f"s3://{BUCKET}/inbox/acme/iris/{name}.csv"}
        cloud.sfn.start_execution(stateMachineArn=cloud.state_machine, name=name, input=json.dumps(spec))
        assert json.loads(cloud.finish(name)["output"])["status"] == "SUCCEEDED"
    columns = {c["Name"] for c in glue.get_table(DatabaseName="sluice_batch", Name="acme__late")["Table"]["StorageDescriptor"]["Columns"]}
    assert {"id", "prediction"} <= columns


def test_a_failed_job_never_adds_a_partition(cloud: Cloud, monkeypatch: pytest.MonkeyPatch) -> None:
    from sluice.domain.errors import Forbidden

    fail_chunks(monkeypatch, Forbidden, "access denied to the input")
    glue = boto3.client("glue", region_name=REGION)
    glue.create_database(DatabaseInput={"Name": "sluice_batch"})
    cloud.s3.put_object(Bucket=BUCKET, Key="inbox/acme/iris/spec.csv", Body=_csv(100))
    spec = _spec(catalog={"database": "sluice_batch", "table": "iris_scores"})
    cloud.sfn.start_execution(stateMachineArn=cloud.state_machine, name="doomed", input=json.dumps(spec))
    assert cloud.finish("doomed")["status"] == "FAILED"
    assert glue.get_tables(DatabaseName="sluice_batch")["TableList"] == []


def test_a_catalog_outside_the_allowed_database_or_not_parquet_is_refused(cloud: Cloud) -> None:
    from sluice.batch.catalog import GlueCatalog
    from sluice.domain.errors import Forbidden

    bad = [
        (_spec(catalog={"database": "Bad-Name", "table": "t"}), "catalog.database"),
        (_spec(catalog={"database": "db"}), "catalog must be an object with database and table"),
        (_spec(catalog={"database": "db", "table": "t"}, output_format="csv"), "writes parquet"),
    ]
    for i, (spec, message) in enumerate(bad):
        cloud.sfn.start_execution(stateMachineArn=cloud.state_machine, name=f"bad-{i}", input=json.dumps(spec))
        execution = cloud.finish(f"bad-{i}")
        assert execution["status"] == "FAILED" and message in execution["cause"], execution
    # Where the stack names one database, Finalize publishes there and nowhere else.
    job = cloud.container.batch.submit(
        _acme(), deployment="iris", input_uri=_spec()["input_uri"], start=False,
        catalog={"database": "other_db", "table": "t"},
    )  # fmt: skip
    done = cloud.container.registry.update_job("acme", job.id, status="RUNNING")
    done = cloud.container.registry.update_job("acme", job.id, status="SUCCEEDED")
    catalog = GlueCatalog(cloud.container.batch_runner.files, batch_root=f"s3://{BUCKET}/", database="sluice_batch")
    with pytest.raises(Forbidden, match="sluice_batch"):
        catalog.publish(done, [])


def _acme() -> Any:
    from sluice.domain import Principal

    return Principal("acme", frozenset({"predict"}), "test")


def test_a_queued_scheduled_run_waits_for_the_run_going(cloud: Cloud) -> None:
    from sluice.domain import Principal
    from sluice.domain.schedules import Schedule
    from sluice.handlers import batch as handlers

    template = f"s3://{BUCKET}/inbox/acme/iris/dt={{date}}/events.csv"
    cloud.container.registry.create_schedule(
        Schedule("acme", "hourly", "iris", template, "rate(1 hour)", overlap="queue")
    )
    acme = Principal("acme", frozenset({"predict"}), "test")
    going = cloud.container.batch.submit(
        acme, deployment="iris", input_uri=template.format(date="2026-11-26"), start=False, schedule="hourly"
    )
    spec = {"tenant": "acme", "deployment": "iris", "input_uri": template, "schedule": "hourly",
            "scheduled_time": "2026-11-26T02:00:00Z"}  # fmt: skip
    execution = f"{cloud.state_machine.replace(':stateMachine:', ':execution:')}:queued"
    # CreateJob hands the spec back to wait on (the state machine's WaitForRun), creating nothing…
    waiting = handlers.create_job({"spec": spec, "execution": execution}, LambdaContext())
    assert waiting == spec | {"queued_behind": going.id}
    assert [j.id for j in cloud.container.registry.list_jobs("acme")] == [going.id]
    # …and, asked again with it once the run going has ended, creates the run's job.
    cloud.container.registry.update_job("acme", going.id, status="FAILED")
    created = handlers.create_job({"spec": waiting, "execution": execution}, LambdaContext())
    job = cloud.container.registry.get_job("acme", created["job_id"])
    assert job.schedule == "hourly" and job.input_uri.endswith("dt=2026-11-26/events.csv")
    assert cloud.container.registry.get_schedule("acme", "hourly").skipped == 0


def test_a_catalog_table_made_meanwhile_by_another_job_is_used_not_an_error(cloud: Cloud) -> None:
    from sluice.batch.catalog import GlueCatalog

    glue = boto3.client("glue", region_name=REGION)
    glue.create_database(DatabaseInput={"Name": "sluice_batch"})
    location = f"s3://{BUCKET}/outbox/acme/tables/t/"

    class Meanwhile:
        """A Glue client before whose GetTable answer another job creates the table."""

        def __getattr__(self, name: str) -> Any:
            return getattr(glue, name)

        made = False

        def get_table(self, **params: Any) -> Any:
            try:
                return glue.get_table(**params)
            finally:
                if not Meanwhile.made:
                    Meanwhile.made = True
                    glue.create_table(DatabaseName="sluice_batch", TableInput={
                        "Name": params["Name"], "StorageDescriptor": {"Location": location},
                        "PartitionKeys": [{"Name": "job", "Type": "string"}],
                    })  # fmt: skip

    job = cloud.container.batch.submit(
        _acme(), deployment="iris", input_uri=_spec()["input_uri"], start=False,
        catalog={"database": "sluice_batch", "table": "t"},
    )  # fmt: skip
    cloud.container.registry.update_job("acme", job.id, status="RUNNING")
    done = cloud.container.registry.update_job("acme", job.id, status="SUCCEEDED")
    catalog = GlueCatalog(cloud.container.batch_runner.files, batch_root=f"s3://{BUCKET}/", client=Meanwhile())
    assert catalog.publish(done, [])["partition"] == f"job={job.id}"
    assert catalog.publish(done, [])["partition"] == f"job={job.id}"  # again: the same partition
    (partition,) = glue.get_partitions(DatabaseName="sluice_batch", TableName="acme__t")["Partitions"]
    assert partition["StorageDescriptor"]["Location"] == f"{location}job={job.id}/"


def test_an_uploaded_manifest_runs_the_state_machine_across_its_objects(cloud: Cloud) -> None:
    from sluice.handlers import batch as handlers

    # Objects staged under a hidden folder of the inbox (no event starts a job for them),
    # then a manifest uploaded beside them.
    keys = ["inbox/acme/iris/_staged/a.csv", "inbox/acme/iris/_staged/b.csv"]
    cloud.s3.put_object(Bucket=BUCKET, Key=keys[0], Body=_csv(2000))
    cloud.s3.put_object(Bucket=BUCKET, Key=keys[1], Body=_csv(1500, bad_every=500))
    listing = {"files": [f"s3://{BUCKET}/{k}" for k in keys]}
    event = cloud.upload("inbox/acme/iris/nightly.json", json.dumps(listing).encode(), **{"sluice-key-columns": "id"})
    (job,) = handlers.on_upload(event, LambdaContext(function_name="sluice-batch-on-upload"))["jobs"]
    execution = cloud.finish(job["job_id"])
    assert execution["status"] == "SUCCEEDED", execution
    record = cloud.container.registry.get_job("acme", job["job_id"])
    assert (record.rows_total, record.rows_in, record.rows_out, record.rows_failed) == (3500, 3500, 3497, 3)
    assert record.format == "csv" and record.chunks_done == record.chunks_total
    manifest = json.loads(cloud.read(f"outbox/acme/{job['job_id']}/_manifest.json"))
    assert [(o["uri"], o["rows"]) for o in manifest["objects"]] == [(listing["files"][0], 2000), (listing["files"][1], 1500)]
    errors = [json.loads(line) for e in manifest["errors"] for line in cloud.read(e["uri"].split(f"{BUCKET}/")[1]).splitlines()]
    assert sorted((e["object"], e["row"]) for e in errors) == [(listing["files"][1], r) for r in (0, 500, 1000)]
