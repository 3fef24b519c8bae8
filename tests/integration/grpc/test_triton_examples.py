"""The calls Triton's own example clients make (the `simple_*` and image scripts of
`triton-inference-server/client`), through `tritonclient.http` and `tritonclient.grpc`, with
the checks those scripts make: classification (`class_count`), compressed requests, the unknown
model's words, the extensions served; and the protocol's smaller promises (an `id` echoed only
when given, 405 for a wrong method, `last_inference`, gRPC's lowercase metadata)."""

from __future__ import annotations

import asyncio
import gzip
import json
import time
import zlib
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from sluice.api.app import create_app
from tests.integration.grpc.conftest import auth, fails

if TYPE_CHECKING:
    from sluice.wiring import Container

grpcclient = pytest.importorskip("tritonclient.grpc")
httpclient = pytest.importorskip("tritonclient.http")

ROWS = np.array([[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]], dtype=np.float32)  # setosa, virginica
LABELS = ["setosa", "versicolor", "virginica"]


@pytest.fixture
def http(served: Container) -> TestClient:
    return TestClient(create_app(served))


def _http_body(inputs: list[Any], outputs: list[Any] | None = None, **kw: Any) -> tuple[bytes, dict[str, str]]:
    body, size = httpclient.InferenceServerClient.generate_request_body(inputs, outputs=outputs, **kw)
    return body, ({"Inference-Header-Content-Length": str(size)} if size is not None else {})


def _http_result(r: Any) -> Any:
    assert r.status_code == 200, r.text
    size = r.headers.get("inference-header-content-length")
    return httpclient.InferResult.from_response_body(r.content, header_length=int(size) if size else None)


def _iris_input(module: Any, binary: bool = True) -> Any:
    tensor = module.InferInput("input", list(ROWS.shape), "FP32")
    if module is httpclient:
        tensor.set_data_from_numpy(ROWS, binary_data=binary)
    else:
        tensor.set_data_from_numpy(ROWS)
    return tensor


def _expected(probabilities: np.ndarray, k: int) -> list[list[str]]:
    """Triton's strings, from the raw probabilities: `%f:index:label`, best first."""
    return [[f"{row[i]:f}:{i}:{LABELS[i]}" for i in np.argsort(-row, kind="stable")[:k]] for row in probabilities]


def _raw_probabilities(http: TestClient, keys: dict[str, str]) -> np.ndarray:
    body, headers = _http_body([_iris_input(httpclient)])
    return _http_result(http.post("/v2/models/iris/infer", content=body, headers={**auth(keys["acme"]), **headers})).as_numpy("output_probability")


@pytest.mark.parametrize("binary", [True, False])
def test_http_class_count_answers_top_k_with_labels(http: TestClient, keys: dict[str, str], binary: bool) -> None:
    probabilities = _raw_probabilities(http, keys)
    outputs = [httpclient.InferRequestedOutput("output_probability", binary_data=binary, class_count=2)]
    body, headers = _http_body([_iris_input(httpclient, binary)], outputs)
    result = _http_result(http.post("/v2/models/iris/infer", content=body, headers={**auth(keys["acme"]), **headers}))
    got = result.as_numpy("output_probability")
    assert got.shape == (2, 2) and result.get_output("output_probability")["datatype"] == "BYTES"
    texts = [[x.decode() if isinstance(x, bytes) else x for x in row] for row in got]
    assert texts == _expected(probabilities, 2)
    assert texts[0][0].endswith(":0:setosa") and texts[1][0].endswith(":2:virginica")
    # The image client's reading of each: score, index, label.
    score, index, label = texts[1][0].split(":")
    assert float(score) == pytest.approx(float(probabilities[1][2]), abs=1e-6) and (index, label) == ("2", "virginica")


def test_grpc_class_count_answers_top_k_with_labels(grpc_url: str, http: TestClient, keys: dict[str, str]) -> None:
    probabilities = _raw_probabilities(http, keys)
    client = grpcclient.InferenceServerClient(grpc_url)
    outputs = [grpcclient.InferRequestedOutput("output_probability", class_count=5), grpcclient.InferRequestedOutput("output_label")]
    result = client.infer("iris", [_iris_input(grpcclient)], outputs=outputs, headers=auth(keys["acme"]), compression_algorithm="gzip")
    got = result.as_numpy("output_probability")
    assert got.shape == (2, 3)  # past the number of classes: every class
    assert [[x.decode() for x in row] for row in got] == _expected(probabilities, 3)
    assert result.as_numpy("output_label").tolist() == [b"setosa", b"virginica"]  # the others as they were


def test_classification_without_labels_and_of_integers(grpc_url: str, http: TestClient, keys: dict[str, str]) -> None:
    """`words` answers `code` (INT64, one per word) with no class labels: classified whole,
    scores as integers, `score:index`."""
    words = np.array([b"cat", b"emu", b"dog"], dtype=np.object_)
    tensor = httpclient.InferInput("word", [3], "BYTES")
    tensor.set_data_from_numpy(words)
    body, headers = _http_body([tensor], [httpclient.InferRequestedOutput("code", binary_data=False, class_count=2)])
    result = _http_result(http.post("/v2/models/words/infer", content=body, headers={**auth(keys["acme"]), **headers}))
    assert result.as_numpy("code").tolist() == ["2:2", "1:0"]
    g = grpcclient.InferInput("word", [3], "BYTES")
    g.set_data_from_numpy(words)
    answer = grpcclient.InferenceServerClient(grpc_url).infer(
        "words", [g], outputs=[grpcclient.InferRequestedOutput("code", class_count=1)], headers=auth(keys["acme"])
    )
    assert answer.as_numpy("code").tolist() == [b"2:2"]


def test_classification_that_cannot_be_served_is_a_400_naming_the_output(grpc_url: str, http: TestClient, keys: dict[str, str]) -> None:
    for outputs, why in (
        ([{"name": "output_label", "parameters": {"classification": 2}}], "not numeric"),
        ([{"name": "output_probability", "parameters": {"classification": -1}}], "positive integer"),
        ([{"name": "output_probability", "parameters": {"classification": "two"}}], "positive integer"),
    ):
        inputs = [{"name": "input", "datatype": "FP32", "shape": [2, 4], "data": ROWS.ravel().tolist()}]
        r = http.post("/v2/models/iris/infer", json={"inputs": inputs, "outputs": outputs}, headers=auth(keys["acme"]))
        assert r.status_code == 400, r.text
        assert r.json()["field"] == f"outputs.{outputs[0]['name']}.parameters.classification" and why in r.json()["error"]
    refused = fails(
        grpcclient.InferenceServerClient(grpc_url).infer,
        "iris", [_iris_input(grpcclient)], outputs=[grpcclient.InferRequestedOutput("output_label", class_count=1)], headers=auth(keys["acme"]),
    )  # fmt: skip
    assert refused.status() == "StatusCode.INVALID_ARGUMENT" and "output 'output_label'" in refused.message()


def test_the_unknown_model_in_tritons_words_with_sluices_code(grpc_url: str, http: TestClient, keys: dict[str, str]) -> None:
    """simple_{http,grpc}_health_metadata and the aio infer clients test these words."""
    for path in ("/v2/models/wrong_model_name", "/v2/models/wrong_model_name/ready", "/v2/models/wrong_model_name/config"):
        r = http.get(path, headers=auth(keys["acme"]))
        assert r.status_code == 404 and r.json()["code"] == "not_found" and r.json()["field"] == "deployment"
        assert r.json()["error"] == "Request for unknown model: 'wrong_model_name' is not found"
    infer = http.post("/v2/models/wrong_model_name/infer", json={"inputs": []}, headers=auth(keys["acme"]))
    assert infer.json()["error"].startswith("Request for unknown model")
    # sluice's own routes keep sluice's words.
    own = http.get("/api/v1/deployments/wrong_model_name", headers=auth(keys["acme"]))
    assert own.json()["error"] == "deployment 'wrong_model_name' not found"
    client = grpcclient.InferenceServerClient(grpc_url)
    ex = fails(client.get_model_metadata, "wrong_model_name", headers=auth(keys["acme"]))
    assert ex.message().startswith("Request for unknown model") and ex.status() == "StatusCode.NOT_FOUND"
    ex = fails(client.infer, "wrong_model_name", [_iris_input(grpcclient)], headers=auth(keys["acme"]))
    assert ex.message().startswith("Request for unknown model")
    # A model it does not have is not ready, as Triton answers: false, not an error.
    assert client.is_model_ready("wrong_model_name", headers=auth(keys["acme"])) is False


def test_an_unknown_version_in_tritons_words_with_sluices_code(grpc_url: str, http: TestClient, keys: dict[str, str]) -> None:
    """Triton's own client tests (test_unknown_model_version, test_model_specific_infer) ask a
    version the model lacks: its metadata fails in these words on both transports, and it is
    not ready (false, not an error), while the versions it has are."""
    words = "Request for unknown model: 'iris' version 99 is not found"
    body = {"inputs": [{"name": "input", "shape": list(ROWS.shape), "datatype": "FP32", "data": ROWS.ravel().tolist()}]}
    for method, path in (("GET", "/v2/models/iris/versions/99"), ("POST", "/v2/models/iris/versions/99/infer"), ("GET", "/v2/models/iris/versions/99/config")):
        r = http.request(method, path, headers=auth(keys["acme"]), json=body if method == "POST" else None)
        assert r.status_code == 404, r.text
        assert r.json()["error"].startswith(words) and (r.json()["code"], r.json()["field"]) == ("not_found", "version")
    assert http.get("/v2/models/iris/versions/99/ready", headers=auth(keys["acme"])).status_code == 404
    # sluice's own routes keep sluice's words, naming the model.
    own = http.post("/api/v1/predictions", json={"deployment": "iris", "version": 99, "inputs": [[6.7, 3.0, 5.2, 2.3]]}, headers=auth(keys["acme"]))
    assert (own.status_code, own.json()["error"], own.json()["field"]) == (404, "model 'iris' has no version 99", "version")
    client = grpcclient.InferenceServerClient(grpc_url)
    ex = fails(client.get_model_metadata, "iris", "99", headers=auth(keys["acme"]))
    assert ex.message().startswith(words) and ex.status() == "StatusCode.NOT_FOUND"
    ex = fails(client.infer, "iris", [_iris_input(grpcclient)], model_version="99", headers=auth(keys["acme"]))
    assert ex.message().startswith(words) and ex.status() == "StatusCode.NOT_FOUND"
    assert client.is_model_ready("iris", "99", headers=auth(keys["acme"])) is False
    assert client.is_model_ready("iris", "1", headers=auth(keys["acme"])) is True


def test_the_extensions_served_are_listed_on_both_transports(grpc_url: str, http: TestClient) -> None:
    served = {"binary_tensor_data", "classification", "model_configuration", "model_repository", "parameters", "statistics"}
    assert set(http.get("/v2").json()["extensions"]) == served
    assert set(grpcclient.InferenceServerClient(grpc_url).get_server_metadata().extensions) == served


def test_an_id_is_echoed_only_when_given(grpc_url: str, http: TestClient, keys: dict[str, str]) -> None:
    inputs = [{"name": "input", "datatype": "FP32", "shape": [2, 4], "data": ROWS.ravel().tolist()}]
    given = http.post("/v2/models/iris/infer", json={"id": "mine", "inputs": inputs}, headers=auth(keys["acme"]))
    assert given.json()["id"] == "mine"
    none = http.post("/v2/models/iris/infer", json={"inputs": inputs}, headers=auth(keys["acme"]))
    assert "id" not in none.json() and none.headers["x-request-id"]
    empty = http.post("/v2/models/iris/infer", json={"id": "", "inputs": inputs}, headers=auth(keys["acme"]))
    assert empty.status_code == 200 and "id" not in empty.json()  # as Triton: an empty id is none
    client = grpcclient.InferenceServerClient(grpc_url)
    assert client.infer("iris", [_iris_input(grpcclient)], headers=auth(keys["acme"])).get_response().id == ""
    assert client.infer("iris", [_iris_input(grpcclient)], request_id="r-1", headers=auth(keys["acme"])).get_response().id == "r-1"


@pytest.mark.parametrize("path", ["/v2/models/iris/infer", "/v2/models/iris/versions/1/infer", "/api/v1/predictions"])
def test_a_wrong_method_on_an_infer_route_is_a_405(http: TestClient, keys: dict[str, str], path: str) -> None:
    for method in ("GET", "PUT", "DELETE"):
        r = http.request(method, path, headers=auth(keys["acme"]))
        assert r.status_code == 405 and r.headers["allow"] == "POST" and r.json()["code"] == "method_not_allowed", (method, r.text)


def test_statistics_say_when_the_last_inference_was(http: TestClient, keys: dict[str, str], served: Container) -> None:
    before = time.time() * 1000
    body, headers = _http_body([_iris_input(httpclient)])
    _http_result(http.post("/v2/models/iris/infer", content=body, headers={**auth(keys["acme"]), **headers}))
    served.predictions.stats.flush()
    (stats,) = http.get("/v2/models/iris/stats", headers=auth(keys["acme"])).json()["model_stats"]
    assert before <= stats["last_inference"] <= time.time() * 1000


def test_grpc_missing_key_says_lowercase_authorization(grpc_url: str) -> None:
    ex = fails(grpcclient.InferenceServerClient(grpc_url).get_model_metadata, "iris")
    assert ex.status() == "StatusCode.UNAUTHENTICATED"
    assert "'authorization: Bearer <key>'" in ex.message() and "Authorization" not in ex.message()


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_http_request_compression_as_tritonclient_sends_it(http: TestClient, keys: dict[str, str], algorithm: str) -> None:
    """tritonclient.http's request_compression_algorithm: the whole body compressed, the
    header length that of the inflated body; response_compression_algorithm asks gzip back."""
    body, headers = _http_body([_iris_input(httpclient)])
    compressed = gzip.compress(body) if algorithm == "gzip" else zlib.compress(body)
    headers |= {"Content-Encoding": algorithm, "Accept-Encoding": "gzip", **auth(keys["acme"])}
    result = _http_result(http.post("/v2/models/iris/infer", content=compressed, headers=headers))
    assert result.as_numpy("output_label").tolist() == [b"setosa", b"virginica"]
    assert json.loads(json.dumps(result.get_response()))["model_name"] == "iris"


def test_tritonclient_http_over_a_socket_as_the_examples_call_it(served: Container, keys: dict[str, str]) -> None:
    """tritonclient.http's own client on a loopback server: compressed requests both ways
    (simple_http_infer_client's compression options), class_count (the image client's), the
    unknown model's words (simple_http_health_metadata's check)."""
    from tritonclient.utils import InferenceServerException

    from tests.support import serving

    with serving(create_app(served)) as url:
        client = httpclient.InferenceServerClient(url.removeprefix("http://"))
        key = keys["acme"]
        try:
            for request_algorithm in ("gzip", "deflate"):
                result = client.infer(  # a dict of its own each call: the client writes its codings into it
                    "iris", [_iris_input(httpclient)], headers=auth(key),
                    request_compression_algorithm=request_algorithm, response_compression_algorithm="gzip",
                )  # fmt: skip
                assert result.as_numpy("output_label").tolist() == [b"setosa", b"virginica"]
            top = client.infer(
                "iris", [_iris_input(httpclient)], headers=auth(key),
                outputs=[httpclient.InferRequestedOutput("output_probability", class_count=1)],
            )  # fmt: skip
            assert [row[0].decode().split(":")[1:] for row in top.as_numpy("output_probability")] == [["0", "setosa"], ["2", "virginica"]]
            with pytest.raises(InferenceServerException) as unknown:
                client.get_model_metadata("wrong_model_name", headers=auth(key))
            assert "Request for unknown model" in unknown.value.message()
            assert set(client.get_server_metadata()["extensions"]) >= {"classification", "binary_tensor_data"}
        finally:
            client.close()
        asyncio.run(_aio_calls(url.removeprefix("http://"), key))


async def _aio_calls(url: str, key: str) -> None:
    """simple_http_aio_infer_client's calls: aiohttp asks gzip on every call; a large answer
    comes gzipped and is read, the metadata comes as it is, the unknown model's words hold."""
    import tritonclient.http.aio as aioclient

    async with aioclient.InferenceServerClient(url) as client:
        rows = np.tile(ROWS, (100, 1))
        tensor = aioclient.InferInput("input", list(rows.shape), "FP32")
        tensor.set_data_from_numpy(rows)
        result = await client.infer("iris", [tensor], headers=auth(key))
        assert result.as_numpy("output_label").tolist() == [b"setosa", b"virginica"] * 100
        assert (await client.get_model_metadata("iris", headers=auth(key)))["name"] == "iris"
        assert (await client.get_model_config("iris", headers=auth(key)))["name"] == "iris"
        try:
            await client.infer("wrong_model_name", [tensor], headers=auth(key))
        except aioclient.InferenceServerException as ex:
            assert ex.message().startswith("Request for unknown model")
        else:
            raise AssertionError("an unknown model answered")


def test_v2_request_parameters_are_strings_numbers_and_booleans_as_triton_takes_them(http: TestClient, keys: dict[str, str]) -> None:
    """Triton refuses a request parameter of any other type (a 400 naming it); sluice's v2
    parameters are held to the rule its simple JSON's are (at most 32): they were taken and
    ignored, whatever they held."""
    body = {"inputs": [{"name": "input", "shape": list(ROWS.shape), "datatype": "FP32", "data": ROWS.ravel().tolist()}]}
    fine = {"binary_data_output": False, "sequence_id": 7, "priority": 1, "timeout": 100, "tier": "gold", "weight": 0.5}
    assert http.post("/v2/models/iris/infer", json={**body, "parameters": fine}, headers=auth(keys["acme"])).status_code == 200
    for parameters, field in (({"a": {"b": 1}}, "parameters.a"), ({"a": [1, 2]}, "parameters.a"), ({"a": None}, "parameters.a"), ({f"k{i}": i for i in range(33)}, "parameters")):
        r = http.post("/v2/models/iris/infer", json={**body, "parameters": parameters}, headers=auth(keys["acme"]))
        assert r.status_code == 422 and r.json()["field"].startswith(field), (parameters, r.text)
