"""Graphs given what nobody on the team would give them: casts past a type's range, equality on
FP32 inputs, switches whose inputs disagree on rows or whose cases answer different classes,
exposed outputs that clash with the answer's, and WebSocket text frames of many-byte
characters. Each is answered right or refused naming what is wrong; never a wrong 200."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from tests.integration.conftest import auth
from tests.models import embed_model, one_hot_model, relu_model, score_model
from tests.support import single

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

    from sluice.domain import Principal
    from sluice.wiring import Container


def _save(client: TestClient, key: str, name: str, policy: dict[str, Any]) -> Any:
    return client.post("/api/v1/deployments", json={"name": name, "policy": policy}, headers=auth(key))


def _cast_then_score(datatype: str, to: str) -> dict[str, Any]:
    ops = [{"op": "cast", "input": "a", "datatype": to, "output": "b"}, {"op": "concat", "inputs": ["b"], "output": "embedding"}, {"op": "keep", "names": ["embedding"]}]
    transform = {"kind": "transform", "inputs": [{"name": "a", "datatype": datatype, "shape": [-1, 2]}], "ops": ops}
    return {"kind": "sequence", "steps": [{"name": "features", "target": transform}, {"name": "score", "target": single("score", 1)}]}


@pytest.mark.parametrize(
    ("datatype", "to", "data", "ok"),
    [
        ("INT64", "INT32", [2**40, 3], False),
        ("INT64", "INT32", [2**31 - 1, -(2**31)], True),
        ("FP32", "INT64", [1e30, 2.7], False),
        ("FP32", "INT32", [2.7, -3.0], True),
    ],
)
def test_a_cast_holds_the_same_values_or_refuses(demo: Container, acme: Principal, client: TestClient, keys: dict[str, str], datatype: str, to: str, data: list[float], ok: bool) -> None:
    demo.models.push(acme, "score", score_model())
    assert _save(client, keys["acme"], "cast", _cast_then_score(datatype, to)).status_code == 201
    body = {"inputs": [{"name": "a", "datatype": datatype, "shape": [1, 2], "data": data}]}
    r = client.post("/v2/models/cast/infer", json=body, headers=auth(keys["acme"]))
    if ok:
        assert r.status_code == 200, r.text
        (out,) = r.json()["outputs"]
        assert out["data"][0] == pytest.approx(float(np.asarray(data, np.float64).astype(np.int64) @ [1.0, 2.0]))
    else:
        assert r.status_code == 400 and r.json()["field"] == "inputs.a" and f"to {to}" in r.json()["error"], r.text


@pytest.mark.parametrize(("op", "value", "hit"), [("==", 0.2, True), ("in", [0.1, 0.2], True), ("!=", 0.2, False), ("<=", 0.2, True), ("==", 1e300, False), ("in", [1e300, 0.2], True), ("==", 10**400, False), ("in", [10**400, 0.2], True), ("<", 10**400, True)])
def test_a_condition_reads_an_fp32_value_as_the_caller_sent_it(client: TestClient, keys: dict[str, str], op: str, value: Any, hit: bool) -> None:
    """The caller sends 0.2 for an FP32 input: the row equals 0.2, as it is at most and at
    least 0.2. A number past every float (JSON's integers have no bound) equals no row."""
    policy = {"kind": "switch", "cases": [{"name": "hit", "when": {"field": "inputs.input", "column": "petal_width", "op": op, "value": value}, "target": single("iris", 1)}], "default": single("iris", 1)}
    assert _save(client, keys["acme"], "eq", policy).status_code == 201
    r = client.post("/api/v1/predictions", json={"deployment": "eq", "inputs": [[5.1, 3.5, 1.4, 0.2]]}, headers=auth(keys["acme"]))
    assert r.status_code == 200 and r.json()["case"] == ("hit" if hit else "default"), r.text


def test_a_switch_deciding_row_by_row_needs_one_row_of_each_input_per_row(demo: Container, acme: Principal, client: TestClient, keys: dict[str, str]) -> None:
    demo.models.push(acme, "score", score_model())
    two = [{"name": n, "datatype": "FP32", "shape": [-1]} for n in ("a", "b")]
    ops = [{"op": "concat", "inputs": ["a", "b"], "output": "embedding"}, {"op": "keep", "names": ["embedding"]}]
    sequence = {"kind": "sequence", "steps": [{"name": "features", "target": {"kind": "transform", "inputs": two, "ops": ops}}, {"name": "score", "target": single("score", 1)}]}
    policy = {"kind": "switch", "cases": [{"name": "small", "when": {"field": "inputs.a", "op": "<", "value": 1.5}, "target": sequence}], "default": sequence}
    assert _save(client, keys["acme"], "rows", policy).status_code == 201
    for a, b in (([1, 2], [5]), ([1], [5, 6]), ([1, 2], [1, 5, 1])):
        body = {"inputs": [{"name": "a", "datatype": "FP32", "shape": [len(a)], "data": a}, {"name": "b", "datatype": "FP32", "shape": [len(b)], "data": b}]}
        r = client.post("/v2/models/rows/infer", json=body, headers=auth(keys["acme"]))
        assert r.status_code == 400 and r.json()["field"] == "inputs.b", r.text
    body = {"inputs": [{"name": "a", "datatype": "FP32", "shape": [2], "data": [1, 2]}, {"name": "b", "datatype": "FP32", "shape": [2], "data": [5, 6]}]}
    assert client.post("/v2/models/rows/infer", json=body, headers=auth(keys["acme"])).json()["outputs"][0]["data"] == pytest.approx([11.0, 14.0])


def test_a_case_that_answers_fewer_rows_than_it_was_given_is_never_spread_over_them(demo: Container, acme: Principal, client: TestClient, keys: dict[str, str]) -> None:
    """A switch that decides row by row puts each case's rows back where they came from: a case
    whose model answers one row for the batch (column sums) would have that row copied into
    every row of its case (and, in a bulk call, into other records' rows). A 502 naming the
    case, never a 200."""
    from sluice.domain.errors import ModelFailed
    from sluice.inference.bulk import Error, Records, score_many
    from sluice.inference.loop import run
    from tests.models import total_model

    for _ in (1, 2):
        demo.models.push(acme, "total", total_model())
    policy = {"kind": "switch", "cases": [{"name": "neg", "when": {"field": "inputs.x", "column": 0, "op": "<", "value": 0}, "target": single("total", 1)}], "default": single("total", 2)}
    assert _save(client, keys["acme"], "sums", policy).status_code == 201
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [4, 2], "data": [-1, 0, 2, 2, -5, 0, 3, 3]}]}
    r = client.post("/v2/models/sums/infer", json=body, headers=auth(keys["acme"]))
    assert r.status_code == 502 and "case 'neg' answered output 'total' with 1 rows for the 2" in r.json()["error"], r.text
    # Two records of two rows, called together: that call fails (each case has two rows), and
    # split, each record's cases have one row each, which their sums answer: every record its own rows.
    rows = np.array([[-1, 0], [2, 2], [3, 3], [-5, 0]], np.float32)
    done = run(score_many(demo.predictions, acme, "sums", Records({"x": rows}, rows=np.array([2, 2])), max_rows=64))
    assert not done.errors and len(done.results) == 2
    for result in done.results:
        np.testing.assert_array_equal(result.answer.result.outputs["total"], rows[result.rows])
    lone = run(score_many(demo.predictions, acme, "sums", Records({"x": rows[[0, 3]]}, rows=np.array([2])), max_rows=64))  # one record, both rows neg
    (error,) = lone.errors
    assert isinstance(error, Error) and isinstance(error.error, ModelFailed) and not error.retry


def test_references_that_save_answer_and_fan_out_is_bounded_when_saved(demo: Container, acme: Principal, client: TestClient, keys: dict[str, str]) -> None:
    """What the checks let through, a request can take: references as deep as they allow
    answer, whatever nodes lie between (each split adds a node, not a deployment). And the most
    calls one request could make is bounded when the policy is saved, counted once per
    deployment however many paths reach it."""
    iris = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [5.1, 3.5, 1.4, 0.2]}]}
    assert _save(client, keys["acme"], "d0", single("iris", 1)).status_code == 201
    for i in range(1, 8):  # d7 -> d6 -> ... -> d0: eight deployments, each behind a split
        split = {"kind": "split", "variants": [{"name": "a", "weight": 1.0, "target": {"kind": "ref", "deployment": f"d{i - 1}"}}]}
        assert _save(client, keys["acme"], f"d{i}", split).status_code == 201
        r = client.post(f"/v2/models/d{i}/infer", json=iris, headers=auth(keys["acme"]))
        assert r.status_code == 200, (i, r.text)
    split = {"kind": "split", "variants": [{"name": "a", "weight": 1.0, "target": {"kind": "ref", "deployment": "d7"}}]}
    assert _save(client, keys["acme"], "d8", split).status_code == 422  # a ninth: refused when saved
    fan = lambda below: {"kind": "ensemble", "aggregator": "majority", "members": [{"name": f"m{j}", "target": {"kind": "ref", "deployment": below}} for j in range(16)]}  # noqa: E731
    nested = lambda below: {"kind": "ensemble", "aggregator": "majority", "members": [{"name": f"e{j}", "target": fan(below)} for j in range(4)]}  # noqa: E731
    mid = _save(client, keys["acme"], "mid", nested("d0"))
    assert mid.status_code == 201, mid.text  # 4 x 16 = 64 calls
    assert client.post("/v2/models/mid/infer", json=iris, headers=auth(keys["acme"])).status_code == 200
    r = _save(client, keys["acme"], "top", nested("mid"))  # 64 x 64 = 4,096
    assert r.status_code == 422 and "up to 4096 calls" in r.json()["error"] and r.json()["field"] == "policy", r.text


def test_a_transform_too_wide_is_refused_when_saved_and_too_many_rows_of_a_wide_one_when_asked(demo: Container, acme: Principal, client: TestClient, keys: dict[str, str]) -> None:
    """Concats of concats multiply widths: past 65,536 columns a tensor is refused when the
    policy is saved (four levels of 256 named billions of columns, and a MemoryError answered
    500); a wide one that saves refuses a request whose rows would make it past 64 million
    values, before it is made."""
    demo.models.push(acme, "score1", score_model("s", 1))

    def widening(*times: int) -> dict[str, Any]:
        ops: list[dict[str, Any]] = [{"op": "concat", "inputs": ["x"] * times[0], "output": "l1"}]
        ops += [{"op": "concat", "inputs": [f"l{i}"] * k, "output": f"l{i + 1}"} for i, k in enumerate(times[1:], start=1)]
        ops += [{"op": "select", "input": "x", "columns": [0], "output": "s"}, {"op": "keep", "names": ["s"]}]
        transform = {"kind": "transform", "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}], "ops": ops}
        return {"kind": "sequence", "steps": [{"name": "t", "target": transform}, {"name": "score", "target": single("score1", 1)}]}

    for times in ((256, 256), (256, 256, 256, 256)):  # 131,072 columns at ops.1
        r = _save(client, keys["acme"], "too-wide", widening(*times))
        assert r.status_code == 422 and "131072 columns, past the 65536" in r.json()["error"] and r.json()["field"] == "policy.steps.0.target.ops.1", r.text
    assert _save(client, keys["acme"], "wide", widening(256, 128)).status_code == 201  # 2 x 256 x 128 = 65,536 columns
    for rows, status in ((10, 200), (977, 413)):  # 976 rows of 65,536 is the most under 64 million
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [rows, 2], "data": [1.0] * (2 * rows)}]}
        r = client.post("/v2/models/wide/infer", json=body, headers=auth(keys["acme"]))
        assert r.status_code == status, r.text
    assert r.json()["field"].endswith("inputs") and "65536 columns" in r.json()["error"]


@pytest.mark.parametrize("others", [[0.5], [1.0], [9223372036854775808], [-1e300]])
def test_a_switch_in_list_of_whole_numbers_tells_ids_past_2_53_apart_whatever_else_it_holds(
    demo: Container, acme: Principal, client: TestClient, keys: dict[str, str], others: list[Any]
) -> None:
    """An `in` list holding a fraction, a float, a number past INT64 or a huge one beside an id
    past 2**53: each row of an INT64 input is compared as the whole number it is (made floats,
    2**53 and 2**53 + 1 were one number)."""
    from tests.models import ratio_model

    for _ in (1, 2):
        demo.models.push(acme, "ratio", ratio_model())
    when = {"field": "inputs.x", "op": "in", "value": [9007199254740993, *others]}
    policy = {"kind": "switch", "cases": [{"name": "vip", "when": when, "target": single("ratio", 1)}], "default": single("ratio", 2)}
    assert _save(client, keys["acme"], "ids", policy).status_code == 201
    body = {"inputs": [{"name": "x", "datatype": "INT64", "shape": [3, 1], "data": [2**53, 2**53 + 1, 2**53 + 2]}]}
    r = client.post("/v2/models/ids/infer", json=body, headers=auth(keys["acme"]))
    assert r.status_code == 200 and r.json()["parameters"]["case"] == ["default", "vip", "default"], r.text


def test_rows_whose_cases_answer_other_classes_are_not_put_in_one_tensor(demo: Container, acme: Principal, client: TestClient, keys: dict[str, str]) -> None:
    """One tensor has one list of classes: rows of a model with classes s1..s3 are not labelled
    with iris's (a 92% s1 row read as 92% setosa)."""
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    data = load_iris()
    labels = np.array([{"setosa": "s3", "versicolor": "s2", "virginica": "s1"}[n] for n in data.target_names[data.target]])
    model = LogisticRegression(max_iter=500, random_state=0).fit(data.data.astype(np.float32), labels)
    onnx_model = to_onnx(model, initial_types=[("input", FloatTensorType([None, 4]))], target_opset=17)
    names = onnx_model.metadata_props.add()  # iris's inputs, named as iris's are
    names.key, names.value = "feature_names", "sepal_length,sepal_width,petal_length,petal_width"
    demo.models.push(acme, "relabelled", onnx_model.SerializeToString())
    policy = {"kind": "switch", "cases": [{"name": "short", "when": {"field": "inputs.input", "column": 2, "op": "<", "value": 2.5}, "target": single("iris", 1)}], "default": single("relabelled", 1)}
    saved = _save(client, keys["acme"], "petals", policy)
    assert saved.status_code == 201, saved.text
    rows = [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]]
    r = client.post("/v2/models/petals/infer", json={"inputs": [{"name": "input", "datatype": "FP32", "shape": [2, 4], "data": [v for r in rows for v in r]}]}, headers=auth(keys["acme"]))
    assert r.status_code == 502 and r.json()["field"] == "policy" and "different classes" in r.json()["error"], r.text
    one = client.post("/api/v1/predictions", json={"deployment": "petals", "inputs": [rows[1]]}, headers=auth(keys["acme"]))
    assert one.status_code == 200 and one.json()["prediction"] == "s1"  # a request whose rows take one case is answered by it


def test_an_exposed_output_may_not_take_the_name_of_one_the_answer_has(demo: Container, acme: Principal, client: TestClient, keys: dict[str, str]) -> None:
    demo.models.push(acme, "embed", embed_model())
    demo.models.push(acme, "score", score_model())
    rename = {"kind": "transform", "ops": [{"op": "rename", "input": "score", "output": "embed.embedding"}]}
    policy = {
        "kind": "sequence", "expose": ["embed.embedding"],
        "steps": [{"name": "embed", "target": single("embed", 1)}, {"name": "score", "target": single("score", 1)}, {"name": "post", "target": rename}],
    }  # fmt: skip
    r = _save(client, keys["acme"], "collide", policy)
    assert r.status_code == 422 and r.json()["field"] == "policy.expose.0", r.text


def test_a_websocket_text_frame_is_measured_in_bytes(demo: Container) -> None:
    """A text frame of 300,000 four-byte characters is 1.2 MB however few characters it has:
    over a 1 MiB limit, as the same bytes in a binary frame are."""
    from sluice.api.socket import message_size

    text = "\N{GRINNING FACE}" * 300_000
    assert message_size(text, 1 << 20) == len(text.encode()) > 1 << 20
    assert message_size(text.encode(), 1 << 20) == len(text.encode())
    assert message_size("x" * 1000, 1 << 20) == 1000


def test_a_scalar_input_takes_a_switch_by_header_and_is_refused_by_one_that_reads_it_per_row(demo: Container, acme: Principal, client: TestClient, keys: dict[str, str]) -> None:
    """A scalar (shape []) is one row: a switch on a header sends it on whole; a switch that
    decides by an input's value row by row cannot, and says so naming the input (never a 500)."""
    demo.models.push(acme, "scalar", relu_model([]))
    by_header = {"field": "headers.x-a", "op": "==", "value": "1"}
    by_value = {"field": "inputs.x", "op": ">", "value": 0}
    for name, when in (("header", by_header), ("value", by_value)):
        demo.deployments.create(acme, name, {"kind": "switch", "cases": [{"name": "a", "when": when, "target": single("scalar", 1)}], "default": single("scalar", 1)})
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [], "data": [-2.0]}]}
    r = client.post("/v2/models/header/infer", json=body, headers={**auth(keys["acme"]), "x-a": "1"})
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [0.0] and r.json()["parameters"]["case"] == "a", r.text
    r = client.post("/v2/models/value/infer", json=body, headers=auth(keys["acme"]))
    assert r.status_code == 400 and r.json()["field"] == "inputs.x" and "scalar" in r.json()["error"], r.text


def test_a_category_the_one_hot_encoder_never_saw_is_a_400_naming_its_input(demo: Container, acme: Principal, client: TestClient, keys: dict[str, str]) -> None:
    """A scikit-learn pipeline whose OneHotEncoder refuses unknown categories, asked with one it
    never saw: the caller's value, so a 400 naming the input it came in (never a 502, the
    model's failure); the request with a known category answers."""
    version = demo.models.push(acme, "colors", one_hot_model())
    demo.deployments.create(acme, "colors", {"kind": "single", "model": "colors", "version": version.version})

    def asked(color: str) -> Any:
        inputs = [{"name": "color", "datatype": "BYTES", "shape": [1, 1], "data": [color]}, {"name": "size", "datatype": "FP32", "shape": [1, 1], "data": [2.0]}]
        return client.post("/v2/models/colors/infer", json={"inputs": inputs}, headers=auth(keys["acme"]))

    assert asked("red").status_code == 200
    r = asked("purple")
    assert r.status_code == 400, r.text
    assert r.json()["field"] == "inputs.color" and "category" in r.json()["error"], r.json()
    simple = client.post("/api/v1/predictions", json={"deployment": "colors", "features": {"color": "purple", "size": 2.0}}, headers=auth(keys["acme"]))
    assert simple.status_code == 400 and simple.json()["field"] == "inputs.color", simple.text
