"""A root-relative `Location` from the app works from the URL the client called: a REST API's
stage (`/prod`) is put in front of it; an HTTP API's `$default` stage and a custom domain
without a base path get it as it is."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sluice.handlers.asgi import _staged, url_prefix
from tests.conftest import EVENTS


def load(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text())


def moved(location: bytes) -> dict[str, Any]:
    return {"status": 202, "headers": [[b"content-type", b"application/json"], [b"location", location]], "body": b"{}"}


def test_a_rest_api_stage_goes_in_front_of_a_root_relative_location() -> None:
    event = load("api_rest_get_result.json")
    assert url_prefix(event) == "/prod"
    staged = _staged(moved(b"/api/v1/results/abc"), event)
    assert staged["headers"][1] == [b"location", b"/prod/api/v1/results/abc"]
    assert staged["headers"][0] == [b"content-type", b"application/json"] and staged["status"] == 202


@pytest.mark.parametrize(
    "location",
    [b"https://bucket.s3.eu-west-1.amazonaws.com/key?X-Amz-Signature=x", b"console/", b"//elsewhere/x"],
)
def test_absolute_and_relative_locations_are_left_alone(location: bytes) -> None:
    assert _staged(moved(location), load("api_rest_get_result.json"))["headers"][1] == [b"location", location]


def test_no_prefix_on_an_http_api_default_stage_or_a_custom_domain() -> None:
    http_api = load("api_http_predict.json")
    assert url_prefix(http_api) == ""
    assert _staged(moved(b"/api/v1/results/abc"), http_api)["headers"][1] == [b"location", b"/api/v1/results/abc"]
    custom = load("api_rest_get_result.json")
    custom["requestContext"]["path"] = custom["path"]  # a custom domain mapped at its root
    assert url_prefix(custom) == ""
    mapped = load("api_rest_get_result.json")
    mapped["requestContext"]["path"] = "/sluice" + mapped["path"]  # a base path mapping
    assert url_prefix(mapped) == "/sluice"
