"""Every field that takes a time or a version, through the HTTP API and the CLI: the spellings a
security review found answered 500 now answer 422 naming the field, and a property-based test
(hypothesis) sends each field arbitrary strings, numbers (huge, NaN, infinities, negative),
booleans and nulls, and checks the answer against the domain's parser: never a 5xx, every 4xx
names a field, and the server refuses exactly what the parser refuses, with its message."""

from __future__ import annotations

import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from sluice.api.app import create_app
from sluice.domain.errors import InvalidRequest
from sluice.domain.values import (
    LATEST_TIME,
    MAX_NUMBER,
    parse_model_version,
    parse_time,
    parse_version,
    parse_version_or_latest,
)
from tests.conftest import MODELS
from tests.integration.conftest import auth, run_cli

if TYPE_CHECKING:
    from collections.abc import Callable

    from httpx import Response

    from sluice.wiring import Container

# Hypothesis keeps its caches outside the repository, and no example database: every run is
# the same run (derandomized). Forty values per field and route (a few milliseconds each through
# the whole app): the parsers are the same function behind every route, so what one route's
# values miss another's find; SLUICE_VALUES_EXAMPLES sends more.
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "sluice-values-hypothesis")
EXAMPLES = int(os.environ.get("SLUICE_VALUES_EXAMPLES", "40"))
PROPERTY = settings(
    max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)  # fmt: skip

IRIS_ROW = {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}
V2_BODY = {"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [5.1, 3.5, 1.4, 0.2]}]}
# What the parsers say when they refuse, whatever the value: an answer that says it about a
# value the parser takes would be a second parser somewhere.
REFUSALS = ("a version is", "a revision is", "a time is", "is outside the times sluice takes", "is not MODEL:VERSION,", "is not MODEL:VERSION:", "a model version is")


def post_json(client: TestClient, key: str, path: str, body: dict[str, Any], method: str = "POST") -> Response:
    """A body as JSON, NaN and infinities included (Python's reader takes them; so does the API's)."""
    headers = {**auth(key), "content-type": "application/json"}
    return client.request(method, path, content=json.dumps(body, allow_nan=True), headers=headers)


# The five spellings of the finding, and their company -------------------------------------------
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"since": float("nan")}, "since"),
        ({"since": LATEST_TIME, "until": 253402300800}, "until"),  # the year 10000
        ({"since": -62135596900, "until": -62135596000}, "since"),  # the year 0
        ({"since": "9999-12-31T23:00:00", "until": "9999-12-31T23:59:59"}, "since"),  # the reader's hour past the year 9999
        ({"since": "1h", "until": float("inf")}, "until"),
        ({"since": float("-inf")}, "since"),
        ({"since": True}, "since"),  # was read as 1970-01-01T00:00:01Z
        ({"since": "1h", "until": 10**400}, "until"),
    ],
)
def test_a_replay_window_the_parser_refuses_is_a_422_naming_it(client: TestClient, keys: dict[str, str], body: dict[str, Any], field: str) -> None:
    r = post_json(client, keys["acme"], "/api/v1/deployments/iris/replay", {**body, "against": "iris:1"})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field and r.json()["code"] == "invalid_request"
    assert r.json()["error"] == parse_refusal(parse_time, body[field], field=field, now=time.time())


@pytest.mark.parametrize("ago", ["1h", "0s", "30m"])
def test_a_replay_window_from_a_time_to_the_same_time_is_a_422_however_it_is_spelled(client: TestClient, keys: dict[str, str], ago: str) -> None:
    """`since` and `until` are read against one now: the same duration ago twice is one time,
    an empty window (refused), not a window of the microseconds between the two readings."""
    r = post_json(client, keys["acme"], "/api/v1/deployments/iris/replay", {"since": ago, "until": ago, "against": "iris:1"})
    assert r.status_code == 422, r.text
    assert (r.json()["field"], r.json()["error"]) == ("until", "until must come after since")


@pytest.mark.parametrize("version", [str(MAX_NUMBER + 1), str(2**64), "9" * 25, "1" * 400])
def test_a_version_past_63_bits_in_against_or_to_is_a_422(client: TestClient, keys: dict[str, str], version: str) -> None:
    r = post_json(client, keys["acme"], "/api/v1/deployments/iris/replay", {"since": "1h", "against": f"iris:{version}"})
    assert r.status_code == 422 and r.json()["field"] == "against", r.text
    r = post_json(client, keys["acme"], "/api/v1/deployments/iris/rollout", {"to": f"iris:{version}", "gate": "error_rate<=0.01"})
    assert r.status_code == 422 and r.json()["field"] == "to", r.text
    # The largest version is a version: looked up, and not found (422 on the field, not a 500).
    r = post_json(client, keys["acme"], "/api/v1/deployments/iris/rollout", {"to": f"iris:{MAX_NUMBER}", "gate": "error_rate<=0.01"})
    assert (r.status_code, r.json()["code"], r.json()["field"]) == (422, "unprocessable", "to"), r.text


def test_a_replay_at_the_edges_of_the_range_runs(client: TestClient, keys: dict[str, str]) -> None:
    """The first and last instants are times like any other: the reader walks the window."""
    for since, until in ((0, 3600), (LATEST_TIME - 86400, LATEST_TIME), ("9999-12-29T00:00:00Z", "9999-12-30T00:00:00Z")):
        r = post_json(client, keys["acme"], "/api/v1/deployments/iris/replay", {"since": since, "until": until, "against": "iris:1"})
        assert r.status_code == 200, r.text
        assert r.json()["records"] == 0 and r.json()["until"] == datetime.fromtimestamp(parse_time(until, field="u"), UTC).isoformat()


@pytest.mark.parametrize(("revision", "status"), [(1, 200), (2, 404), (999, 404)])
def test_a_deployments_statistics_at_a_revision_it_has_not_made_are_a_404_naming_it(client: TestClient, keys: dict[str, str], revision: int, status: int) -> None:
    """They were zeros under that revision's number: read as a revision that had no traffic."""
    r = client.get(f"/api/v1/deployments/iris/stats?revision={revision}", headers=auth(keys["acme"]))
    assert r.status_code == status, r.text
    if status == 404:
        assert r.json()["field"] == "revision" and "at revision 1" in r.json()["error"]


def test_a_captured_record_whose_version_is_not_one_fails_alone(demo: Container, client: TestClient, keys: dict[str, str]) -> None:
    """Replay reads versions from captured records with the same parser: one that names no
    version (text, past 63 bits) is an unreadable record, counted, and the others are scored."""
    from sluice.domain import Principal

    demo.deployments.update(Principal("acme", frozenset({"admin"}), "t"), "iris", None, capture={"sample_percent": 100})
    for i in range(4):
        r = post_json(client, keys["acme"], "/api/v1/predictions", {"deployment": "iris", "inputs": [[5.1, 3.5, 1.4, 0.2 + i / 10]]})
        assert r.status_code == 200, r.text
    assert demo.capture is not None and demo.capture.drain()
    files = sorted((demo.settings.process.home / "capture").rglob("*.jsonl"))
    lines = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert len(lines) == 4 and all(r["version"] == 1 for r in lines)
    for record, version in zip(lines, ("x", 2**70, "1", 1), strict=True):
        record["version"] = version
    for f in files[1:]:
        f.unlink()
    files[0].write_text("".join(json.dumps(r) + "\n" for r in lines))
    r = post_json(client, keys["acme"], "/api/v1/deployments/iris/replay", {"since": "1h", "against": "iris:1"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert (out["records"], out["scored_rows"], out["failed_rows"]) == (4, 2, 2)
    assert out["failures"] == {"unreadable record": 2}


# The CLI: the same message, and a non-zero exit ---------------------------------------------------
@pytest.mark.usefixtures("cli_home")
def test_the_cli_prints_the_apis_message_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    from sluice.wiring import get_container

    run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
    run_cli(capsys, "deployments", "create", "iris", "--model", "iris")
    _, key = get_container().keys.create("default", ["admin", "predict"])  # the CLI's own tenant
    keys = {"acme": key}
    client = TestClient(create_app(get_container()))
    cases = [
        (["replay", "iris", "--since", "9999-12-31T23:00:00", "--against", "iris:1"], "replay", {"since": "9999-12-31T23:00:00", "against": "iris:1"}),
        (["replay", "iris", "--since", "1h", "--until", "2026-02-30", "--against", "iris:1"], "replay", {"since": "1h", "until": "2026-02-30", "against": "iris:1"}),
        (["replay", "iris", "--since", "1h", "--against", f"iris:{MAX_NUMBER + 1}"], "replay", {"since": "1h", "against": f"iris:{MAX_NUMBER + 1}"}),
        (["rollout", "start", "iris", "--to", f"iris:{MAX_NUMBER + 1}", "--gate", "error_rate<=0.01"], "rollout", {"to": f"iris:{MAX_NUMBER + 1}", "gate": "error_rate<=0.01"}),
    ]  # fmt: skip
    for argv, route, body in cases:
        code, _, err = run_cli(capsys, *argv)
        answer = post_json(client, keys["acme"], f"/api/v1/deployments/iris/{route}", body).json()
        assert code == 2 and err.strip() == f"error: {answer['error']}", (argv, err, answer)
    # A version read by the service (`models show`): an OverflowError and a traceback before.
    code, _, err = run_cli(capsys, "models", "show", "iris", "--version", str(MAX_NUMBER + 1))
    answer = client.get(f"/api/v1/models/iris/versions/{MAX_NUMBER + 1}", headers=auth(keys["acme"])).json()
    assert code == 2 and err.strip() == f"error: {answer['error']}"
    code, _, err = run_cli(capsys, "models", "show", "iris", "--version", "\u0661")
    assert code == 2 and "error: version: " in err
    # A version read by argparse: the same message after argparse's own prefix.
    with pytest.raises(SystemExit) as exited:
        run_cli(capsys, "predict", "iris", "--features", "{}", "--version", "01")
    assert exited.value.code == 2
    assert parse_refusal(parse_version, "01", field="version") in capsys.readouterr().err


# The property: every field, arbitrary values ------------------------------------------------------
def parse_refusal(parse: Callable[..., Any], value: Any, **kw: Any) -> str | None:
    """The parser's message for `value`, or None when it takes it."""
    try:
        parse(value, **kw)
    except InvalidRequest as exc:
        return exc.message
    return None


EDGE_TEXT = [
    "1", "01", "+1", " 1", "1 ", "0", "-1", "1.0", "1e3", "\u0661\u0662", "\u00b3", "latest", "true", "null", "NaN", "Infinity",
    str(MAX_NUMBER), str(MAX_NUMBER + 1), str(2**64), "9" * 40, "iris:1", "iris:0", f"iris:{MAX_NUMBER}",
    f"iris:{MAX_NUMBER + 1}", "iris:\u0661", "iris:latest", "iris", ":1", "2h", "0s", "99999999999d", "1.5d", "-2h",
    "1970-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "9999-12-30T00:00:00Z", "9999-12-30T00:00:01Z",
    "9999-12-31T23:00:00", "0000-01-01", "2026-02-30", "2026-11-26T14:00:00+24:00", "2026-11-26 14:00", "2026-11-26",
]  # fmt: skip
EDGE_NUMBERS = [
    0, 1, -1, MAX_NUMBER, MAX_NUMBER + 1, -(2**63), 2**64, 10**400, -(10**400), LATEST_TIME, LATEST_TIME + 1,
    253402300800, -62135596900, 1.0, 1e3, 0.5, -0.001, 1e308, -1e308, 5e-324,
]  # fmt: skip
TEXT = st.one_of(st.text(max_size=40), st.sampled_from(EDGE_TEXT), st.integers().map(str), st.floats().map(str))
# What a JSON body may hold where a time or a version goes.
JSON_VALUES = st.one_of(
    TEXT,
    st.integers(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.integers(min_value=LATEST_TIME - 86400, max_value=LATEST_TIME + 86400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(EDGE_NUMBERS),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=1),
)
# What a path segment may hold: any text a client can put in one (no '/', and not a dot segment,
# which the URL itself resolves before sluice sees it).
PATH_VALUES = TEXT.filter(lambda t: t not in ("", ".", "..") and "/" not in t)


def check(r: Response, field: str, refusal: str | None, *, exact: bool = True) -> None:
    """Never a 5xx; a 4xx names a field; refused by the parser: a 422 on this field, with the
    parser's message when the parser saw the value (`exact`); taken: not refused as such."""
    assert r.status_code < 500, (field, r.status_code, r.text)
    body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
    if r.status_code >= 400:
        assert isinstance(body.get("field"), str) and body["field"], (field, r.status_code, r.text)
    if refusal is not None:
        assert (r.status_code, body.get("code"), body.get("field")) == (422, "invalid_request", field), (refusal, r.text)
        if exact:
            assert body["error"] == refusal, (refusal, r.text)
    else:
        assert not (body.get("field") == field and any(words in body.get("error", "") for words in REFUSALS)), r.text


VERSION_PATHS = [
    ("GET", "/v2/models/iris/versions/{v}", False),
    ("GET", "/v2/models/iris/versions/{v}/ready", False),
    ("POST", "/v2/models/iris/versions/{v}/infer", False),
    ("GET", "/v2/models/iris/versions/{v}/config", False),
    ("GET", "/v2/models/iris/versions/{v}/stats", False),
    ("GET", "/api/v1/models/iris/versions/{v}", True),
    ("DELETE", "/api/v1/models/iris/versions/{v}", False),
    ("POST", "/api/v1/models/iris/versions/{v}/optimize", True),
]


@pytest.mark.parametrize(("method", "path", "latest"), VERSION_PATHS)
def test_a_version_in_a_path_is_read_by_the_parser(client: TestClient, keys: dict[str, str], method: str, path: str, latest: bool) -> None:
    @PROPERTY
    @given(value=PATH_VALUES)
    def run(value: str) -> None:
        parse = parse_version_or_latest if latest else parse_version
        r = client.request(method, path.format(v=quote(value, safe="")), headers=auth(keys["acme"]), json=V2_BODY if method == "POST" else None)
        check(r, "version", parse_refusal(parse, value, field="version"))

    run()


@pytest.mark.parametrize("field", ["since", "until"])
def test_a_replay_time_is_read_by_the_parser(client: TestClient, keys: dict[str, str], field: str) -> None:
    @PROPERTY
    @given(value=JSON_VALUES)
    def run(value: Any) -> None:
        body = {"since": "1h", "against": "iris:1", field: value}
        r = post_json(client, keys["acme"], "/api/v1/deployments/iris/replay", body)
        refusal = None if field == "until" and value is None else parse_refusal(parse_time, value, field=field, now=time.time())
        check(r, field, refusal)

    run()


# Windows that pass the parser, near the ends of the range: the reader walks them.
INSTANTS = st.one_of(
    st.integers(min_value=-86400, max_value=86400 * 3),
    st.integers(min_value=LATEST_TIME - 86400 * 3, max_value=LATEST_TIME + 86400),
    st.floats(min_value=LATEST_TIME - 86400 * 3, max_value=LATEST_TIME + 86400),
)


@PROPERTY
@given(since=INSTANTS, hours=st.integers(min_value=-2, max_value=24 * 32), as_text=st.booleans())
def test_a_replay_window_anywhere_in_range_never_fails_the_server(client: TestClient, keys: dict[str, str], since: float, hours: int, as_text: bool) -> None:
    until = since + hours * 3600
    body: dict[str, Any] = {"since": since, "until": until, "against": "iris:1"}
    if as_text and since >= 0 and until <= LATEST_TIME:
        body |= {"since": datetime.fromtimestamp(since, UTC).isoformat(), "until": datetime.fromtimestamp(until, UTC).isoformat()}
    r = post_json(client, keys["acme"], "/api/v1/deployments/iris/replay", body)
    refusal = parse_refusal(parse_time, body["since"], field="since") or parse_refusal(parse_time, body["until"], field="until")
    check(r, "since" if parse_refusal(parse_time, body["since"], field="since") else "until", refusal)
    if refusal is None and 0 < until - since < 31 * 86400 - 1:
        assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("field", "path", "body"),
    [
        ("against", "/api/v1/deployments/iris/replay", {"since": "1h"}),
        # steps "100" is refused after `to` is read and looked up: no rollout starts.
        ("to", "/api/v1/deployments/iris/rollout", {"gate": "error_rate<=0.01", "steps": "100"}),
    ],
)
def test_a_model_version_is_read_by_the_parser(client: TestClient, keys: dict[str, str], field: str, path: str, body: dict[str, Any]) -> None:
    @PROPERTY
    @given(value=JSON_VALUES)
    def run(value: Any) -> None:
        r = post_json(client, keys["acme"], path, {**body, field: value})
        if not isinstance(value, str):  # the wire's `str` refuses it first, naming the field
            check(r, field, "not a string", exact=False)
        elif field == "to" or ":" in value:
            check(r, field, parse_refusal(parse_model_version, value, field=field))
        else:  # a deployment's name: not a version at all, checked as a name
            check(r, field, None)

    run()


@pytest.mark.parametrize(
    ("field", "method", "path", "body"),
    [
        ("version", "POST", "/api/v1/predictions", {"deployment": "iris", "features": IRIS_ROW}),
        ("version", "PUT", "/api/v1/deployments/iris", {"model": "iris"}),
        ("revision", "PUT", "/api/v1/deployments/iris", {"model": "iris", "version": 1}),
    ],
)
def test_a_version_in_a_body_is_read_by_the_parser(client: TestClient, keys: dict[str, str], field: str, method: str, path: str, body: dict[str, Any]) -> None:
    @PROPERTY
    @given(value=JSON_VALUES)
    def run(value: Any) -> None:
        r = post_json(client, keys["acme"], path, {**body, field: value}, method=method)
        check(r, field, None if value is None else parse_refusal(parse_version, value, field=field, what=field))

    run()


def test_a_stats_revision_is_read_by_the_parser(client: TestClient, keys: dict[str, str]) -> None:
    @PROPERTY
    @given(value=TEXT)
    def run(value: str) -> None:
        r = client.get("/api/v1/deployments/iris/stats", params={"revision": value}, headers=auth(keys["acme"]))
        check(r, "revision", parse_refusal(parse_version, value, field="revision", what="revision"))

    run()
