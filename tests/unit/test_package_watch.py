"""A binding to a SageMaker model package group and the approvals of its packages meet whatever
the case of the group's name: SageMaker keeps the name as given in the group's ARN and the
event's `ModelPackageGroupName`, and lower-cases it in the package's ARN."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.domain.errors import InvalidRequest
from sluice.domain.follows import Follow, FollowEvent, PackageStateChange, parse_source
from tests.conftest import EVENTS

NAME = st.from_regex(r"[A-Za-z0-9](-?[A-Za-z0-9]){0,20}", fullmatch=True)
PREFIX = "arn:aws:sagemaker:eu-west-1:123456789012"


def approval(group: str, version: int, time: str = "2026-03-02T09:41:27Z") -> dict:
    event = json.loads((EVENTS / "sagemaker_model_package_approved.json").read_text())
    arn = f"{PREFIX}:model-package/{group.lower()}/{version}"  # as SageMaker spells it
    event.update(resources=[arn], time=time)
    event["detail"].update(ModelPackageArn=arn, ModelPackageGroupName=group, ModelPackageVersion=version)
    return event


@given(name=NAME, bound_as=st.sampled_from([str, str.lower, str.upper, str.swapcase]), version=st.integers(1, 10**6))
def test_a_binding_in_any_spelling_is_found_by_its_groups_approvals(name: str, bound_as: object, version: int) -> None:
    source = parse_source(f"{PREFIX}:model-package-group/{bound_as(name)}")  # type: ignore[operator]
    change = PackageStateChange.from_event(approval(name, version))
    assert source.watch in change.watches
    assert (change.group, change.version, change.approval_status) == (name, version, "Approved")
    assert change.changed_at == 1772444487.0


@given(name=NAME, other=NAME)
def test_an_approval_names_one_group(name: str, other: str) -> None:
    """A package ARN of one group and a group name of another is no event of either."""
    event = approval(name, 1)
    event["detail"]["ModelPackageGroupName"] = other
    if other.lower() == name.lower():
        assert PackageStateChange.from_event(event).group == other
        return
    with pytest.raises(InvalidRequest, match="names no versioned model package"):
        PackageStateChange.from_event(event)


TAKEN = ("pushing", "rolling_out", "completed", "rolled_back", "aborted", "conversion_failed", "push_failed", "rollout_refused")
STATUS = st.sampled_from(["Approved", "Rejected", "PendingManualApproval"])


def binding(version: int, outcome: str, changed_at: float, seen: int) -> Follow:
    event = FollowEvent(str(version), outcome, 0.0, changed_at=changed_at)
    return Follow("acme", "fraud", f"{PREFIX}:model-package-group/fraud", "sagemaker", "fraud", "plan", "watch",
                  seen=str(seen), seen_at=changed_at, history=(event,))  # fmt: skip


def change(version: int, status: str, changed_at: float) -> PackageStateChange:
    arn = f"{PREFIX}:model-package/fraud/{version}"
    return PackageStateChange(arn, "fraud", f"{PREFIX}:model-package-group/fraud", version, status, changed_at)


@given(outcome=st.sampled_from([*TAKEN, "rejected", "withdrawn"]), status=STATUS, acted=st.floats(1e9, 2e9), earlier=st.floats(0.001, 1e6), seen=st.integers(1, 3))
def test_a_change_made_before_the_last_one_acted_on_is_stale(outcome: str, status: str, acted: float, earlier: float, seen: int) -> None:
    """EventBridge keeps no order: whatever a version's last change was, one made before it
    and delivered after it changes nothing."""
    assert change(1, status, acted - earlier).meaning(binding(1, outcome, acted, seen)) == "stale"


@given(outcome=st.sampled_from(TAKEN), later=st.floats(0, 1e6), seen=st.integers(1, 3))
def test_an_approval_of_a_version_taken_and_never_withdrawn_is_an_update(outcome: str, later: float, seen: int) -> None:
    """SageMaker tells of any change to a package that stays Approved: never a new approval."""
    assert change(1, "Approved", 1e9 + later).meaning(binding(1, outcome, 1e9, seen)) == "update"


@given(outcome=st.sampled_from(["rejected", "withdrawn"]), later=st.floats(0.001, 1e6))
def test_an_approval_after_a_rejection_or_withdrawal_is_taken_again(outcome: str, later: float) -> None:
    assert change(1, "Approved", 1e9 + later).meaning(binding(1, outcome, 1e9, 1)) == "approved_again"
    assert change(1, "Rejected", 1e9 + later).meaning(binding(1, outcome, 1e9, 1)) == "rejected"  # a new rejection
