"""Inputs that look like numbers but are not, and names that look valid but are not."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sluice.domain import check_name
from sluice.domain.errors import BadRequest
from tests.integration.conftest import auth

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

IRIS = {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}


@pytest.mark.parametrize(
    "body",
    [
        {"deployment": "iris", "features": {**IRIS, "sepal_width": True}},
        {"deployment": "iris", "inputs": [[5.1, 3.5, 1.4, False]]},
        {"deployment": "iris", "batch": [[5.1, 3.5, 1.4, 0.2], [True, True, True, True]]},
    ],
)
def test_json_booleans_are_not_numbers_in_simple_json(client: TestClient, keys: dict[str, str], body: dict) -> None:
    r = client.post("/api/v1/predictions", json=body, headers=auth(keys["acme"]))
    assert r.status_code == 400 and "true/false" in r.json()["error"], r.text


@pytest.mark.parametrize("data", [[True, False, True, True], [5.1, 3.5, True, 0.2], [[5.1, 3.5], [1.4, False]]])
def test_json_booleans_are_not_numbers_in_v2(client: TestClient, keys: dict[str, str], data: list) -> None:
    body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": data}]}
    r = client.post("/v2/models/iris/infer", json=body, headers=auth(keys["acme"]))
    assert r.status_code == 400 and r.json()["field"] == "inputs.input.data", r.text


def test_numbers_still_pass(client: TestClient, keys: dict[str, str]) -> None:
    r = client.post("/api/v1/predictions", json={"deployment": "iris", "features": {**IRIS, "petal_width": 1}}, headers=auth(keys["acme"]))
    assert r.status_code == 200


@pytest.mark.parametrize("name", ["iris\n", "iris\nx", "", "Iris", "-iris", "a" * 64])
def test_names_are_matched_whole(name: str) -> None:
    with pytest.raises(BadRequest):
        check_name(name, field="name")


def test_a_model_name_ending_in_a_newline_is_refused_over_the_api(client: TestClient, keys: dict[str, str]) -> None:
    r = client.post("/api/v1/models", json={"name": "iris2\n"}, headers=auth(keys["acme"]))
    assert r.status_code in (400, 422) and r.json()["field"] == "name"


def test_booleans_are_refused_wherever_the_json_holds_them(client: TestClient, keys: dict[str, str]) -> None:
    """JSON true/false are not numbers, whether the edge saw them in the body or not: a body
    with none anywhere is read without looking at each value, and still refuses strings."""
    headers = auth(keys["acme"])
    for rows in ([[5.1, 3.5, True, 0.2]], [[5.1, 3.5, 1.4, False]]):
        r = client.post("/api/v1/predictions", json={"deployment": "iris", "inputs": rows}, headers=headers)
        assert r.status_code == 400 and "true/false" in r.json()["error"], r.text
    r = client.post("/v2/models/iris/infer", headers=headers,
                    json={"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [5.1, 3.5, True, 0.2]}]})
    assert r.status_code == 400 and "true/false" in r.json()["error"], r.text
    r = client.post("/api/v1/predictions", json={"deployment": "iris", "inputs": [[5.1, 3.5, "1.4", 0.2]]}, headers=headers)
    assert r.status_code == 400, r.text
    r = client.post("/api/v1/predictions", json={"deployment": "iris", "inputs": [[5.1, 3.5, 1.4, 0.2]]}, headers=headers)
    assert r.status_code == 200 and r.json()["prediction"] == "setosa"
    # a long body (rows of numbers, with keys holding t and f many times) is looked through as a short one
    many = [[5.1, 3.5, 1.4, 0.2]] * 80
    for rows in ([*many, [5.1, 3.5, True, 0.2]], [[5.1, 3.5, False, 0.2], *many]):
        r = client.post("/api/v1/predictions", json={"request_id": "tttt-ffff-tttt-ffff", "deployment": "iris", "inputs": rows}, headers=headers)
        assert r.status_code == 400 and "true/false" in r.json()["error"], r.text
