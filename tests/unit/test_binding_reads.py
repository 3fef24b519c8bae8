"""What a tenant's follow bindings may have sluice read (`BindingReads`): the package groups the
operator lists for it, in any case, and model data under its own S3 prefixes alone, whatever
key a registry names: an admitted location is read exactly as checked, and nothing that some
reader would take for another key (dot segments, escapes) is admitted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.domain.errors import Forbidden, InvalidRequest
from sluice.domain.follows import BindingReads, parse_source
from sluice.domain.locations import Root

READS = BindingReads(frozenset({"Fraud"}), (Root.of("model-data", "s3://shared-ml/acme/"), Root.of("model-data", "s3://acme-models/")))
SEGMENT = st.one_of(st.sampled_from(["acme", "globex", "..", ".", "", "acme%2f..", "m?x", "a#b", "model.tar.gz"]), st.text(max_size=8))


@given(bucket=st.sampled_from(["shared-ml", "acme-models", "acme-models-evil", "shared-ml2"]), segments=st.lists(SEGMENT, min_size=1, max_size=5))
def test_model_data_is_admitted_only_under_the_tenants_prefixes_and_read_as_checked(bucket: str, segments: list[str]) -> None:
    uri = f"s3://{bucket}/{'/'.join(segments)}"
    parts = "/".join(segments).split("/")  # a generated segment may hold a '/' of its own
    plain = all(s not in ("", ".", "..") and not any(c in s for c in "%?#\\") and all(ord(c) >= 32 and ord(c) != 127 for c in s) for s in parts)
    expected = plain and (bucket == "acme-models" or (bucket == "shared-ml" and parts[0] == "acme" and len(parts) > 1))
    try:
        read = READS.model_data_uri("acme", uri)
    except Forbidden as exc:
        assert not expected, uri
        assert exc.field == "model_data" and uri in exc.message
        return
    assert expected and read == uri


def test_a_tenant_with_no_locations_reads_nothing_and_groups_compare_in_any_case() -> None:
    with pytest.raises(Forbidden, match="its model data may lie in nowhere"):
        BindingReads().model_data_uri("acme", "s3://shared-ml/acme/m.onnx")
    group = "arn:aws:sagemaker:eu-west-1:123456789012:model-package-group/{}"
    READS.check_group("acme", parse_source(group.format("fraud")))
    with pytest.raises(Forbidden) as refused:
        READS.check_group("acme", parse_source(group.format("fraud-v2")))
    assert refused.value.field == "registry"


HOME = "arn:aws:sagemaker:eu-west-1:123456789012:model-package-group/"
HOMED = BindingReads(frozenset({"Fraud"}), (), HOME)


@given(
    partition=st.sampled_from(["aws", "aws-cn", "aws-us-gov"]),
    region=st.sampled_from(["eu-west-1", "us-east-1", "eu-west-2"]),
    account=st.sampled_from(["123456789012", "210987654321", "123456789013"]),
    group=st.sampled_from(["Fraud", "fraud", "FRAUD", "churn"]),
)
def test_a_binding_follows_only_groups_of_the_stacks_own_account_and_region(partition: str, region: str, account: str, group: str) -> None:
    """On AWS the registry's approvals reach sluice from its own account and region alone: a group
    elsewhere is refused when the binding is made (422 naming `registry`), before its name is
    looked up; at home, the tenant's list decides, in any case."""
    source = parse_source(f"arn:{partition}:sagemaker:{region}:{account}:model-package-group/{group}")
    home = (partition, region, account) == ("aws", "eu-west-1", "123456789012")
    try:
        HOMED.check_group("acme", source)
    except InvalidRequest as exc:
        assert not home and exc.field == "registry" and "123456789012" in exc.message and "eu-west-1" in exc.message
        return
    except Forbidden as exc:
        assert home and group.lower() != "fraud" and exc.field == "registry"
        return
    assert home and group.lower() == "fraud"


def test_the_home_prefix_is_read_from_the_settings_and_checked() -> None:
    from sluice.settings import SettingRefused
    from sluice.settings.follows import FollowSettings

    settings = FollowSettings(follow_package_groups={"acme": ["Fraud"]}, follow_group_arn_prefix=HOME)
    assert settings.reads("acme").group_arn_prefix == HOME
    for bad in ("arn:aws:sagemaker:eu-west-1:123:model-package-group/", "arn:aws:sagemaker:eu-west-1:123456789012:model-package/", HOME + "Fraud"):
        with pytest.raises(SettingRefused, match="SLUICE_FOLLOW_GROUP_ARN_PREFIX: "):
            FollowSettings(follow_group_arn_prefix=bad)
