"""Predictions over a WebSocket on the local service (`ws://…/api/v1/stream`): authenticated at
connect, answers carry their request id, every bad message is an error message on a connection
that stays open, one tenant never sees another's deployments, a connection is held to its
message rate, and a revoked key stops an open connection."""

from __future__ import annotations

import concurrent.futures
from typing import TYPE_CHECKING, Any

import pytest
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from sluice.api.app import create_app
from sluice.settings import Settings
from sluice.wiring import Container
from tests.conftest import MODELS
from tests.integration.conftest import auth
from tests.integration.test_edge import IRIS_ROW
from tests.support import ReadThen

if TYPE_CHECKING:
    from pathlib import Path

    from starlette.testclient import WebSocketTestSession

    from sluice.domain import Principal

URL = "/api/v1/stream"
SETOSA = {"deployment": "iris", "features": IRIS_ROW}


def ask(ws: WebSocketTestSession, message: dict[str, Any] | str) -> dict[str, Any]:
    if isinstance(message, str):
        ws.send_text(message)
    else:
        ws.send_json(message)
    return ws.receive_json()


def test_a_connection_without_a_valid_key_is_refused(client: TestClient, keys: dict[str, str]) -> None:
    with pytest.raises(WebSocketDenialResponse) as refused, client.websocket_connect(URL, headers=auth("sk_nope_wrong")):
        pass
    assert refused.value.status_code == 401 and refused.value.json()["code"] == "unauthenticated"
    # no key in the handshake: the first message must authenticate, or the connection ends
    with client.websocket_connect(URL) as ws:
        answer = ask(ws, {**SETOSA, "request_id": "r1"})
        assert answer["status"] == 401 and answer["code"] == "unauthenticated" and answer["request_id"] == "r1"
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
        assert closed.value.code == 1008
    with client.websocket_connect(URL) as ws:
        assert ask(ws, {"action": "auth", "api_key": "sk_nope_wrong"})["code"] == "unauthenticated"
    # a socket path that does not exist is refused too
    with pytest.raises(WebSocketDisconnect), client.websocket_connect("/api/v1/elsewhere", headers=auth(keys["acme"])):
        pass



def test_a_first_message_too_large_to_be_an_auth_message_is_refused_unread(client: TestClient, demo: Container, keys: dict[str, str]) -> None:
    """A connection with no key may send no more than its headers could have carried before it
    authenticates: a larger first message is refused and the connection closed, its key never
    looked up (a valid key padded past the bound is refused too)."""
    most = demo.settings.serve.max_header_bytes
    padded = {"action": "auth", "api_key": keys["acme"], "pad": "x" * most}
    with client.websocket_connect(URL) as ws:
        answer = ask(ws, padded)
        assert answer["status"] == 401 and answer["field"] == "api_key" and f"over {most} bytes" in answer["error"]
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
        assert closed.value.code == 1008
    with client.websocket_connect(URL) as ws:  # one within the bound authenticates as before
        assert ask(ws, {**padded, "pad": "x" * (most // 2)})["authenticated"] is True

def test_each_way_of_presenting_a_key_opens_a_connection_that_predicts(client: TestClient, keys: dict[str, str]) -> None:
    with client.websocket_connect(URL, headers={"x-api-key": keys["acme_predict"]}) as ws:
        assert ask(ws, {**SETOSA, "request_id": "a"})["prediction"] == "setosa"
    with client.websocket_connect(URL, subprotocols=["sluice.v1", f"bearer.{keys['acme']}"]) as ws:
        assert ws.accepted_subprotocol == "sluice.v1"  # never the key echoed back
        assert ask(ws, {**SETOSA, "request_id": "b"})["prediction"] == "setosa"
    with client.websocket_connect(URL) as ws:
        hello = ask(ws, {"action": "auth", "api_key": keys["acme"]})
        assert hello["authenticated"] is True and hello["tenant"] == "acme"
        assert ask(ws, {**SETOSA, "request_id": "c"})["prediction"] == "setosa"


def test_answers_carry_the_request_id_and_read_as_the_http_api_answers(client: TestClient, keys: dict[str, str]) -> None:
    http = client.post("/api/v1/predictions", json={**SETOSA, "request_id": "same"}, headers=auth(keys["acme"])).json()
    with client.websocket_connect(URL, headers=auth(keys["acme"])) as ws:
        answer = ask(ws, {**SETOSA, "request_id": "same"})
        for name in ("request_id", "deployment", "model", "version", "prediction", "probabilities"):
            assert answer[name] == http[name], name
        rows = ask(ws, {"deployment": "iris", "inputs": [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]], "request_id": "two"})
        assert rows["request_id"] == "two" and [r["prediction"] for r in rows["predictions"]] == ["setosa", "virginica"]
        v2 = ask(ws, {"request_id": "t", "deployment": "iris", "v2": {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [5.1, 3.5, 1.4, 0.2]}]}})
        assert v2["request_id"] == "t" and v2["model_name"] == "iris" and v2["outputs"]
        top = ask(ws, {"deployment": "iris", "v2": {
            "inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [5.1, 3.5, 1.4, 0.2]}],
            "outputs": [{"name": "output_probability", "parameters": {"classification": 1}}],
        }})  # fmt: skip
        (out,) = top["outputs"]  # the classification extension, as over HTTP
        assert out["datatype"] == "BYTES" and out["shape"] == [1, 1] and out["data"][0].endswith(":0:setosa")
        assert ask(ws, SETOSA)["request_id"]  # none sent: one is made up and returned


def test_bad_messages_are_answered_with_errors_and_the_connection_stays_open(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    with client.websocket_connect(URL, headers=auth(keys["acme"])) as ws:
        bad_json = ask(ws, '{"deployment": "iris", ')
        assert bad_json["status"] == 422 and bad_json["code"] == "invalid_request" and bad_json["field"] == "body"
        assert ask(ws, "[1, 2]")["code"] == "invalid_request"
        unknown = ask(ws, {"request_id": "u", "deployment": "nope", "features": IRIS_ROW})
        assert (unknown["request_id"], unknown["status"], unknown["code"]) == ("u", 404, "not_found")
        shape = ask(ws, {"request_id": "s", "deployment": "iris", "features": {"sepal_length": 5.1}})
        assert shape["request_id"] == "s" and shape["status"] in (400, 422) and "field" in shape
        extra = ask(ws, {"request_id": "x", "deployment": "iris", "features": IRIS_ROW, "bogus": 1})
        assert extra["status"] == 422 and extra["field"] == "bogus"
        limit = demo.settings.websocket.websocket_max_message_bytes
        big = ask(ws, '{"deployment": "iris", "inputs": [' + "0," * limit + "0]}")
        assert big["status"] == 413 and big["code"] == "payload_too_large"
        assert ask(ws, {"action": "auth", "api_key": keys["globex"]})["field"] == "action"  # the tenant stays
        assert ask(ws, {**SETOSA, "request_id": "ok"})["prediction"] == "setosa"  # still open


def test_another_tenants_deployment_is_not_visible(client: TestClient, keys: dict[str, str]) -> None:
    with client.websocket_connect(URL, headers=auth(keys["globex"])) as ws:
        answer = ask(ws, {**SETOSA, "request_id": "g"})
        assert answer["status"] == 404 and answer["code"] == "not_found"


def test_concurrent_messages_are_each_answered_under_their_own_id(client: TestClient, keys: dict[str, str]) -> None:
    with client.websocket_connect(URL, headers=auth(keys["acme"])) as ws:
        for i in range(40):
            ws.send_json({"deployment": "iris" if i % 2 else "nope", "features": IRIS_ROW, "request_id": f"m{i}"})
        answers = {a["request_id"]: a for a in (ws.receive_json() for _ in range(40))}
    assert sorted(answers) == sorted(f"m{i}" for i in range(40))
    assert all((a.get("prediction") == "setosa") == (int(rid[1:]) % 2 == 1) for rid, a in answers.items())


@pytest.mark.parametrize("request_id", [7, "x" * 129], ids=["a number", "129 characters"])
def test_a_request_id_that_is_not_one_is_refused_under_no_id(client: TestClient, keys: dict[str, str], request_id: Any) -> None:
    """An id the client cannot match is never made up for it: the refusal carries `null`, as
    for a message that does not read."""
    with client.websocket_connect(URL, headers=auth(keys["acme"])) as ws:
        refused = ask(ws, {**SETOSA, "request_id": request_id})
        assert (refused["request_id"], refused["status"], refused["field"]) == (None, 422, "request_id")
        v2 = ask(ws, {"deployment": "iris", "v2": {"id": request_id, "inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [5.1, 3.5, 1.4, 0.2]}]}})
        assert (v2["request_id"], v2["status"], v2["field"]) == (None, 422, "v2.id")


def test_an_upload_is_refused_by_name_not_ignored(client: TestClient, keys: dict[str, str]) -> None:
    upload = "0123456789abcdef0123456789abcdef"
    v2 = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [5.1, 3.5, 1.4, 0.2]}], "parameters": {"upload_id": upload}}
    with client.websocket_connect(URL, headers=auth(keys["acme"])) as ws:
        for message in ({"request_id": "u", "deployment": "iris", "upload_id": upload}, {"request_id": "u", "deployment": "iris", "v2": v2}):
            refused = ask(ws, message)
            assert (refused["request_id"], refused["status"], refused["field"]) == ("u", 400, "upload_id"), refused
            assert "HTTP" in refused["error"]


INPUT = {"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [5.1, 3.5, 1.4, 0.2]}


@pytest.mark.parametrize(
    "parameters",
    [{"binary_data_output": "yes"}, {"binary_data_output": True}, {"binary_data_output": 1}],
)
def test_binary_outputs_asked_of_a_message_are_refused_naming_the_field_as_http_refuses_a_bad_flag(
    client: TestClient, keys: dict[str, str], parameters: dict[str, Any]
) -> None:
    """A message answers JSON: one asking its outputs in binary is refused by name, never
    answered JSON as if it had not asked; a flag HTTP refuses is refused alike, naming it."""
    v2 = {"inputs": [INPUT], "parameters": parameters}
    over_http = client.post("/v2/models/iris/infer", json=v2, headers=auth(keys["acme"]))
    with client.websocket_connect(URL, headers=auth(keys["acme"])) as ws:
        refused = ask(ws, {"request_id": "b", "deployment": "iris", "v2": v2})
        also = ask(ws, {"request_id": "o", "deployment": "iris", "v2": {"inputs": [INPUT], "outputs": [{"name": "output_label", "parameters": {"binary_data": True}}]}})
        assert ask(ws, {"request_id": "ok", "deployment": "iris", "v2": {"inputs": [INPUT], "parameters": {"binary_data_output": False}}})["outputs"]
    assert (refused["request_id"], refused["status"], refused["field"]) == ("b", 400, "parameters.binary_data_output"), refused
    assert (also["status"], also["field"]) == (400, "outputs.parameters.binary_data"), also
    if over_http.status_code == 400:  # a flag that is not one: the same refusal, the same field
        assert (refused["code"], refused["field"]) == (over_http.json()["code"], over_http.json()["field"])


def test_an_auth_message_on_an_open_connection_is_refused_under_its_own_request_id(client: TestClient, keys: dict[str, str]) -> None:
    with client.websocket_connect(URL, headers=auth(keys["acme"])) as ws:
        refused = ask(ws, {"action": "auth", "api_key": keys["globex"], "request_id": "mine"})
    assert (refused["request_id"], refused["status"], refused["field"]) == ("mine", 400, "action"), refused


def _limited(tmp_path: Path, acme: Principal, **settings: Any) -> tuple[TestClient, Container, str]:
    from sluice.demo import install_demo

    container = Container.from_settings(Settings(mode="local", home=tmp_path / "home", **settings))
    install_demo(container, acme, MODELS)
    _, key = container.keys.create("acme", ["predict"])
    return TestClient(create_app(container)), container, key


def test_a_connection_past_its_message_rate_gets_an_error_and_stays_open(tmp_path: Path, acme: Principal) -> None:
    client, _, key = _limited(tmp_path, acme, websocket_rate_limit="3/minute")
    with client.websocket_connect(URL, headers=auth(key)) as ws:
        assert [ask(ws, {**SETOSA, "request_id": str(i)}).get("prediction") for i in range(3)] == ["setosa"] * 3
        refused = ask(ws, {**SETOSA, "request_id": "4"})
        assert (refused["request_id"], refused["status"], refused["code"]) == ("4", 429, "rate_limited")
        assert refused["details"]["retry_after_s"] > 0
        assert ask(ws, {**SETOSA, "request_id": "5"})["code"] == "rate_limited"  # open, still limited
    with client.websocket_connect(URL, headers=auth(key)) as ws:  # the rate is the connection's
        assert ask(ws, SETOSA)["prediction"] == "setosa"


@pytest.mark.parametrize(("junk", "status"), [('{"request_id": "j", ', 422), ("x" * 2_000_000, 413)], ids=["not json", "over the size"])
def test_every_message_counts_against_the_rate_whether_it_reads_or_not(tmp_path: Path, acme: Principal, junk: str, status: int) -> None:
    client, _, key = _limited(tmp_path, acme, websocket_rate_limit="3/minute")
    with client.websocket_connect(URL, headers=auth(key)) as ws:
        assert [ask(ws, junk)["status"] for _ in range(3)] == [status] * 3
        refused = ask(ws, {**SETOSA, "request_id": "good"})
        assert (refused["request_id"], refused["code"]) == ("good", "rate_limited")
        assert ask(ws, junk)["code"] == "rate_limited"


def test_a_revoked_key_stops_an_open_connection(tmp_path: Path, acme: Principal) -> None:
    client, container, key = _limited(tmp_path, acme)
    key_id = key.split("_")[1]
    with client.websocket_connect(URL, headers=auth(key)) as ws:
        assert ask(ws, SETOSA)["prediction"] == "setosa"
        container.keys.revoke(acme, key_id)
        stopped = ask(ws, {**SETOSA, "request_id": "after"})
        assert (stopped["request_id"], stopped["status"], stopped["code"]) == ("after", 401, "unauthenticated")
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
        assert closed.value.code == 1008


def test_a_revoke_from_another_process_reaches_the_connection(tmp_path: Path, acme: Principal) -> None:
    client, container, key = _limited(tmp_path, acme)
    other = Container.from_settings(container.settings)  # another worker on the same registry
    with client.websocket_connect(URL, headers=auth(key)) as ws:
        assert ask(ws, SETOSA)["prediction"] == "setosa"
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(other.keys.revoke, acme, key.split("_")[1]).result()
        assert ask(ws, SETOSA)["code"] == "unauthenticated"


def test_a_key_revoked_while_the_connection_is_authenticated_stops_it_at_the_first_message(tmp_path: Path, acme: Principal) -> None:
    """The key is read at connect (it works); before that read comes back another process
    revokes it. The connection is open (the key was good when read), and its first message is
    refused 401: the revocation came after the reading the connection started from."""
    client, container, key = _limited(tmp_path, acme)
    other = Container.from_settings(container.settings)  # another worker on the same registry
    key_id = key.split("_")[1]
    container.keys.registry = ReadThen(container.keys.registry, "get_api_key", (key_id,), lambda: other.keys.revoke(acme, key_id))  # type: ignore[assignment]
    with client.websocket_connect(URL, headers=auth(key)) as ws:
        stopped = ask(ws, {**SETOSA, "request_id": "first"})
        assert (stopped["request_id"], stopped["status"], stopped["code"]) == ("first", 401, "unauthenticated")


@pytest.mark.parametrize("message", ["not json", "x" * 2_000_000], ids=["not json", "over the size"])
def test_a_revoked_keys_next_message_is_refused_whatever_it_holds(tmp_path: Path, acme: Principal, message: str) -> None:
    """After a revoke, a message that does not parse or is over the size is answered 401 and the
    connection closed, as a good one is (not a 422 or 413 on a connection that stays open)."""
    client, container, key = _limited(tmp_path, acme)
    with client.websocket_connect(URL, headers=auth(key)) as ws:
        assert ask(ws, SETOSA)["prediction"] == "setosa"
        container.keys.revoke(acme, key.split("_")[1])
        ws.send_text(message)
        assert ws.receive_json()["code"] == "unauthenticated"
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
        assert closed.value.code == 1008


def test_messages_refused_by_the_connections_rate_are_counted_each_and_logged_together(
    tmp_path: Path, acme: Principal, caplog: pytest.LogCaptureFixture
) -> None:
    """As every door's refusals: each refused message a failure and a refusal by code (the
    10-second 'requests refused by admission' line, ml_inference_refused_total), no line each."""
    from fastapi.testclient import TestClient

    from sluice.api.app import create_app
    from sluice.demo import install_demo
    from sluice.settings import Settings
    from sluice.wiring import Container
    from tests.conftest import MODELS

    caplog.set_level("INFO")
    container = Container.from_settings(Settings(mode="local", home=tmp_path / "home", websocket_rate_limit="1/minute"))
    install_demo(container, acme, MODELS)
    _, key = container.keys.create("acme", ["predict"])
    with TestClient(create_app(container)).websocket_connect(URL, headers=auth(key)) as ws:
        codes = [ask(ws, {**SETOSA, "request_id": str(i)}).get("code", "ok") for i in range(4)]
    assert codes == ["ok", "rate_limited", "rate_limited", "rate_limited"]
    messages = [record.getMessage() for record in caplog.records]
    assert container.telemetry.errors == 3 and container.telemetry.refusals == {"rate_limited": 3}
    assert "prediction failed" not in messages and messages.count("requests refused by admission") == 1


def test_a_message_whose_input_says_binary_data_size_is_refused_as_http_refuses_it(client: TestClient, keys: dict[str, str]) -> None:
    """A message is JSON alone: an input that says `binary_data_size` is refused naming it, as
    HTTP refuses a JSON body's, never read from its `data`."""
    v2 = {"inputs": [{**INPUT, "parameters": {"binary_data_size": 16}}]}
    over_http = client.post("/v2/models/iris/infer", json=v2, headers=auth(keys["acme"]))
    with client.websocket_connect(URL, headers=auth(keys["acme"])) as ws:
        refused = ask(ws, {"request_id": "b", "deployment": "iris", "v2": v2})
    assert (refused["status"], refused["field"]) == (400, "inputs.input.parameters.binary_data_size"), refused
    assert (over_http.status_code, over_http.json()["field"]) == (400, refused["field"])
