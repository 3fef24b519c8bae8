"""moto-backed AWS for integration tests: fake credentials, a region, and a Lambda backend
whose invokes run sluice's own handlers in process."""

from __future__ import annotations

import io
import json
import zipfile
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto import mock_aws

from tests.support import LambdaContext, OneCallAtATime, fake_aws_credentials

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from fastapi.testclient import TestClient

    from sluice.settings import Settings
    from sluice.wiring import Container

REGION = "eu-west-1"
BUCKET = "sluice-artifacts"
ENDPOINTS_ROLE = "arn:aws:iam::123456789012:role/sluice-endpoints"


def _off_the_timer() -> None:
    """Recorders of earlier tests (a handler's cached container keeps its own) off the
    statistics timer: moto's stubs serve every client of the process, so their flushes would
    write into this test's backend from the timer thread, and moto is not thread-safe (a
    transaction deep-copies the tables another thread is writing)."""
    from sluice.stats import timer

    for recorder in list(timer._timer._recorders):
        timer.forget(recorder)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    fake_aws_credentials(monkeypatch, REGION)
    _off_the_timer()
    with mock_aws(config={"lambda": {"use_docker": False}, "stepfunctions": {"execute_state_machine": True}}):
        yield
    _off_the_timer()


@pytest.fixture
def lambda_dispatch(aws: None, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, Callable[[dict[str, Any], Any], Any]], list[dict[str, Any]]]:
    """Register a moto Lambda whose invokes call `handler(event, context)` here; returns the
    list of events it received."""
    from moto.awslambda_simple.models import LambdaSimpleBackend

    routes: dict[str, Callable[[dict[str, Any], Any], Any]] = {}
    received: dict[str, list[dict[str, Any]]] = {}

    def invoke(self: Any, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: Any) -> bytes:
        name = function_name.split(":")[-1]
        event = json.loads(body or "{}")
        received[name].append(event)
        result = routes[name](event, LambdaContext(function_name=name))
        return json.dumps(result).encode()

    monkeypatch.setattr(LambdaSimpleBackend, "invoke", invoke)
    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(
        RoleName="sluice-test-role",
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
    )["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as z:
        z.writestr("index.py", "def handler(event, context):\n    return event\n")

    def register(name: str, handler: Callable[[dict[str, Any], Any], Any]) -> list[dict[str, Any]]:
        boto3.client("lambda", region_name=REGION).create_function(
            FunctionName=name, Runtime="python3.11", Role=role, Handler="index.handler", Code={"ZipFile": code.getvalue()}
        )
        routes[name] = handler
        received[name] = []
        return received[name]

    return register


class Recorded:
    """What boto3 clients were asked: `calls`, each operation's name in the order made;
    `sent`, each operation's request parameters in that order. Both are taken as a request's
    parameters are built: a botocore Stubber answers before any other `before-call` hook."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.sent: dict[str, list[dict[str, Any]]] = {}

    def watch(self, *clients: Any) -> None:
        for client in clients:
            client.meta.events.register("before-parameter-build", self._params)
            client.meta.events.register("before-parameter-build", self._call)

    def _call(self, model: Any, **_: Any) -> None:
        self.calls.append(model.name)

    def _params(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        self.sent.setdefault(model.name, []).append(dict(params))


def sagemaker_settings(home: Path) -> Settings:
    """A local service at `home` that deploys SageMaker endpoints (on moto: call under `aws`),
    its store in a new S3 bucket, its deployments read afresh on every request."""
    from sluice.settings import Settings

    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    return Settings(
        mode="local",
        home=home,
        store=f"s3://{BUCKET}/artifacts",
        region=REGION,
        endpoints="sagemaker",
        sagemaker_execution_role_arn=ENDPOINTS_ROLE,
        deployment_cache_ttl_s=0,
    )


@pytest.fixture
def on_dynamodb(aws: None, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Container:
    """The service of `settings` over a DynamoDB registry (moto, one call at a time: the
    statistics' timer thread writes too) and a folder store, the container a handler gets
    (`wiring.get_container`): what the tests of the scheduled functions run."""
    from sluice import wiring
    from sluice.registry.dynamodb import DynamoRegistry, create_table
    from sluice.storage.folder import FolderStore
    from sluice.wiring import Container, build_runtimes

    dynamodb = boto3.client("dynamodb", region_name=REGION)
    create_table(dynamodb, "sluice-registry")
    registry = DynamoRegistry("sluice-registry", client=OneCallAtATime(dynamodb))
    store = FolderStore(settings.home_path / "artifacts")
    container = Container(settings, registry, store, build_runtimes(settings, store))
    monkeypatch.setattr(wiring, "get_container", lambda: container)
    return container


@pytest.fixture
def mlp_service(aws: None, tmp_path: Path) -> Container:
    """The service of `sagemaker_settings` at `tmp_path/home`, with versions 1 and 2 of the
    `mlp` model pushed for acme: what the tests of endpoints deploy."""
    from sluice.domain import Principal
    from sluice.wiring import Container
    from tests.integration.triton.conftest import mlp_onnx

    container = Container.from_settings(sagemaker_settings(tmp_path / "home"))
    acme = Principal("acme", frozenset({"admin", "predict"}), "test-acme")
    for version in (1, 2):
        container.models.push(acme, "mlp", mlp_onnx(version))
    return container


class EndpointsWorld(SimpleNamespace):
    """What a test of endpoints works with: `mlp_service` and a client of its API
    (`on_sagemaker`), with the test's own parts beside them."""

    container: Container
    client: TestClient


def on_sagemaker(container: Container, **clients: Any) -> TestClient:
    """`container` (`mlp_service`) deploying endpoints through the adapter wiring builds from
    `sagemaker_settings`, on `clients` (a test's, by the names the adapter takes them under;
    the factory's for the others): a client of its API."""
    from fastapi.testclient import TestClient

    from sluice.api.app import create_app
    from sluice.endpoints.sagemaker import SageMakerEndpoints

    container.endpoint_control = SageMakerEndpoints(container.store, region=REGION, role_arn=ENDPOINTS_ROLE, ready=clients)
    return TestClient(create_app(container))
