"""`sluice serve --grpc-port` as a user runs it: a real process with two HTTP workers, each
serving gRPC too, called by Triton's own gRPC client with the saved admin key."""

from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING

import numpy as np
import pytest

from tests.e2e.conftest import free_port, grpc_client, running_sluice
from tests.support import http

if TYPE_CHECKING:
    from pathlib import Path

grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402


def test_grpc_served_by_every_http_worker(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "SLUICE_MAX_IN_FLIGHT_PER_KEY": "1"}  # per process: one open stream fills a worker
    with running_sluice(tmp_path / "home", env, "--demo", "--workers", "2", "--grpc-port", str(port)) as (http_port, key):
        client = grpc_client(port)
        headers = {"authorization": f"Bearer {key}"}
        tensor = grpcclient.InferInput("input", [1, 4], "FP32")
        tensor.set_data_from_numpy(np.array([[6.7, 3.0, 5.2, 2.3]], dtype=np.float32))
        result = client.infer("iris", [tensor], headers=headers)
        assert result.as_numpy("output_label").tolist() == [b"virginica"]
        # The same key, the same registry: a key revoked over HTTP is refused over gRPC.
        h = {"Authorization": f"Bearer {key}"}
        made = http("POST", f"http://127.0.0.1:{http_port}/api/v1/keys", json={"scopes": ["predict"]}, headers=h)
        assert made.status_code == 201, made.text
        other = {"authorization": f"Bearer {made.json()['key']}"}
        assert client.is_model_ready("iris", headers=other)
        revoked = http("DELETE", f"http://127.0.0.1:{http_port}/api/v1/keys/{made.json()['key_id']}", headers=h)
        assert revoked.status_code in (200, 204), revoked.text
        with pytest.raises(InferenceServerException) as refused:
            client.infer("iris", [tensor], headers=other)
        assert refused.value.status() == "StatusCode.UNAUTHENTICATED"
        # Both workers answer gRPC: connections of their own are spread over them, and each
        # worker counts the key's calls in flight itself, so the key holds one open stream in
        # each worker and no more: two in all, a third connection refused wherever it lands.
        open_streams, refusals = _open_streams(f"127.0.0.1:{port}", headers, tensor, wanted=2)
        try:
            assert len(open_streams) == 2, f"one key's streams admitted: {len(open_streams)}, refused {refusals}"
            more, refused_more = _open_streams(f"127.0.0.1:{port}", headers, tensor, wanted=1, tries=8)
            assert not more and refused_more == 8
        finally:
            for stream in open_streams:
                stream.stop_stream()
                stream.close()
    # The gRPC server ends with `sluice serve`.
    with pytest.raises(InferenceServerException):
        grpcclient.InferenceServerClient(f"127.0.0.1:{port}").is_server_live(client_timeout=2)


def _open_streams(address: str, headers: dict[str, str], tensor: object, *, wanted: int, tries: int = 200) -> tuple[list[object], int]:
    """Streams opened each on a connection of its own until `wanted` are admitted (or `tries`
    connections were made, or a minute passed: the second worker may still be starting);
    returns those kept open and how many were refused for the key's calls in flight."""
    kept: list[object] = []
    refused = 0
    deadline = time.monotonic() + 60
    for _ in range(tries):
        if len(kept) == wanted or time.monotonic() > deadline:
            break
        # A pool of its own: else gRPC shares one connection between channels to one address.
        client = grpcclient.InferenceServerClient(address, channel_args=[("grpc.use_local_subchannel_pool", 1)])
        answers: list[object] = []
        client.start_stream(callback=lambda result, error, answers=answers: answers.append(error or result), headers=headers)
        with contextlib.suppress(InferenceServerException):  # refused already: the callback says why
            client.async_stream_infer("iris", [tensor])
        until = time.monotonic() + 30
        while not answers and time.monotonic() < until:
            time.sleep(0.02)
        assert answers, "a stream got no answer"
        if isinstance(answers[0], InferenceServerException):
            assert answers[0].status() == "StatusCode.RESOURCE_EXHAUSTED", answers[0]
            refused += 1
            client.stop_stream()
            client.close()
        else:
            kept.append(client)
    return kept, refused
