"""Batch: inbox uploads start the state machine; Plan -> distributed Map -> Finalize."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

import pytest

from tests.infra.state_machines import state_machine_definition
from tests.infra.synth import (
    ACCOUNT,
    REGION,
    Synthesized,
    as_list,
    function_by_handler,
    policy_statements_of_role,
    properties,
    role_of,
)

TRANSIENT = {"Lambda.TooManyRequestsException", "Lambda.ServiceException"}


@pytest.fixture(scope="module")
def definition(full_app: Synthesized) -> dict[str, Any]:
    return state_machine_definition(full_app.json("batch"))


def _retries_transient_errors(state: dict[str, Any]) -> bool:
    return any(
        set(retry["ErrorEquals"]) >= TRANSIENT
        and retry["BackoffRate"] > 1
        and retry["MaxAttempts"] >= 3
        for retry in state.get("Retry", [])
    )


def test_plan_then_distributed_map_then_finalize(definition: dict[str, Any]) -> None:
    states = definition["States"]
    assert definition["StartAt"] == "JobOrSpec"
    job_id, skipped, queued = states["JobOrSpec"]["Choices"]
    assert job_id == {"Variable": "$.job_id", "IsPresent": True, "Next": "Plan"}
    assert skipped == {"Variable": "$.skipped", "IsPresent": True, "Next": "RunSkipped"}
    assert queued == {"Variable": "$.queued_behind", "IsPresent": True, "Next": "WaitForRun"}
    assert states["RunSkipped"] == {"Type": "Pass", "OutputPath": "$.skipped", "End": True}
    assert states["WaitForRun"] == {"Type": "Wait", "Seconds": 60, "Next": "CreateJob"}
    assert states["JobOrSpec"]["Default"] == "CreateJob"
    assert states["CreateJob"]["Next"] == "JobOrSpec"
    assert states["CreateJob"]["Resource"].endswith(":function:sluice-batch-create-job")
    assert states["CreateJob"]["Parameters"] == {"spec.$": "$", "execution.$": "$$.Execution.Id"}
    assert states["CreateJob"]["ResultPath"] == "$"
    assert states["CreateJob"]["Catch"] == [
        {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "SpecRejected"}
    ]
    assert states["SpecRejected"]["Type"] == "Fail"
    assert states["Plan"]["Next"] == "ScoreChunks"
    assert states["ScoreChunks"]["Next"] == "Finalize"
    assert states["Finalize"]["End"] is True
    assert states["Finalize"]["OutputPath"] == "$.result"  # the execution's output: the summary
    assert states["Plan"]["Resource"].endswith(":function:sluice-batch-plan")
    assert states["Finalize"]["Resource"].endswith(":function:sluice-batch-finalize")


def test_map_is_distributed_reads_the_chunk_list_plan_wrote_and_tolerates_failures(
    definition: dict[str, Any],
) -> None:
    chunks = definition["States"]["ScoreChunks"]
    assert chunks["Type"] == "Map"
    assert chunks["ItemProcessor"]["ProcessorConfig"]["Mode"] == "DISTRIBUTED"
    assert chunks["ItemReader"]["Resource"] == "arn:aws:states:::s3:getObject"
    assert chunks["ItemReader"]["ReaderConfig"] == {"InputType": "JSON"}
    assert chunks["ItemReader"]["Parameters"] == {
        "Bucket.$": "$.plan.chunks.bucket",
        "Key.$": "$.plan.chunks.key",
    }
    assert chunks["ItemSelector"] == {"job.$": "$.plan.job", "chunk.$": "$$.Map.Item.Value"}
    assert chunks["MaxConcurrency"] == 17
    assert chunks["ToleratedFailurePercentage"] == 5
    assert chunks["ResultWriter"]["Parameters"]["Prefix"] == "work/map-results"
    assert chunks["ResultWriter"]["Parameters"]["Bucket"] == "sluice-batch-123456789012-us-east-1"
    score = chunks["ItemProcessor"]["States"][chunks["ItemProcessor"]["StartAt"]]
    assert score["Resource"].endswith(":function:sluice-batch-score")


def test_the_state_machine_reads_only_under_work_and_writes_only_its_map_results(full_app: Synthesized) -> None:
    """The Map reads the chunk list Plan wrote and writes its child results; it may not read
    or overwrite any tenant's inbox, outbox, capture or monitor files."""
    (machine,) = properties(full_app.template("batch"), "AWS::StepFunctions::StateMachine")
    statements = policy_statements_of_role(full_app.resolved("batch"), machine["RoleArn"]["Fn::GetAtt"][0])
    bucket = f"arn:aws:s3:::sluice-batch-{ACCOUNT}-{REGION}"

    def may(action: str, key: str) -> bool:
        return any(
            fnmatchcase(action, a) and any(fnmatchcase(f"{bucket}/{key}", r) for r in as_list(s["Resource"]))
            for s in statements
            for a in as_list(s["Action"])
        )

    assert may("s3:GetObject", "work/acme/job-1/chunks.json")
    for action in ("s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"):
        assert may(action, "work/map-results/0f1e/manifest.json"), action
    for key in ("inbox/acme/fraud/in.csv", "outbox/acme/job-1/part-00000.csv", "capture/tenant=acme/x.json", "monitor/acme/fraud/baseline.json"):
        assert not may("s3:GetObject", key) and not may("s3:PutObject", key), key
    assert not may("s3:PutObject", "work/acme/job-1/chunks.json")


def test_every_lambda_task_retries_throttling_with_backoff(definition: dict[str, Any]) -> None:
    states = definition["States"]
    chunks = states["ScoreChunks"]["ItemProcessor"]["States"]
    for state in (states["CreateJob"], states["Plan"], states["Finalize"], states["MarkFailed"], *chunks.values()):
        assert _retries_transient_errors(state), state


def test_score_retries_the_handlers_transient_errors_with_backoff(
    definition: dict[str, Any],
) -> None:
    from sluice.batch import readers  # noqa: F401  (defines ChunkUnreadable)
    from sluice.batch.orchestrators import TRANSIENT_ERRORS
    from sluice.domain.errors import SluiceError

    processor = definition["States"]["ScoreChunks"]["ItemProcessor"]
    retries = processor["States"][processor["StartAt"]]["Retry"]
    # Lambda's own errors first, as before; then what the handler raises when trying again
    # may help, named as Lambda reports it (`errorType`: the exception's class name).
    assert set(retries[0]["ErrorEquals"]) >= TRANSIENT
    (handler,) = [r for r in retries if set(r["ErrorEquals"]) & set(TRANSIENT_ERRORS)]
    assert sorted(handler["ErrorEquals"]) == sorted(TRANSIENT_ERRORS)
    assert handler["IntervalSeconds"] >= 1 and handler["BackoffRate"] > 1
    assert handler["MaxAttempts"] >= 2 and handler["JitterStrategy"] == "FULL"

    def class_names(cls: type) -> set[str]:
        return {n for sub in cls.__subclasses__() for n in {sub.__name__} | class_names(sub)}

    assert set(TRANSIENT_ERRORS) <= class_names(SluiceError)


def test_any_failure_marks_the_job_failed_then_fails(definition: dict[str, Any]) -> None:
    states = definition["States"]
    for name in ("Plan", "ScoreChunks", "Finalize"):
        assert states[name]["Catch"] == [
            {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "MarkFailed"}
        ]
    assert states["MarkFailed"]["Resource"].endswith(":function:sluice-batch-mark-failed")
    assert states["MarkFailed"]["Next"] == "JobFailed"
    assert states["JobFailed"] == {
        "Type": "Fail",
        "ErrorPath": "$.error.Error",
        "CausePath": "$.error.Cause",
    }


def test_state_machine_logs_everything_and_traces(full_app: Synthesized) -> None:
    template = full_app.template("batch")
    (machine,) = properties(template, "AWS::StepFunctions::StateMachine")
    assert machine["StateMachineName"] == "sluice-batch"
    assert machine["StateMachineType"] == "STANDARD"
    assert machine["TracingConfiguration"] == {"Enabled": True}
    assert machine["LoggingConfiguration"]["Level"] == "ALL"
    assert machine["LoggingConfiguration"]["IncludeExecutionData"] is True


def test_uploads_under_inbox_start_a_job(full_app: Synthesized) -> None:
    template = full_app.template("batch")
    on_upload_id, on_upload = function_by_handler(template, "sluice.handlers.batch.on_upload")
    (notifications,) = properties(template, "Custom::S3BucketNotifications")
    (config,) = notifications["NotificationConfiguration"]["LambdaFunctionConfigurations"]
    assert config["Events"] == ["s3:ObjectCreated:*"]
    assert config["Filter"] == {"Key": {"FilterRules": [{"Name": "prefix", "Value": "inbox/"}]}}
    assert config["LambdaFunctionArn"] == {"Fn::GetAtt": [on_upload_id, "Arn"]}

    (machine_id,) = template.find_resources("AWS::StepFunctions::StateMachine")
    variables = on_upload["Environment"]["Variables"]
    assert variables["SLUICE_ORCHESTRATOR"] == {
        "Fn::Join": ["", ["stepfunctions://", {"Ref": machine_id}]]
    }
    statements = policy_statements_of_role(template, role_of(on_upload))
    assert {
        "Action": "states:StartExecution",
        "Effect": "Allow",
        "Resource": {"Ref": machine_id},
    } in statements
    assert "DeadLetterConfig" in on_upload


def test_batch_functions_have_both_layers_and_scoped_grants(full_app: Synthesized) -> None:
    template = full_app.template("batch")
    layer_ids = set(template.find_resources("AWS::Lambda::LayerVersion"))
    assert len(layer_ids) == 2
    for purpose in ("create_job", "plan", "score", "finalize", "mark_failed", "execution_ended", "on_upload"):
        _, function = function_by_handler(template, f"sluice.handlers.batch.{purpose}")
        assert {layer["Ref"] for layer in function["Layers"]} == layer_ids
        assert (
            function["Environment"]["Variables"]["SLUICE_BATCH_BUCKET"]["Fn::Join"][1][0]
            == "sluice-batch-"
        )
    _, score = function_by_handler(template, "sluice.handlers.batch.score")
    statements = policy_statements_of_role(template, role_of(score))
    writes = [s["Resource"]["Fn::Join"][1][-1] for s in statements if "s3:PutObject" in s["Action"]]
    assert writes == ["/outbox/*"]
    assert any(s["Action"] == "sagemaker:InvokeEndpoint" for s in statements)
    # Plan clears an earlier job's results, a chunk finished after a cancel takes its files
    # back, and a failed or cancelled job leaves no _SUCCESS (MarkFailed, and Finalize when a
    # cancel wins the race): each may delete under outbox/, nowhere else.
    for purpose in ("plan", "score", "mark_failed", "execution_ended", "finalize"):
        _, function = function_by_handler(template, f"sluice.handlers.batch.{purpose}")
        statements = policy_statements_of_role(template, role_of(function))
        deletes = [s["Resource"]["Fn::Join"][1][-1] for s in statements if "s3:DeleteObject" in s["Action"]]
        assert deletes == ["/outbox/*"], purpose
    # A failure report lists the objects a prefix or manifest job read, from the plan's chunk
    # list under work/: read, never written (denied, the report had no object list).
    for purpose in ("mark_failed", "execution_ended"):
        _, function = function_by_handler(template, f"sluice.handlers.batch.{purpose}")
        statements = policy_statements_of_role(template, role_of(function))
        reads = [s["Resource"]["Fn::Join"][1][-1] for s in statements if "s3:GetObject" in s["Action"]]
        writes = [s["Resource"]["Fn::Join"][1][-1] for s in statements if "s3:PutObject" in s["Action"]]
        assert "/work/*" in reads and writes == ["/outbox/*"], (purpose, reads, writes)
    assert score["Timeout"] == 900 and score["MemorySize"] == 3008


def test_every_end_of_an_execution_reaches_the_handler_its_job_record_follows(full_app: Synthesized) -> None:
    """A job whose execution ended without recording it (timed out, stopped from outside,
    MarkFailed failed) is found by its execution's end, not left RUNNING."""
    template = full_app.template("batch")
    handler_id, handler = function_by_handler(template, "sluice.handlers.batch.execution_ended")
    (machine_id,) = template.find_resources("AWS::StepFunctions::StateMachine")
    (rule,) = properties(template, "AWS::Events::Rule")
    assert rule["EventPattern"] == {
        "source": ["aws.states"],
        "detail-type": ["Step Functions Execution Status Change"],
        "detail": {"stateMachineArn": [{"Ref": machine_id}], "status": ["SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"]},
    }
    assert rule["State"] == "ENABLED"
    assert [target["Arn"] for target in rule["Targets"]] == [{"Fn::GetAtt": [handler_id, "Arn"]}]
    (permission,) = [p for p in properties(template, "AWS::Lambda::Permission") if p["Principal"] == "events.amazonaws.com"]
    assert permission["FunctionName"] == {"Fn::GetAtt": [handler_id, "Arn"]} and permission["Action"] == "lambda:InvokeFunction"
    assert "DeadLetterConfig" in handler  # an invoke that keeps failing is kept, not lost
    statements = policy_statements_of_role(template, role_of(handler))
    assert not [s for s in statements if "states:" in str(s["Action"])]  # the event says it all


def test_create_job_may_describe_executions_of_the_state_machine_and_nothing_more(full_app: Synthesized) -> None:
    """A scheduled run asks whether the run still going has an execution that ended."""
    template = full_app.template("batch")
    _, create_job = function_by_handler(template, "sluice.handlers.batch.create_job")
    orchestrator = create_job["Environment"]["Variables"]["SLUICE_ORCHESTRATOR"]
    assert orchestrator["Fn::Join"][1][0] == "stepfunctions://arn:" and orchestrator["Fn::Join"][1][-1] == ":stateMachine:sluice-batch"
    statements = policy_statements_of_role(template, role_of(create_job))
    states = [s for s in statements if "states:" in str(s["Action"])]
    assert [(s["Action"], s["Resource"]["Fn::Join"][1][-1]) for s in states] == [
        ("states:DescribeExecution", ":execution:sluice-batch:*")
    ]


def test_finalize_may_publish_to_the_batch_glue_database_only(full_app: Synthesized) -> None:
    template = full_app.template("batch")
    (database,) = properties(template, "AWS::Glue::Database")
    assert database["DatabaseInput"]["Name"] == "sluice_batch"
    _, finalize = function_by_handler(template, "sluice.handlers.batch.finalize")
    assert finalize["Environment"]["Variables"]["SLUICE_CATALOG_DATABASE"] == "sluice_batch"
    statements = policy_statements_of_role(template, role_of(finalize))
    (glue,) = [s for s in statements if "glue:CreatePartition" in s["Action"]]
    resources = [r["Fn::Join"][1][-1] for r in glue["Resource"]]
    assert resources == [":catalog", ":database/sluice_batch", ":table/sluice_batch/*"]
    assert not any(a.endswith("*") or "Delete" in a for a in glue["Action"])
    assert "glue:UpdateTable" in glue["Action"]  # a table a job of no rows made gets its columns later (`GlueCatalog`)
    for purpose in ("plan", "score", "mark_failed", "on_upload", "create_job"):
        _, other = function_by_handler(template, f"sluice.handlers.batch.{purpose}")
        assert not any("glue:" in str(s["Action"]) for s in policy_statements_of_role(template, role_of(other)))


def test_the_scheduler_role_may_only_start_the_state_machine(full_app: Synthesized) -> None:
    template = full_app.template("batch")
    (group,) = properties(template, "AWS::Scheduler::ScheduleGroup")
    assert group["Name"] == "sluice-batch"
    roles = {
        rid: r["Properties"] for rid, r in template.find_resources("AWS::IAM::Role").items()
        if r["Properties"].get("RoleName") == "sluice-batch-scheduler"
    }  # fmt: skip
    ((role_id, role),) = roles.items()
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert "aws:SourceAccount" in trust["Condition"]["StringEquals"]
    (machine_id,) = template.find_resources("AWS::StepFunctions::StateMachine")
    assert policy_statements_of_role(template, role_id) == [
        {"Action": "states:StartExecution", "Effect": "Allow", "Resource": {"Ref": machine_id}}
    ]
