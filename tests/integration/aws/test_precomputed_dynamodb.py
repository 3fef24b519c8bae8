"""Tables of precomputed answers on DynamoDB (moto): every key under the tenant's prefix, with
its time to live; reads and writes in the store's batch sizes (BatchGetItem ≤100 keys,
BatchWriteItem ≤25 items, what comes back unprocessed sent again); and a batch job publishing
into the table that a `precomputed` deployment then serves, over a DynamoDB registry."""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import boto3
import hypothesis
import numpy as np
import pytest
from botocore.stub import Stubber
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from sluice.domain.requests import ArrayInputs, PredictionRequest
from sluice.registry.dynamodb import DynamoRegistry, create_table
from sluice.registry.precomputed import Publication, Superseded
from sluice.registry.precomputed.dynamodb import DynamoPrecomputed
from sluice.registry.precomputed.sqlite import SqlitePrecomputed
from sluice.settings import Settings
from sluice.storage.folder import FolderStore
from sluice.wiring import Container, build_runtimes
from tests.conftest import MODELS
from tests.integration.batch.jobs import run_job
from tests.support import OneCallAtATime, single

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal

REGISTRY, ANSWERS = "sluice-registry", "sluice-precomputed"
OUTPUTS = [{"name": "variable", "datatype": "FP32", "shape": [-1, 1]}]


def counted(client: Any) -> Counter[str]:
    calls: Counter[str] = Counter()
    client.meta.events.register("before-call.dynamodb.*", lambda model, **_: calls.update([model.name]))
    return calls


def test_answers_are_written_and_read_in_the_stores_batches_under_the_tenants_prefix(aws: None) -> None:
    client = boto3.client("dynamodb")
    create_table(client, ANSWERS)
    store = DynamoPrecomputed(ANSWERS, client=client)
    calls = counted(client)
    now = time.time()
    store.put_answers("acme", "recs", "job-1", [(f"u{i}", b'{"variable":[%d]}' % i) for i in range(60)], computed_at=now, expires_at=now + 600)
    assert calls["BatchWriteItem"] == 3  # 25 + 25 + 10

    found = store.get_answers("acme", "recs", "job-1", [f"u{i}" for i in range(150)], now=now)
    assert calls["BatchGetItem"] == 2  # 100 + 50 keys, never one call per row
    assert sorted(found) == sorted(f"u{i}" for i in range(60)) and found["u7"].body == b'{"variable":[7]}'
    assert store.get_answers("acme", "recs", "job-2", ["u1"], now=now) == {}  # another generation
    assert store.get_answers("globex", "recs", "job-1", ["u1"], now=now) == {}  # another tenant
    assert store.get_answers("acme", "recs", "job-1", ["u1"], now=now + 601) == {}  # expired, whether or not DynamoDB removed it yet

    items = client.scan(TableName=ANSWERS)["Items"]
    assert all(i["pk"]["S"].startswith("T#acme#P#recs#E#") and i["sk"]["S"] == "G#job-1" for i in items)
    assert all(int(i["expires_at"]["N"]) >= now + 600 for i in items)

    assert store.publication("acme", "recs", now=now) is None
    first = Publication("job-1", "job-1", "diabetes", OUTPUTS, published_at=now)
    assert store.publish("acme", "recs", first, expires_at=now + 600) is None
    replaced = store.publish("acme", "recs", Publication("job-2", "job-2", "diabetes", OUTPUTS, published_at=now), expires_at=now + 600)
    assert replaced is not None and (replaced.job, replaced.expires_at) == ("job-1", math.ceil(now + 600))
    assert store.publication("acme", "recs", now=now).generation == "job-2"  # type: ignore[union-attr]
    assert store.publication("globex", "recs", now=now) is None


def test_items_dynamodb_leaves_unprocessed_are_sent_again() -> None:
    client = boto3.client("dynamodb", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
    store = DynamoPrecomputed(ANSWERS, client=client)
    with Stubber(client) as stub:
        left = {"PutRequest": {"Item": {"pk": {"S": "T#acme#P#recs#E#u1"}, "sk": {"S": "G#g"}, "body": {"B": b"{}"}, "at": {"N": "1.0"}, "expires_at": {"N": "100"}}}}
        stub.add_response("batch_write_item", {"UnprocessedItems": {ANSWERS: [left]}})
        stub.add_response("batch_write_item", {"UnprocessedItems": {}}, {"RequestItems": {ANSWERS: [left]}})
        store.put_answers("acme", "recs", "g", [("u0", b"{}"), ("u1", b"{}")], computed_at=1.0, expires_at=100)
        key = {"pk": {"S": "T#acme#P#recs#E#u1"}, "sk": {"S": "G#g"}}
        stub.add_response("batch_get_item", {"Responses": {ANSWERS: []}, "UnprocessedKeys": {ANSWERS: {"Keys": [key]}}})
        item = {**key, "body": {"B": b"{}"}, "at": {"N": "1.0"}, "expires_at": {"N": "100"}}
        stub.add_response("batch_get_item", {"Responses": {ANSWERS: [item]}})
        assert list(store.get_answers("acme", "recs", "g", ["u1"], now=50)) == ["u1"]
        stub.assert_no_pending_responses()


def test_a_job_publishes_into_dynamodb_and_a_deployment_serves_it(aws: None, tmp_path: Path, acme: Principal) -> None:
    client = boto3.client("dynamodb")
    create_table(client, REGISTRY)
    create_table(client, ANSWERS)
    settings = Settings(
        mode="local", home=tmp_path / "home", registry=f"dynamodb://{REGISTRY}", store="", deployment_cache_ttl_s=0,
        precomputed_table=f"dynamodb://{ANSWERS}", precomputed_publication_ttl_s=0,
    )  # fmt: skip
    store = FolderStore(tmp_path / "artifacts")
    c = Container(settings, DynamoRegistry(REGISTRY, client=OneCallAtATime(client)), store, build_runtimes(settings, store))
    assert isinstance(c.precomputed, DynamoPrecomputed)
    c.models.push(acme, "diabetes", (MODELS / "diabetes_mlp.onnx").read_bytes())
    c.deployments.create(acme, "diabetes", single("diabetes", 1))
    c.deployments.create(acme, "recs", {"kind": "precomputed", "table": "recs", "key": "routing_key", "live": single("diabetes", 1)})
    source = tmp_path / "users.csv"
    source.write_text("user,age,sex,bmi,bp,s1,s2,s3,s4,s5,s6\n" + "".join(f"u{i},{','.join(['0.03'] * 10)}\n" for i in range(30)))
    job = run_job(c, acme, source, deployment="diabetes", publish={"table": "recs", "key": "user", "ttl_s": 3600})
    assert (job.status, job.rows_out) == ("SUCCEEDED", 30)

    def ask(user: str) -> Any:
        request = PredictionRequest("recs", ArrayInputs({"input": np.full((1, 10), 0.03, np.float32)}), routing_key=user)
        return asyncio.run(c.predictions.predict(acme, request)).answer

    hit, miss = ask("u3"), ask("u99")
    assert (hit.source, miss.source) == ("precomputed", "live")
    np.testing.assert_allclose(hit.result.outputs["variable"], miss.result.outputs["variable"], rtol=1e-6)  # the same features, the same model
    published = client.get_item(TableName=ANSWERS, Key={"pk": {"S": "T#acme#P#recs"}, "sk": {"S": "PUBLISHED"}})["Item"]
    assert job.id in published["doc"]["S"] and time.time() + 3500 < int(published["expires_at"]["N"]) <= time.time() + 3601


_EXAMPLES = itertools.count()
# (op, job, ttl): publish the answers of the job made `job`-th, living `ttl` ticks (again: its
# Finalize tried again); withdraw that job's (it did not succeed after all), putting back what
# it replaced, as it was; or settle it (it succeeded: never withdrawn after).
_OPS = st.lists(st.tuples(st.sampled_from(["publish", "withdraw", "settle"]), st.integers(0, 4), st.sampled_from([2, 100])), min_size=1, max_size=12)


@hypothesis.settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=_OPS)
@hypothesis.example(ops=[("publish", 0, 100), ("publish", 1, 100), ("publish", 2, 100), ("withdraw", 1, 100), ("withdraw", 2, 100)])  # a failed job put back
@hypothesis.example(ops=[("publish", 0, 100), ("publish", 1, 2), ("publish", 2, 2), ("withdraw", 2, 2), ("withdraw", 1, 2)])
@hypothesis.example(ops=[("publish", 0, 100), ("publish", 2, 100), ("publish", 1, 100), ("withdraw", 2, 100)])  # a job made before the one served, publishing after it: put back, not the older
def test_a_table_serves_the_latest_made_job_whatever_order_jobs_finish_in_on_both_stores(aws: None, tmp_path: Path, ops: list[tuple[str, int, int]]) -> None:
    """Jobs finishing in any order, some withdrawn, some publications expiring: on SQLite and on
    DynamoDB alike, the table serves what a model of the rule says: a publication replaces the
    one served only where that one expired or was made before it (else `Superseded`, naming
    it, and kept in that one's chain where its order puts it), the same job again replaces what
    it replaced first, and a withdrawal puts back what
    the job replaced, with that one's own expiry, only while the job is served; a job withdrawn
    while a later one is served is forgotten by it, never put back when that one is withdrawn
    in turn (a failed job's answers served again); a job that succeeded (settled) puts back
    nothing below it, and keeps no earlier job's publication below it."""
    client = boto3.client("dynamodb")
    if ANSWERS not in client.list_tables()["TableNames"]:
        create_table(client, ANSWERS)
    table = f"recs{next(_EXAMPLES)}"
    stores = {"sqlite": SqlitePrecomputed(tmp_path / "precomputed.db"), "dynamodb": DynamoPrecomputed(ANSWERS, client=client)}
    served: tuple[Publication, int] | None = None  # the model: what is served, until when
    replaced: dict[int, tuple[Publication, int] | None] = {}  # what each job's publication replaced, until when
    succeeded: set[int] = set()  # jobs settled while served (their publication says so)
    settled: set[int] = set()  # jobs that succeeded: never withdrawn after
    for tick, (op, job, ttl) in enumerate(ops, start=1):
        mine = Publication(f"g{job}", f"job-{job}", "diabetes", OUTPUTS, published_at=float(tick), made_at=1000.0 + job)
        expected: Any
        chain: list[int] = []  # the jobs of the publication served and those below it, newest first
        link = int(served[0].generation[1:]) if served is not None else None
        while link is not None and link not in chain:
            chain.append(link)
            below = replaced.get(link)
            link = int(below[0].generation[1:]) if below is not None else None
        if op == "withdraw" and job in settled:
            continue
        if op == "settle":
            settled.add(job)
            if chain and chain[0] == job:
                succeeded.add(job)
            if job in chain:
                replaced[job] = None
            for store in stores.values():
                store.settle("acme", table, mine.generation)
            continue
        if op == "publish":
            live = served is not None and served[1] > tick
            if live and served[0].order > mine.order:  # type: ignore[index]
                expected = ("superseded", served[0].job)  # type: ignore[index]
                # kept in the served one's chain, newest first, to be put back should those above
                # it be withdrawn (not below one that succeeded: never withdrawn)
                if job not in chain and chain[0] not in succeeded:
                    link = chain[0]
                    while (below := replaced.get(link)) is not None and below[0].order > mine.order:
                        link = int(below[0].generation[1:])
                    replaced[job], replaced[link] = replaced.get(link), (mine, tick + ttl)
            else:
                prior = replaced.get(job) if served is not None and served[0].generation == mine.generation else served
                prior = prior if prior is not None and prior[1] > tick else None  # an expired one replaces nothing
                expected = ("replaced", prior[0].generation if prior else None)
                replaced[job] = prior
                served = (mine, tick + ttl)
                succeeded.discard(job)  # published again: a publication of its own, not yet settled
        else:
            expected = served is not None and served[0].generation == mine.generation
            if expected:
                served = replaced.get(job)
            elif served is not None:  # taken out of the chain of those the one served would put back
                link = int(served[0].generation[1:])
                for _ in range(len(replaced) + 1):
                    prior = replaced.get(link)
                    if prior is None:
                        break
                    if prior[0].generation == mine.generation:
                        replaced[link] = replaced.get(job)
                        break
                    link = int(prior[0].generation[1:])
        for name, store in stores.items():
            if op == "publish":
                try:
                    before = store.publish("acme", table, mine, expires_at=float(tick + ttl))
                    got: Any = ("replaced", before.generation if before else None)
                except Superseded as later:
                    got = ("superseded", later.current.job)
            else:
                got = store.withdraw("acme", table, mine.generation)
            assert got == expected, (name, tick, op, job, ops)
            now = stores[name].publication("acme", table, now=float(tick))
            want = served[0].generation if served is not None and served[1] > tick else None
            assert (now.generation if now else None) == want, (name, tick, op, job, ops)


@pytest.mark.parametrize("succeeded", [True, False])
def test_a_tables_record_stays_within_a_dynamodb_item_however_many_jobs_publish(aws: None, succeeded: bool) -> None:
    """Each publication keeps those it may have to put back, each as it was (outputs, classes):
    a job that succeeds settles the chain below it (never put back now), and a chain of jobs not
    yet succeeded goes only as deep as one record holds. A model of 2,000 labels (about 56 KB a
    publication) failed the ninth job's publication with a record past DynamoDB's 400 KB."""
    from sluice.registry.precomputed import MAX_DOC_BYTES

    client = boto3.client("dynamodb")
    if ANSWERS not in client.list_tables()["TableNames"]:
        create_table(client, ANSWERS)
    store = DynamoPrecomputed(ANSWERS, client=client)
    outputs = [{"name": "probabilities", "datatype": "FP32", "shape": [-1, 2000]}]
    classes = {"probabilities": [f"label-number-{i:05d}-xyz" for i in range(2000)]}
    table, now = f"big{next(_EXAMPLES)}", time.time()
    for i in range(12):
        store.publish("acme", table, Publication(f"j{i}", f"j{i}", "d", outputs, classes, published_at=now + i, made_at=now + i), expires_at=now + 3600)
        if succeeded:
            store.settle("acme", table, f"j{i}")
    doc = client.get_item(TableName=ANSWERS, Key={"pk": {"S": f"T#acme#P#{table}"}, "sk": {"S": "PUBLISHED"}})["Item"]["doc"]["S"]
    depth, link = 0, Publication.from_json(doc).replaced
    while link is not None:
        depth, link = depth + 1, link.replaced
    assert len(doc) <= MAX_DOC_BYTES, len(doc)
    if succeeded:
        assert depth == 0  # nothing a withdrawal could need
    else:  # as deep as fits: withdrawn, the last puts back the one before it
        assert 1 <= depth < 8, depth
        assert store.withdraw("acme", table, "j11")
        served = store.publication("acme", table, now=now + 20)
        assert served is not None and served.generation == "j10"
