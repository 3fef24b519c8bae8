"""A real local Triton, started once per session, serving two small ONNX models built here.

`mlp`: float [batch, 8] -> float [batch, 3]. `clf`: float [batch, 4] -> `probabilities`
[batch, 3] and a string `label` [batch] (zipmap off), the SageMaker port's default model.
Both are served through the `local` repository flavour (ONNX Runtime in the python backend).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

from sluice.domain import ModelVersion
from sluice.domain.errors import Unavailable
from sluice.endpoints import local_triton
from sluice.endpoints.repository import TritonOptions, build_model
from sluice.services.models import read_signature

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from sluice.endpoints.local_triton import LocalTriton

CLASSES = ["setosa", "versicolor", "virginica"]
# mlp batches small (requests above 16 rows are split by the runtime); clf takes 1 MiB at once.
SERVED_OPTIONS = {
    "mlp": TritonOptions(max_batch_size=16, preferred_batch_sizes=(4, 8), max_queue_delay_us=500),
    "clf": TritonOptions(max_batch_size=65536, max_queue_delay_us=500),
}


def _graph_model(nodes: list, inputs: list, outputs: list, initializers: list, name: str) -> bytes:
    from onnx import helper

    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="sluice-tests")
    model.ir_version = 9  # readable by every ONNX Runtime either env has
    return model.SerializeToString()


def mlp_onnx(seed: int = 7) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.normal(size=(8, 16)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.normal(size=(16,)).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.normal(size=(16, 3)).astype(np.float32), "w2")
    b2 = numpy_helper.from_array(rng.normal(size=(3,)).astype(np.float32), "b2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w2"], ["h3"]),
        helper.make_node("Add", ["h3", "b2"], ["y"]),
    ]
    return _graph_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [w1, b1, w2, b2],
        "mlp",
    )


def classifier_onnx(seed: int = 11) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.normal(size=(4, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.normal(size=(3,)).astype(np.float32), "b")
    classes = numpy_helper.from_array(np.array(CLASSES, dtype=object), "classes")
    nodes = [
        helper.make_node("MatMul", ["features", "w"], ["z0"]),
        helper.make_node("Add", ["z0", "b"], ["z"]),
        helper.make_node("Softmax", ["z"], ["probabilities"], axis=1),
        helper.make_node("ArgMax", ["z"], ["index"], axis=1, keepdims=0),
        helper.make_node("Gather", ["classes", "index"], ["label"], axis=0),
    ]
    return _graph_model(
        nodes,
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 4])],
        [
            helper.make_tensor_value_info("label", TensorProto.STRING, ["batch"]),
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 3]),
        ],
        [w, b, classes],
        "clf",
    )


def make_version(name: str, data: bytes, runtime: str, config: dict) -> ModelVersion:
    return ModelVersion(
        tenant="acme",
        model=name,
        version=1,
        runtime=runtime,  # type: ignore[arg-type]
        artifact_uri=f"file:///{name}.onnx",
        sha256="0" * 64,
        size_bytes=len(data),
        signature=read_signature(data),
        config=config,
    )


@pytest.fixture(scope="session")
def onnx_models() -> dict[str, bytes]:
    return {"mlp": mlp_onnx(), "clf": classifier_onnx()}


@pytest.fixture(scope="session")
def triton_env() -> local_triton.TritonEnv:
    try:
        return local_triton.find_env()
    except Unavailable as exc:
        pytest.skip(f"local Triton environment absent ({exc.message})")


@pytest.fixture(scope="session")
def served_repository(tmp_path_factory: pytest.TempPathFactory, onnx_models: dict[str, bytes]) -> Path:
    root = tmp_path_factory.mktemp("repository")
    for name, data in onnx_models.items():
        build_model(root, name, 1, read_signature(data), data, flavour="local", options=SERVED_OPTIONS[name])
    return root


@pytest.fixture(scope="session")
def triton_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sluice-home")


@pytest.fixture(scope="session")
def triton_server(
    triton_env: local_triton.TritonEnv, served_repository: Path, triton_home: Path
) -> Iterator[LocalTriton]:
    server = local_triton.start(
        served_repository,
        home=triton_home,
        port=local_triton.free_base_port(),
        default_model="clf",
        env=triton_env,
    )
    try:
        yield server
    finally:
        local_triton.stop(triton_home)


def allowing(server: LocalTriton) -> list[str]:
    """`triton_url_prefixes` admitting the session's server: it takes free ports, not the
    default 8100-8102, so the operator names them (HTTP and gRPC), as a user of another port would."""
    return [server.http_url, f"http://{server.grpc_address}"]


@pytest.fixture
def triton_versions(triton_server: LocalTriton, onnx_models: dict[str, bytes]) -> dict[str, ModelVersion]:
    """`triton` versions of both models on the local server's HTTP port."""
    return {
        name: make_version(name, data, "triton", {"url": triton_server.http_url, "model_name": name})
        for name, data in onnx_models.items()
    }


@pytest.fixture
def sagemaker_version(onnx_models: dict[str, bytes]) -> ModelVersion:
    """The classifier as a `sagemaker` version: the endpoint the local SageMaker port stands in for."""
    return make_version("clf", onnx_models["clf"], "sagemaker", {"endpoint_name": "clf-endpoint"})


def in_process(data: bytes, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same model run by ONNX Runtime in this process: the numbers to match."""
    import onnxruntime as ort

    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs), strict=True))
