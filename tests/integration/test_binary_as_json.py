"""A v2 tensor sent as binary data (the binary tensor extension: a JSON header, then the raw
little-endian bytes, `Inference-Header-Content-Length` saying where the header ends) against the
same values sent as JSON: for any datatype, shape and number of values to either demo model,
both are refused alike (the same status and error code) or answered with the same outputs."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.integration.conftest import auth
from tests.support import V2_DTYPES, v2_values

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

HEADER = "Inference-Header-Content-Length"


@st.composite
def _tensor(draw: Any) -> tuple[str, dict[str, Any]]:
    model, width = draw(st.sampled_from([("iris", 4), ("diabetes", 10)]))
    datatype = draw(st.sampled_from(["FP32", "FP32", "FP32", *V2_DTYPES]))
    shape = [draw(st.integers(1, 3)), width + draw(st.sampled_from([0, 0, 0, -1, 1]))]
    count = max(math.prod(shape) + draw(st.sampled_from([0, 0, 0, 0, -1, 1])), 0)
    return model, {"name": "input", "shape": shape, "datatype": datatype, "data": draw(st.lists(v2_values(datatype), min_size=count, max_size=count))}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sent=_tensor())
def test_binary_data_answers_as_json(client: TestClient, keys: dict[str, str], sent: tuple[str, dict[str, Any]]) -> None:
    model, tensor = sent
    url, headers = f"/v2/models/{model}/infer", {**auth(keys["acme"]), "content-type": "application/json"}
    as_json = client.post(url, content=json.dumps({"inputs": [tensor]}), headers=headers)
    raw = np.asarray(tensor["data"], dtype=V2_DTYPES[tensor["datatype"]]).tobytes()
    described = {k: v for k, v in tensor.items() if k != "data"} | {"parameters": {"binary_data_size": len(raw)}}
    header = json.dumps({"inputs": [described]}).encode()
    as_binary = client.post(url, content=header + raw, headers={**headers, "content-type": "application/octet-stream", HEADER: str(len(header))})
    event(str(as_json.status_code))
    assert as_binary.status_code == as_json.status_code, (as_binary.text, as_json.text)
    if as_json.status_code != 200:
        assert as_binary.json()["code"] == as_json.json()["code"], (as_binary.text, as_json.text)
        return
    steady = lambda body: {o["name"]: (o["datatype"], o["shape"], o["data"]) for o in body["outputs"]}  # noqa: E731
    assert steady(as_binary.json()) == steady(as_json.json())
