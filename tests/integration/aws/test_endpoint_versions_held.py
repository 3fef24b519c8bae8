"""What an endpoint's binding stands on is kept while it stands (found by a black-box review):
the version a bound deployment is pointed back at when its endpoint is undeployed cannot be
deleted first (undeploying was then refused for good, the endpoint left running and billed),
and a deployment cannot be undeployed while another deployment routes to a version its endpoint
serves (that deployment's requests went to a deleted endpoint). moto's SageMaker."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from sluice.domain import Principal
from tests.integration.aws.conftest import REGION, EndpointsWorld, on_sagemaker
from tests.integration.conftest import api_keys, auth

ACME = Principal("acme", frozenset({"admin", "predict"}), "test-acme")


@pytest.fixture
def world(mlp_service: Any) -> EndpointsWorld:
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    client = on_sagemaker(mlp_service, sagemaker=sagemaker, autoscaling=boto3.client("application-autoscaling", region_name=REGION))
    return EndpointsWorld(container=mlp_service, client=client, keys=api_keys(mlp_service), sagemaker=sagemaker)


def _call(world: EndpointsWorld, method: str, path: str, body: Any = None) -> Any:
    return world.client.request(method, path, json=body, headers=auth(world.keys["acme"]))


def _deployed(world: EndpointsWorld, name: str) -> dict[str, Any]:
    world.container.deployments.create(ACME, name, {"model": "mlp", "version": 1})
    assert _call(world, "POST", f"/api/v1/deployments/{name}/endpoint", {"instance_type": "ml.g4dn.xlarge"}).status_code in (200, 201, 202)
    policy = world.container.deployments.get(ACME, name).policy
    assert policy["version"] != 1  # bound: the version the endpoint serves
    return policy


def test_the_version_a_binding_stands_for_cannot_be_deleted_while_it_stands(world: EndpointsWorld) -> None:
    _deployed(world, "ranker")
    refused = _call(world, "DELETE", "/api/v1/models/mlp/versions/1")
    assert refused.status_code == 409 and refused.json()["field"] == "model" and "undeploy it first" in refused.json()["error"], refused.text
    assert _call(world, "DELETE", "/api/v1/deployments/ranker/endpoint").status_code == 200
    assert world.container.deployments.get(ACME, "ranker").policy == {"kind": "single", "model": "mlp", "version": 1}


def test_an_endpoint_another_deployment_routes_to_is_not_undeployed(world: EndpointsWorld) -> None:
    policy = _deployed(world, "a")
    world.container.deployments.create(ACME, "b", policy)  # b routes to the version a's endpoint serves
    refused = _call(world, "DELETE", "/api/v1/deployments/a/endpoint")
    assert refused.status_code == 409 and refused.json()["field"] == "endpoint" and "deployment 'b'" in refused.json()["error"], refused.text
    assert world.container.deployments.get(ACME, "a").policy == policy  # nothing changed
    world.container.deployments.update(ACME, "b", {"kind": "single", "model": "mlp", "version": 2}, expected_revision=None)
    assert _call(world, "DELETE", "/api/v1/deployments/a/endpoint").status_code == 200


def test_an_endpoint_another_binding_stands_on_is_not_undeployed(world: EndpointsWorld) -> None:
    """b was deployed from a policy that routed to a's endpoint (b's bound version stands for
    a's): undeploying a would leave b pointed back, at its own undeploy, at a deleted endpoint."""
    policy = _deployed(world, "a")
    world.container.deployments.create(ACME, "b", policy)
    assert _call(world, "POST", "/api/v1/deployments/b/endpoint", {"instance_type": "ml.g4dn.xlarge"}).status_code in (200, 201, 202)
    assert world.container.deployments.get(ACME, "b").policy != policy  # b routes to its own endpoint now
    refused = _call(world, "DELETE", "/api/v1/deployments/a/endpoint")
    assert refused.status_code == 409 and "deployment 'b'" in refused.json()["error"] and "stands on" in refused.json()["error"], refused.text
    assert _call(world, "DELETE", "/api/v1/deployments/b/endpoint").status_code == 200  # b back at a's version
    assert world.container.deployments.get(ACME, "b").policy == policy
