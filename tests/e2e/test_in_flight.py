"""The per-key cap on requests in flight (`SLUICE_MAX_IN_FLIGHT_PER_KEY`) on a real `sluice
serve` (one worker, and its gRPC process): requests held open by their bodies fill a key's
slots, then that key's next HTTP request is a 429 with a JSON body and Retry-After, its
WebSocket message an error answer on a connection that stays open, while another key still
gets in; a slot comes back when its request is answered or abandoned. Over gRPC, open streams
hold the slots and a call past them is RESOURCE_EXHAUSTED."""

from __future__ import annotations

import json
import os
import socket
import time
from typing import TYPE_CHECKING

import numpy as np
import pytest
from websockets.sync.client import connect

from tests.e2e.conftest import free_port, running_sluice
from tests.support import http

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import httpx

CAP = 2
SETOSA = {"deployment": "iris", "features": {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}}
BODY = json.dumps(SETOSA).encode()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int, str, str]]:
    """(HTTP port, gRPC port, the admin key, a second key of the same tenant)."""
    home: Path = tmp_path_factory.mktemp("home")
    env = {**os.environ, "SLUICE_MAX_IN_FLIGHT_PER_KEY": str(CAP)}
    grpc_port = free_port()
    with running_sluice(home, env, "--demo", "--workers", "1", "--grpc-port", str(grpc_port)) as (port, key):
        made = http("POST", f"http://127.0.0.1:{port}/api/v1/keys", json={"scopes": ["predict"]}, headers=_auth(key))
        assert made.status_code == 201, made.text
        yield port, grpc_port, key, made.json()["key"]


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _held(port: int, key: str) -> socket.socket:
    """A prediction whose body is not sent yet: once the server asks for it (100 Continue),
    the request is past authentication and in flight, and stays so until its body comes."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(
        b"POST /api/v1/predictions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {key}\r\nContent-Length: {len(BODY)}\r\nExpect: 100-continue\r\n\r\n".encode()
    )
    assert sock.recv(64).startswith(b"HTTP/1.1 100 Continue"), "the server did not ask for the body"
    return sock


def _finish(sock: socket.socket) -> bytes:
    """Send the held request's body; its response's status line."""
    sock.sendall(BODY)
    answer = b""
    while b"\r\n" not in answer:
        answer += sock.recv(4096)
    sock.close()
    return answer.split(b"\r\n", 1)[0]


def _predict(port: int, key: str) -> httpx.Response:
    return http("POST", f"http://127.0.0.1:{port}/api/v1/predictions", json=SETOSA, headers=_auth(key), timeout=30)


def test_a_key_past_its_requests_in_flight_gets_429_and_other_keys_do_not(service: tuple[int, int, str, str]) -> None:
    port, _, key, other = service
    held = [_held(port, key) for _ in range(CAP)]
    try:
        refused = _predict(port, key)
        assert refused.status_code == 429, refused.text
        assert refused.headers["retry-after"] == "1"
        body = refused.json()
        assert (body["code"], body["field"], body["details"]["limit"]) == ("too_many_in_flight", "key", CAP)
        # Management routes count too: any request of the key.
        assert http("GET", f"http://127.0.0.1:{port}/api/v1/deployments", headers=_auth(key)).status_code == 429
        assert _predict(port, other).status_code == 200  # another key's slots are its own
        # A WebSocket message of the key is a request in flight like any other: answered with
        # the error, and the connection stays open.
        with connect(f"ws://127.0.0.1:{port}/api/v1/stream", additional_headers=_auth(key)) as ws:
            ws.send(json.dumps({**SETOSA, "request_id": "over"}))
            answer = json.loads(ws.recv(timeout=30))
            assert (answer["request_id"], answer["status"], answer["code"]) == ("over", 429, "too_many_in_flight")
            assert _finish(held.pop()) == b"HTTP/1.1 200 OK"  # one answered: its slot is free
            ws.send(json.dumps({**SETOSA, "request_id": "now"}))
            answer = json.loads(ws.recv(timeout=30))
            assert (answer["request_id"], answer.get("prediction")) == ("now", "setosa")
        assert _predict(port, key).status_code == 200
    finally:
        for sock in held:
            sock.close()


def test_a_request_abandoned_before_its_body_gives_its_slot_back(service: tuple[int, int, str, str]) -> None:
    port, _, key, _ = service
    for sock in [_held(port, key) for _ in range(CAP)]:
        sock.close()  # the client leaves with the body unsent
    # The server learns of it when it next reads those connections: ask until it has.
    deadline = time.monotonic() + 30
    while (status := _predict(port, key).status_code) == 429 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert status == 200
    for _ in range(3 * CAP):  # and no slot stays taken: requests one after another all pass
        assert _predict(port, key).status_code == 200


def test_grpc_streams_hold_a_keys_slots_and_a_call_past_them_is_resource_exhausted(service: tuple[int, int, str, str]) -> None:
    grpcclient = pytest.importorskip("tritonclient.grpc")
    from tritonclient.utils import InferenceServerException

    _, grpc_port, key, other = service
    address = f"127.0.0.1:{grpc_port}"
    _wait_live(grpcclient.InferenceServerClient(address), InferenceServerException)
    tensor = grpcclient.InferInput("input", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.array([[5.1, 3.5, 1.4, 0.2]], dtype=np.float32))
    streams = []
    try:
        for _ in range(CAP):
            client = grpcclient.InferenceServerClient(address)
            answers: list[object] = []
            client.start_stream(callback=lambda result, error, answers=answers: answers.append(error or result), headers=_grpc(key))
            client.async_stream_infer("iris", [tensor])
            deadline = time.monotonic() + 30
            while not answers and time.monotonic() < deadline:  # the stream is open on the server
                time.sleep(0.05)
            assert answers and not isinstance(answers[0], InferenceServerException), answers
            streams.append(client)
        caller = grpcclient.InferenceServerClient(address)
        with pytest.raises(InferenceServerException) as refused:
            caller.infer("iris", [tensor], headers=_grpc(key))
        assert refused.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
        assert "in flight" in refused.value.message()
        assert caller.infer("iris", [tensor], headers=_grpc(other)).as_numpy("output_label").tolist() == [b"setosa"]
        streams.pop().stop_stream()  # a stream closed: its slot is free
        assert caller.infer("iris", [tensor], headers=_grpc(key)).as_numpy("output_label").tolist() == [b"setosa"]
    finally:
        for client in streams:
            client.stop_stream()


def _grpc(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def _wait_live(client: object, error: type[Exception]) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            if client.is_server_live():  # type: ignore[attr-defined]
                return
        except error:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)
