"""The CDK app synthesized for tests, and small readers of its templates.

Two configs: the default (what `cdk deploy --all` ships: no endpoints, no alarm topic), in
the environment the CDK CLI gives an app without credentials (a region, no account); and a
full one (a GPU endpoint with two variants, a tenant with its own plan, an alarm topic, two
Lambda functions a tenant's graphs may call, two deployments the SnapStart functions preload),
environment-agnostic.
Both apps run with cdk-nag registered exactly as the real app does, with the feature flags
of cdk.json, and with asset bundling skipped (layers are built in test_layers.py).

`Synthesized.resolved` gives a template as it would deploy in one account and region
(pseudo parameters, mappings, and the names and ARNs of functions, state machines and
roles filled in), so tests can match ARNs and environment variables as plain strings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

# aws_cdk is imported where used: every pytest-xdist worker imports this module to collect the
# suite, and only the worker that runs the infra tests should pay for the CDK.
if TYPE_CHECKING:
    from aws_cdk import App, Environment, Stack
    from aws_cdk.assertions import Template
    from constructs import Construct
    from infra.config import SluiceConfig
    from infra.constructs.functions import FunctionPlatform, SluiceFunction
    from infra.constructs.python_layer import PythonLayer

REPO = Path(__file__).resolve().parents[2]
# Where `Synthesized.resolved` deploys the templates.
PSEUDO = {
    "AWS::Partition": "aws",
    "AWS::Region": "us-east-1",
    "AWS::AccountId": "123456789012",
    "AWS::URLSuffix": "amazonaws.com",
}
ACCOUNT, REGION = PSEUDO["AWS::AccountId"], PSEUDO["AWS::Region"]
SAGEMAKER_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}"  # what the names of SageMaker's resources follow
COMPONENTS = ("storage", "batch", "endpoints", "api", "observability")
OPTIONAL = ("streams",)  # stacks made only where the config asks for them

# The tenant's own Lambda functions the full config lets graphs' function steps call: one in
# this account and region, one alias in another account's.
FUNCTION_STEP_ARNS = (
    f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:acme-enrich",
    "arn:aws:lambda:eu-west-1:210987654321:function:acme-geo:live",
)

# The online stores the full config lets the tenant's lookup steps read.
LOOKUP_TABLES = ("acme-customers", "acme-merchants")
LOOKUP_FEATURE_GROUPS = ("Acme-Customer-Features",)

# A tenant's MLflow credentials named by their full ARN (the other tenant's by name).
MLFLOW_SECRET_ARN = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:mlflow/beta-AbCdEf"
# The customer-managed key the tenants' MLflow secrets are encrypted under.
MLFLOW_KMS_KEY_ARN = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"

FULL_CONFIG: dict[str, Any] = {
    "name": "sluice",
    "tags": {"owner": "ml-platform"},
    "functions": {"preload": ["acme/fraud", "acme/iris"], "preload_max_mb": 64},
    "api": {
        "follow_package_groups": {"acme": ["fraud", "Churn-Model"], "beta": ["fraud"]},
        "model_data_locations": {"acme": ["s3://acme-model-data/", "s3://shared-ml/acme/"], "beta": ["s3://shared-ml/beta/models"]},
        "follow_poll_minutes": 2,
        "mlflow_tracking_servers": ["https://mlflow.example.com"],
        "mlflow_credentials": {"acme": "mlflow/acme", "beta": MLFLOW_SECRET_ARN},
        "mlflow_credentials_kms_keys": [MLFLOW_KMS_KEY_ARN],
        "rate_limit": 300,
        "burst_limit": 600,
        "prediction_cache_shared": True,
        "tenants": [
            {
                "tenant": "acme",
                "rate_limit": 20,
                "burst_limit": 40,
                "quota": 100000,
                "quota_period": "MONTH",
            }
        ],
    },
    "websocket": {"enabled": True, "rate_limit": 40, "burst_limit": 80, "connection_rate_limit": "5/second;120 per minute"},
    "batch": {"max_concurrency": 17, "tolerated_failure_percentage": 5},
    "storage": {"outbox_expiry_days": 9, "upload_cors_origins": ["https://app.example.com"]},
    "alarms": {"emails": ["oncall@example.com"], "monitor_deployments": ["acme/iris"]},
    "graphs": {
        "functions": [{"tenant": "acme", "arns": list(FUNCTION_STEP_ARNS)}],
        "lookups": [{"tenant": "acme", "tables": list(LOOKUP_TABLES), "feature_groups": list(LOOKUP_FEATURE_GROUPS)}],
    },
    "streams": [
        {
            "name": "orders",
            "tenant": "acme",
            "deployment": "fraud",
            "source": {"kind": "sqs", "create": True},
            "destination": {"kind": "s3"},
            "batch_size": 50,
            "batching_window_s": 2,
            "max_concurrency": 5,
        },
        {
            "name": "payments",
            "tenant": "acme",
            "deployment": "fraud",
            "source": {"kind": "sqs", "create": True, "fifo": True},
            "destination": {"kind": "sqs", "create": True, "fifo": True},
            "batch_size": 10,
            "batching_window_s": 0,
        },
        {
            "name": "sensors",
            "tenant": "globex",
            "deployment": "anomaly",
            "source": {"kind": "kinesis", "create": True, "shards": 2},
            "destination": {"kind": "kinesis", "create": True},
            "batch_size": 1000,
            "parallelization_factor": 2,
            "max_record_age_s": 600,
            "retry_attempts": 2,
        },
        {
            "name": "clicks",
            "tenant": "acme",
            "deployment": "ctr",
            "source": {
                "kind": "msk",
                "arn": "arn:aws:kafka:us-east-1:123456789012:cluster/events/0a1b2c3d-1111-2222-3333-444455556666-1",
                "topic": "clicks",
            },
            "destination": {
                "kind": "firehose",
                "arn": "arn:aws:firehose:us-east-1:123456789012:deliverystream/ctr-scores",
            },
        },
        {
            "name": "ledger",
            "tenant": "acme",
            "deployment": "fraud",
            "source": {
                "kind": "kafka",
                "topic": "ledger",
                "bootstrap_servers": ["kafka-1.example.com:9096"],
                "secret_arn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:kafka-ledger-AbCdEf",
            },
            "destination": {"kind": "sqs", "arn": "arn:aws:sqs:us-east-1:123456789012:ledger-scores"},
        },
        {
            "name": "refunds",
            "tenant": "globex",
            "deployment": "refunds",
            "source": {"kind": "sqs", "arn": "arn:aws:sqs:us-east-1:123456789012:refunds"},
            "destination": {"kind": "s3", "prefix": "outbox/globex/refund-scores/"},
        },
    ],
    "endpoints": [
        {
            "name": "resnet",
            "triton_version": "25.09",
            "variants": [
                {
                    "name": "primary",
                    "model_data_key": "triton/resnet/1/model.tar.gz",
                    "model_name": "resnet",
                    "instance_type": "ml.g5.xlarge",
                    "initial_instance_count": 1,
                    "min_instances": 1,
                    "max_instances": 3,
                    "weight": 0.9,
                    "target_invocations_per_instance": 250,
                },
                {
                    "name": "canary",
                    "model_data_key": "triton/resnet/2/model.tar.gz",
                    "model_name": "resnet",
                    "instance_type": "ml.g6.xlarge",
                    "weight": 0.1,
                },
            ],
        },
        {
            "name": "segmenter",
            "variants": [
                {
                    "model_data_key": "triton/seg/1/model.tar.gz",
                    "model_name": "seg",
                    "instance_type": "ml.g5.xlarge",
                    "initial_instance_count": 1,
                    "min_instances": 0,
                    "max_instances": 2,
                }
            ],
            "asynchronous": {"tenant": "acme", "max_concurrent_invocations_per_instance": 2},
        },
        {
            "name": "ranker",
            "variants": [
                {
                    "model_data_key": "triton/ranker/1/model.tar.gz",
                    "model_name": "ranker",
                    "instance_type": "ml.g5.xlarge",
                }
            ],
            "inference_components": {"max_instances": 2, "max_copies": 4, "memory_mb": 8192},
        },
    ],
}


def cdk_context(**extra: Any) -> dict[str, Any]:
    """cdk.json's context (the feature flags the CLI would pass), bundling skipped."""
    context = json.loads((REPO / "cdk.json").read_text())["context"]
    return {**context, "aws:cdk:bundling-stacks": [], **extra}


class Synthesized:
    """One synthesized app: its config, stacks by component, and their templates."""

    def __init__(self, app: App, config: SluiceConfig, outdir: Path) -> None:
        self.app = app
        self.config = config
        self.outdir = outdir
        self.assembly = app.synth()
        self.stacks: dict[str, Stack] = {
            component: app.node.find_child(f"{config.name}-{component}") for component in COMPONENTS
        }
        for component in OPTIONAL:
            found = app.node.try_find_child(f"{config.name}-{component}")
            if found is not None:
                self.stacks[component] = found  # type: ignore[assignment]
        self._templates: dict[str, Template] = {}
        self._resolved: dict[str, Template] = {}

    def template(self, component: str) -> Template:
        from aws_cdk.assertions import Template

        if component not in self._templates:
            self._templates[component] = Template.from_stack(self.stacks[component])
        return self._templates[component]

    def json(self, component: str) -> dict[str, Any]:
        return self.template(component).to_json()

    def resolved(self, component: str) -> Template:
        """The component's template with references resolved (see `resolve_references`)."""
        from aws_cdk.assertions import Template

        if component not in self._resolved:
            template = self.json(component)
            self._resolved[component] = Template.from_json(resolve_references(template, template))
        return self._resolved[component]

    def warnings(self, component: str) -> list[str]:
        """A stack's warnings as its cloud assembly records them (the manifest's metadata, or
        the stack's metadata file it names), read as JSON: the CDK's `Annotations` hands each
        back as a MetadataEntry, which jsii fails to build in a process that has not loaded
        that module of the CDK."""
        artifact = json.loads((self.outdir / "manifest.json").read_text())["artifacts"][self.stacks[component].artifact_id]
        metadata = dict(artifact.get("metadata", {}))
        if "additionalMetadataFile" in artifact:
            metadata.update(json.loads((self.outdir / artifact["additionalMetadataFile"]).read_text()))
        return [str(e["data"]) for entries in metadata.values() for e in entries if e["type"] == "aws:cdk:warning"]

    def validation_report(self) -> dict[str, Any]:
        return json.loads((self.outdir / "validation-report.json").read_text())

    def findings(self) -> list[dict[str, Any]]:
        """What the validation plugins (cdk-nag's packs) found, each plugin checked to have
        concluded `success`; less the one warning sluice gives itself where `functions.python`
        is 3.14 (monitoring without drift: no DataSketches wheel; the default, 3.13, gives none),
        which is said to the operator, not a finding."""
        from infra.constructs.functions import MONITOR_WARNING

        own = f"Annotation::{MONITOR_WARNING}"
        found = []
        for plugin in self.validation_report()["pluginReports"]:
            assert plugin["conclusion"] == "success", plugin["pluginName"]
            found += [v for v in plugin["violations"] if v["ruleName"] != own]
        return found


def _physical(template: dict[str, Any], logical_id: str, attribute: str | None) -> str | None:
    """The name (Ref) or ARN (GetAtt Arn) of a function, state machine or role, else None."""
    resource = template.get("Resources", {}).get(logical_id)
    if resource is None:
        return None
    kind, props = resource["Type"], resource.get("Properties", {})
    region, account = PSEUDO["AWS::Region"], PSEUDO["AWS::AccountId"]
    if kind == "AWS::Lambda::Function" and isinstance(props.get("FunctionName"), str):
        name = props["FunctionName"]
        return name if attribute is None else f"arn:aws:lambda:{region}:{account}:function:{name}"
    if kind == "AWS::StepFunctions::StateMachine" and isinstance(
        props.get("StateMachineName"), str
    ):
        return f"arn:aws:states:{region}:{account}:stateMachine:{props['StateMachineName']}"
    if kind == "AWS::IAM::Role" and attribute == "Arn":
        return f"arn:aws:iam::{account}:role/{props.get('RoleName', logical_id)}"
    return None


def resolve_references(value: Any, template: dict[str, Any]) -> Any:
    """`value` with pseudo parameters, `Fn::FindInMap`, and the `Ref`/`Fn::GetAtt` that
    `_physical` knows replaced by strings, and each `Fn::Join` of strings joined; anything
    else (other resources' references) is left as it was."""
    if isinstance(value, list):
        return [resolve_references(v, template) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((function, argument),) = value.items()
        if function == "Ref" and isinstance(argument, str):
            return PSEUDO.get(argument) or _physical(template, argument, None) or value
        if function == "Fn::GetAtt" and isinstance(argument, list) and len(argument) == 2:
            return _physical(template, argument[0], argument[1]) or value
        if function == "Fn::FindInMap":
            name, key, attribute = resolve_references(argument, template)
            if all(isinstance(part, str) for part in (name, key, attribute)):
                return template["Mappings"][name][key][attribute]
        if function == "Fn::Join":
            delimiter, parts = argument
            parts = resolve_references(parts, template)
            if all(isinstance(part, str) for part in parts):
                return delimiter.join(parts)
            return {"Fn::Join": [delimiter, parts]}
    return {k: resolve_references(v, template) for k, v in value.items()}


def resources(template: Template, resource_type: str) -> dict[str, dict[str, Any]]:
    return template.find_resources(resource_type)


def properties(template: Template, resource_type: str) -> list[dict[str, Any]]:
    return [r.get("Properties", {}) for r in template.find_resources(resource_type).values()]


def function_by_handler(template: Template, handler: str) -> tuple[str, dict[str, Any]]:
    matches = [
        (logical_id, r["Properties"])
        for logical_id, r in template.find_resources("AWS::Lambda::Function").items()
        if r["Properties"].get("Handler") == handler
    ]
    assert len(matches) == 1, f"expected one function running {handler}, found {len(matches)}"
    return matches[0]


def policy_statements_of_role(template: Template, role_id: str) -> list[dict[str, Any]]:
    """Every statement of the IAM policies attached to one role."""
    statements: list[dict[str, Any]] = []
    for policy in template.find_resources("AWS::IAM::Policy").values():
        roles = policy["Properties"].get("Roles", [])
        if {"Ref": role_id} in roles:
            statements.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return statements


def roles_assumed_by(template: Template, service: str) -> list[str]:
    """The logical IDs of the roles that `service` (`sagemaker.amazonaws.com`) may assume."""
    from aws_cdk.assertions import Match

    trusting = Match.object_like({"Principal": {"Service": service}})
    return list(
        template.find_resources(
            "AWS::IAM::Role", {"Properties": {"AssumeRolePolicyDocument": {"Statement": [trusting]}}}
        )
    )


def role_of(function_properties: dict[str, Any]) -> str:
    return function_properties["Role"]["Fn::GetAtt"][0]


def as_list(value: Any) -> list[Any]:
    """A statement's `Action` or `Resource`: one value or a list of them, as a list."""
    return value if isinstance(value, list) else [value]


def function_arn(app: Synthesized, handler: str, component: str = "api") -> str:
    """The ARN of `component`'s function running `handler`, as a resolved template writes it."""
    _, function = function_by_handler(app.template(component), handler)
    return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{function['FunctionName']}"


def statements_of_function(app: Synthesized, handler: str, component: str = "api") -> list[dict[str, Any]]:
    """Every statement of the policies of the role of `component`'s function running
    `handler`, references resolved."""
    _, function = function_by_handler(app.template(component), handler)
    return policy_statements_of_role(app.resolved(component), role_of(function))


def schedule_invoking(app: Synthesized, handler: str, component: str = "api") -> dict[str, Any]:
    """The one EventBridge Scheduler schedule that invokes `component`'s function running
    `handler` (a stack has others, for other functions)."""
    arn = function_arn(app, handler, component)
    schedules = properties(app.resolved(component), "AWS::Scheduler::Schedule")
    (schedule,) = [s for s in schedules if s["Target"]["Arn"] == arn]
    return schedule


def assert_role_policy_has(
    app: Synthesized, component: str, handler: str, statements: list[Any]
) -> dict[str, Any]:
    """One IAM policy of the role of `component`'s function running `handler` holds every one
    of `statements` (literals or Match patterns, references resolved); the function's
    properties."""
    from aws_cdk.assertions import Match

    _, function = function_by_handler(app.template(component), handler)
    app.resolved(component).has_resource_properties(
        "AWS::IAM::Policy",
        {
            "Roles": Match.array_with([{"Ref": role_of(function)}]),
            "PolicyDocument": {"Statement": Match.array_with(statements)},
        },
    )
    return function


def api_function(
    scope: Construct, id: str, *, name: str, description: str, platform: FunctionPlatform, layers: list[PythonLayer]
) -> SluiceFunction:
    """A small function running the API handler: what a platform and layers make of one."""
    from aws_cdk import Duration
    from infra.constructs.functions import SluiceFunction

    return SluiceFunction(
        scope,
        id,
        function_name=name,
        handler="sluice.handlers.api.handler",
        description=description,
        platform=platform,
        layers=layers,
        memory_mb=128,
        timeout=Duration.seconds(3),
    )


def synthesize(
    outdir: Path, config: SluiceConfig, *, env: Environment | None = None
) -> Synthesized:
    from infra.app import build_app

    app = build_app(config=config, context=cdk_context(), outdir=str(outdir), env=env)
    return Synthesized(app, config, outdir)
