"""cdk-nag (AWS Solutions and Serverless packs) runs on every synthesis: no finding may be
left unfixed or unacknowledged, and every acknowledgement says why."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.infra.synth import Synthesized, cdk_context

pytestmark = pytest.mark.usefixtures("cdk_runtime")  # constructs of its own: on the CDK's worker (tests/conftest.py)

if TYPE_CHECKING:
    from constructs import IConstruct


def acknowledgements(root: IConstruct) -> Iterator[tuple[str, str, str]]:
    """(construct path, rule id, reason) for every acknowledgement in the tree."""
    from aws_cdk import Validations

    key = Validations.ACKNOWLEDGED_RULES_METADATA_KEY
    for construct in root.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == key:
                for rule_id, reason in entry.data.items():
                    yield construct.node.path, rule_id.split("::", 1)[-1], reason


@pytest.mark.parametrize("app_name", ["default_app", "full_app"])
def test_synthesis_leaves_no_unacknowledged_findings(
    app_name: str, request: pytest.FixtureRequest
) -> None:
    app: Synthesized = request.getfixturevalue(app_name)
    # The fixture's synth() raises on any violation; the report confirms what ran.
    assert app.findings() == []


def test_every_acknowledgement_gives_a_reason(
    full_app: Synthesized, default_app: Synthesized
) -> None:
    found = list(acknowledgements(full_app.app)) + list(acknowledgements(default_app.app))
    assert found
    for path, rule_id, reason in found:
        assert len(reason.split()) >= 8, f"{path} acknowledges {rule_id} without a real reason"


def test_the_rule_packs_are_really_checking() -> None:
    from aws_cdk import App, Stack
    from aws_cdk import aws_s3 as s3
    from infra.nag import register_checks

    app = App(context=cdk_context())
    stack = Stack(app, "Careless")
    s3.Bucket(stack, "Open", enforce_ssl=False)
    register_checks(app)
    with pytest.raises(RuntimeError, match=r"AwsSolutions-S10") as failure:
        app.synth()
    assert "AwsSolutions-S1" in str(failure.value)
