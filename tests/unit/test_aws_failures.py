"""A lookup's store and a function step map AWS's failures the same way, each to its own words:
what a caller sees (the status and the message) for a timeout, the network, a refusal by code,
a refusal without one and any other failure."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from sluice.runtimes.feature_stores import aws_error
from sluice.runtimes.functions import _mapped

ARN = "arn:aws:lambda:eu-west-1:123456789012:function:enrich"


def refused(code: str | None) -> ClientError:
    error = {"Message": "the raw text"} | ({"Code": code} if code else {})
    return ClientError({"Error": error}, "Call")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exc", "store", "function"),
    [
        (ReadTimeoutError(endpoint_url="https://x"), (503, "is not reachable"), (504, "did not answer in time")),
        (EndpointConnectionError(endpoint_url="https://x"), (503, "is not reachable"), (503, "Lambda is not reachable")),
        (refused("ThrottlingException"), (503, "throttling reads (ThrottlingException)"), (503, "right now (ThrottlingException)")),
        (refused("ResourceNotFoundException"), (502, "does not exist"), (502, "does not exist")),
        (refused("AccessDeniedException"), (502, "the operator grants it"), (502, "the operator grants it")),
        (refused("RequestTooLargeException"), (502, "failed (RequestTooLargeException)"), (413, "refused the event")),
        (refused(None), (502, "failed (unknown error)"), (502, "failed (unknown error)")),
        (ValueError("the raw text"), (502, "failed (ValueError)"), (502, "failed (ValueError)")),
    ],
)
def test_aws_failures_map_to_a_status_and_words_without_the_raw_text(exc: Exception, store: tuple[int, str], function: tuple[int, str]) -> None:
    for error, (status, words) in ((aws_error(exc, "DynamoDB table 'customers'"), store), (_mapped(exc, ARN), function)):
        assert (error.status, words in str(error), "raw text" in str(error)) == (status, True, False), str(error)
