"""A prediction sent as a WebSocket message against the same prediction POSTed: for any body,
right or wrong (the simple JSON a caller might send, or text that is not JSON), and any key,
the message's answer says what the HTTP answer says: the same status and error code and field
for a refusal, the same prediction for an answer (but its latency and request id)."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from tests.integration.conftest import auth
from tests.integration.test_lambda_api import _PLAIN
from tests.support import steady

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

URL = "/api/v1/stream"
SETOSA = [5.1, 3.5, 1.4, 0.2]
_RIGHT_FEATURES = {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}
_RIGHT = st.sampled_from([
    {"deployment": "iris", "inputs": [SETOSA]},
    {"deployment": "iris", "inputs": [SETOSA, [6.7, 3.0, 5.2, 2.3]]},
    {"deployment": "iris", "features": _RIGHT_FEATURES},
])  # fmt: skip
_BODIES = st.one_of(_RIGHT, _RIGHT, _PLAIN, st.text(max_size=8))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=_BODIES, who=st.sampled_from(["acme", "acme_predict", "globex"]))
# NaN, Infinity and integers past 64 bits are no JSON to orjson: a message once called them
# "not valid JSON" where the HTTP routes read them and the input checks refused them.
@example(body={"deployment": "iris", "features": {**_RIGHT_FEATURES, "sepal_width": math.nan}}, who="acme")
@example(body={"deployment": "iris", "inputs": [[2**70, 3.5, 1.4, 0.2]]}, who="acme")
def test_a_message_is_answered_as_the_request(client: TestClient, keys: dict[str, str], body: Any, who: str) -> None:
    text = body if isinstance(body, str) else json.dumps(body)
    http = client.post("/api/v1/predictions", content=text, headers={**auth(keys[who]), "content-type": "application/json"})
    with client.websocket_connect(URL, headers=auth(keys[who])) as ws:
        ws.send_text(text)
        answer = ws.receive_json()
    expected = http.json()
    event(str(http.status_code))
    if http.status_code == 200:
        assert "status" not in answer, answer
        assert steady(answer) == steady(expected)
    else:
        assert (answer.get("status"), answer.get("code"), answer.get("field")) == (http.status_code, expected["code"], expected.get("field")), (answer, expected)
