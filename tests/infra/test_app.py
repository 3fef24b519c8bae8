"""The app as a whole: five stacks in dependency order, tags and defaults applied once."""

from __future__ import annotations

import pytest

from tests.infra.synth import COMPONENTS, Synthesized

pytestmark = pytest.mark.usefixtures("cdk_runtime")  # constructs of its own: on the CDK's worker (tests/conftest.py)


def test_five_stacks_deploy_in_dependency_order(default_app: Synthesized) -> None:
    stacks = default_app.stacks
    assert [stacks[c].stack_name for c in COMPONENTS] == [f"sluice-{c}" for c in COMPONENTS]

    def depends_on(component: str) -> set[str]:
        return {s.stack_name for s in stacks[component].dependencies}

    assert depends_on("storage") == set()
    assert depends_on("batch") == {"sluice-storage"}
    assert depends_on("endpoints") == {"sluice-storage"}
    assert depends_on("api") == {"sluice-storage", "sluice-batch"}
    assert depends_on("observability") == {"sluice-api", "sluice-batch"}


def test_stacks_share_names_not_exports(full_app: Synthesized) -> None:
    for component in COMPONENTS:
        template = full_app.json(component)
        assert "Fn::ImportValue" not in str(template), component
        assert not [o for o in template.get("Outputs", {}) if o.startswith("ExportsOutput")]


def test_resources_carry_the_app_tags(full_app: Synthesized) -> None:
    for component in ("storage", "api", "batch"):
        template = full_app.json(component)
        for resource in template["Resources"].values():
            tags = resource.get("Properties", {}).get("Tags")
            if isinstance(tags, list):
                keys = {tag["Key"]: tag["Value"] for tag in tags}
                assert keys.get("project") == "sluice"
                assert keys.get("sluice:component") == component
                assert keys.get("owner") == "ml-platform"


def test_log_groups_without_retention_get_the_default() -> None:
    from aws_cdk import App, Aspects, Stack
    from aws_cdk import aws_logs as logs
    from aws_cdk.assertions import Template
    from infra.aspects import LogRetentionDefault

    app = App()
    stack = Stack(app, "Logs")
    logs.CfnLogGroup(stack, "Forever")
    logs.CfnLogGroup(stack, "Week", retention_in_days=7)
    Aspects.of(app).add(LogRetentionDefault(30))
    retentions = sorted(
        r["Properties"]["RetentionInDays"]
        for r in Template.from_stack(stack).find_resources("AWS::Logs::LogGroup").values()
    )
    assert retentions == [7, 30]
