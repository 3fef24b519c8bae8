"""The v2 binary tensor extension over the app: bodies built and responses read by tritonclient's
own functions (its defaults: binary tensors in and out), and every malformed binary body a 4xx
naming what is wrong."""

from __future__ import annotations

import json
import struct
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from tests.conftest import REPO
from tests.integration.conftest import auth

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

    from sluice.domain import Principal
    from sluice.wiring import Container

VIRGINICA = [6.7, 3.0, 5.2, 2.3]
SETOSA = [5.1, 3.5, 1.4, 0.2]
HEADER = "Inference-Header-Content-Length"


@pytest.fixture
def words(demo: Container, acme: Principal) -> Container:
    """acme also has `words`, a BYTES model (the project's script makes it)."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from make_demo_models import words as words_model
    finally:
        sys.path.pop(0)
    version = demo.models.push(acme, "words", words_model())
    demo.deployments.create(acme, "words", {"kind": "single", "model": "words", "version": version.version})
    return demo


def request_body(inputs: list[Any], outputs: list[Any] | None = None) -> tuple[bytes, dict[str, str]]:
    import tritonclient.http as httpclient

    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs, outputs=outputs)
    return body, ({HEADER: str(json_size)} if json_size is not None else {})


def result_of(response: Any) -> Any:
    import tritonclient.http as httpclient

    assert response.status_code == 200, response.text
    length = response.headers.get(HEADER)
    return httpclient.InferResult.from_response_body(response.content, header_length=int(length) if length else None)


def fp32(name: str, rows: np.ndarray, *, binary: bool = True) -> Any:
    import tritonclient.http as httpclient

    tensor = httpclient.InferInput(name, list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows.astype(np.float32), binary_data=binary)
    return tensor


def test_binary_fp32_in_and_every_output_binary(client: TestClient, keys: dict[str, str]) -> None:
    body, headers = request_body([fp32("input", np.array([SETOSA, VIRGINICA]))])
    r = client.post("/v2/models/iris/infer", content=body, headers={**auth(keys["acme"]), **headers})
    assert r.headers["content-type"] == "application/octet-stream"
    result = result_of(r)
    assert [x.decode() for x in result.as_numpy("output_label")] == ["setosa", "virginica"]
    probs = result.get_output("output_probability")
    assert probs["parameters"]["classes"] == ["setosa", "versicolor", "virginica"]
    assert probs["parameters"]["binary_data_size"] == 2 * 3 * 4 and "data" not in probs
    # The same answer as JSON tensors in and out.
    json_body, _ = request_body([fp32("input", np.array([SETOSA, VIRGINICA]), binary=False)])
    as_json = json.loads(json_body)
    as_json["parameters"] = {}
    plain = client.post("/v2/models/iris/infer", json=as_json, headers=auth(keys["acme"]))
    assert HEADER not in plain.headers and plain.headers["content-type"] == "application/json"
    expected = {o["name"]: o for o in plain.json()["outputs"]}["output_probability"]["data"]
    np.testing.assert_allclose(result.as_numpy("output_probability").reshape(-1), expected, rtol=1e-6)


def test_requested_outputs_binary_or_json_on_a_pinned_version(client: TestClient, keys: dict[str, str]) -> None:
    import tritonclient.http as httpclient

    outputs = [httpclient.InferRequestedOutput("output_probability"), httpclient.InferRequestedOutput("output_label", binary_data=False)]
    body, headers = request_body([fp32("input", np.array([VIRGINICA]))], outputs)
    result = result_of(client.post("/v2/models/iris/versions/1/infer", content=body, headers={**auth(keys["acme"]), **headers}))
    label = result.get_output("output_label")
    assert label["data"] == ["virginica"] and "binary_data_size" not in (label.get("parameters") or {})
    assert result.as_numpy("output_probability").shape == (1, 3)
    # JSON inputs with a binary output: the response is binary all the same.
    body, headers = request_body([fp32("input", np.array([VIRGINICA]), binary=False)], outputs[:1])
    assert headers == {}
    r = client.post("/v2/models/iris/infer", content=body, headers=auth(keys["acme"]))
    assert int(r.headers[HEADER]) < len(r.content)
    assert result_of(r).as_numpy("output_probability").argmax() == 2


def test_bytes_in_and_out(client: TestClient, keys: dict[str, str], words: Container) -> None:
    import tritonclient.http as httpclient

    text = np.array([["red"], ["blue"], ["ünknown"], [""]], dtype=object)
    tensor = httpclient.InferInput("text", list(text.shape), "BYTES")
    tensor.set_data_from_numpy(text)
    body, headers = request_body([tensor])
    result = result_of(client.post("/v2/models/words/infer", content=body, headers={**auth(keys["acme"]), **headers}))
    assert result.as_numpy("code").reshape(-1).tolist() == [0, 2, -1, -1]
    assert result.as_numpy("echo").reshape(-1).tolist() == [b"red", b"blue", "ünknown".encode(), b""]


def test_fp16_bytes_decode_little_endian() -> None:
    from sluice.codecs.binary import from_bytes, to_bytes

    values = np.array([[1.5, -2.0], [0.25, 65504.0]], dtype=np.float16)
    raw = memoryview(values.astype("<f2").tobytes())
    decoded = from_bytes("x", "FP16", [2, 2], raw, field="inputs.x")
    np.testing.assert_array_equal(decoded, values)
    assert to_bytes(values.astype(">f2")) == values.astype("<f2").tobytes()


def _iris_header(size: int | None, shape: list[int] | None = None, datatype: str = "FP32", **extra: Any) -> bytes:
    params = {} if size is None else {"binary_data_size": size}
    tensor = {"name": "input", "shape": shape or [1, 4], "datatype": datatype, "parameters": params, **extra}
    return json.dumps({"inputs": [tensor]}).encode()


FOUR = np.array(VIRGINICA, dtype="<f4").tobytes()


def _malformed() -> list[tuple[str, bytes, str | None, str]]:
    """(what, body, Inference-Header-Content-Length or None for the true one, field named)."""
    header = _iris_header(16)
    def words_header(size: int) -> bytes:
        tensor = {"name": "text", "shape": [2, 1], "datatype": "BYTES", "parameters": {"binary_data_size": size}}
        return json.dumps({"inputs": [tensor]}).encode()

    return [
        ("header length beyond the body", header + FOUR, str(len(header) + 17), "inference-header-content-length"),
        ("header length not a number", header + FOUR, "12a", "inference-header-content-length"),
        ("header length cuts the JSON", header + FOUR, str(len(header) - 5), "body"),
        ("binary_data_size beyond the body", _iris_header(32) + FOUR, None, "inputs.input.parameters.binary_data_size"),
        ("size disagrees with shape", _iris_header(12) + FOUR[:12], None, "inputs.input.parameters.binary_data_size"),
        ("shape disagrees with size", _iris_header(16, [1, 3]) + FOUR, None, "inputs.input.parameters.binary_data_size"),
        ("bytes after the last input", _iris_header(12, [1, 3]) + FOUR, None, "body"),
        ("missing binary_data_size", _iris_header(None) + FOUR, None, "inputs.input.data"),
        ("binary_data_size not an integer", _iris_header("16") + FOUR, None, "inputs.input.parameters.binary_data_size"),  # type: ignore[arg-type]
        ("data and binary_data_size", _iris_header(16, data=VIRGINICA) + FOUR, None, "inputs.input.data"),
        ("unknown datatype", _iris_header(16, datatype="BF16") + FOUR, None, "inputs.input.datatype"),
        ("datatype the model does not take", _iris_header(8, datatype="FP16") + FOUR[:8], None, "inputs.input.datatype"),
        ("truncated BYTES", words_header(7) + struct.pack("<I", 3) + b"red", None, "inputs.text"),
        ("BYTES element past its size", words_header(11) + struct.pack("<I", 3) + b"red" + struct.pack("<I", 9), None, "inputs.text"),
        ("BYTES not UTF-8", words_header(14) + struct.pack("<I", 3) + b"red" + struct.pack("<I", 3) + b"\xff\xfe\xfd", None, "inputs.text"),
    ]


@pytest.mark.parametrize(("what", "body", "declared", "field"), _malformed(), ids=[m[0] for m in _malformed()])
def test_malformed_binary_bodies_are_4xx_naming_the_field(
    client: TestClient, keys: dict[str, str], words: Container, what: str, body: bytes, declared: str | None, field: str
) -> None:
    header_length = declared if declared is not None else str(body.index(b"}]}") + 3)
    model = "words" if b'"text"' in body else "iris"
    r = client.post(f"/v2/models/{model}/infer", content=body, headers={**auth(keys["acme"]), HEADER: header_length})
    assert 400 <= r.status_code < 500, (what, r.status_code, r.text)
    assert r.json()["field"] == field, (what, r.json())


def test_json_without_data_names_the_input(client: TestClient, keys: dict[str, str]) -> None:
    r = client.post("/v2/models/iris/infer", json={"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32"}]}, headers=auth(keys["acme"]))
    assert r.status_code == 400 and r.json()["field"] == "inputs.input.data"


@pytest.mark.parametrize(
    "size", [16, 0, "16", None], ids=["with-data", "zero", "text", "none"]
)
def test_a_json_request_whose_input_says_binary_data_size_is_refused_naming_it_never_read_from_its_data(
    client: TestClient, keys: dict[str, str], size: Any
) -> None:
    """An input of a request of JSON alone (no Inference-Header-Content-Length) that says
    `binary_data_size` is refused naming the parameter, as Triton refuses it: its `data` (the
    same numbers) is never read as if the parameter were not there. `null`: not said."""
    tensor = {"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [5.9, 3.0, 5.1, 1.8], "parameters": {"binary_data_size": size}}
    r = client.post("/v2/models/iris/infer", json={"inputs": [tensor]}, headers=auth(keys["acme"]))
    if size is None:
        assert r.status_code == 200, r.text
        return
    assert r.status_code == 400, r.text
    assert r.json()["field"] == "inputs.input.parameters.binary_data_size" and "Inference-Header-Content-Length" in r.json()["error"]


def test_server_metadata_names_the_extension_with_or_without_the_slash(client: TestClient) -> None:
    plain, slash = client.get("/v2", follow_redirects=False), client.get("/v2/", follow_redirects=False)
    assert plain.status_code == slash.status_code == 200 and plain.json() == slash.json()
    assert "binary_tensor_data" in plain.json()["extensions"]
