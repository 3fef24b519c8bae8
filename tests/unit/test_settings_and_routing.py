from __future__ import annotations

import pytest

from sluice.domain.errors import InvalidRequest
from sluice.domain.policy import Single, parse_policy
from sluice.settings import SettingRefused, Settings


def test_aws_mode_refuses_embedded_defaults() -> None:
    with pytest.raises(SettingRefused, match="SLUICE_REGISTRY"):
        Settings(mode="aws", registry="", store="s3://b")
    with pytest.raises(SettingRefused, match="SLUICE_STORE"):
        Settings(mode="aws", registry="dynamodb://t", store="")
    ok = Settings(mode="aws", registry="dynamodb://t", store="s3://b/p")
    assert ok.registry_url == "dynamodb://t"


def test_local_defaults_live_under_home(tmp_path: object) -> None:
    s = Settings(mode="local", home=tmp_path, registry="", store="")
    assert s.registry_url == f"sqlite:///{tmp_path}/registry.db"
    assert s.store_url == f"file://{tmp_path}/artifacts"


def test_single_policy_parses() -> None:
    assert parse_policy({"kind": "single", "model": "iris", "version": 2}) == Single(model="iris", version=2)


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ([], "policy"),
        ({"kind": "nope"}, "policy.kind"),
        ({"kind": "single", "model": "Bad Name", "version": 1}, "policy.model"),
        ({"kind": "single", "model": "iris", "version": 0}, "policy.version"),
        ({"kind": "single", "model": "iris", "version": True}, "policy.version"),
    ],
)
def test_bad_policies_name_the_field(policy: object, field: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_policy(policy)
    assert err.value.field == field
