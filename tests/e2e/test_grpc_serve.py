"""`sluice serve --grpc-port` as a user runs it: a real process with two HTTP workers and the
gRPC server beside them, called by Triton's own gRPC client with the saved admin key."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import numpy as np
import pytest

from tests.e2e.conftest import free_port, running_sluice

if TYPE_CHECKING:
    from pathlib import Path

grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402


def test_grpc_beside_http_workers(tmp_path: Path) -> None:
    import httpx

    port = free_port()
    with running_sluice(tmp_path / "home", dict(os.environ), "--demo", "--workers", "2", "--grpc-port", str(port)) as (http_port, key):
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
        deadline = time.monotonic() + 30
        while True:
            try:
                if client.is_server_live():
                    break
            except InferenceServerException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        headers = {"authorization": f"Bearer {key}"}
        tensor = grpcclient.InferInput("input", [1, 4], "FP32")
        tensor.set_data_from_numpy(np.array([[6.7, 3.0, 5.2, 2.3]], dtype=np.float32))
        result = client.infer("iris", [tensor], headers=headers)
        assert result.as_numpy("output_label").tolist() == [b"virginica"]
        # The same key, the same registry: a key revoked over HTTP is refused over gRPC.
        h = {"Authorization": f"Bearer {key}"}
        made = httpx.post(f"http://127.0.0.1:{http_port}/api/v1/keys", json={"scopes": ["predict"]}, headers=h)
        assert made.status_code == 201, made.text
        other = {"authorization": f"Bearer {made.json()['key']}"}
        assert client.is_model_ready("iris", headers=other)
        revoked = httpx.delete(f"http://127.0.0.1:{http_port}/api/v1/keys/{made.json()['key_id']}", headers=h)
        assert revoked.status_code in (200, 204), revoked.text
        with pytest.raises(InferenceServerException) as refused:
            client.infer("iris", [tensor], headers=other)
        assert refused.value.status() == "StatusCode.UNAUTHENTICATED"
    # The gRPC server ends with `sluice serve`.
    with pytest.raises(InferenceServerException):
        grpcclient.InferenceServerClient(f"127.0.0.1:{port}").is_server_live(client_timeout=2)
