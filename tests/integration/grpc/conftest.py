"""An in-process gRPC server on a free port, over the demo container (acme has iris and
diabetes, and `words`: a string-input model), on an event loop of its own thread."""

from __future__ import annotations

import asyncio
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("grpc", reason="needs the grpc extra")

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tritonclient.utils import InferenceServerException

    from sluice.domain import Principal
    from sluice.wiring import Container


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def fails(call: Any, *args: Any, **kw: Any) -> InferenceServerException:
    """What `call` raised (it must raise Triton's client exception)."""
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException) as caught:
        call(*args, **kw)
    return caught.value


def words_model() -> bytes:
    """A model over strings: `word` [-1] BYTES echoed as `echo`, and coded as `code` (INT64)."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("Identity", ["word"], ["echo"]),
            helper.make_node(
                "LabelEncoder", ["word"], ["code"], domain="ai.onnx.ml",
                keys_strings=["cat", "dog", "émeu"], values_int64s=[1, 2, 3], default_int64=-1,
            ),
        ],
        "words",
        [helper.make_tensor_value_info("word", TensorProto.STRING, [None])],
        [helper.make_tensor_value_info("echo", TensorProto.STRING, [None]), helper.make_tensor_value_info("code", TensorProto.INT64, [None])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 2)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.fixture
def served(demo: Container, acme: Principal) -> Container:
    version = demo.models.push(acme, "words", words_model())
    demo.deployments.create(acme, "words", {"kind": "single", "model": "words", "version": version.version})
    return demo


@contextmanager
def run_server(container: Container) -> Iterator[str]:
    """The server's address while the block runs; stopped after it."""
    with serving(container) as (url, _):
        yield url


@contextmanager
def serving(container: Container) -> Iterator[tuple[str, asyncio.AbstractEventLoop]]:
    """The server's address and the event loop it runs on (a thread's), while the block runs:
    what else the block runs on that loop shares the container as `sluice serve`'s worker does
    (its HTTP and gRPC on one loop)."""
    from sluice.grpc_service.server import start

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server, port = asyncio.run_coroutine_threadsafe(start(container, "127.0.0.1", 0), loop).result(10)
    try:
        yield f"127.0.0.1:{port}", loop
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(None), loop).result(10)
        triton = container.runtimes.get("triton")
        if triton is not None:  # its connections were opened on this loop: closed there
            asyncio.run_coroutine_threadsafe(triton.close(), loop).result(10)  # type: ignore[attr-defined]
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


@pytest.fixture
def grpc_url(served: Container) -> Iterator[str]:
    with run_server(served) as url:
        yield url


@pytest.fixture
def keys(served: Container) -> dict[str, str]:
    from tests.integration.conftest import api_keys

    return api_keys(served)
