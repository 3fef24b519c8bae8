"""Models, versions, deployments and keys through the API: a new version switches
predictions with no restart, and every change is recorded."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient

from tests.conftest import MODELS
from tests.integration.conftest import auth
from tests.support import ReadThen

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.wiring import Container

ROW = {"deployment": "iris", "inputs": [[5.9, 3.0, 5.1, 1.8]]}


def push(client: TestClient, key: str, name: str, filename: str, **params: str) -> dict:
    r = client.post(
        f"/api/v1/models/{name}/versions",
        content=(MODELS / filename).read_bytes(),
        params=params,
        headers={**auth(key), "content-type": "application/octet-stream"},
    )
    assert r.status_code == 201, r.text
    return r.json()


def test_push_point_and_switch_without_restart(client: TestClient, keys: dict[str, str]) -> None:
    key = keys["acme"]
    before = client.post("/api/v1/predictions", json=ROW, headers=auth(key)).json()
    assert before["version"] == 1
    v2 = push(client, key, "iris", "iris_forest.onnx")
    assert v2["version"] == 2 and v2["signature"]["inputs"][0]["feature_names"][0] == "sepal_length"
    r = client.put("/api/v1/deployments/iris", json={"model": "iris", "version": 2}, headers=auth(key))
    assert r.status_code == 200 and r.json()["revision"] == 2
    after = client.post("/api/v1/predictions", json=ROW, headers=auth(key)).json()
    assert after["version"] == 2
    assert after["probabilities"] != before["probabilities"]
    history = client.get("/api/v1/deployments/iris/history", headers=auth(key)).json()
    assert [h["revision"] for h in history] == [1, 2]
    assert history[-1]["old_policy"]["version"] == 1 and history[-1]["new_policy"]["version"] == 2
    assert history[-1]["by"]  # the key id that made the change


def test_push_by_uri_and_feature_names(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    imports = demo.settings.home_path / "imports" / "acme"
    imports.mkdir(parents=True)
    (imports / "dia.onnx").write_bytes((MODELS / "diabetes_mlp.onnx").read_bytes())
    r = client.post("/api/v1/models/dia2/versions", json={"artifact_uri": (imports / "dia.onnx").as_uri()}, headers=auth(keys["acme"]))
    assert r.status_code == 201, r.text
    assert r.json()["sha256"] and r.json()["size_bytes"] == (MODELS / "diabetes_mlp.onnx").stat().st_size
    v = push(client, keys["acme"], "irisx", "iris.onnx", feature_names="a,b,c,d")
    assert v["signature"]["inputs"][0]["feature_names"] == ["a", "b", "c", "d"]


def test_feature_names_for_a_model_of_several_inputs_are_refused_not_dropped(client: TestClient, keys: dict[str, str]) -> None:
    """Feature names name one input's columns: given for a model of two inputs they were taken
    (201) and dropped, the caller never told."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])], "two",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, 2]) for n in ("a", "b")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    h = {**auth(keys["acme"]), "content-type": "application/octet-stream"}
    refused = client.post("/api/v1/models/two/versions", content=model.SerializeToString(), params={"feature_names": "x,y"}, headers=h)
    assert refused.status_code == 422 and refused.json()["field"] == "feature_names" and "2 inputs" in refused.json()["error"], refused.text
    assert client.post("/api/v1/models/two/versions", content=model.SerializeToString(), headers=h).status_code == 201


def test_push_by_uri_only_reads_what_the_tenant_may_import(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    h = auth(keys["acme"])
    registry_file = (demo.settings.home_path / "registry.db").as_uri()
    r = client.post("/api/v1/models/x/versions", json={"artifact_uri": registry_file}, headers=h)
    assert r.status_code == 403 and r.json()["field"] == "artifact_uri" and "imports/acme" in r.json()["error"]
    sneaky = (demo.settings.home_path / "imports" / "acme" / ".." / "globex" / "m.onnx").as_uri()
    assert client.post("/api/v1/models/x/versions", json={"artifact_uri": sneaky}, headers=h).status_code in (400, 403)
    assert client.post("/api/v1/models/x/versions", json={"artifact_uri": (MODELS / "iris.onnx").as_uri()}, headers=h).status_code == 403


@pytest.mark.parametrize("climb", ["%2e%2e", "%2E%2E", ".%2e", "%2e.", "acme/../..", "%2e%2e/%2e%2e/%2e%2e/globex"])
def test_push_by_uri_refuses_an_encoded_climb_into_another_tenants_imports(
    client: TestClient, keys: dict[str, str], demo: Container, climb: str
) -> None:
    """Finding 2 of the security review: `imports/acme/%2e%2e/globex/model.onnx` registered
    globex's model for acme with a 201."""
    home = demo.settings.home_path
    (home / "imports" / "globex").mkdir(parents=True)
    (home / "imports" / "globex" / "model.onnx").write_bytes((MODELS / "iris.onnx").read_bytes())
    uri = (home / "imports" / "acme").as_uri() + f"/{climb}/globex/model.onnx"
    r = client.post("/api/v1/models/stolen/versions", json={"artifact_uri": uri}, headers=auth(keys["acme"]))
    assert r.status_code in (400, 403) and r.json()["field"] == "artifact_uri", r.text
    assert str(home) not in r.text
    assert client.get("/api/v1/models/stolen/versions", headers=auth(keys["acme"])).status_code == 404


def test_a_version_names_its_artifact_by_the_tenants_root_and_push_by_uri_takes_that_name(
    client: TestClient, keys: dict[str, str], demo: Container
) -> None:
    h = auth(keys["acme"])
    version = client.get("/api/v1/models/iris/versions/1", headers=h).json()
    assert version["artifact_uri"].startswith("store/sha256/") and version["artifact_uri"].endswith(".onnx")
    again = client.post("/api/v1/models/iris-copy/versions", json={"artifact_uri": version["artifact_uri"]}, headers=h)
    assert again.status_code == 201 and again.json()["sha256"] == version["sha256"], again.text
    (demo.settings.home_path / "imports" / "acme").mkdir(parents=True)
    missing = client.post("/api/v1/models/x/versions", json={"artifact_uri": "imports/missing.onnx"}, headers=h)
    assert missing.status_code == 404 and missing.json()["error"] == "no file at imports/missing.onnx"


def test_model_crud_and_errors(client: TestClient, keys: dict[str, str]) -> None:
    h = auth(keys["acme"])
    assert client.post("/api/v1/models", json={"name": "fresh", "description": "d"}, headers=h).status_code == 201
    assert client.post("/api/v1/models", json={"name": "fresh"}, headers=h).status_code == 409
    assert client.post("/api/v1/models", json={"name": "Bad Name"}, headers=h).json()["field"] == "name"
    names = [m["name"] for m in client.get("/api/v1/models", headers=h).json()]
    assert {"iris", "diabetes", "fresh"} <= set(names)
    assert client.get("/api/v1/models/iris", headers=h).json()["latest_version"] == 1
    assert client.get("/api/v1/models/iris/versions/latest", headers=h).json()["version"] == 1
    assert len(client.get("/api/v1/models/iris/versions", headers=h).json()) == 1
    bad = client.post("/api/v1/models/junk/versions", content=b"not onnx", headers={**h, "content-type": "application/octet-stream"})
    assert bad.status_code == 400 and bad.json()["field"] == "artifact"
    # A deployed version cannot be deleted out from under its deployment.
    r = client.delete("/api/v1/models/iris/versions/1", headers=h)
    assert r.status_code == 409 and "deployment 'iris'" in r.json()["error"]
    assert client.delete("/api/v1/models/fresh", headers=h).status_code == 204
    assert client.get("/api/v1/models/fresh", headers=h).status_code == 404


def test_deployment_crud_and_validation(client: TestClient, keys: dict[str, str]) -> None:
    h = auth(keys["acme"])
    r = client.post("/api/v1/deployments", json={"name": "iris-b", "model": "iris"}, headers=h)
    assert r.status_code == 201 and r.json()["policy"] == {"kind": "single", "model": "iris", "version": 1}
    assert client.post("/api/v1/deployments", json={"name": "iris-b", "model": "iris"}, headers=h).status_code == 409
    r = client.post("/api/v1/deployments", json={"name": "x", "model": "iris", "version": 7}, headers=h)
    assert r.status_code == 422 and r.json()["field"] == "policy"
    r = client.post("/api/v1/deployments", json={"name": "x", "model": "ghost"}, headers=h)
    assert r.status_code == 422 and r.json()["field"] == "model"
    r = client.post("/api/v1/deployments", json={"name": "x"}, headers=h)
    assert r.status_code == 400 and r.json()["field"] == "policy"
    r = client.put("/api/v1/deployments/iris-b", json={"model": "iris", "version": 1, "revision": 5}, headers=h)
    assert r.status_code == 409 and r.json()["field"] == "revision"
    assert [d["name"] for d in client.get("/api/v1/deployments", headers=h).json()] == ["diabetes", "iris", "iris-b"]
    assert client.delete("/api/v1/deployments/iris-b", headers=h).status_code == 204
    assert client.get("/api/v1/deployments/iris-b", headers=h).status_code == 404


def test_keys_create_list_revoke(client: TestClient, keys: dict[str, str]) -> None:
    h = auth(keys["acme"])
    r = client.post("/api/v1/keys", json={"scopes": ["predict"], "name": "app"}, headers=h)
    assert r.status_code == 201
    created = r.json()
    assert created["key"].startswith("sk_") and created["tenant"] == "acme"
    listed = client.get("/api/v1/keys", headers=h).json()
    assert created["key_id"] in {k["key_id"] for k in listed}
    assert all("key" not in k and "secret_hash" not in k for k in listed)
    ok = client.post("/api/v1/predictions", json=ROW, headers=auth(created["key"]))
    assert ok.status_code == 200
    assert client.delete(f"/api/v1/keys/{created['key_id']}", headers=h).json()["revoked_at"]
    assert client.post("/api/v1/predictions", json=ROW, headers=auth(created["key"])).status_code == 401
    bad = client.post("/api/v1/keys", json={"scopes": ["root"]}, headers=h)
    assert bad.status_code == 400 and bad.json()["field"] == "scopes"


def test_error_messages_name_no_server_folder(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    h = auth(keys["acme"])
    home = str(demo.settings.home_path)
    # Outside the import prefixes: the hint names the tenant's prefix relative to the home.
    r = client.post("/api/v1/models/x/versions", json={"artifact_uri": (MODELS / "iris.onnx").as_uri()}, headers=h)
    assert r.status_code == 403 and "$SLUICE_HOME/imports/acme/" in r.json()["error"]
    assert home not in r.text
    # A version whose artifact went missing from the store: named by its checksum.
    version = client.get("/api/v1/models/iris/versions/1", headers=h).json()
    artifacts = demo.settings.home_path / "artifacts"
    for stored in artifacts.rglob(f"{version['sha256']}*"):
        stored.unlink()
    r = client.get("/v2/models/iris/versions/1/ready", headers=h)
    assert r.status_code == 404 and version["sha256"][:12] in r.json()["error"], r.text
    assert home not in r.text and "file://" not in r.text
    # A batch input outside the inbox: the inbox relative to the batch folder.
    r = client.post("/api/v1/batch-jobs", json={"deployment": "iris", "input_uri": (MODELS / "iris.onnx").as_uri()}, headers=h)
    assert r.status_code == 403 and "inbox/acme/" in r.json()["error"], r.text
    assert home not in r.text


def test_a_change_made_while_the_deployment_is_being_read_is_seen_by_the_next_request(tmp_path: Path, acme: Principal) -> None:
    """A request reads the deployment (to be trusted for `deployment_cache_ttl_s`, here a
    minute); before that read comes back, the deployment is changed in this process. The
    request is answered by what it read, and the next one by the change: a read that a change
    overtook is not kept."""
    from sluice.api.app import create_app
    from sluice.demo import install_demo
    from sluice.settings import Settings
    from sluice.wiring import Container

    container = Container.from_settings(Settings(mode="local", home=tmp_path / "home", deployment_cache_ttl_s=60))
    install_demo(container, acme, MODELS)
    container.models.push(acme, "iris", (MODELS / "iris_forest.onnx").read_bytes())
    client, (_, key) = TestClient(create_app(container)), container.keys.create("acme", ["admin", "predict"])
    predictions = container.predictions
    predictions.registry = ReadThen(  # type: ignore[assignment]
        predictions.registry, "get_deployment", ("acme", "iris"), lambda: container.deployments.update(acme, "iris", {"kind": "single", "model": "iris", "version": 2})
    )
    during = client.post("/api/v1/predictions", json=ROW, headers=auth(key)).json()
    assert during["version"] == 1  # read before the change
    after = client.post("/api/v1/predictions", json=ROW, headers=auth(key)).json()
    assert after["version"] == 2


def test_a_model_deleted_and_pushed_again_numbers_on_and_its_old_version_is_never_another_artifact(client: TestClient, keys: dict[str, str]) -> None:
    """Numbers go on when a model is made again under a deleted one's name: `m:1` named the
    first artifact and never names another (a deployment pointed back at it is refused, naming
    the version); the new artifact is `m:2`, and a deployment pointed at it is answered by it,
    not by what this process read of the old `m:1`."""
    key = keys["acme"]
    row = {**ROW, "deployment": "d"}
    assert push(client, key, "m", "iris.onnx")["version"] == 1
    assert client.post("/api/v1/deployments", json={"name": "d", "model": "m", "version": 1}, headers=auth(key)).status_code == 201
    before = client.post("/api/v1/predictions", json=row, headers=auth(key)).json()
    assert client.put("/api/v1/deployments/d", json={"model": "iris", "version": 1}, headers=auth(key)).status_code == 200
    assert client.delete("/api/v1/models/m", headers=auth(key)).status_code == 204
    again = push(client, key, "m", "iris_forest.onnx")
    assert again["version"] == 2
    refused = client.put("/api/v1/deployments/d", json={"model": "m", "version": 1}, headers=auth(key))
    assert refused.status_code in (404, 422) and "version" in refused.text, refused.text
    assert client.put("/api/v1/deployments/d", json={"model": "m", "version": 2}, headers=auth(key)).status_code == 200
    after = client.post("/api/v1/predictions", json=row, headers=auth(key)).json()
    assert (after["model"], after["version"]) == ("m", 2)
    assert after["probabilities"] != before["probabilities"]  # the forest's, not the first m:1's


def test_a_deployment_deleted_and_created_again_counts_only_its_own_traffic(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    """Statistics are kept per revision: a deployment created again under a deleted one's name
    starts from none of the old one's requests (its revisions go on from its name's writes)."""
    key = keys["acme"]
    row = {**ROW, "deployment": "d"}
    assert client.post("/api/v1/deployments", json={"name": "d", "model": "iris", "version": 1}, headers=auth(key)).json()["revision"] == 1
    for _ in range(3):
        assert client.post("/api/v1/predictions", json=row, headers=auth(key)).status_code == 200
    demo.predictions.stats.flush()
    assert client.get("/api/v1/deployments/d/stats", headers=auth(key)).json()["overall"]["requests"] == 3
    assert client.delete("/api/v1/deployments/d", headers=auth(key)).status_code == 204
    again = client.post("/api/v1/deployments", json={"name": "d", "model": "iris", "version": 1}, headers=auth(key)).json()
    assert again["revision"] == 3
    stats = client.get("/api/v1/deployments/d/stats", headers=auth(key)).json()
    assert (stats["revision"], stats["overall"]["requests"]) == (3, 0)
    history = client.get("/api/v1/deployments/d/history", headers=auth(key)).json()
    assert [h["revision"] for h in history] == [1, 2, 3]


def test_a_deployment_deleted_takes_its_follow_binding_and_baseline_with_it(client: TestClient, keys: dict[str, str]) -> None:
    """What is bound to a deployment goes with it: one created again under its name does not
    start following the old one's registry (nor roll out its versions) or drift against its baseline."""
    key = keys["acme"]
    assert client.post("/api/v1/deployments", json={"name": "d", "model": "iris", "version": 1}, headers=auth(key)).status_code == 201
    follow = {"registry": "models:/iris@champion", "rollout": "10,100 every 1m gate error_rate<=0.01", "tracking_uri": "http://mlflow.example.com"}
    assert client.post("/api/v1/deployments/d/follow", json=follow, headers=auth(key)).status_code in (200, 201)
    assert client.put("/api/v1/deployments/d/baseline", json={"inputs": [[5.1, 3.5, 1.4, 0.2]] * 3}, headers=auth(key)).status_code in (200, 201)
    assert client.delete("/api/v1/deployments/d", headers=auth(key)).status_code == 204
    assert client.post("/api/v1/deployments", json={"name": "d", "model": "iris", "version": 1}, headers=auth(key)).status_code == 201
    assert client.get("/api/v1/deployments/d/follow", headers=auth(key)).status_code == 404
    assert client.get("/api/v1/deployments/d/baseline", headers=auth(key)).status_code == 404
    assert "d" not in [f["deployment"] for f in client.get("/api/v1/follows", headers=auth(key)).json()]
