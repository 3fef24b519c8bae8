"""What a model server outside the process answers, taken with suspicion: an answer its decoding
cannot read is the server's fault (a 502 in sluice's words, never a 500 of sluice's), its
words are quoted short, and a server sluice started is admitted only while it runs."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from sluice.inference.results import _failure
from sluice.monitor.sketches import NUMBER, Column
from sluice.runtimes.triton_answers import rejected_input
from tests.integration.conftest import auth
from tests.integration.traffic_fakes import add_fake

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

    from sluice.domain import Principal
    from sluice.wiring import Container


class Garbled:
    """A server runtime whose answers its own decoding cannot read."""

    kind = "sagemaker"

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def infer(self, version: Any, arrays: Any, outputs: Any) -> Any:
        raise self.error

    async def load(self, version: Any) -> None:
        return None


@pytest.mark.parametrize("error", [ValueError("cannot reshape"), TypeError("len() of unsized"), KeyError("y"), OverflowError("too big")])
def test_an_answer_a_server_garbled_is_a_502_not_a_500(demo: Container, acme: Principal, client: TestClient, keys: dict[str, str], error: Exception) -> None:
    add_fake(demo.registry, "acme", "remote")
    demo.deployments.create(acme, "remote", {"kind": "single", "model": "remote", "version": 1})
    demo.runtimes["sagemaker"] = Garbled(error)  # type: ignore[index]
    r = client.post("/api/v1/predictions", json={"deployment": "remote", "inputs": [[1.0, 2.0, 3.0, 4.0]]}, headers=auth(keys["acme"]))
    assert r.status_code == 502 and "does not read as the model's outputs" in r.json()["error"], r.text


def test_a_servers_words_are_quoted_short() -> None:
    assert rejected_input(f"input '{'x' * 5000}' is not known") is None  # no name that long: the caller is told less
    named = rejected_input("input 'age' has the wrong shape")
    assert named is not None and named.field == "inputs.age"
    failure = _failure(json.dumps({"error": "e" * 3_000_000, "code": "c" * 1000}).encode())
    assert len(failure["error"]) <= 2000 and len(failure["code"]) <= 64


def test_a_read_only_answer_is_profiled_as_any() -> None:
    """Triton's answers are read-only arrays; the sketch takes writable buffers only."""
    values = np.arange(10, dtype=np.float32)
    values.flags.writeable = False
    column = Column(NUMBER, "output")
    column.add(values)
    assert column.count == 10


def test_a_server_sluice_started_is_admitted_only_while_it_runs(demo: Container) -> None:
    """Its port, once given up, may be another endpoint's (another tenant's): the record of
    the servers sluice started is read on every call, not once."""
    from dataclasses import replace

    from sluice.domain.errors import BackendError
    from sluice.runtimes.sagemaker import SageMakerRuntime
    from sluice.runtimes.sagemaker_target import EndpointTarget

    url = "http://127.0.0.1:18765"
    running = [url]
    runtime = SageMakerRuntime(local_servers=(), started_servers=lambda: list(running), region="us-east-1")
    iris = demo.registry.get_version("acme", "iris", 1)
    target = EndpointTarget.of(replace(iris, runtime="sagemaker", config={"endpoint_name": "sluice-iris", "endpoint_url": url}))
    assert runtime.client_for(target) is runtime.client_for(target)  # admitted, its client kept
    running.clear()
    with pytest.raises(BackendError, match="not a local one"):
        runtime.client_for(target)
