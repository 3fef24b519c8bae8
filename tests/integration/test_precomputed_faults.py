"""Publishing precomputed answers under faults, on the embedded defaults: a job that publishes
and then does not succeed (a later step of Finalize fails, it is cancelled or found dead) is
withdrawn; a Finalize tried again replaces what its first try replaced; what a withdrawal puts
back keeps its own expiry; a stored answer that does not fit, and a table that cannot be read,
are answered live (and counted); keys are text as they were written (a CSV's publish key, a
header sent as UTF-8)."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from sluice.api.app import create_app
from sluice.batch.plan import JobSpec
from sluice.codecs.stored_rows import encode_rows
from sluice.domain.errors import Unavailable
from sluice.registry.precomputed import Publication
from sluice.registry.precomputed.sqlite import RETIRED_KEPT_S
from sluice.settings import Settings
from tests.integration.batch.jobs import run_job
from tests.integration.test_precomputed import (
    RECS,
    CancelledAsItPublishes,
    ask,
    scored,
    started,
    users_csv,
)

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.wiring import Container

PUBLISH = {"table": "recs", "key": "user"}


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    # Every request reads the table's publication again: a publication is served at once.
    return Settings(mode="local", home=tmp_path / "home", registry="", store="", deployment_cache_ttl_s=0, precomputed_publication_ttl_s=0)


@pytest.fixture
def recs(demo: Container, acme: Principal) -> Container:
    demo.deployments.create(acme, "recs", RECS)
    return demo


def dies_after_publishing(runner: Any, job: str, error: Exception) -> None:
    """Finalize publishes the job's answers, then its write of `_SUCCESS` fails with `error`:
    the job is left RUNNING and served, as a Lambda that timed out there leaves it."""
    write = runner.files.write_bytes

    def failing(uri: str, body: bytes, **kw: Any) -> Any:
        if str(uri).endswith("_SUCCESS"):
            raise error
        return write(uri, body, **kw)

    runner.files.write_bytes = failing
    with pytest.raises(type(error)):
        runner.finalize("acme", job)
    runner.files.write_bytes = write


@pytest.mark.parametrize("end", ["mark_failed", "cancelled", "found_dead"])
def test_a_job_that_does_not_succeed_after_it_published_is_withdrawn(recs: Container, acme: Principal, tmp_path: Path, end: str) -> None:
    """However the job ends after Finalize pointed the table at it, the table serves again
    what it served before (a failed job publishes nothing)."""
    _, key = recs.keys.create("acme", ["predict"])
    client = TestClient(create_app(recs))
    first = run_job(recs, acme, users_csv(tmp_path / "night1.csv", ["u1"], 0.01), deployment="diabetes", key_columns=["user"], publish=PUBLISH)
    job, runner = started(recs, acme, users_csv(tmp_path / "night2.csv", ["u1"], 0.09))
    dies_after_publishing(runner, job, Unavailable("the store is busy: try again"))
    assert ask(client, key, "u1")["prediction"] != pytest.approx(scored(first)["u1"])  # served meanwhile
    if end == "mark_failed":
        runner.mark_failed("acme", job, error="Unavailable", cause="the store is busy: try again")
    elif end == "cancelled":
        recs.batch.cancel(acme, job)
    else:
        recs.batch.liveness.fail(recs.registry.get_job("acme", job), "its process is gone")
    assert recs.registry.get_job("acme", job).status in ("FAILED", "CANCELLED")
    answer = ask(client, key, "u1")
    assert answer["source"] == "precomputed" and answer["prediction"] == pytest.approx(scored(first)["u1"])


@pytest.mark.parametrize("later", ["withdrawn", "succeeds"])
def test_a_job_made_earlier_that_finishes_after_a_later_one_published_is_what_its_withdrawal_puts_back(
    recs: Container, acme: Principal, tmp_path: Path, later: str
) -> None:
    """A job made before the one the table serves succeeds after that one published: the
    table keeps serving the later one's answers, and should that one then not succeed, puts
    back the earlier job's (the latest that succeeded), never an older job's; should it
    succeed, the earlier job's answers are retired with it."""
    _, key = recs.keys.create("acme", ["predict"])
    client = TestClient(create_app(recs))
    oldest = run_job(recs, acme, users_csv(tmp_path / "z.csv", ["u1"], 0.01), deployment="diabetes", key_columns=["user"], publish=PUBLISH)
    earlier, runner = started(recs, acme, users_csv(tmp_path / "a.csv", ["u1"], 0.03))
    latest, _ = started(recs, acme, users_csv(tmp_path / "b.csv", ["u1"], 0.05))
    if later == "withdrawn":
        dies_after_publishing(runner, latest, Unavailable("the store is busy: try again"))
    else:
        runner.finalize("acme", latest)
    runner.finalize("acme", earlier)  # superseded: succeeds, its answers kept below the later one's
    a, b = recs.registry.get_job("acme", earlier), recs.registry.get_job("acme", latest)
    assert a.status == "SUCCEEDED" and ask(client, key, "u1")["prediction"] == pytest.approx(scored(b)["u1"])
    if later == "withdrawn":
        runner.mark_failed("acme", latest, error="Unavailable", cause="the store is busy: try again")
        answer = ask(client, key, "u1")
        assert answer["source"] == "precomputed" and answer["prediction"] == pytest.approx(scored(a)["u1"])
        assert answer["prediction"] != pytest.approx(scored(oldest)["u1"])
    else:
        assert ask(client, key, "u1")["prediction"] == pytest.approx(scored(b)["u1"])
        kept = recs.precomputed._conn().execute("SELECT generation, expires_at FROM answers WHERE tbl = 'recs'").fetchall()
        assert {g for g, at in kept if at > time.time() + RETIRED_KEPT_S} == {latest}  # the others retired


class ReadOnlyTable:
    """The precomputed table as the API's role sees it on AWS: read, never written (IAM refuses
    the withdrawal's PutItem; moto enforces no IAM, so the refusal is the one sluice maps
    AccessDenied to)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def withdraw(self, tenant: str, table: str, generation: str) -> bool:
        from sluice.domain.errors import BackendError

        raise BackendError("the registry could not complete the request")


def test_a_job_found_dead_by_a_reader_that_may_not_write_the_table_answers_and_its_end_withdraws_it(recs: Container, acme: Principal, tmp_path: Path) -> None:
    """The API finds a job whose Finalize published and then died (its execution ended): the
    GET answers 200 with the job FAILED though the API may not withdraw it; the execution's
    end (ExecutionEnded, which may) withdraws it."""
    from sluice.batch.executions import record_execution_end

    _, key = recs.keys.create("acme", ["predict", "admin"])
    client = TestClient(create_app(recs))
    first = run_job(recs, acme, users_csv(tmp_path / "night1.csv", ["u1"], 0.01), deployment="diabetes", key_columns=["user"], publish=PUBLISH)
    job, runner = started(recs, acme, users_csv(tmp_path / "night2.csv", ["u1"], 0.09))
    dies_after_publishing(runner, job, Unavailable("the store is busy: try again"))
    execution = "arn:aws:states:us-east-1:123456789012:execution:sluice-batch:night2"
    recs.registry.update_job("acme", job, execution=execution)
    writable, runner.precomputed = runner.precomputed, ReadOnlyTable(runner.precomputed)
    recs.batch.liveness.orchestrator = type("Ended", (), {"ended": lambda self, j: "its execution ended TIMED_OUT"})()
    r = client.get(f"/api/v1/batch-jobs/{job}", headers={"authorization": f"Bearer {key}"})
    assert r.status_code == 200 and r.json()["status"] == "FAILED", r.text
    runner.precomputed = writable
    record_execution_end(recs.batch, execution=execution, status="TIMED_OUT", input=json.dumps({"tenant": "acme", "job_id": job}))
    answer = ask(client, key, "u1")
    assert answer["source"] == "precomputed" and answer["prediction"] == pytest.approx(scored(first)["u1"])


@pytest.mark.parametrize("cancelled", [False, True], ids=["succeeds", "cancelled-as-it-publishes"])
def test_a_finalize_tried_again_replaces_what_its_first_try_replaced(recs: Container, acme: Principal, tmp_path: Path, cancelled: bool) -> None:
    """The first try published and died: the retry's publication still names the job before
    it, so a success retires that job's answers, and a cancel puts them back (never the
    cancelled job's own)."""
    _, key = recs.keys.create("acme", ["predict"])
    client = TestClient(create_app(recs))
    store = recs.precomputed
    assert store is not None
    first = run_job(recs, acme, users_csv(tmp_path / "night1.csv", ["u1"], 0.01), deployment="diabetes", key_columns=["user"], publish=PUBLISH)
    job, runner = started(recs, acme, users_csv(tmp_path / "night2.csv", ["u1"], 0.09))
    dies_after_publishing(runner, job, RuntimeError("Task timed out after 900.00 seconds"))
    if cancelled:
        runner.precomputed = CancelledAsItPublishes(recs, acme)
    runner.finalize("acme", job)
    if cancelled:
        assert recs.registry.get_job("acme", job).status == "CANCELLED"
        assert ask(client, key, "u1")["prediction"] == pytest.approx(scored(first)["u1"])
    else:
        assert recs.registry.get_job("acme", job).status == "SUCCEEDED"
        assert ask(client, key, "u1")["prediction"] == pytest.approx(scored(recs.registry.get_job("acme", job))["u1"])
        assert store.get_answers("acme", "recs", first.id, ["u1"], now=time.time() + RETIRED_KEPT_S + 1) == {}  # retired


def test_what_a_withdrawal_puts_back_keeps_its_own_expiry(recs: Container, acme: Principal, tmp_path: Path) -> None:
    """A day's publication replaced by a job living a minute, which is then cancelled: the
    day's is put back for the rest of its day, not for the cancelled job's minute."""
    store = recs.precomputed
    assert store is not None
    first = run_job(recs, acme, users_csv(tmp_path / "night1.csv", ["u1"], 0.01), deployment="diabetes", key_columns=["user"], publish={**PUBLISH, "ttl_s": 86400})
    job = recs.batch.submit(
        acme, deployment="diabetes", input_uri=str(users_csv(tmp_path / "night2.csv", ["u1"], 0.09)), operator=True, source="cli",
        start=False, output_uri=str(tmp_path / "night2-out"), key_columns=["user"], publish={**PUBLISH, "ttl_s": 60},
    )  # fmt: skip
    runner = recs.batch_runner
    runner.precomputed = CancelledAsItPublishes(recs, acme)
    planned = runner.plan("acme", job.id)
    spec = JobSpec.from_dict(planned["job"])
    for chunk in runner.chunks(planned):
        runner.score(spec, chunk)
    runner.finalize("acme", job.id)
    assert recs.registry.get_job("acme", job.id).status == "CANCELLED"
    served = store.publication("acme", "recs", now=time.time() + 3600)
    assert served is not None and served.job == first.id


def test_a_stored_answer_that_does_not_fit_its_publication_is_answered_live(recs: Container, acme: Principal) -> None:
    """A generation holding rows of two shapes (its job's deployment changed version as it
    ran): the rows that fit are served, the others answered live, never a 500."""
    _, key = recs.keys.create("acme", ["predict"])
    client = TestClient(create_app(recs))
    store = recs.precomputed
    assert store is not None
    now = time.time()
    rows = [("u1", encode_rows({"other": np.ones((1, 1))}, 1)[0]), ("u2", encode_rows({"variable": np.full((1, 1), 1234.0)}, 1)[0])]
    store.put_answers("acme", "recs", "g1", rows, computed_at=now, expires_at=now + 60)
    outputs = [{"name": "variable", "datatype": "FP32", "shape": [-1, 1]}]
    store.publish("acme", "recs", Publication("g1", "job-1", "diabetes", outputs, published_at=now), expires_at=now + 60)
    assert (ask(client, key, "u1")["source"], ask(client, key, "u2")["prediction"]) == ("live", 1234.0)
    assert recs.deployments.stats(acme, "recs")["sources"]["precomputed"]["errors"] == 1


def test_a_csv_publish_key_is_kept_as_written(recs: Container, acme: Principal, tmp_path: Path) -> None:
    """A CSV's publish key that is not also a `--key` column is text as in the file: leading
    zeros kept, two 20-digit ids two entities, each served its own answer."""
    _, key = recs.keys.create("acme", ["predict"])
    client = TestClient(create_app(recs))
    users = ["007", "12345678901234567890", "12345678901234567891", "7.0", "1e3"]
    job = run_job(recs, acme, users_csv(tmp_path / "night.csv", users, 0.01), deployment="diabetes", publish=PUBLISH)
    assert (job.status, job.rows_out) == ("SUCCEEDED", len(users))
    store = recs.precomputed
    assert store is not None and sorted(store.get_answers("acme", "recs", job.id, users, now=time.time())) == sorted(users)
    answers = [ask(client, key, u) for u in users]
    assert [a["source"] for a in answers] == ["precomputed"] * len(users)
    assert len({round(a["prediction"], 4) for a in answers}) == len(users)  # each its own row's


def test_a_header_key_sent_as_utf8_finds_its_entity(recs: Container, acme: Principal, tmp_path: Path) -> None:
    _, key = recs.keys.create("acme", ["predict"])
    client = TestClient(create_app(recs))
    run_job(recs, acme, users_csv(tmp_path / "night.csv", ["josé", "bob", "Zoë-日本"], 0.01), deployment="diabetes", key_columns=["user"], publish=PUBLISH)
    for user in ("josé", "bob", "Zoë-日本"):
        headers = {"authorization": f"Bearer {key}", "x-user-id": user.encode("utf-8")}
        response = client.post("/api/v1/predictions", headers=headers, json={"deployment": "recs", "inputs": [[0.02] * 10]})  # type: ignore[arg-type]
        assert (response.status_code, response.json()["source"]) == (200, "precomputed"), user
        with client.websocket_connect("/api/v1/stream", headers=headers) as socket:  # type: ignore[arg-type]  # the handshake's header, alike
            socket.send_json({"deployment": "recs", "inputs": [[0.02] * 10]})
            assert socket.receive_json()["source"] == "precomputed", user


@pytest.mark.parametrize("failing", ["publication", "get_answers"])
def test_a_table_that_cannot_be_read_is_answered_live_and_counted(recs: Container, acme: Principal, tmp_path: Path, failing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The table is a shortcut: a store that fails as its publication or its answers are read
    leaves the request answered live (200, `source: live`), the failure counted under the
    precomputed source's errors and said in a warning; once it reads again, it serves again."""
    _, key = recs.keys.create("acme", ["predict"])
    client = TestClient(create_app(recs))
    job = run_job(recs, acme, users_csv(tmp_path / "night.csv", ["u1"], 0.01), deployment="diabetes", key_columns=["user"], publish=PUBLISH)
    store = recs.precomputed
    assert store is not None
    read = getattr(store, failing)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError("disk I/O error")

    monkeypatch.setattr(store, failing, broken)
    answer = ask(client, key, "u1")
    assert (answer["source"], answer.get("computed_at")) == ("live", None)
    assert answer["prediction"] == pytest.approx(ask(client, key, "u1", deployment="diabetes")["prediction"])  # the live model's
    sources = recs.deployments.stats(acme, "recs")["sources"]
    assert sources["precomputed"]["errors"] == 1 and sources["live"]["requests"] == 1
    monkeypatch.setattr(store, failing, read)
    served = ask(client, key, "u1")
    assert (served["source"], served["prediction"]) == ("precomputed", pytest.approx(scored(job)["u1"], rel=1e-5))
