"""A request's values for BOOL and BYTES inputs read alike on every door: simple JSON, v2 JSON
and a stream's records (whose rows are stacked into one array with their neighbours'). A BOOL
input takes true/false and 1/0 (1.0 too), never 0.25 or 2; a BYTES input takes text, and
numbers as an object array of them reaches the model, on REST and in a stream alike."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import pytest

from sluice.stream.core import StreamScorer
from sluice.stream.records import StreamRecord
from tests.integration.conftest import Tenants

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.wiring import Container


def _model(name: str, kind: int, out: int, op: str) -> bytes:
    from onnx import helper

    attrs = {"to": out} if op == "Cast" else {}
    graph = helper.make_graph(
        [helper.make_node(op, [name], ["out"], **attrs)], name,
        [helper.make_tensor_value_info(name, kind, [None, 2])], [helper.make_tensor_value_info("out", out, [None, 2])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.fixture
def world(demo: Container, acme: Principal) -> Tenants:
    from onnx import TensorProto

    demo.models.push(acme, "flags", _model("flags", TensorProto.BOOL, TensorProto.FLOAT, "Cast"), feature_names=["a", "b"])
    demo.models.push(acme, "codes", _model("codes", TensorProto.STRING, TensorProto.STRING, "Identity"), feature_names=["zip", "plan"])
    demo.models.push(acme, "ids", _model("ids", TensorProto.INT64, TensorProto.INT64, "Identity"), feature_names=["big", "small"])
    demo.models.push(acme, "floats", _model("floats", TensorProto.FLOAT, TensorProto.FLOAT, "Identity"), feature_names=["x", "y"])
    tenants = Tenants(demo)
    for name in ("flags", "codes", "ids", "floats"):
        assert tenants.save(name, {"kind": "single", "model": name, "version": 1}).status_code == 201
    return tenants


def _stream(world: Tenants, deployment: str, records: list[dict[str, Any]]) -> list[Any]:
    polled = [
        StreamRecord(json.dumps({"id": i, "features": f}), "arn:aws:sqs:us-east-1:123456789012:rows", f"m-{i}", {"message_id": f"m-{i}"})
        for i, f in enumerate(records)
    ]  # fmt: skip
    return [o.output for o in asyncio.run(StreamScorer(world.container.predictions, "acme", deployment).score(polled))]


@pytest.mark.parametrize(
    ("values", "taken"),
    [((1, 0), True), ((True, False), True), ((1.0, 0.0), True), ((0.25, 0), False), ((2, 0), False)],
)
def test_a_bool_input_takes_true_false_one_and_zero_on_every_door(world: Tenants, values: tuple[Any, Any], taken: bool) -> None:
    a, b = values
    simple = world.client.post("/api/v1/predictions", json={"deployment": "flags", "features": {"a": a, "b": b}}, headers=world.acme)
    v2 = world.client.post(
        "/v2/models/flags/infer", json={"inputs": [{"name": "flags", "datatype": "BOOL", "shape": [1, 2], "data": [a, b]}]}, headers=world.acme
    )
    for r in (simple, v2):
        assert r.status_code == (200 if taken else 400), r.text
    if taken:
        assert v2.json()["outputs"][0]["data"] == [float(bool(a)), float(bool(b))]
    # In a stream, a record alone and beside a neighbour of another kind answers as it would alone.
    for records in ([{"a": a, "b": b}], [{"a": a, "b": b}, {"a": 0.5, "b": 0}], [{"a": a, "b": b}, {"a": 1, "b": 0}]):
        first = _stream(world, "flags", records)[0]
        assert ("error" not in first) == taken, (records, first)


def test_numbers_for_a_text_input_read_alike_on_rest_and_in_a_stream(world: Tenants) -> None:
    """The same record answers the same text alone, on REST, and in a stream beside any
    neighbour (a float among them once made 7 read as "7.0")."""
    r = world.client.post("/api/v1/predictions", json={"deployment": "codes", "features": {"zip": 2139, "plan": 7}}, headers=world.acme)
    assert r.status_code == 200, r.text
    alone = r.json()["prediction"]
    assert alone == ["2139", "7"]
    for neighbour in ({"zip": "02139", "plan": "7"}, {"zip": 0.5, "plan": 1}, {"zip": 3, "plan": 4}):
        streamed = _stream(world, "codes", [{"zip": 2139, "plan": 7}, neighbour])
        assert streamed[0]["prediction"] == alone, (neighbour, streamed)


@pytest.mark.parametrize("big", [2**53 + 1, 2**63 - 1, -(2**63)])
def test_integers_beside_a_whole_float_reach_an_integer_input_exact_on_every_door(world: Tenants, big: int) -> None:
    """`2.0` is the integer 2, and never sends the integers beside it through float64 (which
    would round 2**53 + 1, or push 2**63 - 1 past INT64's range): simple JSON's every form, v2
    JSON and a stream's records answer the same exact values."""
    want = [big, 2]
    answers = {
        "inputs": world.client.post("/api/v1/predictions", json={"deployment": "ids", "inputs": [[big, 2.0]]}, headers=world.acme),
        "features": world.client.post("/api/v1/predictions", json={"deployment": "ids", "features": {"big": big, "small": 2.0}}, headers=world.acme),
    }
    for door, r in answers.items():
        assert r.status_code == 200 and r.json()["prediction"] == want, (door, r.text)
    v2 = world.client.post("/v2/models/ids/infer", json={"inputs": [{"name": "ids", "datatype": "INT64", "shape": [1, 2], "data": [big, 2.0]}]}, headers=world.acme)
    assert v2.status_code == 200 and v2.json()["outputs"][0]["data"] == want, v2.text
    for records in ([{"big": big, "small": 2.0}], [{"big": big, "small": 2}, {"big": 1, "small": 2.0}]):
        assert _stream(world, "ids", records)[0]["prediction"] == want, records



@pytest.mark.parametrize("big", [-(2**63) - 1, -(2**63) - 201, 2**64, 2**70])
def test_an_integer_past_64_bits_reads_as_written_on_every_door(world: Tenants, big: int) -> None:
    """Refused for an INT64 input, text for a BYTES one, a float for an FP32 one, on REST and in
    a stream alike. A stream's parser read such an integer as a float: -2**63 - 1 reached an
    INT64 model as -2**63 and 2**64 a BYTES one as "1.8446744073709552e+19"; simple JSON refused
    2**70 for an FP32 input that v2 and a stream took."""
    def simple(deployment: str, features: dict[str, Any]) -> Any:
        return world.client.post("/api/v1/predictions", json={"deployment": deployment, "features": features}, headers=world.acme)

    def v2(deployment: str, datatype: str, data: list[Any]) -> Any:
        body = {"inputs": [{"name": deployment, "datatype": datatype, "shape": [1, 2], "data": data}]}
        return world.client.post(f"/v2/models/{deployment}/infer", json=body, headers=world.acme)

    assert simple("ids", {"big": big, "small": 2}).status_code == 400 and v2("ids", "INT64", [big, 2]).status_code == 400
    assert "error" in _stream(world, "ids", [{"big": big, "small": 2}])[0]
    text = simple("codes", {"zip": big, "plan": "a"})
    assert text.status_code == 200 and text.json()["prediction"] == [str(big), "a"], text.text
    assert _stream(world, "codes", [{"zip": big, "plan": "a"}])[0]["prediction"] == [str(big), "a"]
    as_float = simple("floats", {"x": big, "y": 1.0})
    assert as_float.status_code == 200 and as_float.json()["prediction"] == pytest.approx([float(big), 1.0], rel=1e-6), as_float.text
    assert v2("floats", "FP32", [big, 1.0]).json()["outputs"][0]["data"] == pytest.approx([float(big), 1.0], rel=1e-6)
    assert _stream(world, "floats", [{"x": big, "y": 1.0}])[0]["prediction"] == pytest.approx([float(big), 1.0], rel=1e-6)


def test_a_number_past_a_doubles_range_is_no_text_for_a_bytes_input(world: Tenants) -> None:
    """`1e400` reads as infinity: it reached a BYTES model as the text "inf" over REST."""
    body = '{"deployment": "codes", "features": {"zip": 1e400, "plan": "a"}}'
    r = world.client.post("/api/v1/predictions", content=body, headers={**world.acme, "content-type": "application/json"})
    assert r.status_code == 400 and r.json()["field"].startswith("inputs"), r.text
