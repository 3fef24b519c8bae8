"""A tenant's MLflow binding on `sluice serve` is read as on AWS: its tracking URI is a URL the
tenant supplies and sluice's poller calls, so only the servers `mlflow_tracking_servers` admits
are taken (when the binding is made, and before every call), over MLflow's REST API, without
the credentials in the process's environment (MLflow's variables are the operator's) and
without reading the machine's files. The operator's own bindings (the CLI) keep MLflow's client.

Before, a tenant's binding to any URL had the poller send the operator's MLFLOW_TRACKING_TOKEN
there, and a `file:` or `sqlite:` tracking URI or download URI read the machine's files."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.domain.follows import Follow, parse_plan
from tests.conftest import MLFLOW_SERVERS
from tests.fake_mlflow import API, ONNX_MLMODEL, Registry, serving, url
from tests.integration.conftest import auth, run_cli
from tests.models import embed_model
from tests.support import single

if TYPE_CHECKING:
    from collections.abc import Iterator

    from fastapi.testclient import TestClient

    from sluice.domain import Principal
    from sluice.wiring import Container

PLAN = "1,50,100 every 1m gate error_rate<=0.01"
BODY = {"registry": "models:/moving@champion", "rollout": PLAN}
TOKEN, PASSWORD = "operator-token-4b1d9e", "operator-password-77c2"


class Leaky(Registry):
    """A server that says a version's artifacts are somewhere on the poller's machine."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where

    def answer(self, method: str, path: str, query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        if path == f"{API}/model-versions/get-download-uri" and query.get("version") == "3":
            return 200, {"artifact_uri": self.where}
        return super().answer(method, path, query, body)


@pytest.fixture
def operators_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow's own variables in the environment of the process that polls: the operator's."""
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", TOKEN)
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "operator")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", PASSWORD)


@pytest.fixture
def moving(demo: Container, acme: Principal) -> Container:
    """acme's model `moving` (version 1, MLflow's version 1 too) served by deployment `moving`."""
    demo.models.push(acme, "moving", embed_model())
    demo.deployments.create(acme, "moving", single("moving", 1))
    return demo


@pytest.fixture
def tracking(moving: Container, operators_credentials: None) -> Iterator[tuple[Leaky, str]]:
    """The fake tracking server, admitted as an operator admits one (`mlflow_tracking_servers`)."""
    from sluice.domain.origins import parse_allowlist

    registry = Leaky("")
    with serving(registry) as server:
        uri = url(server)
        admitted = parse_allowlist([*MLFLOW_SERVERS, uri], field="mlflow_tracking_servers")
        moving.follows.tracking_servers = admitted
        moving.follower.mlflow.allowed = admitted  # type: ignore[attr-defined]
        yield registry, uri


# Tracking URIs no allowlist entry admits: other schemes (MLflow's stores on the poller's own
# disk or database), loopback and link-local services, look-alike hosts, other ports.
REFUSED = (
    "sqlite:////root/.sluice/registry.db", "file:///etc", "file:///", "mlruns", "databricks", "postgresql://db/mlflow",
    "http://127.0.0.1:5000", "http://localhost:8100", "http://169.254.169.254", "http://[::1]:5000",
    "https://mlflow.example.com.evil.net", "https://mlflow.example.com:8443", "http://mlflow.example.com:80@evil.net",
    "https://evil.net/mlflow.example.com", "ftp://mlflow.example.com", "HTTPS://MLFLOW.EXAMPLE.COM:444",
    "https://[::1", "https://[mlflow.example.com]", "http://mlflow.example.com:99999", "https://mlflow.example.com:x",
)  # fmt: skip
NOT_ADMITTED = st.one_of(
    st.sampled_from(REFUSED),
    st.builds(
        "{}://{}{}".format,
        st.sampled_from(["http", "https", "file", "sqlite", "s3", "gs"]),
        st.from_regex(r"[a-z0-9-]{1,20}(\.[a-z]{2,6}){0,2}", fullmatch=True).filter(lambda h: h != "mlflow.example.com"),
        st.sampled_from(["", ":5000", "/", "/mlflow"]),
    ),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(uri=NOT_ADMITTED)
def test_a_tenants_binding_names_an_admitted_tracking_server_or_is_refused(client: TestClient, keys: dict[str, str], uri: str) -> None:
    answer = client.post("/api/v1/deployments/iris/follow", json={**BODY, "tracking_uri": uri}, headers=auth(keys["acme"]))
    assert answer.status_code in (400, 403, 422), answer.text
    assert answer.json()["field"] == "tracking_uri"
    assert client.get("/api/v1/deployments/iris/follow", headers=auth(keys["acme"])).status_code == 404


def test_no_server_is_admitted_until_the_operator_names_one(tmp_path: Any) -> None:
    from sluice.domain import Principal
    from sluice.domain.errors import Forbidden
    from sluice.settings import Settings
    from sluice.wiring import Container

    defaults = Container.from_settings(Settings(mode="local", home=tmp_path / "home", registry="", store=""))
    acme = Principal("acme", frozenset({"admin"}), "k")
    with pytest.raises(Forbidden) as refused:
        defaults.follows.follow(acme, "iris", source="models:/iris@champion", rollout=PLAN, tracking_uri="https://mlflow.example.com")
    assert refused.value.field == "tracking_uri" and "not an allowed server" in refused.value.message


def test_a_tenants_binding_is_read_over_rest_without_the_operators_credentials(
    client: TestClient, keys: dict[str, str], tracking: tuple[Leaky, str], moving: Container
) -> None:
    registry, uri = tracking
    made = client.post("/api/v1/deployments/moving/follow", json={**BODY, "tracking_uri": uri}, headers=auth(keys["acme"]))
    assert made.status_code == 201, made.text
    assert made.json()["operator"] is False
    registry.versions[2] = ONNX_MLMODEL
    registry.aliases["champion"] = 2
    assert moving.follower.poll_once() == {"acme/moving": "rolling_out"}
    assert moving.registry.list_versions("acme", "moving")[-1].source["version"] == 2
    assert registry.requests and all(authorization is None for _, _, authorization in registry.requests)


@pytest.mark.parametrize("where", ["file:///{model}", "{folder}", "s3://operators-bucket/models/m-1"])
def test_a_tenants_binding_never_reads_the_pollers_files_or_buckets(
    client: TestClient, keys: dict[str, str], tracking: tuple[Leaky, str], moving: Container, tmp_path: Any, where: str
) -> None:
    """The server names, as version 3's artifacts, a folder on the poller's machine holding an
    MLmodel and an ONNX model (or an S3 location only the operator's credentials read)."""
    registry, uri = tracking
    folder = tmp_path / "operators-model"
    folder.mkdir()
    (folder / "MLmodel").write_text(ONNX_MLMODEL)
    (folder / "model.onnx").write_bytes(embed_model())
    registry.where = where.format(model=str(folder).lstrip("/"), folder=folder)
    made = client.post("/api/v1/deployments/moving/follow", json={**BODY, "tracking_uri": uri}, headers=auth(keys["acme"]))
    assert made.status_code == 201, made.text
    registry.versions[3] = ONNX_MLMODEL
    registry.aliases["champion"] = 3
    assert moving.follower.poll_once() == {"acme/moving": "conversion_failed"}
    shown = client.get("/api/v1/deployments/moving/follow", headers=auth(keys["acme"])).json()
    assert "cannot read" in shown["history"][-1]["reason"]
    assert [v.version for v in moving.registry.list_versions("acme", "moving")] == [1]


def test_a_binding_stored_by_a_tenant_before_is_refused_at_every_poll(
    moving: Container, operators_credentials: None, tmp_path: Any
) -> None:
    """A binding a tenant made before servers were checked (or after its server stopped being
    admitted) names a tracking URI on the poller's disk: the poll refuses it, reads nothing."""
    store = tmp_path / "operators-mlflow.db"
    moving.registry.create_follow(
        Follow("acme", "moving", "models:/moving@champion", "mlflow", "moving", str(parse_plan(PLAN)), "mlflow:moving",
               tracking_uri=f"sqlite:///{store}")
    )  # fmt: skip
    (outcome,) = moving.follower.poll_once().values()
    assert outcome.startswith("error: ") and "http" in outcome
    assert not store.exists()  # MLflow's client would have made the database
    assert moving.registry.get_follow("acme", "moving").error is not None


@pytest.mark.usefixtures("cli_home")
def test_the_operators_binding_from_the_cli_takes_any_tracking_uri(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    model = tmp_path / "moving.onnx"
    model.write_bytes(embed_model())
    assert run_cli(capsys, "models", "push", "moving", str(model))[0] == 0
    assert run_cli(capsys, "deployments", "create", "moving", "--model", "moving")[0] == 0
    code, _, err = run_cli(
        capsys, "deployments", "follow", "moving", "--registry", "models:/moving@champion",
        "--tracking-uri", f"sqlite:///{tmp_path}/mlruns.db", "--rollout", PLAN,
    )  # fmt: skip
    assert code == 0, err
    code, out, _ = run_cli(capsys, "deployments", "follow", "moving", "--show")
    assert code == 0 and json.loads(out)["operator"] is True



def test_a_tenant_cannot_say_its_binding_is_the_operators(client: TestClient, keys: dict[str, str]) -> None:
    body = {**BODY, "tracking_uri": "sqlite:///m.db", "operator": True}
    answer = client.post("/api/v1/deployments/iris/follow", json=body, headers=auth(keys["acme"]))
    assert answer.status_code == 422 and answer.json()["field"] == "operator"
    assert client.get("/api/v1/deployments/iris/follow", headers=auth(keys["acme"])).status_code == 404
