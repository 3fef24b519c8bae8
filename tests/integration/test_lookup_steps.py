"""Lookup steps end to end: a fraud graph — a transaction in, the customer's features looked up,
a transform, a small ONNX model — on real parts (each tenant's own SQLite file, a DynamoDB table
in moto, ONNX Runtime, the HTTP API and the bulk call batch jobs score through).

SageMaker Feature Store's runtime is not modelled by moto: its store is tested in
tests/unit/test_feature_stores.py with botocore's Stubber, every call checked against the
service's own shapes."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.inference.bulk import Records, Result, score_many
from sluice.inference.loop import run
from sluice.settings import Settings
from tests.conftest import REPO
from tests.integration.conftest import Tenants
from tests.models import score_model

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from sluice.runtimes.lookups import LookupSteps
    from sluice.wiring import Container

TABLE = "acme-customers"
NOW = time.time()
# customer: (avg_amount, chargebacks, event time); c3's record is a year old; c4 has no chargebacks value.
ACME = {"c1": (10.0, 0, NOW - 60), "c2": (250.5, 2, NOW - 3600), "c3": (40.0, 1, NOW - 365 * 86400), "c4": (5.0, None, NOW - 60)}
GLOBEX = {"c1": (999.0, 9, NOW - 60)}


def fraud(store: str = "sqlite", table: str = "customers", *, default: bool = True, **extra: Any) -> dict[str, Any]:
    """customer + amount in; avg_amount and chargebacks looked up; [amount, avg, chargebacks] summed by the model."""
    lookup = {
        "kind": "lookup", "store": store, "table": table, "keys": {"customer_id": "customer"},
        "inputs": [{"name": "customer", "datatype": "BYTES", "shape": [-1]}, {"name": "amount", "datatype": "FP32", "shape": [-1]}],
        "features": [
            {"name": "avg_amount", "datatype": "FP32", **({"default": 0.0} if default else {})},
            {"name": "chargebacks", "datatype": "INT64", **({"default": 0} if default else {})},
        ],
        **extra,
    }  # fmt: skip
    concat = {"kind": "transform", "ops": [{"op": "concat", "inputs": ["amount", "avg_amount", "chargebacks"], "output": "features"}]}
    return {
        "kind": "sequence",
        "steps": [{"name": "customer", "target": lookup}, {"name": "prepare", "target": concat}, {"name": "score", "target": {"model": "score", "version": 1}}],
    }


def by_hand(rows: list[tuple[str, float]], table: dict[str, tuple[Any, ...]], *, max_age_s: float | None = None) -> list[float]:
    out = []
    for customer, amount in rows:
        avg, chargebacks, at = table.get(customer, (0.0, 0, None))
        if max_age_s is not None and (at is None or NOW - at > max_age_s):
            avg, chargebacks = 0.0, 0
        out.append(amount + avg + (chargebacks or 0))
    return out


def write_sqlite(path: Path, table: dict[str, tuple[Any, ...]]) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE customers (customer_id TEXT PRIMARY KEY, avg_amount REAL, chargebacks INTEGER, event_time REAL)")
        db.executemany("INSERT INTO customers VALUES (?, ?, ?, ?)", [(k, *v) for k, v in table.items()])
    db.close()


class World(Tenants):
    def __init__(self, container: Container, lookups: LookupSteps) -> None:
        super().__init__(container)
        self.lookups = lookups

    def predict(self, name: str, rows: list[tuple[str, float]], headers: dict[str, str] | None = None, **extra: Any) -> Any:
        batch = [{"customer": c, "amount": a} for c, a in rows]
        return self.client.post("/api/v1/predictions", json={"deployment": name, "batch": batch, **extra}, headers=headers or self.acme)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    import boto3
    from moto import mock_aws

    from sluice.runtimes.lookups import LookupSteps

    home = tmp_path_factory.mktemp("lookups")
    (home / "features").mkdir()
    write_sqlite(home / "features" / "acme.db", ACME)
    write_sqlite(home / "features" / "globex.db", GLOBEX)
    with sqlite3.connect(home / "features" / "acme.db") as db:  # the example's features, as its README says
        db.executescript((REPO / "examples" / "features" / "customer_features.sql").read_text())
        db.execute("INSERT INTO customers VALUES ('', 777.0, 7, ?)", (NOW,))  # a key of empty text: in no store, never found
    db.close()
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="eu-west-1", aws_access_key_id="test", aws_secret_access_key="test")
        dynamodb.create_table(
            TableName=TABLE, BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "customer_id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "customer_id", "AttributeType": "S"}],
        )  # fmt: skip
        for customer, (avg, chargebacks, at) in ACME.items():
            item = {"customer_id": {"S": customer}, "avg_amount": {"N": str(avg)}, "event_time": {"N": str(at)}}
            item["chargebacks"] = {"NULL": True} if chargebacks is None else {"N": str(chargebacks)}
            dynamodb.put_item(TableName=TABLE, Item=item)
        for i in range(300):  # many customers, for calls of 100 keys
            dynamodb.put_item(TableName=TABLE, Item={"customer_id": {"S": f"m{i}"}, "avg_amount": {"N": str(i)}, "chargebacks": {"N": "1"}})
        settings = Settings(
            mode="local", home=home / "home", registry="", store="", deployment_cache_ttl_s=0,
            lookup_sqlite=str(home / "features" / "{tenant}.db"), lookup_sources={"acme": [f"dynamodb:{TABLE}"]},
        )  # fmt: skip
        yield make_world(settings, LookupSteps(settings.lookups, mode="local", dynamodb=dynamodb, sleep=lambda s: None))


def make_world(settings: Settings, lookups: LookupSteps, telemetry: Any = None) -> World:
    """A local container reading through `lookups`, with the model `score` for acme and globex
    and `fraud` for acme (the fraud example's), each summing its three features."""
    from sluice.domain import Principal
    from sluice.wiring import Container
    from sluice.wiring.adapters import build_registry, build_store
    from sluice.wiring.runtimes import build_runtimes

    store = build_store(settings)
    container = Container(settings, build_registry(settings), store, build_runtimes(settings, store), lookup_steps=lookups, telemetry=telemetry)
    for tenant in ("acme", "globex"):
        container.models.push(Principal(tenant, frozenset({"admin", "predict"}), f"test-{tenant}"), "score", score_model("features", 3))
    container.models.push(Principal("acme", frozenset({"admin", "predict"}), "test-acme"), "fraud", score_model("features", 3))
    return World(container, lookups)


ROWS = [("c1", 1.0), ("c2", 2.0), ("c1", 3.0), ("nobody", 4.0)]


def answers_by_hand(world: World, name: str, policy: dict[str, Any]) -> dict[str, Any]:
    """`policy` saved as `name` and called on ROWS by acme: its answer, checked against the sums by hand."""
    assert world.save(name, policy).status_code in (200, 201)
    r = world.predict(name, ROWS)
    assert r.status_code == 200, r.text
    body = r.json()
    assert [p["prediction"] for p in body["predictions"]] == pytest.approx(by_hand(ROWS, ACME))
    return body


def test_features_looked_up_in_sqlite_feed_the_model_in_one_store_call(world: World) -> None:
    body = answers_by_hand(world, "fraud", fraud())
    lookup = body["steps"][0]
    assert (lookup["name"], lookup["kind"], lookup["store_calls"]) == ("customer", "lookup", 1)  # three customers, one call
    meta = world.client.get("/v2/models/fraud", headers=world.acme).json()  # a caller sends the transaction
    assert [(i["name"], i["datatype"]) for i in meta["inputs"]] == [("customer", "BYTES"), ("amount", "FP32")]


def test_the_same_graph_reads_dynamodb_in_calls_of_a_hundred_keys(world: World) -> None:

    answers_by_hand(world, "fraud-ddb", fraud("dynamodb", TABLE))
    # 250 distinct customers over 400 rows, in the bulk call: three calls (100, 100, 50 keys).
    customers = np.array([f"m{i % 250}" for i in range(400)], dtype=object)
    store = world.lookups.store(_lookup_of(fraud("dynamodb", TABLE)), "acme")
    calls, last = score_in_one_bulk_call(world, "fraud-ddb", store, customers)
    assert calls == 3 and last == pytest.approx([1.0 + 149 + 1])  # m149: amount, avg, chargebacks


def _lookup_of(policy: dict[str, Any]) -> Any:
    from sluice.domain.policy import parse_policy

    return parse_policy(policy).steps[0].target  # type: ignore[union-attr]


def score_in_one_bulk_call(world: World, deployment: str, store: Any, customers: Any) -> tuple[int, list[float]]:
    """`customers`, each with an amount of 1, scored by acme in one bulk call: the store calls it
    made and the last row's score."""
    from sluice.domain import Principal

    rows = len(customers)
    before = store.calls
    acme = Principal("acme", frozenset({"predict"}), "test-acme")
    records = Records({"customer": customers, "amount": np.ones(rows, np.float32)})
    done = run(score_many(world.container.predictions, acme, deployment, records, max_rows=rows))
    assert done.failed == 0, done.by_record()
    outcome = done.by_record()[rows - 1]
    assert isinstance(outcome, Result)
    j = list(np.arange(rows)[outcome.records]).index(rows - 1)
    return store.calls - before, outcome.outputs_of(j)["score"][:, 0].tolist()


def run_fraud_job(world: World, tmp_path: Path, policy: dict[str, Any], rows: int, store_of: Any) -> tuple[list[str], Any, Any]:
    """A parquet file of `rows` transactions (c1, c2 and an unknown customer in turn) scored by a
    batch job on `policy` saved as "fraud", checked to read the store once per inference call,
    never once a row (a chunk's last call may be a short one): its customers, amounts and scores."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sluice.domain import Principal
    from tests.integration.batch.jobs import read_parts, run_job

    customers = [("c1", "c2", "nobody")[i % 3] for i in range(rows)]
    amounts = np.arange(rows, dtype=np.float32) % 7
    pq.write_table(pa.table({"customer": customers, "amount": amounts}), tmp_path / "transactions.parquet")
    assert world.save("fraud", policy).status_code in (200, 201)
    store = store_of(world)
    before = store.calls
    job = run_job(world.container, Principal("acme", frozenset({"admin", "predict"}), "test-acme"), tmp_path / "transactions.parquet", deployment="fraud")
    assert job.status == "SUCCEEDED" and (job.rows_out, job.rows_failed) == (rows, 0), job.error
    least = -(-rows // world.container.settings.batch.batch_infer_rows)  # inference calls of 4096 rows
    assert least <= store.calls - before <= least + (job.chunks_total or 0)
    return customers, amounts, read_parts(job).column("prediction").to_numpy()


def refusals_without_defaults(world: World, policy: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`policy` (no defaults) saved as "strict": the 422 bodies for a call with an unknown customer and
    for c4 (its record is there, its chargebacks null); known customers are answered."""
    assert world.save("strict", policy).status_code in (200, 201)
    unknown = world.predict("strict", [("c1", 1.0), ("nobody", 2.0)])
    assert unknown.status_code == 422, unknown.text
    null = world.predict("strict", [("c4", 1.0)])
    assert null.status_code == 422, null.text
    assert world.predict("strict", [("c1", 1.0), ("c2", 2.0)]).status_code == 200
    return unknown.json(), null.json()


def check_staleness_and_event_times(world: World, policy_of: Callable[..., dict[str, Any]], within_s: float | None = None) -> None:
    """Records older than max_age_s count as missing (the defaults, or a 422 without them); each
    record's event time comes back on request (`within_s` of the one stored), a stale record's too."""
    day = 86400.0
    policy = policy_of(max_age_s=day, event_time_output="customer_at")
    policy["expose"] = ["customer.customer_at"]
    assert world.save("fresh", policy).status_code in (200, 201)
    rows = [("c1", 1.0), ("c3", 2.0), ("nobody", 3.0)]
    r = world.predict("fresh", rows)
    assert r.status_code == 200, r.text
    predictions = r.json()["predictions"]
    assert [p["prediction"]["score"] for p in predictions] == pytest.approx(by_hand(rows, ACME, max_age_s=day))  # c3 takes the defaults
    times = [p["prediction"]["customer.customer_at"] for p in predictions]
    assert times[0] == pytest.approx(ACME["c1"][2], abs=within_s) and times[1] == pytest.approx(ACME["c3"][2], abs=within_s) and times[2] is None
    assert world.save("fresh-strict", policy_of(default=False, max_age_s=day)).status_code in (200, 201)
    r = world.predict("fresh-strict", [("c3", 1.0)])
    assert r.status_code == 422 and "older than max_age_s" in r.json()["error"]


def test_a_missing_entity_without_a_default_is_a_422_naming_the_key(world: World) -> None:
    unknown, null = refusals_without_defaults(world, fraud(default=False))
    assert unknown["field"] == "inputs.customer" and "customer_id='nobody'" in unknown["error"] and "not in the store" in unknown["error"]
    assert unknown["details"]["key"] == {"customer_id": "nobody"} and unknown["details"]["step"] == "customer"
    assert "feature 'chargebacks'" in null["error"] and "customer_id='c4'" in null["error"]


@pytest.mark.parametrize("key", [None, {"a": 1}, ["c1"], 1.5, True])
def test_a_key_that_is_no_entity_is_a_400_naming_the_input(world: World, key: Any) -> None:
    """A null key names no entity (and none named "None"), nor does an object, a list, a
    fraction or a boolean: refused, never looked up as their text, defaults or not."""
    assert world.save("fraud", fraud()).status_code in (200, 201)
    r = world.predict("fraud", [("c1", 1.0), (key, 2.0)])
    assert r.status_code in (400, 422), r.text
    assert r.json()["field"] == "inputs.customer", r.text


def test_stale_records_count_as_missing_and_event_times_come_back_on_request(world: World) -> None:
    check_staleness_and_event_times(world, fraud)


def test_each_tenant_reads_its_own_store(world: World) -> None:
    assert world.save("fraud", fraud(), world.globex).status_code in (200, 201)
    r = world.predict("fraud", [("c1", 1.0)], world.globex)  # the same table name: globex's own file
    assert r.status_code == 200 and r.json()["predictions"][0]["prediction"] == pytest.approx(by_hand([("c1", 1.0)], GLOBEX)[0])
    r = world.save("stolen", fraud("dynamodb", TABLE), world.globex)  # acme's table: not on globex's list
    assert r.status_code == 422 and r.json()["field"] == "policy.steps.0.target.table" and "globex" in r.json()["error"]


def test_a_features_file_every_tenant_opens_gives_each_tenant_its_listed_tables_alone(tmp_path: Path) -> None:
    """`SLUICE_LOOKUP_SQLITE` without `{tenant}` is one file for everyone: before, any tenant's
    lookup read any of its tables (acme's features, by globex); now a tenant reads the tables
    `lookup_sources` lists for it, refused by name when the policy is saved."""
    from sluice.runtimes.lookups import LookupSteps

    write_sqlite(tmp_path / "shared.db", ACME)
    for listed in ({}, {"acme": ["sqlite:customers"]}):
        settings = Settings(
            mode="local", home=tmp_path / f"home{len(listed)}", registry="", store="", deployment_cache_ttl_s=0,
            lookup_sqlite=str(tmp_path / "shared.db"), lookup_sources=listed,
        )  # fmt: skip
        world = make_world(settings, LookupSteps(settings.lookups, mode="local"))
        refused = world.save("fraud", fraud(), world.globex)  # the table holds acme's customers
        assert refused.status_code == 422 and refused.json()["field"] == "policy.steps.0.target.table"
        assert "not among the tables tenant 'globex' may read" in refused.json()["error"]
    answers_by_hand(world, "fraud", fraud())  # acme's, listed


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (lambda p: p["steps"][0]["target"].update(keys={"customer_id": "client"}), "policy.steps.0.target.keys.customer_id", "input 'client'"),
        (lambda p: p["steps"][0]["target"].update(keys={"customer_id": "amount"}), "policy.steps.0.target.keys.customer_id", "string or integer"),
        (lambda p: p["steps"][0]["target"]["features"][0].update(default="zero"), "policy.steps.0.target.features.0", "not a FP32"),
        (lambda p: p["steps"][0]["target"]["features"][1].update(datatype="INT32", default=5_000_000_000), "policy.steps.0.target.features.1", "not a INT32 value"),
        (lambda p: p["steps"][0]["target"]["features"][1].update(default=2**63), "policy.steps.0.target.features.1", "not a INT64 value"),
        (lambda p: p["steps"][0]["target"]["features"][0].update(default=1e39), "policy.steps.0.target.features.0", "not a FP32 value"),
        (lambda p: p["steps"][0]["target"].update(table="no such table"), "policy.steps.0.target", "not a sqlite table name"),
        (lambda p: p["steps"][0]["target"].update(table="Pragma_Database_List"), "policy.steps.0.target", "SQLite keeps for its own"),
        (lambda p: p["steps"][0]["target"].update(table="sqlite_master"), "policy.steps.0.target", "SQLite keeps for its own"),
        (lambda p: p["steps"][0]["target"].update(store="sagemaker", keys={"a": "customer", "b": "amount"}), "policy.steps.0.target", "one key"),
        (lambda p: p["steps"][0]["target"].pop("inputs"), "policy.steps.0.target.inputs", "declares the inputs"),
        (lambda p: p["steps"][1]["target"]["ops"][0].update(inputs=["amount", "avg_amount", "churn"]), "policy.steps.1.target.ops.0.inputs.2", "churn"),
        (lambda p: p.update(steps=[p["steps"][0], {"name": "score", "target": {"model": "score", "version": 1}}]), "policy.steps.1", "features"),
        (lambda p: p["steps"][0]["target"].update(max_age_s=True), "policy.steps.0.target.max_age_s", "number"),  # not 1 s
        (lambda p: p["steps"][0]["target"].update(cache_ttl_s=True), "policy.steps.0.target.cache_ttl_s", "number"),
        (lambda p: p.update(steps=[{"name": "customer", "target": {"kind": "precomputed", "table": "t", "key": "routing_key", "max_age_s": True, "live": p["steps"][2]["target"]}}]), "policy.steps.0.target.max_age_s", "number"),
    ],
)
def test_refusals_when_saved_name_the_field(world: World, change: Any, field: str, words: str) -> None:
    policy = fraud()
    change(policy)
    r = world.save("refused", policy)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field and words in r.json()["error"], r.json()


@pytest.mark.parametrize("table", ["dbstat", "DbStat"])
def test_a_table_sqlite_makes_itself_is_in_no_features_file(world: World, table: str) -> None:
    """Virtual tables every file answers (`dbstat`: the file's pages, by table) are not the
    file's tables: a lookup reads only a table or view the file declares."""
    policy = fraud(table=table, default=False)
    policy["steps"][0]["target"].update(keys={"name": "customer"}, features=[{"name": "pageno", "datatype": "FP32"}, {"name": "ncell", "datatype": "INT64"}])
    policy["steps"][1]["target"]["ops"][0]["inputs"] = ["amount", "pageno", "ncell"]
    assert world.save(f"own-{table.lower()}", policy).status_code in (200, 201)
    r = world.predict(f"own-{table.lower()}", [("customers", 1.0)])
    assert r.status_code == 502 and f"has no table '{table}'" in r.json()["error"], r.text


def test_a_default_stored_before_its_range_was_checked_still_reads_and_its_other_settings_change(world: World) -> None:
    """The range of a default is checked where a policy is written: one stored before (an INT32
    default of 5e9) still reads and takes a change of its other settings, and a policy that
    keeps it is written (a rollout's, going from and back to it); another default past the range
    is refused naming the feature."""
    from dataclasses import replace

    assert world.save("legacy", fraud()).status_code == 201
    stored = world.container.registry.get_deployment("acme", "legacy")
    old = json.loads(json.dumps(stored.policy))
    old["steps"][0]["target"]["features"][1].update(datatype="INT32", default=5_000_000_000)
    world.container.registry.update_deployment(replace(stored, policy=old), expected_revision=stored.revision)
    assert world.client.get("/api/v1/deployments/legacy", headers=world.acme).status_code == 200
    r = world.client.put("/api/v1/deployments/legacy", json={"capture": {"sample_percent": 10}}, headers=world.acme)
    assert r.status_code == 200, r.text
    r = world.client.put("/api/v1/deployments/legacy", json={"policy": old}, headers=world.acme)
    assert r.status_code == 200, r.text
    older = json.loads(json.dumps(old))
    older["steps"][0]["target"]["features"][1]["default"] = 6_000_000_000
    r = world.client.put("/api/v1/deployments/legacy", json={"policy": older}, headers=world.acme)
    assert r.status_code == 422 and r.json()["field"] == "policy.steps.0.target.features.1", r.text
    world.client.delete("/api/v1/deployments/legacy", headers=world.acme)


def test_a_lookup_alone_is_not_a_policy(world: World) -> None:
    r = world.save("alone", fraud()["steps"][0]["target"])
    assert r.status_code == 422 and r.json()["field"] == "policy" and "step of a sequence" in r.json()["error"]


def test_a_100k_row_batch_job_looks_up_per_chunk_in_few_store_calls(world: World, tmp_path: Path) -> None:
    # 25 inference calls of 4096 rows, three customers each.
    customers, amounts, scores = run_fraud_job(world, tmp_path, fraud(), 100_000, lambda w: w.lookups.store(_lookup_of(fraud()), "acme"))
    table = {"c1": 10.0, "c2": 252.5, "nobody": 0.0}
    assert scores[:6].tolist() == pytest.approx([amounts[i] + table[customers[i]] for i in range(6)])


def test_the_fraud_example_saves_and_answers(world: World) -> None:
    """examples/features/fraud.json on SQLite (its Feast repository: tests/integration/test_feast_lookups.py),
    the features of customer_features.sql: a transaction in, the customer's features looked up (a
    month-old record is stale: its defaults), a transform, the model, a decision."""
    import json

    policy = json.loads((REPO / "examples" / "features" / "fraud.json").read_text())
    policy["steps"][0]["target"]["store"] = "sqlite"
    assert world.save("fraud-example", policy).status_code in (200, 201)
    r = world.predict("fraud-example", EXAMPLE_ROWS)
    assert r.status_code == 200, r.text
    expected = fraud_example_decisions()
    assert [a["prediction"] for a in r.json()["predictions"]] == expected and "review" in expected and "allow" in expected


EXAMPLE_ROWS = [("c-1001", 100.0), ("c-1002", 900.0), ("c-1003", 100.0), ("c-new", 5.0)]


def fraud_example_decisions() -> list[str]:
    """The example's decisions for EXAMPLE_ROWS, by hand, on the example's features (SQLite's or Feast's)."""
    features = {"c-1001": (42.5, 0), "c-1002": (310.0, 3)}  # c-1003's record is 30 days old: max_age_s is two days
    expected = []
    for customer, amount in EXAMPLE_ROWS:
        avg, chargebacks = features.get(customer, (0.0, 0))
        score = np.log1p(amount) + np.log1p(avg) + chargebacks
        expected.append("review" if 1 / (1 + np.exp(-(0.8 * score - 6.0))) >= 0.5 else "allow")
    return expected


def test_a_graph_with_a_lookup_is_not_cached(world: World) -> None:
    """The store's values change between requests: a cached answer could be an old one."""
    body = {"name": "cached-fraud", "policy": fraud(), "cache": {"ttl_s": 60, "max_entries": 10}}
    r = world.client.post("/api/v1/deployments", json=body, headers=world.acme)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "policy.steps.0.target" and "lookup step is not deterministic" in r.json()["error"]


def test_a_cached_lookup_reports_its_hits_in_the_answer_and_the_statistics(world: World) -> None:
    assert world.save("fraud-cached", fraud(cache_ttl_s=300)).status_code in (200, 201)
    reports = []
    for _ in range(2):
        r = world.predict("fraud-cached", ROWS)
        assert r.status_code == 200, r.text
        assert [p["prediction"] for p in r.json()["predictions"]] == pytest.approx(by_hand(ROWS, ACME))
        reports.append(r.json()["steps"][0])
    # Rows: the first request reads its three customers in one call, the second reads nothing.
    assert [(s["store_calls"], s["cache_hits"], s["cache_misses"]) for s in reports] == [(1, 0, 4), (0, 4, 0)]
    step = world.client.get("/api/v1/deployments/fraud-cached/stats", headers=world.acme).json()["steps"]["customer"]
    assert (step["cache_hits"], step["cache_misses"], step["cache_hit_rate"]) == (4, 4, 0.5)
    assert world.save("fraud", fraud()).status_code in (200, 201)
    plain = world.predict("fraud", ROWS).json()["steps"][0]  # a lookup that does not ask for the cache: as before
    assert plain["store_calls"] == 1 and "cache_hits" not in plain


def test_sluice_deployments_stats_prints_a_cached_lookups_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from tests.integration.conftest import run_cli
    from tests.support import cli_environment

    write_sqlite(tmp_path / "default.db", ACME)
    (tmp_path / "score.onnx").write_bytes(score_model("features", 3))
    with cli_environment(monkeypatch, tmp_path / "home", SLUICE_DEPLOYMENT_CACHE_TTL_S="0", SLUICE_LOOKUP_SQLITE=str(tmp_path / "{tenant}.db")):
        assert run_cli(capsys, "models", "push", "score", str(tmp_path / "score.onnx"))[0] == 0
        assert run_cli(capsys, "deployments", "create", "fraud", "--policy", json.dumps(fraud(cache_ttl_s=60)))[0] == 0
        batch = json.dumps([{"customer": c, "amount": a} for c, a in ROWS])
        for _ in range(2):
            assert run_cli(capsys, "predict", "fraud", "--batch", batch)[0] == 0
        code, out, _ = run_cli(capsys, "deployments", "stats", "fraud")
    assert code == 0 and "step customer: feature cache 4 rows hit, 4 read from the store" in out, out


def test_in_lambda_a_requests_lookups_ride_on_its_prediction_line(tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """One EMF record per request: its prediction line counts its lookups (`LookupCalls`, with
    no dimension, as the lookup error-rate alarm reads them) and names their stores; a request
    that fails after its lookup answered still counts it, in a line of its own."""
    import json

    from sluice.domain.errors import BackendError
    from sluice.observability import Telemetry, get_logger
    from sluice.runtimes.lookups import LookupSteps

    write_sqlite(tmp_path / "acme.db", ACME)
    settings = Settings(mode="local", home=tmp_path / "home", registry="", store="", deployment_cache_ttl_s=0, lookup_sqlite=str(tmp_path / "{tenant}.db"))
    world = make_world(settings, LookupSteps(settings.lookups, mode="local", metrics_namespace="sluice"), Telemetry(emit_metrics=True, namespace="sluice"))
    caplog.set_level("INFO")
    answers_by_hand(world, "fraud", fraud())
    answers_by_hand(world, "fraud-cached", fraud(cache_ttl_s=300))

    async def down(*args: Any, **kwargs: Any) -> Any:
        raise BackendError("the model's runtime is down")

    monkeypatch.setattr(world.container.runtimes["onnx"], "infer", down)
    assert world.predict("fraud", ROWS).status_code == 502
    formatter = get_logger().registered_formatter
    found = [json.loads(formatter.format(r)) for r in caplog.records if r.getMessage() in ("prediction", "lookup", "prediction failed")]
    assert [line["message"] for line in found] == ["prediction", "prediction", "lookup", "prediction failed"]
    plain, cached, alone, failed = found
    assert (plain["LookupCalls"], plain["LookupErrors"], plain["lookups"]) == (1, 0, [{"store": "sqlite", "table": "customers", "store_calls": 1}])
    by_metric = {m["Name"]: d["Dimensions"] for d in plain["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]}
    assert by_metric["LookupCalls"] == by_metric["LookupErrors"] == [[]] and by_metric["Predictions"] == [["service", "tenant", "deployment"]]
    assert (cached["LookupCacheHits"], cached["LookupCacheMisses"]) == (0, 4)
    assert {m["Name"] for d in cached["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]} >= {"LookupCacheHits", "LookupCacheMisses"}
    assert (alone["LookupCalls"], alone["LookupErrors"], alone["table"]) == (1, 0, "customers")
    assert "LookupCalls" not in failed and failed["error"] == "backend_error"


_CUSTOMERS = st.sampled_from(["c1", "c1", "c2", "c3", "c4", "nobody", "someone else", ""])
_SAVED: set[tuple[int, str]] = set()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    rows=st.lists(st.tuples(_CUSTOMERS, st.floats(0, 100, width=32)), min_size=1, max_size=12),
    store=st.sampled_from(["sqlite", "dynamodb"]),
    cached=st.booleans(),
)
def test_any_batch_is_looked_up_as_by_hand(world: World, rows: list[tuple[str, float]], store: str, cached: bool) -> None:
    """Any batch (customers asked again within it, absent ones taking the default, a record a
    year old, a null value), from either store, through the feature cache or not, in any order
    of requests: the model gets what reading the table by hand gives."""
    name = f"any-{store}-{'cached' if cached else 'plain'}"
    if (id(world), name) not in _SAVED:
        policy = fraud(store, TABLE if store == "dynamodb" else "customers", **({"cache_ttl_s": 300} if cached else {}))
        assert world.save(name, policy).status_code in (200, 201)
        _SAVED.add((id(world), name))
    r = world.predict(name, rows)
    assert r.status_code == 200, r.text
    assert [p["prediction"] for p in r.json()["predictions"]] == pytest.approx(by_hand(rows, ACME), rel=1e-6)


def test_a_precomputed_nodes_live_rows_refused_are_named_as_the_requests_rows(world: World) -> None:
    """Stored answers for c1 and c2; the third row's key (1.5) is refused by the live lookup
    graph, which ran on the live rows alone: the refusal names row 2 of the request, as the
    graph alone would, not row 0 of the rows run live."""
    from sluice.codecs.stored_rows import encode_rows
    from sluice.registry.precomputed import Publication

    assert world.save("fraud", fraud(default=False)).status_code in (200, 201)
    assert world.save("pre", {"kind": "precomputed", "table": "fraud-answers", "key": "inputs.customer", "live": fraud(default=False)}).status_code in (200, 201)
    known = world.predict("fraud", [("c1", 1.0), ("c2", 2.0)])
    assert known.status_code == 200, known.text
    store, now = world.container.precomputed, time.time()
    assert store is not None
    stored = [s.to_dict() for s in world.container.registry.get_version("acme", "fraud", 1).signature.outputs]
    outputs = {stored[0]["name"]: np.asarray([[p["prediction"]] for p in known.json()["predictions"]], np.float32)}
    store.put_answers("acme", "fraud-answers", "g1", list(zip(["c1", "c2"], encode_rows(outputs, 2), strict=True)), computed_at=now, expires_at=now + 600)
    store.publish("acme", "fraud-answers", Publication("g1", "job-1", "fraud", stored, published_at=now), expires_at=now + 600)
    alone = world.predict("fraud", [("c1", 1.0), ("c2", 2.0), (1.5, 3.0)]).json()  # type: ignore[list-item]
    mixed = world.predict("pre", [("c1", 1.0), ("c2", 2.0), (1.5, 3.0)])  # type: ignore[list-item]
    assert mixed.status_code == 400, mixed.text
    assert mixed.json()["error"] == alone["error"] and "row 2 is float '1.5'" in alone["error"]
    assert mixed.json()["details"]["row"] == 2


def test_a_switchs_case_refusing_a_row_names_the_requests_row(world: World) -> None:
    """A switch deciding row by row runs each case on its own rows: a row a case refuses is
    named as the request's row (2), as the graph alone names it, not as the case's (1)."""
    assert world.save("fraud", fraud(default=False)).status_code in (200, 201)
    switch = {"kind": "switch", "cases": [{"name": "low", "when": {"field": "inputs.amount", "op": "<", "value": 2.5}, "target": fraud(default=False)}], "default": fraud(default=False)}
    assert world.save("by-amount", switch).status_code in (200, 201)
    rows = [("c1", 1.0), ("c2", 3.0), (1.5, 4.0)]
    alone = world.predict("fraud", rows).json()  # type: ignore[arg-type]
    switched = world.predict("by-amount", rows)  # type: ignore[arg-type]
    assert switched.status_code == 400 and "row 2 is float '1.5'" in alone["error"]
    assert switched.json()["error"] == f"case 'default': {alone['error']}" and switched.json()["details"]["row"] == 2  # naming its case too
    assert switched.json()["details"]["case"] == "default"


@pytest.mark.parametrize("extra", [{"max_age_s": 86400.0}, {"event_time_output": "customer_at"}], ids=["max_age_s", "event_time_output"])
def test_an_event_time_column_the_table_lacks_is_a_422_naming_it(world: World, extra: dict[str, Any]) -> None:
    """A misspelt `event_time` read for `max_age_s`: before, every record counted as stale and each
    row quietly took its defaults (and `event_time_output` was null throughout); now it is refused
    as a feature missing without a default is, a 422 naming the column."""
    policy = fraud(event_time="evnt_time", **extra)
    assert world.save("misspelt", policy).status_code in (200, 201)
    r = world.predict("misspelt", [("c1", 1.0)])
    assert r.status_code == 422, r.text
    body = r.json()
    assert "no event-time column 'evnt_time'" in body["error"] and "'customers'" in body["error"] and body["field"] == "policy", body
    assert world.save("spelt", fraud(event_time="event_time", **extra)).status_code in (200, 201)
    assert world.predict("spelt", [("c1", 1.0)]).status_code == 200


@pytest.mark.parametrize(("datatype", "key", "kind"), [("BYTES", "7", "a string (S)"), ("INT64", 7, "a number (N)")])
def test_a_dynamodb_key_of_another_type_than_the_tables_is_a_502_naming_the_key_and_the_type(tmp_path: Path, datatype: str, key: Any, kind: str) -> None:
    """DynamoDB refuses a BatchGetItem whose key is of another type than the table's key
    attribute (a text entity against a numeric key, or the reverse) with a ValidationException
    ("The provided key element does not match the schema"; moto does not check, and answers
    nothing found: the Stubber gives the service's answer). Before, the 502 said "reading
    DynamoDB table ... failed (ValidationException)", naming neither; now it names the key and
    the type it was asked as."""
    from botocore.stub import Stubber

    from sluice.runtimes.lookups import LookupSteps

    dynamodb = _dynamodb_client()
    settings = Settings(mode="local", home=tmp_path / "home", registry="", store="", deployment_cache_ttl_s=0, lookup_sources={"acme": [f"dynamodb:{TABLE}"]})
    world = make_world(settings, LookupSteps(settings.lookups, mode="local", dynamodb=dynamodb, sleep=lambda s: None))
    policy = fraud("dynamodb", TABLE)
    policy["steps"][0]["target"]["inputs"][0]["datatype"] = datatype
    assert world.save("typed", policy).status_code in (200, 201)
    with Stubber(dynamodb) as stub:
        stub.add_client_error("batch_get_item", "ValidationException", "The provided key element does not match the schema", 400)
        r = world.client.post("/api/v1/predictions", json={"deployment": "typed", "batch": [{"customer": key, "amount": 1.0}]}, headers=world.acme)
    assert r.status_code == 502, r.text
    error = r.json()["error"]
    assert f"'{TABLE}'" in error and f"key 'customer_id' was asked as {kind}" in error, error


def _dynamodb_client() -> Any:
    import boto3

    return boto3.client("dynamodb", region_name="eu-west-1", aws_access_key_id="test", aws_secret_access_key="test")


@pytest.mark.parametrize(
    ("change", "field", "name"),
    [
        (lambda t: t["features"][0].update(name="avg.amount"), "policy.steps.0.target.features.0.name", "avg.amount"),
        (lambda t: t["features"][1].update(name="_chargebacks"), "policy.steps.0.target.features.1.name", "_chargebacks"),
        (lambda t: t["features"][0].update(name="avg_amount_"), "policy.steps.0.target.features.0.name", "avg_amount_"),
        (lambda t: t["features"][0].update(name="a" * 65), "policy.steps.0.target.features.0.name", "a" * 65),
        (lambda t: t.update(event_time="event.time", max_age_s=60.0), "policy.steps.0.target.event_time", "event.time"),
        (lambda t: t.update(keys={"customer.id": "customer"}), "policy.steps.0.target.keys.customer.id", "customer.id"),
    ],
)
def test_a_sagemaker_lookups_names_that_are_no_feature_names_are_refused_when_saved(tmp_path: Path, change: Any, field: str, name: str) -> None:
    """SageMaker Feature Store's feature names are 1 to 64 letters, digits, '-' and '_', starting
    and ending with a letter or digit (botocore's FeatureName). Before, a policy asking a feature
    group for another name was saved and every call was a 502 (BatchGetRecord's
    ValidationException); now it is a 422 naming the field when saved."""
    from sluice.runtimes.lookups import LookupSteps

    settings = Settings(
        mode="local", home=tmp_path / "home", registry="", store="", deployment_cache_ttl_s=0, lookup_sources={"acme": ["sagemaker:acme-customers"]}
    )  # fmt: skip
    world = make_world(settings, LookupSteps(settings.lookups, mode="local"))
    assert world.save("group", fraud("sagemaker", "acme-customers", max_age_s=60.0, event_time="event-time")).status_code in (200, 201)
    policy = fraud("sagemaker", "acme-customers")
    change(policy["steps"][0]["target"])
    prepare = policy["steps"][1]["target"]["ops"][0]
    prepare["inputs"] = ["amount", *(f["name"] for f in policy["steps"][0]["target"]["features"])]
    r = world.save("misnamed", policy)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field and f"'{name}' is not a SageMaker feature name" in r.json()["error"], r.json()


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_a_batch_jobs_missing_event_time_is_null_in_every_format(world: World, tmp_path: Path, fmt: str) -> None:
    """An exposed `event_time_output` of a row whose entity has no record is no time (`null` in
    an answer): before, a Parquet part wrote it as NaN and a CSV part as `nan`, where JSON Lines
    wrote null; now it is null (an empty CSV cell) in all three."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sluice.domain import Principal
    from tests.integration.batch.jobs import read_parts, run_job

    policy = fraud(max_age_s=86400.0, event_time_output="customer_at")
    policy["expose"] = ["customer.customer_at"]
    assert world.save("timed", policy).status_code in (200, 201)
    path = tmp_path / "transactions.parquet"
    pq.write_table(pa.table({"customer": ["c1", "nobody", "c3"], "amount": pa.array([1.0, 2.0, 3.0], pa.float32())}), path)
    acme = Principal("acme", frozenset({"admin", "predict"}), "test-acme")
    job = run_job(world.container, acme, path, deployment="timed", output_format=fmt, output_uri=str(tmp_path / fmt))
    assert (job.status, job.rows_out) == ("SUCCEEDED", 3), job.error
    times = read_parts(job).column("prediction_customer.customer_at").to_pylist()
    assert times[0] == pytest.approx(ACME["c1"][2]) and times[1] is None and times[2] == pytest.approx(ACME["c3"][2]), times
    if fmt == "csv":  # as written: an empty cell (Arrow's reader also reads `nan` as null)
        from sluice.batch.uris import local_path

        manifest = json.loads((local_path(job.output_uri) / "_manifest.json").read_text())
        lines = "".join(local_path(p["uri"]).read_text() for p in manifest["parts"]).splitlines()
        assert lines[2] == "1,2,", lines
