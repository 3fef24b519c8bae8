"""Follow bindings through the API (admin scope, per tenant): made, shown with what became of
each version, listed and removed; a binding that cannot be made is a 4xx naming the field."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.integration.conftest import auth

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

    from sluice.wiring import Container

BODY = {"registry": "models:/iris@champion", "rollout": "1,10,100 every 10m gate agreement>=0.98", "tracking_uri": "https://mlflow.example.com"}


def test_a_binding_is_made_shown_listed_and_removed_in_its_tenant(client: TestClient, keys: dict[str, str]) -> None:
    made = client.post("/api/v1/deployments/iris/follow", json=BODY, headers=auth(keys["acme"]))
    assert made.status_code == 201, made.text
    body = made.json()
    assert (body["registry"], body["model"], body["state"], body["history"]) == ("mlflow", "iris", "waiting", [])
    assert body["plan"] == "1,10,100 every 10m gate agreement>=0.98 min 100"
    assert client.get("/api/v1/deployments/iris/follow", headers=auth(keys["acme"])).json() == body
    assert [f["deployment"] for f in client.get("/api/v1/follows", headers=auth(keys["acme"])).json()] == ["iris"]
    assert client.get("/api/v1/follows", headers=auth(keys["globex"])).json() == []  # another tenant's
    assert client.get("/api/v1/deployments/iris/follow", headers=auth(keys["globex"])).status_code == 404
    assert client.get("/api/v1/deployments/iris/follow", headers=auth(keys["acme_predict"])).status_code == 403
    again = client.post("/api/v1/deployments/iris/follow", json=BODY, headers=auth(keys["acme"]))
    assert again.status_code == 409 and again.json()["field"] == "deployment"
    assert client.delete("/api/v1/deployments/iris/follow", headers=auth(keys["acme"])).status_code == 204
    gone = client.get("/api/v1/deployments/iris/follow", headers=auth(keys["acme"]))
    assert gone.status_code == 404 and gone.json()["error"] == "deployment 'iris' follows no registry"


def test_a_binding_that_cannot_be_made_is_a_4xx_naming_the_field(client: TestClient, keys: dict[str, str]) -> None:
    for change, field, status in (
        ({"rollout": "100 gate agreement>=0.98"}, "rollout", 422),
        ({"registry": "models:/iris/3"}, "registry", 422),
        ({"registry": "models:/" + "n" * 257 + "/latest"}, "registry", 422),  # longer than MLflow keeps a name
        ({"registry": "models:/iris@" + "a" * 257}, "registry", 422),
        ({"tracking_uri": "https://alice:s3cret@mlflow.example.com"}, "tracking_uri", 422),
        # A URL Python cannot split (its message quotes the whole netloc): the credentials not echoed either.
        ({"tracking_uri": "https://alice:s3cret@mlflow.example.com\u2100/"}, "tracking_uri", 422),
        ({"tracking_uri": "https://s3cret@mlflow.example.com\uff0f"}, "tracking_uri", 422),
        ({"tracking_uri": "https://alice:s3cret@[::1/"}, "tracking_uri", 422),
        ({"registry": "arn:aws:sagemaker:eu-west-1:123456789012:model-package-group/iris", "tracking_uri": None, "tag_back": True}, "tag_back", 422),
        # What every version would then be refused for: a rollout's min_requests, a model name no push takes.
        ({"rollout": "5,100 gate error_rate<=0.01 min 20000000"}, "rollout", 422),
        ({"model": "Bad Name/.."}, "model", 400),
        ({"model": ""}, "model", 400),
        ({"tag_back": "yes"}, "tag_back", 422),
    ):
        answer = client.post("/api/v1/deployments/iris/follow", json={**BODY, **change}, headers=auth(keys["acme"]))
        assert (answer.status_code, answer.json()["field"]) == (status, field), answer.text
        assert "s3cret" not in answer.text
    assert client.post("/api/v1/deployments/nosuch/follow", json=BODY, headers=auth(keys["acme"])).status_code == 404


def test_a_failing_poll_is_shown_on_the_binding_until_one_succeeds(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    from sluice.domain.errors import Forbidden

    assert client.post("/api/v1/deployments/iris/follow", json=BODY, headers=auth(keys["acme"])).status_code == 201
    refused = Forbidden("MLflow at https://mlflow.example.com answered /api/2.0/mlflow/registered-models/alias with 403", http_status=403)
    demo.follows.note_error("acme", "iris", refused)
    demo.follows.note_error("acme", "iris", refused)  # the next poll fails the same way
    error = client.get("/api/v1/deployments/iris/follow", headers=auth(keys["acme"])).json()["error"]
    assert error["kind"] == "unauthorized" and error["message"] == refused.message and error["since"] <= error["at"]
    assert client.get("/api/v1/follows", headers=auth(keys["acme"])).json()[0]["error"] == error
    demo.follows.note_error("acme", "iris", None)  # a poll that succeeds
    assert client.get("/api/v1/deployments/iris/follow", headers=auth(keys["acme"])).json()["error"] is None
