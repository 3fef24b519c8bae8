"""Every gRPC call is held to the request limit by sluice, gRPC's own bound being above it (so
that a stream goes on past one oversized request): a message over the limit is refused before
it is parsed, whatever the call (public ones taking no key included), as RESOURCE_EXHAUSTED in
sluice's words."""
from __future__ import annotations

from typing import Any

import grpc
import numpy as np
import pytest

from tests.integration.grpc.conftest import auth, run_server

pytest.importorskip("tritonclient.grpc")
from tritonclient.grpc import service_pb2 as pb

SVC = "/inference.GRPCInferenceService/"
LIMIT = 64 * 1024


def _pad(data: bytes, n: int = 300_000) -> bytes:
    # an unknown length-delimited field 999 (tag 999<<3|2), n bytes of padding
    tag = (999 << 3) | 2
    out = bytearray()
    for v in (tag, n):
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
    return data + bytes(out) + b"x" * n


def _call(url: str, method: str, data: bytes, answer: Any, metadata: tuple = ()) -> Any:
    with grpc.insecure_channel(url) as channel:
        call = channel.unary_unary(SVC + method, request_serializer=lambda b: b, response_deserializer=answer.FromString)
        return call(data, metadata=metadata, timeout=30)


def test_model_ready_over_the_request_limit_is_refused(served, keys) -> None:
    served.settings.limits.max_request_bytes = LIMIT
    data = _pad(pb.ModelReadyRequest(name="iris").SerializeToString())
    assert len(data) > LIMIT
    with run_server(served) as url:
        with pytest.raises(grpc.RpcError) as refused:
            got = _call(url, "ModelReady", data, pb.ModelReadyResponse, tuple(auth(keys["acme"]).items()))
            print("answered", got)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_server_live_without_key_over_the_request_limit_is_refused(served) -> None:
    served.settings.limits.max_request_bytes = LIMIT
    data = _pad(b"")
    with run_server(served) as url:
        with pytest.raises(grpc.RpcError) as refused:
            _call(url, "ServerLive", data, pb.ServerLiveResponse)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def _iris_bytes(rows: int) -> bytes:
    m = pb.ModelInferRequest(model_name="iris", id="big")
    m.inputs.add(name="input", datatype="FP32", shape=[rows, 4])
    m.raw_input_contents.append(np.zeros((rows, 4), np.float32).tobytes())
    return m.SerializeToString()


def test_unary_oversized_infer_is_resource_exhausted_in_sluice_words(served, keys) -> None:
    served.settings.limits.max_request_bytes = LIMIT
    with run_server(served) as url:
        with pytest.raises(grpc.RpcError) as refused:
            _call(url, "ModelInfer", _iris_bytes(20_000), pb.ModelInferResponse, tuple(auth(keys["acme"]).items()))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value.details()
        assert "over the 65536 a request may be" in refused.value.details()


def test_oversized_and_malformed_infer_is_resource_exhausted(served, keys) -> None:
    served.settings.limits.max_request_bytes = LIMIT
    data = _iris_bytes(20_000) + b"\x0a\xff\xff"  # a truncated trailing field 1
    with run_server(served) as url:
        with pytest.raises(grpc.RpcError) as refused:
            _call(url, "ModelInfer", data, pb.ModelInferResponse, tuple(auth(keys["acme"]).items()))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (refused.value.code(), refused.value.details())


def test_oversized_infer_is_not_parsed_by_the_server(served, keys, monkeypatch) -> None:
    """A message over SLUICE_MAX_REQUEST_BYTES is refused before it is parsed (its typed
    contents never decoded), as docs/security.md says."""
    from sluice.grpc_service import wire

    parsed: list[int] = []
    real = wire.read_infer_request

    def spy(data, **kw):
        got = real(data, **kw)
        if got.message.ByteSize() > LIMIT:
            parsed.append(len(data))
        return got

    monkeypatch.setattr(wire, "read_infer_request", spy)
    served.settings.limits.max_request_bytes = LIMIT
    m = pb.ModelInferRequest(model_name="iris", id="typed")
    m.inputs.add(name="input", datatype="FP32", shape=[20_000, 4]).contents.fp32_contents.extend([0.0] * 80_000)
    with run_server(served) as url, pytest.raises(grpc.RpcError) as refused:
        _call(url, "ModelInfer", m.SerializeToString(), pb.ModelInferResponse, tuple(auth(keys["acme"]).items()))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert not [n for n in parsed if n > LIMIT], f"parsed {parsed} bytes (limit {LIMIT})"
