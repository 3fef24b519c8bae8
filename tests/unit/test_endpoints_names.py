"""Endpoint naming, autoscaling requests, weights on the command line, sagemaker version configs."""

from __future__ import annotations

import pytest

from sluice.cli.endpoints import parse_weights
from sluice.domain.errors import BadRequest
from sluice.endpoints.control import Autoscaling
from sluice.endpoints.names import (
    SAGEMAKER_NAME,
    config_name,
    endpoint_name,
    model_name,
    variant_name,
)
from sluice.services.endpoint_requests import DeployRequest
from sluice.services.models import sagemaker_config

LONGEST = "x" * 63


@pytest.mark.parametrize(
    ("tenant", "deployment"),
    [("acme", "ranker"), ("a.b_c", "d_e.f"), (LONGEST, LONGEST), ("0", "9"), ("t--", "-.-x")],
)
def test_every_name_fits_sagemaker(tenant: str, deployment: str) -> None:
    endpoint = endpoint_name(tenant, deployment)
    variant = variant_name(LONGEST.replace("x", "v_"))
    names = [endpoint, config_name(endpoint, "f" * 64), model_name(endpoint, variant, "e" * 64), variant]
    for name in names:
        assert len(name) <= 63 and SAGEMAKER_NAME.match(name), name
    assert endpoint.startswith("sluice-") and len(endpoint) <= 40


def test_tenants_cannot_collide() -> None:
    # The readable part alone would be the same for both; the digest keeps them apart.
    assert endpoint_name("a-b", "c") != endpoint_name("a", "b-c")
    assert endpoint_name("acme", "ranker") != endpoint_name("globex", "ranker")
    assert endpoint_name("acme", "ranker") == endpoint_name("acme", "ranker")
    # Names cut to fit still differ when only their cut-off ends do.
    assert endpoint_name(LONGEST, LONGEST) != endpoint_name(LONGEST, LONGEST[:-1] + "y")


def test_children_carry_the_endpoint_prefix() -> None:
    endpoint = endpoint_name("acme", "ranker")
    assert config_name(endpoint, "abcdef0123").startswith(endpoint + "-")
    assert model_name(endpoint, "blue", "abcdef0123").startswith(endpoint + "-blue-")


def test_variant_names_follow_sagemaker() -> None:
    assert variant_name("canary_v2.1") == "canary-v2-1"
    assert variant_name("Blue") == "blue"


def test_autoscaling_tag_round_trips() -> None:
    scaling = Autoscaling(1, 4, 250.0)
    assert Autoscaling.from_tag(scaling.to_tag()) == scaling
    assert Autoscaling.from_tag("nonsense") is None
    assert Autoscaling.from_tag("0:2:100") is None


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (DeployRequest("ml.g5.xlarge"), None),
        (DeployRequest("ml.g5.xlarge", instance_count=2, max_instances=5), Autoscaling(2, 5, 100.0)),
        (DeployRequest("ml.g5.xlarge", instance_count=2, min_instances=2), Autoscaling(2, 2, 100.0)),
        (DeployRequest("ml.g5.xlarge", target_invocations_per_instance=30), Autoscaling(1, 1, 30.0)),
        (DeployRequest("ml.g5.xlarge", instance_count=3, min_instances=1, max_instances=4), Autoscaling(1, 4, 100.0)),
    ],
)
def test_deploy_request_autoscaling(request_: DeployRequest, expected: Autoscaling | None) -> None:
    assert request_.autoscaling() == expected


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (DeployRequest("ml.g5.xlarge", min_instances=0), "min_instances"),
        (DeployRequest("ml.g5.xlarge", min_instances=3, max_instances=2), "min_instances"),
        (DeployRequest("ml.g5.xlarge", instance_count=5, max_instances=2), "instance_count"),
        (DeployRequest("ml.g5.xlarge", instance_count=1, min_instances=2, max_instances=3), "instance_count"),
        (DeployRequest("ml.g5.xlarge", target_invocations_per_instance=-1), "target_invocations_per_instance"),
    ],
)
def test_deploy_request_refusals(request_: DeployRequest, field: str) -> None:
    with pytest.raises(BadRequest) as caught:
        request_.autoscaling()
    assert caught.value.field == field


def test_weights_on_the_command_line() -> None:
    assert parse_weights(["blue=0.9", "green=0.1"]) == {"blue": 0.9, "green": 0.1}
    for bad in (["blue"], ["=1"], ["blue=lots"]):
        with pytest.raises(BadRequest):
            parse_weights(bad)


def test_sagemaker_version_config() -> None:
    config = {"endpoint_name": "ranker-prod", "variant": "blue", "max_batch_size": 64, "target_model": "ranker"}
    assert sagemaker_config(config) == config
    for bad, field in (
        ({}, "config.endpoint_name"),
        ({"endpoint_name": "under_score"}, "config.endpoint_name"),
        ({"endpoint_name": "ok", "variant": "-x"}, "config.variant"),
        ({"endpoint_name": "ok", "max_batch_size": -1}, "config.max_batch_size"),
        ({"endpoint_name": "ok", "source_version": 1}, "config"),
        ({"endpoint_name": "ok", "endpoint_url": "http://127.0.0.1:9000"}, "config"),  # sluice's own binding only
    ):
        with pytest.raises(BadRequest) as caught:
            sagemaker_config(bad)
        assert caught.value.field == field
