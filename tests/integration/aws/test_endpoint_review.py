"""Review reproductions against moto: a deploy option Triton cannot load reaches SageMaker,
and undeploying one endpoint removes another tenant's configs and models whose names extend
its own."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from sluice.domain import Principal
from sluice.endpoints.names import digest, endpoint_name
from sluice.wiring import Container
from tests.integration.aws.conftest import REGION, on_sagemaker
from tests.integration.conftest import auth
from tests.integration.triton.conftest import mlp_onnx


@pytest.fixture
def client(mlp_service: Container) -> Any:
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    autoscaling = boto3.client("application-autoscaling", region_name=REGION)
    return on_sagemaker(mlp_service, sagemaker=sagemaker, autoscaling=autoscaling), sagemaker


def test_a_max_batch_size_beyond_int32_is_a_400_and_makes_nothing(mlp_service: Container, client: Any) -> None:
    api, sagemaker = client
    _, key = mlp_service.keys.create("acme", ["admin", "predict"])
    mlp_service.deployments.create(Principal("acme", frozenset({"admin"}), "t"), "ranker", {"model": "mlp", "version": 1})
    r = api.post("/api/v1/deployments/ranker/endpoint", json={"instance_type": "ml.g4dn.xlarge", "max_batch_size": 2**31}, headers=auth(key))
    assert (r.status_code, r.json().get("field")) == (400, "max_batch_size"), r.text  # fails: 202
    assert sagemaker.list_endpoints()["Endpoints"] == []


def test_undeploy_leaves_another_tenants_models_alone(mlp_service: Container, client: Any) -> None:
    api, sagemaker = client
    # acme's deployment "x" has endpoint sluice-acme-x-<d>; tenant acme-x's deployment "<d>-y"
    # gets sluice-acme-x-<d>-y-<d2>, whose configs and models start with "sluice-acme-x-<d>-".
    victim_tenant, victim_dep = "acme-x", f"{digest('acme', 'x')}-y"
    mine, theirs = endpoint_name("acme", "x"), endpoint_name(victim_tenant, victim_dep)
    assert theirs.startswith(mine + "-")
    keys = {}
    for tenant, dep in (("acme", "x"), (victim_tenant, victim_dep)):
        principal = Principal(tenant, frozenset({"admin", "predict"}), "t")
        if tenant != "acme":
            mlp_service.models.push(principal, "mlp", mlp_onnx(1))
        mlp_service.deployments.create(principal, dep, {"model": "mlp", "version": 1})
        _, keys[tenant] = mlp_service.keys.create(tenant, ["admin", "predict"])
        r = api.post(f"/api/v1/deployments/{dep}/endpoint", json={"instance_type": "ml.g4dn.xlarge"}, headers=auth(keys[tenant]))
        assert r.status_code == 202, r.text
    before = [m["ModelName"] for m in sagemaker.list_models()["Models"] if m["ModelName"].startswith(theirs)]
    assert before
    r = api.delete("/api/v1/deployments/x/endpoint", headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    after = [m["ModelName"] for m in sagemaker.list_models()["Models"] if m["ModelName"].startswith(theirs)]
    assert after == before, r.json()["deleted"]  # fails: acme's undeploy deleted acme-x's model and config
