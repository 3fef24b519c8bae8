"""Requests nobody on the team would write, answered as a client can read them: a 4xx naming
the field (never a 500, a dropped connection or an allocation the body cannot pay for), or the
answer with every value the caller gave echoed as it gave it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.api.encoding import gzip_accepted
from sluice.domain.values import decimal
from tests.integration.conftest import auth

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

    from sluice.domain import Principal
    from sluice.wiring import Container

ROW = [5.1, 3.5, 1.4, 0.2]
INFER = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": ROW}]}


def _binary(client: TestClient, key: str, header: dict[str, Any], tail: bytes = b"", length: str | None = None) -> Any:
    text = json.dumps(header).encode()
    return client.post(
        "/v2/models/iris/infer", content=text + tail,
        headers={**auth(key), "Inference-Header-Content-Length": length if length is not None else str(len(text))},
    )  # fmt: skip


@pytest.mark.parametrize("shape", [[2**26], [2**40], [2**31, 2**31]])
def test_a_bytes_shape_the_body_cannot_hold_is_refused_before_anything_is_made(client: TestClient, keys: dict[str, str], shape: list[int]) -> None:
    header = {"inputs": [{"name": "input", "datatype": "BYTES", "shape": shape, "parameters": {"binary_data_size": 4}}]}
    r = _binary(client, keys["acme"], header, tail=b"\x00\x00\x00\x00")
    assert r.status_code == 400, r.text
    assert r.json()["field"] == "inputs.input" and "needs at least" in r.json()["error"]


@pytest.mark.parametrize("length", ["\N{SUPERSCRIPT TWO}", "\N{ARABIC-INDIC DIGIT THREE}", "-1", "+5", "1e3", " 12"])
def test_a_header_length_that_is_not_ascii_digits_is_a_400(client: TestClient, keys: dict[str, str], length: str) -> None:
    text = json.dumps(INFER).encode()
    r = client.post("/v2/models/iris/infer", content=text, headers={**auth(keys["acme"]), "Inference-Header-Content-Length": length.encode("utf-8")})  # type: ignore[dict-item]
    assert r.status_code == 400, r.text
    assert r.json()["field"] == "inference-header-content-length"


def test_a_header_length_of_zero_is_a_400_naming_the_header(client: TestClient, keys: dict[str, str]) -> None:
    """A JSON header of no bytes is no request: refused naming the header, as one past the body
    is (never read as an empty body and answered about the body)."""
    r = _binary(client, keys["acme"], INFER, length="0")
    assert r.status_code == 400, r.text
    assert r.json()["field"] == "inference-header-content-length" and "0" in r.json()["error"]


@given(text=st.text())
def test_a_count_is_ascii_digits_alone(text: str) -> None:
    found = decimal(text)
    if text.isascii() and text.isdigit() and len(text) <= 18:
        assert found == int(text)
    else:
        assert found is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rid=st.text(min_size=1, max_size=128))
def test_any_request_id_is_echoed_and_its_header_reads_back_to_it(client: TestClient, keys: dict[str, str], rid: str) -> None:
    """Control characters, CR and LF, NUL, characters beyond latin-1: the body echoes the id as
    given, and its `x-request-id` header is the id itself or, where it could not be a header
    value, its percent-encoding (never a header that ends the response, never a 500)."""
    v2 = client.post("/v2/models/iris/infer", json={**INFER, "id": rid}, headers=auth(keys["acme"]))
    simple = client.post("/api/v1/predictions", json={"deployment": "iris", "inputs": [ROW], "request_id": rid}, headers=auth(keys["acme"]))
    for r, echoed in ((v2, "id"), (simple, "request_id")):
        assert r.status_code == 200, r.text
        assert r.json()[echoed] == rid
        header = r.headers["x-request-id"]
        assert header.isascii() and header.isprintable() and " " not in header
        assert unquote(header) == rid


def test_a_request_id_past_128_characters_is_a_400_naming_it(client: TestClient, keys: dict[str, str]) -> None:
    r = client.post("/v2/models/iris/infer", json={**INFER, "id": "x" * 129}, headers=auth(keys["acme"]))
    assert r.status_code in (400, 422) and r.json()["field"] == "id", r.text


MEMBERS = st.tuples(
    st.sampled_from(["gzip", "GZip", "x-gzip", "*", "br", "deflate", "identity", "gzipped"]),
    st.sampled_from([None, "0", "0.0", "0.000", "0.5", "1", "1.0", "0.001", "2", "abc"]),
    st.sampled_from(["", " ", "  "]),
)


@given(members=st.lists(MEMBERS, max_size=5))
def test_accept_encoding_is_read_as_rfc_9110_reads_it(members: list[tuple[str, str | None, str]]) -> None:
    """gzip is accepted when named (or as `x-gzip`) with a weight above 0, or, named by
    neither, when `*` is; `q=0` refuses; a weight that is not one counts for nothing."""

    def weight(q: str | None) -> float | None:
        if q is None:
            return 1.0
        valid = q in ("0", "0.0", "0.000", "0.5", "1", "1.0", "0.001")
        return float(q) if valid else None

    named = [w for c, q, _ in members if c.lower() in ("gzip", "x-gzip") and (w := weight(q)) is not None]
    star = [w for c, q, _ in members if c == "*" and (w := weight(q)) is not None]
    expected = max(named) > 0 if named else bool(star) and max(star) > 0
    header = ",".join(f"{space}{c}{'' if q is None else f'{space};{space}q={q}'}" for c, q, space in members)
    assert gzip_accepted(header) is expected, header


def test_a_client_that_refuses_gzip_gets_no_gzip(client: TestClient, keys: dict[str, str]) -> None:
    rows = [ROW] * 64  # an answer large enough to be worth compressing
    body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [64, 4], "data": [v for r in rows for v in r]}]}
    for value, gzipped in (("gzip", True), ("gzip;q=0", False), ("identity;q=1, gzip;q=0", False), ("*;q=0", False), ("*", True), ("deflate, gzip;q=0.5", True)):
        r = client.post("/v2/models/iris/infer", json=body, headers={**auth(keys["acme"]), "Accept-Encoding": value})
        assert r.status_code == 200
        assert (r.headers.get("content-encoding") == "gzip") is gzipped, value


@pytest.mark.parametrize("variant", [["a"], {"a": 1}, 5, True])
def test_a_variant_that_is_not_a_name_is_a_400_naming_it(client: TestClient, keys: dict[str, str], variant: Any) -> None:
    r = client.post("/v2/models/iris/infer", json={**INFER, "parameters": {"variant": variant}}, headers=auth(keys["acme"]))
    # A list or an object is no parameter at all (422 naming it where it is); a number or a boolean no variant's name.
    assert r.status_code in (400, 422) and r.json()["field"] == ("parameters.variant" if isinstance(variant, list | dict) else "variant"), r.text


def test_classification_of_no_rows_is_no_classes(client: TestClient, keys: dict[str, str]) -> None:
    empty = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [0, 4], "data": []}], "outputs": [{"name": "output_probability", "parameters": {"classification": 2}}]}
    r = client.post("/v2/models/iris/infer", json=empty, headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    (out,) = r.json()["outputs"]
    assert (out["datatype"], out["shape"][0], out["data"]) == ("BYTES", 0, [])


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"parameters": {"binary_data_output": "false"}}, "parameters.binary_data_output"),
        ({"parameters": {"binary_data_output": 1}}, "parameters.binary_data_output"),
        ({"outputs": [{"name": "output_label", "parameters": {"binary_data": "no"}}]}, "outputs.output_label.parameters.binary_data"),
        ({"inputs": [{"name": "input", "datatype": "FP32", "shape": [True, 4], "data": ROW}]}, "inputs.0.shape.0"),
        ({"inputs": [{"name": "input", "datatype": "FP32", "shape": ["1", 4], "data": ROW}]}, "inputs.0.shape.0"),
    ],
)
def test_a_flag_or_a_shape_of_the_wrong_json_type_is_refused_naming_it(client: TestClient, keys: dict[str, str], change: dict[str, Any], field: str) -> None:
    """The text "false" would read as true, `true` as 1: refused, not guessed."""
    r = client.post("/v2/models/iris/infer", json={**INFER, **change}, headers=auth(keys["acme"]))
    assert r.status_code in (400, 422), r.text
    assert r.json()["field"] == field, r.text


@pytest.mark.parametrize("k", [False, 0, 0.0, -0.0])
def test_a_classification_of_false_or_zero_is_a_400_not_the_raw_tensor(client: TestClient, keys: dict[str, str], k: Any) -> None:
    body = {**INFER, "outputs": [{"name": "output_probability", "parameters": {"classification": k}}]}
    r = client.post("/v2/models/iris/infer", json=body, headers=auth(keys["acme"]))
    assert r.status_code == 400, r.text
    assert r.json()["field"] == "outputs.output_probability.parameters.classification"


@pytest.mark.parametrize("ready", ["yes", 1, "true", None])
def test_a_repository_index_ready_that_is_not_true_or_false_is_refused_naming_it(client: TestClient, keys: dict[str, str], ready: Any) -> None:
    r = client.post("/v2/repository/index", json={"ready": ready}, headers=auth(keys["acme"]))
    assert r.status_code in (400, 422) and r.json()["field"].endswith("ready"), r.text


@pytest.mark.parametrize(
    ("policy", "width"),
    [
        ({"kind": "ensemble", "aggregator": "soft_vote", "members": [{"name": "a", "target": {"kind": "single", "model": "iris", "version": 1}}, {"name": "b", "target": {"kind": "single", "model": "iris", "version": 2}}]}, 4),
        ({"kind": "ensemble", "aggregator": "majority", "members": [{"name": "a", "target": {"kind": "single", "model": "iris", "version": 1}}, {"name": "b", "target": {"kind": "single", "model": "iris", "version": 2}}]}, 4),
        ({"kind": "precomputed", "table": "nightly", "key": "inputs.input", "column": "age", "live": {"kind": "single", "model": "diabetes", "version": 1}}, 10),
    ],
    ids=["soft_vote", "majority", "precomputed-by-input"],
)
def test_no_rows_through_an_ensemble_or_a_precomputed_node_is_an_empty_answer(
    client: TestClient, keys: dict[str, str], demo: Container, acme: Principal, policy: dict[str, Any], width: int
) -> None:
    """Zero rows (`shape [0, F]`), which a model alone answers with no rows, are answered so by
    the nodes that combine or look up rows too: never a 500."""
    from tests.conftest import MODELS

    demo.models.push(acme, "iris", (MODELS / "iris_forest.onnx").read_bytes())
    demo.deployments.create(acme, "zero", policy)
    empty = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [0, width], "data": []}]}
    r = client.post("/v2/models/zero/infer", json=empty, headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    assert r.json()["outputs"] and all(out["shape"][0] == 0 and out["data"] == [] for out in r.json()["outputs"])


@pytest.fixture
def scalar(demo: Container, acme: Principal) -> Container:
    """acme's deployment `scalar`: a model of one scalar input (shape []), cached and captured."""
    from tests.models import relu_model

    demo.models.push(acme, "scalar", relu_model([]))
    demo.deployments.create(acme, "scalar", {"kind": "single", "model": "scalar", "version": 1}, cache={"ttl_s": 600, "max_entries": 10}, capture={"sample_percent": 100})
    return demo


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(x=st.floats(-1e6, 1e6, width=32))
def test_a_scalar_input_is_one_row_on_every_door_that_counts_rows(scalar: Container, client: TestClient, keys: dict[str, str], x: float) -> None:
    """A model whose input is a scalar (shape []) answers a request of shape [] (computed, then
    from the cache) as ONNX Runtime does, and what counts rows (statistics, capture, kept
    answers) counts one: never a 500."""
    from sluice.capture.capturer import Capturer

    class Recording:
        records: list[dict[str, Any]] = []

        def write(self, records: Any) -> tuple[int, int]:
            self.records += list(records)
            return 0, 0

    sink = Recording()
    sink.records = []
    scalar.predictions.capture = Capturer(sink)
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [], "data": [x]}]}
    computed = 0
    for _ in range(2):  # computed (unless an earlier example asked the same), then from the cache
        r = client.post("/v2/models/scalar/infer", json=body, headers=auth(keys["acme"]))
        assert r.status_code == 200, r.text
        (out,) = r.json()["outputs"]
        assert out["shape"] == [] and np.float32(out["data"]) == np.float32(max(x, 0.0))
        computed += not r.json()["parameters"].get("cached", False)
    assert r.json()["parameters"]["cached"] is True
    r = client.post("/api/v1/predictions", json={"deployment": "scalar", "inputs": {"x": x}}, headers=auth(keys["acme"]))
    assert r.status_code == 200 and np.float32(r.json()["prediction"]) == np.float32(max(x, 0.0)), r.text
    computed += not r.json().get("cached", False)
    assert scalar.predictions.capture.drain()
    assert [rec["rows"] for rec in sink.records] == [1] * computed  # a computed answer is captured, one row


def test_simple_json_inputs_with_no_row_say_so(client: TestClient, keys: dict[str, str]) -> None:
    """`inputs: []` is no row at all: it read as one row of no values ("got [1, 0]", a shape
    the caller never sent). A row of no values is an empty input (below)."""
    empty = client.post("/api/v1/predictions", json={"deployment": "iris", "inputs": []}, headers=auth(keys["acme"]))
    assert (empty.status_code, empty.json()["field"]) == (400, "inputs") and "[1, 0]" not in empty.text, empty.text


@pytest.mark.parametrize(
    ("inputs", "field"),
    [([[]], "inputs"), ({"input": [[]]}, "inputs.input"), ({"input": [[], []]}, "inputs.input"), ({"input": []}, "inputs.input")],
    ids=["row", "named-row", "named-rows", "named-none"],
)
def test_rows_of_no_values_are_refused_as_empty_naming_where_they_came(client: TestClient, keys: dict[str, str], inputs: Any, field: str) -> None:
    """`[[]]` is an empty input, said so where the rows came: never a shape the caller never
    sent (`got [1, 0]`) under a field it has none of (`inputs.input.shape`)."""
    r = client.post("/api/v1/predictions", json={"deployment": "iris", "inputs": inputs}, headers=auth(keys["acme"]))
    assert r.status_code == 400, r.text
    assert r.json()["field"] == field and "is empty" in r.json()["error"] and "[1, 0]" not in r.json()["error"], r.json()
