"""The same rows as simple JSON and as a v2 tensor: for any rows of any width and any values
(finite or not) to either demo model, both routes refuse alike (the same status and error
code) or answer with the same predictions: the same labels and probabilities (iris) or values
(diabetes), read as the model's float32."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.integration.conftest import auth

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

WIDTH = {"iris": 4, "diabetes": 10}
_FINITE = st.floats(-10, 10, width=32)


@st.composite
def _rows(draw: Any) -> tuple[str, list[list[float]]]:
    model = draw(st.sampled_from(sorted(WIDTH)))
    width = WIDTH[model] + draw(st.sampled_from([0, 0, 0, 0, -1, 1]))
    value = _FINITE | st.sampled_from([math.nan, math.inf]) if draw(st.integers(0, 4)) == 0 else _FINITE
    return model, draw(st.lists(st.lists(value, min_size=width, max_size=width), min_size=1, max_size=4))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sent=_rows())
def test_v2_answers_as_simple_json(client: TestClient, keys: dict[str, str], sent: tuple[str, list[list[float]]]) -> None:
    model, rows = sent
    headers = {**auth(keys["acme"]), "content-type": "application/json"}  # bodies as json.dumps writes them: NaN too
    simple = client.post("/api/v1/predictions", content=json.dumps({"deployment": model, "inputs": rows}), headers=headers)
    tensor = {"name": "input", "shape": [len(rows), len(rows[0])], "datatype": "FP32", "data": [v for r in rows for v in r]}
    v2 = client.post(f"/v2/models/{model}/infer", content=json.dumps({"inputs": [tensor]}), headers=headers)
    event(str(simple.status_code))
    assert simple.status_code == v2.status_code, (simple.text, v2.text)
    if simple.status_code != 200:
        assert simple.json()["code"] == v2.json()["code"], (simple.text, v2.text)
        return
    answers = simple.json()["predictions"] if "predictions" in simple.json() else [simple.json()]
    outputs = {o["name"]: o for o in v2.json()["outputs"]}
    if model == "iris":
        assert [a["prediction"] for a in answers] == outputs["output_label"]["data"]
        probabilities = np.asarray([[a["probabilities"][c] for c in ("setosa", "versicolor", "virginica")] for a in answers], dtype=np.float32)
        np.testing.assert_array_equal(probabilities.ravel(), np.asarray(outputs["output_probability"]["data"], dtype=np.float32))
    else:
        np.testing.assert_array_equal(np.asarray([a["prediction"] for a in answers], dtype=np.float32), np.asarray(outputs["variable"]["data"], dtype=np.float32))
