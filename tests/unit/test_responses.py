"""An answer's size as a Lambda result carries it (`lambda_size_over`), checked against the
reference: Mangum's own translation of the response into API Gateway's result, written as
JSON as the Lambda Python runtimes sluice deploys write it."""

from __future__ import annotations

import gzip
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from mangum.handlers.api_gateway import APIGateway
from starlette.responses import Response

from sluice.api.responses import JSONResponse, lambda_size_over
from tests.conftest import EVENTS

_EVENT = json.loads((EVENTS / "api_rest_predict.json").read_text())
_CONFIG: Any = {"api_gateway_base_path": "/", "text_mime_types": ["application/json"], "exclude_headers": []}

_JSON = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.text(),  # any character: quotes, backslashes, controls, non-ASCII
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner, max_size=6),
    max_leaves=40,
)


def _carried(response: Response) -> int:
    """The body's bytes in the function's result as Lambda writes it (Python 3.12 on: JSON,
    non-ASCII as it is)."""
    result = APIGateway(_EVENT, None, _CONFIG)({"status": 200, "headers": response.raw_headers, "body": response.body})
    return len(json.dumps(result["body"], ensure_ascii=False).encode()) - 2  # less the string's quotes


def _answers(content: Any, coded: str) -> Response:
    response = JSONResponse(content)
    if coded == "gzip":
        response.body = gzip.compress(response.body)
        response.headers["content-encoding"] = "gzip"
    elif coded == "binary":
        response = Response(response.body, media_type="application/octet-stream")
    return response


@given(content=_JSON, coded=st.sampled_from(["json", "gzip", "binary"]), data=st.data())
def test_an_answer_is_over_the_limit_exactly_when_its_lambda_result_is(content: Any, coded: str, data: st.DataObject) -> None:
    response = _answers(content, coded)
    carried = _carried(response)
    limit = data.draw(st.integers(1, 2 * carried + 2), label="limit")
    over = lambda_size_over(response, limit)
    assert (over is None) == (carried <= limit), (carried, limit, over)
    if over is not None:  # what the refusal says: never more than it is
        assert limit < over <= carried


def test_an_answer_of_quotes_is_counted_escaped() -> None:
    """Near the limit the escapes decide: an answer under it by its length alone is over it
    as Lambda carries it."""
    response = JSONResponse({"rows": [{"label": "setosa"}] * 1000})
    size, quotes = len(response.body), response.body.count(b'"')
    assert lambda_size_over(response, size) == size + quotes
    assert lambda_size_over(response, size + quotes) is None
