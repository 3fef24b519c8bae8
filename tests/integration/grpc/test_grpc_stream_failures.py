"""A ModelStreamInfer stream goes on past one request's failure, whatever fails: a request
over the request limit is its own `error_message` (gRPC's own bound, which ends the whole
call, is above sluice's), and a registry that fails as the stream's key is checked again
ends it in sluice's words and status, never Python's."""

from __future__ import annotations

import queue
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from tests.integration.grpc.conftest import auth, run_server

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.wiring import Container

pytest.importorskip("tritonclient.grpc")
VIRGINICA = [6.7, 3.0, 5.2, 2.3]


def _iris(request_id: str, rows: int = 1) -> Any:
    from tritonclient.grpc import service_pb2 as pb

    message = pb.ModelInferRequest(model_name="iris", id=request_id)
    message.inputs.add(name="input", datatype="FP32", shape=[rows, 4])
    message.raw_input_contents.append(np.tile(np.float32(VIRGINICA), (rows, 1)).tobytes())
    return message


def test_one_oversized_request_on_a_stream_is_its_error_message_not_the_end_of_the_stream(served: Container, keys: dict[str, str]) -> None:
    """A request over SLUICE_MAX_REQUEST_BYTES is answered with its own `error_message`
    (sluice's words) and the requests after it are answered (it ended the whole stream
    RESOURCE_EXHAUSTED in grpc-core's words, "Received message larger than max")."""
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    served.settings.limits.max_request_bytes = 64 * 1024
    sent = [_iris("a"), _iris("big", rows=20_000), _iris("c")]  # the middle one is ~320 KB
    got: list[tuple[str, str]] = []
    with run_server(served) as url, grpc.insecure_channel(url) as channel:
        stream = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(iter(sent), metadata=tuple(auth(keys["acme"]).items()))
        try:
            got = [(a.infer_response.id, a.error_message) for a in stream]
        except grpc.RpcError as ended:
            pytest.fail(f"the stream ended after {got}: {ended.code()} {ended.details()}")
    assert [rid for rid, _ in got] == ["a", "big", "c"]
    assert got[0][1] == "" and got[2][1] == ""
    assert "over the 65536 a request may be" in got[1][1]  # the oversized one's own error


def test_a_registry_hiccup_while_a_stream_rechecks_its_key_does_not_leak_the_exception(
    served: Container, keys: dict[str, str], acme: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After any key is revoked, an open stream reads its own key again before its next
    request; a registry that fails then (DynamoDB throttled, a disk fault) ends the stream as
    any call's failure is said (UNAVAILABLE for a 503), never UNKNOWN with Python's words."""
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    from sluice.domain.errors import Unavailable

    other, _ = served.keys.create("acme", ["predict"])
    requests: queue.Queue[Any] = queue.Queue()
    with run_server(served) as url, grpc.insecure_channel(url) as channel:
        answers = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(iter(requests.get, None), metadata=tuple(auth(keys["acme"]).items()))
        requests.put(_iris("first"))
        assert next(answers).infer_response.id == "first"
        served.keys.revoke(acme, other.key_id)  # another key: the revocation signal moves

        def unavailable(key_id: str) -> bool:
            raise Unavailable("the registry is unavailable; try again")

        monkeypatch.setattr(served.keys, "active", unavailable)
        requests.put(_iris("second"))
        try:
            answer = next(answers)
        except grpc.RpcError as ended:
            assert ended.code() == grpc.StatusCode.UNAVAILABLE, ended.details()
            assert "<class" not in (ended.details() or "") and "registry is unavailable" in (ended.details() or ""), ended.details()
        else:
            assert answer.infer_response.id == "second" and answer.error_message
        finally:
            requests.put(None)
