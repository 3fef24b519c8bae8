"""The per-key rate limit of the local service (`SLUICE_RATE_LIMIT`): off by default, and when on,
a key past its rate gets 429 with Retry-After before its body is read, other keys unaffected."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.api.app import create_app
from sluice.settings import SettingRefused, Settings
from sluice.wiring import Container
from tests.conftest import MODELS, REPO
from tests.integration.conftest import auth
from tests.integration.test_edge import IRIS_ROW, MB, _call

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal


def _limited(tmp_path: Path, acme: Principal, rate: str, **more: Any) -> tuple[Container, str, str]:
    """acme's demo deployments on a container of `rate` (and `more` settings): an admin key, a predict key."""
    from sluice.demo import install_demo

    container = Container.from_settings(Settings(mode="local", home=tmp_path / "home", rate_limit=rate, **more))
    install_demo(container, acme, MODELS)
    _, admin = container.keys.create("acme", ["admin", "predict"])
    _, other = container.keys.create("acme", ["predict"])
    return container, admin, other


def test_a_key_past_its_rate_gets_429_with_retry_after_and_others_do_not(tmp_path: Path, acme: Principal) -> None:
    container, key, other = _limited(tmp_path, acme, "3/second")
    client = TestClient(create_app(container))
    assert [client.get("/api/v1/models", headers=auth(key)).status_code for _ in range(3)] == [200] * 3
    refused = client.get("/api/v1/models", headers=auth(key))
    assert refused.status_code == 429
    assert refused.json()["code"] == "rate_limited" and refused.json()["field"] == "key"
    wait = int(refused.headers["Retry-After"])
    assert wait == 1
    # the hot route is held to the same rate, and another key of the same tenant is not
    body = {"deployment": "iris", "features": IRIS_ROW}
    assert client.post("/api/v1/predictions", json=body, headers=auth(key)).status_code == 429
    assert client.post("/api/v1/predictions", json=body, headers=auth(other)).status_code == 200
    time.sleep(wait + 0.1)
    answered = client.post("/api/v1/predictions", json=body, headers=auth(key))
    assert answered.status_code == 200 and answered.json()["prediction"] == "setosa"


def test_a_burst_bound_and_a_sustained_rate_both_hold(tmp_path: Path, acme: Principal) -> None:
    container, key, _ = _limited(tmp_path, acme, "4/minute;2/second")
    client = TestClient(create_app(container))
    statuses = [client.get("/api/v1/models", headers=auth(key)).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]  # the burst: 2 in a second
    time.sleep(1.1)
    statuses = [client.get("/api/v1/models", headers=auth(key)).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]  # 4 in the minute now
    refused = client.get("/api/v1/models", headers=auth(key))
    assert "per 1 minute" in refused.json()["error"] and int(refused.headers["Retry-After"]) > 50


def test_a_key_over_its_rate_is_refused_before_any_of_the_body_is_read(tmp_path: Path, acme: Principal) -> None:
    container, key, _ = _limited(tmp_path, acme, "1/minute")
    app = create_app(container)
    assert TestClient(app).get("/api/v1/models", headers=auth(key)).status_code == 200
    for path in ("/api/v1/predictions", "/v2/models/iris/infer", "/api/v1/models"):
        status, body, read = _call(app, "POST", path, auth(key), [MB] * 50)
        assert status == 429 and body["code"] == "rate_limited"
        assert read == 0


def test_off_by_default_nothing_changes_and_limits_is_never_imported(tmp_path: Path) -> None:
    # A process of its own: other tests here import `limits`.
    script = f"""
import sys
from fastapi.testclient import TestClient
from sluice.api.app import create_app
from sluice.settings import Settings
from sluice.wiring import Container
container = Container.from_settings(Settings(mode="local", home={str(tmp_path)!r}))
assert container.settings.admission.rate_limit == ""
_, key = container.keys.create("acme", ["admin"])
client = TestClient(create_app(container))
statuses = {{client.get("/api/v1/models", headers={{"Authorization": "Bearer " + key}}).status_code for _ in range(200)}}
assert statuses == {{200}}, statuses
assert "limits" not in sys.modules, "limits imported with the rate limit off"
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.mark.parametrize("rate", ["fast", "10/fortnight", "0/second", "10"])
def test_a_rate_that_is_not_one_is_refused_naming_the_setting(rate: str) -> None:
    with pytest.raises(SettingRefused, match="SLUICE_RATE_LIMIT"):
        Settings(mode="local", rate_limit=rate)


def test_the_rate_limit_is_refused_on_aws_where_usage_plans_throttle() -> None:
    with pytest.raises(SettingRefused, match="usage plans"):
        Settings(mode="aws", registry="dynamodb://t", store="s3://b", rate_limit="10/second")


@settings(max_examples=60, deadline=None)
@given(
    scheme=st.sampled_from(["reddis", "http", "memcached", "mongodb", "redis+cluster", "async+reddis", ""]),
    password=st.text(st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters="@/?#"), min_size=1, max_size=20),
)
def test_a_storage_it_cannot_count_in_is_refused_by_name_without_its_password(scheme: str, password: str) -> None:
    """`reddis://:hunter2@cache:6379` was taken: every request was then a 500, and the server's
    output printed the URL, its password with it."""
    url = f"{scheme}://:pw-{password}@cache.internal:6379" if scheme else f":pw-{password}@cache.internal:6379"
    with pytest.raises(SettingRefused) as refused:
        Settings(mode="local", rate_limit="10/second", rate_limit_storage=url)
    assert str(refused.value).startswith("SLUICE_RATE_LIMIT_STORAGE: ") and f"pw-{password}" not in str(refused.value)


def test_redis_counts_through_the_redis_package_and_without_it_is_refused_as_the_settings_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """limits' asynchronous Redis storage wants coredis by default: with the `redis` package the
    docs name, every request was a 500 ("'coredis' prerequisite not available")."""
    from sluice.services.ratelimit import RateLimit

    url = "redis://:secret@127.0.0.1:6379/0"
    if importlib.util.find_spec("redis") is not None:
        limit = RateLimit.from_settings(Settings(mode="local", rate_limit="10/second", rate_limit_storage=url).admission)
        assert limit is not None and type(limit.strategy.storage.bridge).__name__ == "RedispyBridge"  # built, no server needed yet
    monkeypatch.setitem(sys.modules, "redis", None)  # as where it is not installed
    with pytest.raises(SettingRefused, match=r"^SLUICE_RATE_LIMIT_STORAGE: redis:// needs the `redis` package") as refused:
        Settings(mode="local", rate_limit="10/second", rate_limit_storage=url)
    assert "secret" not in str(refused.value)


def test_each_message_of_a_grpc_stream_counts_against_its_keys_rate(tmp_path: Path, acme: Principal) -> None:
    """A stream is no way around the rate: 3 a minute answers the first 3 of 6 messages and
    refuses the rest, each with its own error, as a unary call past the rate is refused."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    from tests.integration.grpc.conftest import run_server

    container, key, _ = _limited(tmp_path, acme, "3/minute")
    answers: list[Any] = []
    with run_server(container) as url:
        client = grpcclient.InferenceServerClient(url)
        client.start_stream(callback=lambda result, error: answers.append(error or result), headers={"authorization": f"Bearer {key}"})
        rows = np.asarray([[5.1, 3.5, 1.4, 0.2]], dtype=np.float32)
        for _ in range(6):
            tensor = grpcclient.InferInput("input", [1, 4], "FP32")
            tensor.set_data_from_numpy(rows)
            client.async_stream_infer("iris", [tensor])
        deadline = time.monotonic() + 20
        while len(answers) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        client.stop_stream()
        client.close()
    refused = [a for a in answers if isinstance(a, Exception)]
    assert len(answers) == 6 and len(refused) == 3, answers
    assert all("rate" in str(a).lower() for a in refused), refused


def _grpc_row() -> Any:
    """One iris row as tritonclient's gRPC client sends it."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    row = grpcclient.InferInput("input", [1, 4], "FP32")
    row.set_data_from_numpy(np.asarray([[5.1, 3.5, 1.4, 0.2]], dtype=np.float32))
    return row


@pytest.mark.parametrize("first", ["http", "grpc"])
def test_a_key_has_one_rate_whichever_door_it_uses(tmp_path: Path, acme: Principal, first: str) -> None:
    """HTTP and gRPC in one process count a key against one rate: its requests over HTTP leave
    gRPC only what remains of it, and the other way round. Both doors on the one event loop, as
    a `sluice serve` worker runs them (the rate's in-memory store belongs to a loop)."""
    import asyncio

    import httpx
    import tritonclient.grpc as grpcclient

    from tests.integration.grpc.conftest import serving

    container, _, key = _limited(tmp_path, acme, "3/minute")
    app = create_app(container)
    row = _grpc_row()
    with serving(container) as (url, loop):
        g = grpcclient.InferenceServerClient(url)

        def over_grpc() -> str:
            try:
                g.infer("iris", [row], headers={"authorization": f"Bearer {key}"})
                return "ok"
            except grpcclient.InferenceServerException as exc:
                return str(exc.status())

        async def post() -> int:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sluice") as client:
                answer = await client.post("/api/v1/predictions", json={"deployment": "iris", "features": IRIS_ROW}, headers=auth(key))
                return answer.status_code

        def over_http() -> str:
            status = asyncio.run_coroutine_threadsafe(post(), loop).result(60)
            return "ok" if status == 200 else str(status)

        doors = [over_http, over_grpc] if first == "http" else [over_grpc, over_http]
        answered = [doors[0]() for _ in range(2)] + [doors[1]() for _ in range(2)]
        g.close()
    assert answered[:3] == ["ok", "ok", "ok"] and answered[3] in ("429", "StatusCode.RESOURCE_EXHAUSTED"), answered


@pytest.mark.parametrize("door", ["http", "grpc"])
def test_a_request_refused_for_too_many_in_flight_takes_none_of_its_keys_rate(tmp_path: Path, acme: Principal, door: str) -> None:
    """Admission is asked before the rate is counted, on both doors: requests refused while the
    key holds its one request in flight cost nothing of its rate of 2 a minute (both are
    answered once the slot is free), and a request refused by its rate holds no slot."""
    import tritonclient.grpc as grpcclient

    from tests.integration.grpc.conftest import run_server

    container, _, key = _limited(tmp_path, acme, "2/minute", max_in_flight_per_key=1)
    holder = container.keys.authenticate(key)
    admission = container.admission
    assert admission is not None
    client = TestClient(create_app(container))
    row = _grpc_row()
    with run_server(container) as url:
        g = grpcclient.InferenceServerClient(url)

        def ask() -> str:
            if door == "http":
                answer = client.post("/api/v1/predictions", json={"deployment": "iris", "features": IRIS_ROW}, headers=auth(key))
                return "ok" if answer.status_code == 200 else answer.json()["code"]
            try:
                g.infer("iris", [row], headers={"authorization": f"Bearer {key}"})
                return "ok"
            except grpcclient.InferenceServerException as exc:
                return "rate_limited" if "rate" in str(exc) else str(exc.status())

        with admission.held(holder):  # the key's one request in flight
            refused = [ask() for _ in range(3)]
        answered = [ask() for _ in range(3)]
        g.close()
    assert refused == ["too_many_in_flight"] * 3 if door == "http" else all(r == "StatusCode.RESOURCE_EXHAUSTED" for r in refused), refused
    assert answered == ["ok", "ok", "rate_limited"], answered
    assert admission.per_key is not None and admission.per_key.count(holder.subject) == 0  # the rate's refusal held no slot


def test_requests_refused_by_admission_or_their_rate_are_counted_and_logged_together(
    tmp_path: Path, acme: Principal, caplog: pytest.LogCaptureFixture
) -> None:
    """A line per refused request would add to the load that caused them: refusals (too many in
    flight, past the key's rate) are counted each, in the failures and by code, and logged
    together, one line in a while, never a "prediction failed" line each."""
    caplog.set_level("INFO")
    container, _, key = _limited(tmp_path, acme, "1/minute", max_in_flight_per_key=1)
    client = TestClient(create_app(container))
    body = {"deployment": "iris", "features": IRIS_ROW}
    assert container.admission is not None
    with container.admission.held(container.keys.authenticate(key)):
        statuses = [client.post("/api/v1/predictions", json=body, headers=auth(key)).status_code for _ in range(3)]
    statuses += [client.post("/api/v1/predictions", json=body, headers=auth(key)).status_code for _ in range(3)]
    assert statuses == [429, 429, 429, 200, 429, 429]
    messages = [record.getMessage() for record in caplog.records]
    assert "prediction failed" not in messages
    assert messages.count("requests refused by admission") == 1
    assert container.telemetry.refusals == {"too_many_in_flight": 3, "rate_limited": 2}
    assert container.telemetry.errors == 5
