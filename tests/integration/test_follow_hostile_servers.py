"""An admitted MLflow server answering what nobody foresaw (JSON of another shape, an MLmodel
nested past the parser's depth, an answer sent a byte at a time) fails its own tenant's
binding, kept on it, and never the poll of the other tenants' bindings. Before, a `{}` for an
alias escaped the poll (KeyError) and every binding after it went unpolled; one after the claim
left the binding `pushing` with nothing recorded, taken over and failed again at each lease."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

from sluice.convert.mlflow_rest import MlflowRest
from sluice.domain.errors import Unavailable
from sluice.domain.follows import Follow, parse_plan
from sluice.domain.origins import parse_allowlist
from tests.conftest import MLFLOW_SERVERS
from tests.fake_mlflow import API, ONNX_MLMODEL, Registry, serving, url
from tests.integration.conftest import auth
from tests.models import embed_model
from tests.support import single

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

    from sluice.domain import Principal
    from sluice.wiring import Container

PLAN = "1,50,100 every 1m gate error_rate<=0.01"


class Hostile(Registry):
    def __init__(self, where: str, bad: Any) -> None:
        super().__init__()
        self.where, self.bad = where, bad

    def answer(self, method: str, path: str, query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        if path == f"{API}/{self.where}":
            return 200, self.bad
        return super().answer(method, path, query, body)


TENSOR_SPEC_LIST = "flavors:\n  onnx:\n    data: model.onnx\nsignature:\n  inputs: '[{\"type\": \"tensor\", \"tensor-spec\": [1]}]'\n"
DEEP = "flavors: " + "[" * 5000 + "]" * 5000 + "\n"


@pytest.mark.parametrize(
    ("where", "bad"),
    [
        ("registered-models/alias", {}),
        ("registered-models/alias", []),
        ("registered-models/alias", {"model_version": {"version": "x"}}),
        ("registered-models/alias", {"model_version": ["1"]}),
        ("model-versions/get-download-uri", {}),  # after the version is claimed
        ("MLmodel", TENSOR_SPEC_LIST),
        ("MLmodel", DEEP),
    ],
    ids=["alias-empty", "alias-list", "alias-version-text", "alias-version-list", "download-uri-empty", "mlmodel-spec-list", "mlmodel-deep"],
)
def test_a_server_answering_what_nobody_foresaw_fails_its_binding_alone(
    demo: Container, acme: Principal, globex: Principal, client: TestClient, keys: dict[str, str], where: str, bad: Any
) -> None:
    for who in (acme, globex):
        demo.models.push(who, "moving", embed_model())
        demo.deployments.create(who, "moving", single("moving", 1))
    honest = Registry()
    hostile = Hostile(where, bad) if where != "MLmodel" else Registry()
    with serving(honest) as good, serving(hostile) as evil:
        admitted = parse_allowlist([*MLFLOW_SERVERS, url(good), url(evil)], field="mlflow_tracking_servers")
        demo.follows.tracking_servers = demo.follower.mlflow.allowed = admitted
        body = {"registry": "models:/moving@champion", "rollout": PLAN}
        # acme's binding, on the hostile server, is looked at first
        assert client.post("/api/v1/deployments/moving/follow", json={**body, "tracking_uri": url(evil)}, headers=auth(keys["acme"])).status_code == 201
        assert client.post("/api/v1/deployments/moving/follow", json={**body, "tracking_uri": url(good)}, headers=auth(keys["globex"])).status_code == 201
        honest.versions[2] = hostile.versions[2] = ONNX_MLMODEL
        if where == "MLmodel":
            hostile.versions[2] = bad + "onnx:\n"  # the fake serves model.onnx where the text says onnx
        honest.aliases["champion"] = hostile.aliases["champion"] = 2
        done = demo.follower.poll_once()
    assert done["globex/moving"] == "rolling_out"
    assert done["acme/moving"] == "conversion_failed" or done["acme/moving"].startswith("error: ")
    kept = demo.registry.get_follow("acme", "moving")
    assert kept.state != "pushing"  # nothing left claimed for a lease to take over
    assert kept.error is not None or kept.history[-1].outcome == "conversion_failed"


@pytest.mark.parametrize("refused", [False, True])
def test_an_answer_sent_a_byte_at_a_time_is_cut_at_its_deadline(refused: bool) -> None:
    """The timeout bounds each wait for bytes; a server sending one a little faster held a call,
    and so the poll of every binding, as long as it liked: an answer's body, or an error's."""
    registry = Registry()
    registry.drip_s = 20.0
    if refused:
        registry.fail_with = (404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "x" * 2000})
    with serving(registry) as server:
        rest = MlflowRest(allowed=parse_allowlist([url(server)], field="x"), credentials=lambda t: None, reads=lambda f: None, timeout_s=1.0)
        follow = Follow(
            "acme", "moving", "models:/moving@champion", "mlflow", "moving", str(parse_plan(PLAN)),
            "mlflow:models:/moving@champion", tracking_uri=url(server),
        )  # fmt: skip
        started = time.monotonic()
        with pytest.raises(Unavailable, match="too slowly"):
            rest.current_version(follow)
        assert time.monotonic() - started < 10  # its budget: the timeout and a second a MiB (~3 s), well short of the 20 s
        server.shutdown()  # its handler is still dripping


@pytest.mark.parametrize(
    "mlmodel",
    [
        "flavors:\n  sklearn: {}\n  'leak {auth}': {}\n",  # a flavor's name
        "flavors:\n  onnx: {data: model.onnx}\nsignature:\n  inputs: '[{\"type\": \"string\", \"name\": \"{auth}\"}]'\n",  # a column's
    ],
    ids=["flavor", "column"],
)
def test_credentials_a_server_quotes_back_are_never_in_what_is_recorded(mlmodel: str, tmp_path: Any) -> None:
    """Refusals made of a 200 answer repeated it as the server wrote it, the tenant's
    Authorization header included, into the reason its admins read."""
    import base64

    from sluice.convert.mlflow_credentials import Credentials
    from sluice.domain.errors import SluiceError

    password = "pw-7f3c9e1b-never-shown"
    credentials = Credentials(username="sluice-bot", password=password)
    registry = Registry()
    registry.versions[2] = mlmodel.replace("{auth}", credentials.authorization())
    with serving(registry) as server:
        rest = MlflowRest(allowed=parse_allowlist([url(server)], field="x"), credentials=lambda t: credentials, reads=lambda f: None)
        follow = Follow(
            "acme", "moving", "models:/moving@champion", "mlflow", "moving", str(parse_plan(PLAN)),
            "mlflow:models:/moving@champion", tracking_uri=url(server),
        )  # fmt: skip
        with pytest.raises(SluiceError) as refused:
            rest.pull(follow, 2, tmp_path)
    said = refused.value.message
    assert password not in said and base64.b64encode(f"sluice-bot:{password}".encode()).decode() not in said
    assert "***" in said
