"""Statistics are never lost without being counted as lost: a write the registry refuses is
put back and written once it accepts (merged with what came meanwhile), an idle process
publishes its last counts on its timer, and what can never be written is dropped visibly (a
metric and a log line). Real SQLite throughout, refusing by its own limits."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import settings as examples
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from sluice.api.app import create_app
from sluice.metrics import PrometheusMetrics
from sluice.observability import get_logger
from sluice.registry.sqlite import SqliteRegistry
from sluice.stats.recorder import LAST_REQUEST, StatsRecorder
from sluice.wiring import Container
from tests.conftest import MODELS
from tests.integration.conftest import api_keys, auth
from tests.integration.registry_limits import RegistryLimits

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.settings import Settings

SETOSA = {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}
KEY = ("acme", "iris", 1, "deployment")
MIRROR = ("acme", "iris", 1, "mirror:candidate")


@pytest.fixture
def registry(settings: Settings) -> SqliteRegistry:
    return SqliteRegistry(settings.home_path / "registry.db")


def _stored(registry: SqliteRegistry, key: tuple[str, str, int, str] = KEY) -> dict[str, float]:
    tenant, deployment, revision, subject = key
    return registry.read_stats(tenant, deployment, revision).get(subject, {})


def test_counts_a_read_only_registry_refused_are_written_once_it_accepts_them(registry: SqliteRegistry) -> None:
    limits = RegistryLimits(registry)
    recorder = StatsRecorder(registry, timed=False)
    recorder.request(KEY, 3.0, ok=True)
    assert recorder.flush()
    limits.read_only()
    for _ in range(5):
        recorder.request(KEY, 3.0, ok=True)
    recorder.request(KEY, 0.0, ok=False)
    recorder.add(MIRROR, {"labelled": 4, "agree": 3}, {"diff_max": 0.25})
    assert recorder.flush() is False  # refused: kept, not raised
    recorder.request(KEY, 7.0, ok=True)  # while they wait, more arrive
    recorder.add(MIRROR, {"labelled": 1, "agree": 1}, {"diff_max": 0.5})
    assert recorder.flush() is False
    assert _stored(registry)["requests"] == 1

    limits.lift()
    assert recorder.flush()
    stored = _stored(registry)
    assert (stored["requests"], stored["errors"]) == (8, 1)
    assert stored["latency_ms_sum"] == pytest.approx(3.0 * 6 + 7.0)
    mirror = _stored(registry, MIRROR)
    assert (mirror["labelled"], mirror["agree"], mirror["diff_max"]) == (5, 4, 0.5)
    assert recorder.flush() and _stored(registry)["requests"] == 8  # written once, not again


def test_counts_a_full_registry_refused_are_written_once_it_has_room(registry: SqliteRegistry) -> None:
    limits = RegistryLimits(registry)
    recorder = StatsRecorder(registry, timed=False)
    limits.full()
    for n in range(1000):  # a new variant each flush, until the file can take no more rows
        recorder.request(("acme", "iris", 1, f"variant:v{n:04}"), 3.0, ok=True)
        recorder.request(KEY, 3.0, ok=True)
        if not recorder.flush():
            break
    else:
        pytest.fail("the registry never filled up")
    recorder.request(("acme", "iris", 1, f"variant:v{n:04}"), 5.0, ok=True)  # the refused one, again
    recorder.flush()

    limits.lift()
    assert recorder.flush()
    counts = registry.read_stats("acme", "iris", 1)
    assert counts["deployment"]["requests"] == n + 1
    assert sum(c["requests"] for s, c in counts.items() if s.startswith("variant:")) == n + 2
    assert counts[f"variant:v{n:04}"]["requests"] == 2


def test_stats_read_while_the_registry_refuses_writes_and_no_count_is_lost(demo: Container, keys: dict[str, str]) -> None:
    limits = RegistryLimits(demo.registry)  # type: ignore[arg-type]
    client = TestClient(create_app(demo))
    limits.read_only()
    for _ in range(4):
        r = client.post("/api/v1/predictions", json={"deployment": "iris", "features": SETOSA}, headers=auth(keys["acme"]))
        assert r.status_code == 200, r.text
    r = client.get("/api/v1/deployments/iris/stats", headers=auth(keys["acme"]))  # its flush is refused
    assert r.status_code == 200, r.text

    limits.lift()
    r = client.get("/api/v1/deployments/iris/stats", headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    assert r.json()["overall"]["requests"] == 4


def test_an_idle_process_publishes_its_last_counts_on_its_timer(settings: Settings, acme: Principal) -> None:
    from sluice.demo import install_demo

    container = Container.from_settings(settings.replace(stats_flush_s=1.0))
    install_demo(container, acme, MODELS)
    client = TestClient(create_app(container))
    key = api_keys(container)["acme"]
    for _ in range(10):
        r = client.post("/api/v1/predictions", json={"deployment": "iris", "features": SETOSA}, headers=auth(key))
        assert r.status_code == 200, r.text
    # No request comes again: only the timer can write what is pending. Another connection
    # to the file reads what has been published.
    reader = SqliteRegistry(settings.home_path / "registry.db")
    deadline = time.monotonic() + 60
    while _stored(reader).get("requests", 0) < 10 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _stored(reader).get("requests") == 10


class _CountedWhileWriting:
    """A registry that, while it writes the first counts, lets `meanwhile` count more (a
    shadow job finishing while the process stops)."""

    def __init__(self, registry: SqliteRegistry, meanwhile: Callable[[], None]) -> None:
        self.registry, self.meanwhile = registry, meanwhile

    def merge_stats(self, *args: Any) -> None:
        self.registry.merge_stats(*args)
        meanwhile, self.meanwhile = self.meanwhile, lambda: None
        meanwhile()


@pytest.mark.parametrize("timed", [False, True])
def test_a_count_made_while_the_shutdown_flush_writes_is_written_not_dropped(registry: SqliteRegistry, timed: bool) -> None:
    """The registry took the close's flush: what arrived during it was never refused, so it is
    written (by the next flush, or by the timer where the recorder is on one), never dropped."""
    dropped: list[Any] = []
    recorder = StatsRecorder(
        _CountedWhileWriting(registry, lambda: recorder.request(MIRROR, 0.0, ok=False)),  # type: ignore[arg-type]
        timed=timed, flush_every_s=0.05, on_drop=dropped.extend,
    )  # fmt: skip
    recorder.request(KEY, 3.0, ok=True)
    recorder.close()
    assert dropped == []
    if not timed:
        assert recorder.flush()
    deadline = time.monotonic() + 30
    while not _stored(registry, MIRROR) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _stored(registry, MIRROR)["errors"] == 1 and _stored(registry)["requests"] == 1


def test_what_can_never_be_written_is_dropped_visibly(demo: Container, keys: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    demo.telemetry.sink = PrometheusMetrics()  # type: ignore[union-attr]
    limits = RegistryLimits(demo.registry)  # type: ignore[arg-type]
    client = TestClient(create_app(demo))
    limits.read_only()
    caplog.set_level("ERROR")
    for _ in range(3):
        r = client.post("/api/v1/predictions", json={"deployment": "iris", "features": SETOSA}, headers=auth(keys["acme"]))
        assert r.status_code == 200, r.text
    demo.predictions.stats.close()  # the shutdown flush, refused to the end

    metrics = client.get("/metrics", headers=auth(keys["acme"])).text
    dropped = [
        (s.labels, s.value) for f in text_string_to_metric_families(metrics) for s in f.samples if s.name == "ml_inference_stats_dropped_total"
    ]
    assert dropped == [({"tenant": "acme", "deployment": "iris", "subject": "deployment"}, 3.0)]
    formatter = get_logger().registered_formatter
    (line,) = [json.loads(formatter.format(r)) for r in caplog.records if r.getMessage() == "statistics dropped"]
    assert line["requests"] == 3
    assert line["dropped"][0] | {"reason": ""} == {"tenant": "acme", "deployment": "iris", "revision": 1, "subject": "deployment", "requests": 3, "reason": ""}
    limits.lift()
    r = client.get("/api/v1/deployments/iris/stats", headers=auth(keys["acme"]))
    assert r.json()["overall"]["requests"] == 0  # dropped means dropped: never written later


def test_pending_counts_are_bounded_while_the_registry_refuses(registry: SqliteRegistry) -> None:
    limits = RegistryLimits(registry)
    dropped: list[tuple[object, float, str]] = []
    recorder = StatsRecorder(registry, timed=False, max_pending=2, on_drop=dropped.extend)
    limits.read_only()
    for deployment in ("a", "b", "c"):
        for _ in range(2):
            recorder.request(("acme", deployment, 1, "deployment"), 1.0, ok=True)
    assert recorder.flush() is False
    assert [(key, n) for key, n, _ in dropped] == [(("acme", "c", 1, "deployment"), 2)]

    limits.lift()
    assert recorder.flush()
    assert [_stored(registry, ("acme", d, 1, "deployment")).get("requests") for d in "abc"] == [2, 2, None]


def test_a_requests_steps_counted_with_it_in_one_call_give_the_figures_counted_apart(tmp_path: Path) -> None:
    """A sequence's steps are counted with the deployment's own request, under one lock: the
    figures stored are those the two calls (a step that answered, one that failed, the request)
    store."""
    steps = [(("acme", "chain", 1, "step:embed"), 0.4), (("acme", "chain", 1, "step:score"), 1.7), (("acme", "chain", 1, "step:score"), None)]
    key = ("acme", "chain", 1, "deployment")
    stored = []
    for together in (False, True):
        registry = SqliteRegistry(tmp_path / f"registry-{together}.db")
        recorder = StatsRecorder(registry, timed=False)
        for latency_ms in (2.5, 3.0):
            if together:
                recorder.request(key, latency_ms, ok=True, rows=2, steps=steps)
            else:
                recorder.requests(steps)
                recorder.request(key, latency_ms, ok=True, rows=2)
        assert recorder.flush()
        figures = registry.read_stats("acme", "chain", 1)
        assert figures["deployment"].pop(LAST_REQUEST) > 0  # a time: the one figure that differs
        stored.append(figures)
    assert stored[0] == stored[1]
    assert stored[1]["step:score"]["requests"] == 4 and stored[1]["step:score"]["errors"] == 2 and stored[1]["deployment"]["rows"] == 4


_KEYS = [("acme", "iris", 1, "deployment"), ("acme", "iris", 1, "variant:a"), ("globex", "iris", 2, "deployment")]
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("request"), st.integers(0, 2), st.booleans(), st.integers(0, 5)),  # key, answered, rows
        st.tuples(st.just("steps"), st.integers(0, 2), st.booleans(), st.just(0)),  # a graph's step with it
        st.tuples(st.sampled_from(["flush", "read_only", "full", "lift"]), st.just(0), st.just(False), st.just(0)),
    ),
    max_size=30,
)


@examples(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=_OPS, max_pending=st.integers(1, 3), end_open=st.booleans())
def test_every_request_is_written_once_or_dropped_visibly_whatever_the_registry_does(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, bool, int]], max_pending: int, end_open: bool
) -> None:
    """Requests counted in any order, flushes, and the registry turning read-only, full or
    writable again in between, with a small bound on the keys held: at the close, each key's
    requests, errors and rows are written exactly once, or reported dropped (with the requests
    they held), never both and never neither."""
    registry = SqliteRegistry(tmp_path_factory.mktemp("stats") / "registry.db")
    limits = RegistryLimits(registry)
    dropped: list[tuple[tuple[str, str, int, str], float, str]] = []
    recorder = StatsRecorder(registry, timed=False, max_pending=max_pending, on_drop=dropped.extend)
    made = {key: {"requests": 0, "errors": 0, "rows": 0} for key in _KEYS}
    for op, which, answered, rows in ops:
        key = _KEYS[which]
        if op == "request":
            recorder.request(key, 2.5, ok=answered, rows=rows)
            made[key]["requests"] += 1
            made[key]["errors"] += not answered
            made[key]["rows"] += rows
        elif op == "steps":  # the deployment's own request, with a step counted in the same call
            step = ("acme", "iris", 1, "step:score")
            made.setdefault(step, {"requests": 0, "errors": 0, "rows": 0})
            recorder.request(key, 1.0, ok=True, steps=[(step, None if answered else 0.5)])
            made[key]["requests"] += 1
            made[step]["requests"] += 1
            made[step]["errors"] += answered
        elif op == "flush":
            recorder.flush()
        else:
            getattr(limits, op)()
    if end_open:
        limits.lift()
    recorder.close()
    limits.lift()
    lost: dict[tuple[str, str, int, str], float] = {}
    for key, weight, _ in dropped:
        lost[key] = lost.get(key, 0.0) + weight
    for key, counts in made.items():
        stored = _stored(registry, key)
        written = stored.get("requests", 0)
        assert written + lost.get(key, 0) == counts["requests"], (key, stored, lost.get(key))
        if not lost.get(key):  # nothing of it dropped: every count written, once
            assert (stored.get("errors", 0), stored.get("rows", 0)) == (counts["errors"], counts["rows"]), (key, stored)


def test_a_key_the_registry_refuses_at_every_flush_is_dropped_visibly_in_the_end(registry: SqliteRegistry) -> None:
    """Counts are kept to try again for `give_up_s` and `give_up_flushes`, not for ever: then
    they are reported dropped, with the requests they held, and never written later."""
    limits = RegistryLimits(registry)
    dropped: list[tuple[object, float, str]] = []
    recorder = StatsRecorder(registry, timed=False, give_up_s=0.3, give_up_flushes=3, on_drop=dropped.extend)
    limits.read_only()
    for _ in range(3):
        recorder.request(KEY, 1.0, ok=True)
    assert recorder.flush() is False and dropped == []  # kept, to try again
    time.sleep(0.35)
    assert recorder.flush() is False and dropped == []  # refused long enough, but at 2 flushes alone
    assert recorder.flush() is False
    assert [(key, n) for key, n, _ in dropped] == [(KEY, 3)] and "refused" in dropped[0][2]
    assert not recorder.pending()
    limits.lift()
    recorder.request(KEY, 1.0, ok=True)  # a new count starts afresh
    assert recorder.flush()
    assert _stored(registry)["requests"] == 1


def test_refusals_far_apart_in_a_process_that_flushes_rarely_drop_nothing(registry: SqliteRegistry) -> None:
    """In Lambda a flush comes only with a request: two refused flushes `give_up_s` apart are
    two refusals, not a registry refusing all along. The counts are written at the next flush
    that works; one that works starts the count of refusals afresh."""
    limits = RegistryLimits(registry)
    dropped: list[tuple[object, float, str]] = []
    recorder = StatsRecorder(registry, timed=False, give_up_s=0.2, give_up_flushes=3, on_drop=dropped.extend)
    for refused in (2, 2):  # refused at 2 flushes in a row, further apart than give_up_s, twice over
        for _ in range(refused):
            limits.read_only()
            recorder.request(KEY, 1.0, ok=True)
            assert recorder.flush() is False
            limits.lift()
            time.sleep(0.25)
        recorder.request(KEY, 1.0, ok=True)
        assert recorder.flush()
    assert dropped == [] and _stored(registry)["requests"] == 6


_COUNT = st.one_of(st.floats(-1e6, 1e6), st.sampled_from([float("nan"), float("inf"), float("-inf")]))


@examples(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(adds=st.lists(st.tuples(_COUNT, _COUNT), min_size=1, max_size=12))
def test_a_count_that_is_not_a_finite_number_never_blocks_its_key(
    tmp_path_factory: pytest.TempPathFactory, adds: list[tuple[float, float]]
) -> None:
    """No registry stores NaN or infinity (SQLite's NOT NULL refuses NaN, DynamoDB both): such
    a count is dropped and reported, alone with the other members of its mean (`diff_sum`
    with `diff_n`), and the counts added with it (`compared`) and after it are written."""
    registry = SqliteRegistry(tmp_path_factory.mktemp("stats") / "registry.db")
    dropped: list[tuple[tuple[str, str, int, str], float, str]] = []
    recorder = StatsRecorder(registry, timed=False, on_drop=dropped.extend)
    sums = [s for s, _ in adds if np.isfinite(s)]
    maxima = [m for _, m in adds if np.isfinite(m)]
    for diff_sum, diff_max in adds:
        recorder.add(MIRROR, {"compared": 1, "diff_sum": diff_sum, "diff_n": 1}, {"diff_max": diff_max})
    assert recorder.flush()  # all written: nothing kept to try again
    assert not recorder.pending()
    stored = _stored(registry, MIRROR)
    assert stored.get("compared", 0) == len(adds) and stored.get("diff_n", 0) == len(sums)
    assert stored.get("diff_sum", 0) == pytest.approx(sum(sums), abs=1e-6)
    assert stored.get("diff_max") == (max(maxima) if maxima else None)
    assert bool(dropped) == (len(sums) + len(maxima) < 2 * len(adds))
    assert all("not a number the registry stores" in why for _, _, why in dropped)


def test_a_sum_grown_past_the_largest_float_is_dropped_alone(registry: SqliteRegistry) -> None:
    dropped: list[tuple[object, float, str]] = []
    recorder = StatsRecorder(registry, timed=False, on_drop=dropped.extend)
    for _ in range(2):
        recorder.add(MIRROR, {"compared": 1, "diff_sumsq": 1.5e308})
    assert recorder.flush()
    assert _stored(registry, MIRROR) == {"compared": 2}
    assert [(key, why) for key, _, why in dropped] == [(MIRROR, "not a number the registry stores: diff_sumsq")]
