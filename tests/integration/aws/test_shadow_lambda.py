"""The asynchronous shadow path in AWS form: the API Lambda invokes the shadow Lambda
(InvocationType=Event) through moto, with the body in S3 when it is over the limit."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from sluice.inference import mirror as mirror_module
from sluice.inference.mirror import LambdaMirror
from sluice.storage.s3 import S3Store
from sluice.wiring import Container
from tests.conftest import EVENTS, MODELS
from tests.integration.aws.conftest import REGION
from tests.integration.test_lambda_api import body_of
from tests.support import LambdaContext

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sluice.domain import Principal
    from sluice.settings import Settings


@pytest.fixture
def cloud(settings: Settings, lambda_dispatch: Any, acme: Principal) -> Iterator[tuple[Container, list[dict[str, Any]], Any]]:
    from sluice.handlers import api, shadow, snapstart
    from sluice.registry.sqlite import SqliteRegistry
    from sluice.wiring import build_runtimes

    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="sluice-artifacts", CreateBucketConfiguration={"LocationConstraint": REGION})
    store = S3Store("sluice-artifacts", "artifacts", client=s3)
    registry = SqliteRegistry(settings.home_path / "registry.db")
    mirror = LambdaMirror("sluice-shadow", store, client=boto3.client("lambda", region_name=REGION))
    container = Container(settings, registry, store, build_runtimes(settings, store), mirror=mirror)
    container.models.push(acme, "iris", (MODELS / "iris.onnx").read_bytes())
    container.models.push(acme, "iris", (MODELS / "iris_forest.onnx").read_bytes())
    container.deployments.create(
        acme,
        "iris",
        {"kind": "shadow", "primary": {"kind": "single", "model": "iris", "version": 1}, "mirrors": [{"name": "forest", "target": {"kind": "single", "model": "iris", "version": 2}}]},
    )
    received = lambda_dispatch("sluice-shadow", shadow.handler)
    saved = api.app.state.container, snapstart.state.container
    api.app.state.container, snapstart.state.container = container, container
    yield container, received, s3
    api.app.state.container, snapstart.state.container = saved


def _predict_event(rows: list[list[float]]) -> dict[str, Any]:
    event = json.loads((EVENTS / "api_rest_predict.json").read_text())
    event["body"] = json.dumps({"deployment": "iris", "inputs": rows})
    return event


def test_the_api_lambda_invokes_the_shadow_lambda_asynchronously(cloud: tuple[Container, list[dict[str, Any]], Any], acme: Principal) -> None:
    from sluice.handlers import api

    container, received, _ = cloud
    response = api.handler(_predict_event([[6.7, 3.0, 5.2, 2.3]]), LambdaContext())
    assert response["statusCode"] == 200 and body_of(response)["version"] == 1
    assert len(received) == 1 and received[0]["mirror"] == "forest" and "inputs" in received[0]
    stats = container.deployments.stats(acme, "iris")
    assert stats["mirrors"]["forest"]["compared"] == 1 and stats["mirrors"]["forest"]["agreement"] == 1.0


def test_bodies_over_the_async_limit_travel_through_s3(cloud: tuple[Container, list[dict[str, Any]], Any], acme: Principal, monkeypatch: pytest.MonkeyPatch) -> None:
    from sluice.handlers import api

    container, received, s3 = cloud
    monkeypatch.setattr(mirror_module, "ASYNC_PAYLOAD_LIMIT", 2_000)
    rows = [[5.1, 3.5, 1.4, 0.2]] * 40
    response = api.handler(_predict_event(rows), LambdaContext())
    assert response["statusCode"] == 200
    (event,) = received
    assert set(event) == {"payload_uri", "sha256", "tenant"} and event["payload_uri"].startswith("s3://sluice-artifacts/")
    stats = container.deployments.stats(acme, "iris")
    assert stats["mirrors"]["forest"]["compared"] == 1 and stats["mirrors"]["forest"]["requests"] == 1
    # The shadow handler removes the offloaded body once it has run.
    leftovers = s3.list_objects_v2(Bucket="sluice-artifacts", Prefix="artifacts/tenants/acme/").get("Contents", [])
    assert not [o for o in leftovers if o["Key"].endswith(".shadow.json")]


def test_a_failed_invoke_never_touches_the_primary(cloud: tuple[Container, list[dict[str, Any]], Any]) -> None:
    from sluice.handlers import api

    container, _, _ = cloud
    container.mirror.function_name = "no-such-function"  # type: ignore[union-attr]
    response = api.handler(_predict_event([[6.7, 3.0, 5.2, 2.3]]), LambdaContext())
    assert response["statusCode"] == 200 and body_of(response)["prediction"] == "virginica"
