"""The helper that turns a synthesized DefinitionString into a definition to run."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from tests.infra.state_machines import function_ids_by_handler, resolve, state_machine_definition
from tests.infra.synth import Synthesized


def test_definition_has_no_references_left(full_app: Synthesized) -> None:
    text = json.dumps(state_machine_definition(full_app.json("batch")))
    assert "Fn::" not in text and '"Ref"' not in text
    assert "arn:aws:lambda:us-east-1:123456789012:function:sluice-batch-score" in text


def test_arns_can_be_mapped_by_logical_id(full_app: Synthesized) -> None:
    template = full_app.json("batch")
    plan_id = function_ids_by_handler(template)["sluice.handlers.batch.plan"]
    arn = "arn:aws:lambda:eu-west-1:000000000000:function:other-plan"
    definition = state_machine_definition(
        template,
        arns={plan_id: arn},
        pseudo={
            "AWS::Partition": "aws",
            "AWS::Region": "eu-west-1",
            "AWS::AccountId": "000000000000",
            "AWS::URLSuffix": "amazonaws.com",
        },
    )
    assert definition["States"]["Plan"]["Resource"] == arn
    assert (
        definition["States"]["ScoreChunks"]["ResultWriter"]["Parameters"]["Bucket"]
        == "sluice-batch-000000000000-eu-west-1"
    )


def test_unknown_intrinsics_are_refused() -> None:
    with pytest.raises(ValueError, match="unsupported"):
        resolve({"Fn::Sub": "${AWS::Region}"}, {"Resources": {}})


def test_moto_accepts_the_definition(full_app: Synthesized) -> None:
    definition = state_machine_definition(full_app.json("batch"))
    with mock_aws():
        client = boto3.client("stepfunctions", region_name="us-east-1")
        arn = client.create_state_machine(
            name="sluice-batch",
            definition=json.dumps(definition),
            roleArn="arn:aws:iam::123456789012:role/sluice-batch",
        )["stateMachineArn"]
        described = client.describe_state_machine(stateMachineArn=arn)
    assert json.loads(described["definition"])["StartAt"] == "JobOrSpec"
