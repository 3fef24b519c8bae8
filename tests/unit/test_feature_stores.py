"""The online stores of lookup steps against the services' own shapes (botocore's Stubber checks
every request it is given against the API model): SageMaker Feature Store's BatchGetRecord,
which moto does not model, and DynamoDB's UnprocessedKeys, which moto never returns."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from botocore.stub import Stubber

from sluice.domain.errors import BackendError, Forbidden, Unavailable, Unprocessable
from sluice.domain.lookups import Lookup
from sluice.inference.loop import run
from sluice.runtimes.feature_stores import DynamoStore, Found, SageMakerStore, epoch_seconds
from sluice.runtimes.lookups import LookupSteps
from sluice.settings import LookupSettings

GROUP = "acme-customers"


def _client(service: str) -> Any:
    import boto3

    return boto3.client(service, region_name="eu-west-1", aws_access_key_id="test", aws_secret_access_key="test")


def _node(store: str, table: str, **extra: Any) -> Lookup:
    return Lookup(
        store=store, table=table, keys={"customer_id": "customer"},
        features=[{"name": "avg_amount", "datatype": "FP32", "default": 0.0}, {"name": "vip", "datatype": "BOOL", "default": False}],
        **extra,
    )  # fmt: skip


def _record(customer: str, avg: str, vip: str, at: str) -> dict[str, Any]:
    return {
        "FeatureGroupName": GROUP,
        "RecordIdentifierValueAsString": customer,
        "Record": [{"FeatureName": "avg_amount", "ValueAsString": avg}, {"FeatureName": "vip", "ValueAsString": vip}, {"FeatureName": "event_time", "ValueAsString": at}],
    }


def test_a_feature_group_answers_in_calls_of_a_hundred_identifiers_with_its_event_times() -> None:
    client = _client("sagemaker-featurestore-runtime")
    # One call at a time, so the Stubber's answers meet their calls in order.
    settings = LookupSettings(lookup_sources={"acme": [f"sagemaker:{GROUP}"]}, lookup_concurrency=1)
    steps = LookupSteps(settings, mode="aws", featurestore=client, sleep=lambda s: None)
    customers = np.array([f"c{i}" for i in range(150)] + ["c0"], dtype=object)  # 150 distinct: two calls
    node = _node("sagemaker", GROUP, event_time_output="at")
    with Stubber(client) as stub:
        for chunk in (range(100), range(100, 150)):
            ids = [f"c{i}" for i in chunk]
            found = [_record(c, str(i), "true" if i % 2 else "0", "2026-11-27T10:00:00Z") for i, c in zip(chunk, ids, strict=True) if i != 7]
            expected = {"Identifiers": [{"FeatureGroupName": GROUP, "RecordIdentifiersValueAsString": ids, "FeatureNames": ["avg_amount", "vip", "event_time"]}]}
            errors = [{"FeatureGroupName": GROUP, "RecordIdentifierValueAsString": "c7", "ErrorCode": "ResourceNotFound", "ErrorMessage": "no record"}] if 0 in chunk else []
            stub.add_response("batch_get_record", {"Records": found, "Errors": errors, "UnprocessedIdentifiers": []}, expected)
        out, calls = run(steps.call(node, "acme", {"customer": customers}, timeout_s=5))
        stub.assert_no_pending_responses()
    assert calls == 2
    assert out["avg_amount"][[1, 7, 149, 150]].tolist() == [1.0, 0.0, 149.0, 0.0]  # c7 not found: its default
    assert out["vip"][[1, 2, 7]].tolist() == [True, False, False]
    assert out["at"][0] == epoch_seconds("2026-11-27T10:00:00+00:00") and np.isnan(out["at"][7])
    assert out["customer"] is customers  # what it took goes on


def test_a_feature_group_that_refuses_a_record_fails_the_step() -> None:
    client = _client("sagemaker-featurestore-runtime")
    store = SageMakerStore(client, sleep=lambda s: None)
    with Stubber(client) as stub:
        error = {"FeatureGroupName": GROUP, "RecordIdentifierValueAsString": "c1", "ErrorCode": "AccessDeniedException", "ErrorMessage": "no"}
        stub.add_response("batch_get_record", {"Records": [], "Errors": [error], "UnprocessedIdentifiers": []})
        with pytest.raises(BackendError, match="refused records"):
            store.get_many(GROUP, ["customer_id"], [("c1",)], ["avg_amount"], "event_time")
        stub.add_client_error("batch_get_record", "ThrottlingException", "slow down")
        with pytest.raises(Unavailable, match="throttling"):
            store.get_many(GROUP, ["customer_id"], [("c1",)], ["avg_amount"], "event_time")


def test_dynamodb_unprocessed_keys_are_asked_again_until_none_are_left() -> None:
    client = _client("dynamodb")
    slept: list[float] = []
    store = DynamoStore(client, retries=2, sleep=slept.append)
    names = {"#a0": "customer_id", "#a1": "avg_amount", "#a2": "event_time"}
    keys = [{"customer_id": {"S": c}} for c in ("c1", "c2")]
    with Stubber(client) as stub:
        request = {"RequestItems": {"t": {"Keys": keys, "ProjectionExpression": "#a0, #a1, #a2", "ExpressionAttributeNames": names}}}
        left = {"t": {"Keys": keys[1:], "ProjectionExpression": "#a0, #a1, #a2", "ExpressionAttributeNames": names}}
        stub.add_response("batch_get_item", {"Responses": {"t": [{"customer_id": {"S": "c1"}, "avg_amount": {"N": "1.5"}}]}, "UnprocessedKeys": left}, request)
        stub.add_response("batch_get_item", {"Responses": {"t": [{"customer_id": {"S": "c2"}, "avg_amount": {"N": "2"}}]}, "UnprocessedKeys": {}}, {"RequestItems": left})
        found = store.get_many("t", ["customer_id"], [("c1",), ("c2",)], ["avg_amount"], "event_time")
        assert found == Found([("c1",), ("c2",)], {"avg_amount": ["1.5", "2"]}, [None, None])
        assert store.calls == 2 and slept == [0.05]
        for _ in range(3):  # throttled every time: 503 after the retries
            stub.add_response("batch_get_item", {"Responses": {"t": []}, "UnprocessedKeys": left}, {"RequestItems": left})
        with pytest.raises(Unavailable, match="unprocessed after 3 calls"):
            store.get_many("t", ["customer_id"], [("c2",)], ["avg_amount"], "event_time")


def test_a_value_the_store_holds_that_is_not_of_the_declared_type_names_the_feature_and_entity() -> None:
    client = _client("dynamodb")
    steps = LookupSteps(LookupSettings(lookup_sources={"acme": ["dynamodb:acme-t"]}), mode="aws", dynamodb=client)
    with Stubber(client) as stub:
        # Neither max_age_s nor event_time_output: the record's time is not read.
        names = {"#a0": "customer_id", "#a1": "avg_amount", "#a2": "vip"}
        asked = {"RequestItems": {"acme-t": {"Keys": [{"customer_id": {"S": "c1"}}], "ProjectionExpression": "#a0, #a1, #a2", "ExpressionAttributeNames": names}}}
        stub.add_response("batch_get_item", {"Responses": {"acme-t": [{"customer_id": {"S": "c1"}, "avg_amount": {"S": "lots"}}]}}, asked)
        with pytest.raises(BackendError, match=r"'lots' for feature 'avg_amount' of customer_id='c1'"):
            run(steps.call(_node("dynamodb", "acme-t"), "acme", {"customer": np.array(["c1"], dtype=object)}, timeout_s=5))


def test_a_key_of_empty_text_is_a_missing_entity_not_sent_to_dynamodb() -> None:
    """DynamoDB refuses a whole BatchGetItem that asks for a key of empty text (moto does not:
    the Stubber holds sluice to the one call with the other keys); the row takes its default,
    as in the other stores, and a call of that key alone asks nothing."""
    client = _client("dynamodb")
    steps = LookupSteps(LookupSettings(lookup_sources={"acme": ["dynamodb:acme-t"]}), mode="aws", dynamodb=client)
    names = {"#a0": "customer_id", "#a1": "avg_amount", "#a2": "vip"}
    asked = {"RequestItems": {"acme-t": {"Keys": [{"customer_id": {"S": "c1"}}], "ProjectionExpression": "#a0, #a1, #a2", "ExpressionAttributeNames": names}}}
    with Stubber(client) as stub:
        stub.add_response("batch_get_item", {"Responses": {"acme-t": [{"customer_id": {"S": "c1"}, "avg_amount": {"N": "1.5"}}]}}, asked)
        out, calls = run(steps.call(_node("dynamodb", "acme-t"), "acme", {"customer": np.array(["c1", "", "c1"], dtype=object)}, timeout_s=5))
        assert out["avg_amount"].tolist() == [1.5, 0.0, 1.5] and calls == 1
        out, calls = run(steps.call(_node("dynamodb", "acme-t"), "acme", {"customer": np.array([""], dtype=object)}, timeout_s=5))
        assert out["avg_amount"].tolist() == [0.0] and calls == 0
        stub.assert_no_pending_responses()


def test_a_feature_groups_list_value_is_not_of_a_scalar_datatype() -> None:
    """A List, Set or Vector feature comes back as `ValueAsStringList`: a value that is there but
    not of the declared datatype, so a 502 naming it, never taken as missing (its default)."""
    client = _client("sagemaker-featurestore-runtime")
    steps = LookupSteps(LookupSettings(lookup_sources={"acme": [f"sagemaker:{GROUP}"]}), mode="aws", featurestore=client, sleep=lambda s: None)
    record = {"FeatureGroupName": GROUP, "RecordIdentifierValueAsString": "c1", "Record": [{"FeatureName": "avg_amount", "ValueAsStringList": ["0.1", "0.2"]}]}
    with Stubber(client) as stub:
        stub.add_response("batch_get_record", {"Records": [record], "Errors": [], "UnprocessedIdentifiers": []})
        with pytest.raises(BackendError, match=r"holds \"\['0.1', '0.2'\]\" for feature 'avg_amount' of customer_id='c1': not a FP32 value"):
            run(steps.call(_node("sagemaker", GROUP), "acme", {"customer": np.array(["c1"], dtype=object)}, timeout_s=5))


def test_stores_are_refused_outside_the_tenants_list_and_sqlite_on_aws() -> None:
    steps = LookupSteps(LookupSettings(lookup_sources={"acme": ["dynamodb:acme-customers"]}, lookup_sqlite="features/{tenant}.db"), mode="aws")
    assert steps.refusal(_node("dynamodb", "acme-customers"), "acme") is None
    assert "tenant 'globex'" in (steps.refusal(_node("dynamodb", "acme-customers"), "globex") or "")
    assert "may read" in (steps.refusal(_node("sagemaker", "acme-customers"), "acme") or "")  # the same name, another store
    assert "local only" in (steps.refusal(_node("sqlite", "customers"), "acme") or "")
    with pytest.raises(Forbidden, match="tenant 'globex'"):  # asked again on every call, not only when saved
        run(steps.call(_node("dynamodb", "acme-customers"), "globex", {"customer": np.array(["c1"], dtype=object)}, timeout_s=5))
    with pytest.raises(ValueError, match="not dynamodb:TABLE"):
        LookupSettings(lookup_sources={"acme": ["s3:bucket"]})


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(1700000000, 1700000000.0), ("1700000000.5", 1700000000.5), ("2023-11-14T22:13:20Z", 1700000000.0), ("2023-11-14T22:13:20", 1700000000.0), ("soon", None), (None, None)],
)
def test_event_times_as_numbers_or_iso_8601(value: Any, seconds: float | None) -> None:
    assert epoch_seconds(value) == seconds


def test_in_lambda_each_lookup_is_an_emf_record_of_calls_and_store_failures(caplog: pytest.LogCaptureFixture) -> None:
    """What the observability stack's lookup error-rate alarm reads: a failed store counts, a
    missing entity (the caller's data, a 422) does not."""
    import json

    from sluice.observability import get_logger

    client = _client("dynamodb")
    steps = LookupSteps(LookupSettings(lookup_sources={"acme": ["dynamodb:acme-t"]}), mode="aws", dynamodb=client, metrics_namespace="sluice")
    node = _node("dynamodb", "acme-t")
    strict = Lookup(store="dynamodb", table="acme-t", keys={"customer_id": "customer"}, features=[{"name": "avg_amount", "datatype": "FP32"}])
    customers = {"customer": np.array(["c1"], dtype=object)}
    caplog.set_level("INFO")
    with Stubber(client) as stub:
        stub.add_response("batch_get_item", {"Responses": {"acme-t": [{"customer_id": {"S": "c1"}, "avg_amount": {"N": "1"}}]}})
        run(steps.call(node, "acme", customers, timeout_s=5))
        stub.add_client_error("batch_get_item", "ProvisionedThroughputExceededException", "slow down")
        with pytest.raises(Unavailable):
            run(steps.call(node, "acme", customers, timeout_s=5))
        stub.add_response("batch_get_item", {"Responses": {"acme-t": []}})
        with pytest.raises(Unprocessable):
            run(steps.call(strict, "acme", customers, timeout_s=5))
    formatter = get_logger().registered_formatter
    found = [json.loads(formatter.format(r)) for r in caplog.records if r.getMessage() == "lookup"]
    assert [(line["LookupCalls"], line["LookupErrors"], line["table"]) for line in found] == [(1, 0, "acme-t"), (1, 1, "acme-t"), (1, 0, "acme-t")]
    meta = found[0]["_aws"]["CloudWatchMetrics"][0]
    assert meta["Namespace"] == "sluice" and meta["Dimensions"] == [[]] and {m["Name"] for m in meta["Metrics"]} == {"LookupCalls", "LookupErrors"}


def test_a_sqlite_table_keyed_by_two_integer_columns(tmp_path: Any) -> None:
    """Integer keys are asked as numbers (SQLite compares INTEGER columns with numbers) and two
    keys together; the tenant reads its own file, read-only."""
    import sqlite3

    with sqlite3.connect(tmp_path / "acme.db") as db:
        db.execute("CREATE TABLE merchant_day (merchant INTEGER, day INTEGER, volume REAL, PRIMARY KEY (merchant, day))")
        db.executemany("INSERT INTO merchant_day VALUES (?, ?, ?)", [(7, 1, 70.5), (7, 2, 72.0), (8, 1, 80.0)])
    db.close()
    steps = LookupSteps(LookupSettings(lookup_sqlite=str(tmp_path / "{tenant}.db")), mode="local")
    node = Lookup(
        store="sqlite", table="merchant_day", keys={"merchant": "m", "day": "d"},
        features=[{"name": "volume", "datatype": "FP64", "default": -1.0}, {"name": "missing_column", "datatype": "INT32", "default": 3}],
    )  # fmt: skip
    arrays = {"m": np.array([7, 8, 7, 9, 7], np.int64), "d": np.array([2, 1, 2, 1, 1], np.int32)}
    out, calls = run(steps.call(node, "acme", arrays, timeout_s=5))
    assert calls == 1 and out["volume"].tolist() == [72.0, 80.0, 72.0, -1.0, 70.5]
    assert out["missing_column"].tolist() == [3] * 5 and out["missing_column"].dtype == np.int32  # a column not there: its default
    assert steps.refusal(node, "globex") is None
    with pytest.raises(Unavailable, match="features file"):  # globex has no file of its own: nothing of acme's is read
        run(steps.call(node, "globex", arrays, timeout_s=5))
    other = Lookup(store="sqlite", table="later", keys={"merchant": "m"}, features=[{"name": "volume", "datatype": "FP64"}])
    with pytest.raises(BackendError, match="no table 'later'"):
        run(steps.call(other, "acme", arrays, timeout_s=5))
    with sqlite3.connect(tmp_path / "acme.db") as db:  # made while the service runs: read from then on
        db.execute("CREATE TABLE later (merchant INTEGER PRIMARY KEY, volume REAL)")
        db.executemany("INSERT INTO later VALUES (?, ?)", [(7, 1.0), (8, 2.0), (9, 3.0)])
    db.close()
    assert run(steps.call(other, "acme", arrays, timeout_s=5))[0]["volume"].tolist() == [1.0, 2.0, 1.0, 3.0, 1.0]


@pytest.mark.parametrize("declared", ["REAL", "DOUBLE", "FLOAT", "NUMERIC", "INTEGER", "", "TEXT"])
@pytest.mark.parametrize("asked", ["INT64", "BYTES"])
def test_a_key_column_of_any_declared_type_finds_the_keys_sqlite_matches(tmp_path: Any, declared: str, asked: str) -> None:
    """A key column declared REAL (pandas' `to_sql` writes an integer id column with a null as
    one) holds 7.0: the key 7 or "7" finds it, and its features are the row's, not the default
    (the row was found by SQLite and then dropped, its key read back as '7.0'). Two keys
    SQLite takes as one number ("7" and "7.0") each get the row; the SQL path, not the held table."""
    import sqlite3

    with sqlite3.connect(tmp_path / "acme.db") as db:
        db.execute(f"CREATE TABLE t (id {declared}, part {declared}, v REAL)")
        db.executemany("INSERT INTO t VALUES (?, ?, ?)", [(7, 1, 70.0), (8, 2, 80.0), (7.5, 1, 75.0)])
    db.close()
    steps = LookupSteps(LookupSettings(lookup_sqlite=str(tmp_path / "{tenant}.db"), lookup_sqlite_hold_rows=0), mode="local")
    node = Lookup(store="sqlite", table="t", keys={"id": "k"}, features=[{"name": "v", "datatype": "FP32", "default": -1.0}])
    both = Lookup(store="sqlite", table="t", keys={"id": "k", "part": "p"}, features=[{"name": "v", "datatype": "FP32", "default": -1.0}])
    if asked == "INT64":
        keys, want = np.array([7, 8, 9], np.int64), [70.0, 80.0, -1.0]
    else:
        keys = np.array(["7", "8", "9", "7.5", "7.0"], object)
        want = {  # as SQLite compares: text with numbers as numbers, but not in a column of no type
            "TEXT": [70.0, 80.0, -1.0, 75.0, -1.0], "": [-1.0] * 5,  # TEXT holds "7", "8", "7.5"
        }.get(declared, [70.0, 80.0, -1.0, 75.0, 70.0])  # fmt: skip
    assert run(steps.call(node, "acme", {"k": keys}, timeout_s=5))[0]["v"].tolist() == want
    parts = np.ones(len(keys), np.int64)
    parts[1] = 2
    assert run(steps.call(both, "acme", {"k": keys, "p": parts}, timeout_s=5))[0]["v"].tolist() == want


@pytest.mark.parametrize("hold_rows", [0, 100])
def test_sqlite_column_names_match_as_sqlite_matches_them_in_either_case(tmp_path: Any, hold_rows: int) -> None:
    """A feature or key named in another case than its column is that column (SQLite's names
    are ASCII-case-insensitive): read, not taken as missing and given its default."""
    import sqlite3

    with sqlite3.connect(tmp_path / "acme.db") as db:
        db.execute("CREATE TABLE t (customer_id TEXT PRIMARY KEY, avg_amount REAL)")
        db.executemany("INSERT INTO t VALUES (?, ?)", [("c1", 10.5), ("c2", 20.5)])
    db.close()
    steps = LookupSteps(LookupSettings(lookup_sqlite=str(tmp_path / "{tenant}.db"), lookup_sqlite_hold_rows=hold_rows), mode="local")
    node = Lookup(store="sqlite", table="T", keys={"Customer_ID": "k"}, features=[{"name": "AVG_Amount", "datatype": "FP32", "default": -1.0}])
    for _ in range(3):  # asked for as many keys as the table has rows: held where it may be
        assert run(steps.call(node, "acme", {"k": np.array(["c1", "c2", "c3"], object)}, timeout_s=5))[0]["AVG_Amount"].tolist() == [10.5, 20.5, -1.0]


def test_feast_views_are_listed_per_tenant_and_off_without_a_repository() -> None:
    """Feast itself is read in tests/integration/test_feast_lookups.py; these need no SDK."""
    listed = LookupSettings(lookup_sources={"acme": ["feast:customers"]}, lookup_feast_repo="repos/{tenant}")
    steps = LookupSteps(listed, mode="local")
    assert steps.refusal(_node("feast", "customers"), "acme") is None
    assert "tenant 'globex'" in (steps.refusal(_node("feast", "customers"), "globex") or "")
    assert "may read" in (steps.refusal(_node("feast", "orders"), "acme") or "")
    off = LookupSteps(LookupSettings(lookup_sources={"acme": ["feast:customers"]}), mode="local")
    assert "SLUICE_LOOKUP_FEAST_REPO" in (off.refusal(_node("feast", "customers"), "acme") or "")
    assert steps.store(_node("feast", "customers"), "acme").repo_path == "repos/acme"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="feast:FEATURE_VIEW"):
        LookupSettings(lookup_sources={"acme": ["feast:"]})
    with pytest.raises(ValueError, match="not a feast table name"):
        _node("feast", "customers:avg_amount")  # a view, not a feature reference


def test_a_feast_repository_that_is_not_there_or_an_sdk_that_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from sluice.runtimes.feast_store import FeastStore
    from tests.conftest import REPO

    with pytest.raises(Unavailable, match=r"no feature_store\.yaml"):
        FeastStore(str(REPO / "examples")).get_many("customers", ["customer_id"], [("c1",)], ["avg_amount"], "")
    monkeypatch.setitem(sys.modules, "feast", None)  # as where it is not installed: importing it fails
    with pytest.raises(BackendError, match=r"pip install 'sluice\[feast\]'"):
        FeastStore(str(REPO / "examples" / "features" / "feast")).get_many("customer_features", ["customer_id"], [("c-1",)], ["avg_amount_30d"], "")


def test_a_sqlite_features_file_is_read_as_it_is_now(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A column added after the table was first read is found by the lookup that names it; a
    file replaced by another (moved into place) is read from the path's next look, held table
    and all, and a file removed answers 503."""
    import os
    import sqlite3

    from sluice.runtimes import feature_stores

    def make(path: Any, avg: float) -> None:
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE customers (customer_id TEXT PRIMARY KEY, avg_amount REAL)")
            db.executemany("INSERT INTO customers VALUES (?, ?)", [(f"c{i}", avg + i) for i in range(5)])
        db.close()

    make(tmp_path / "acme.db", 100.0)
    steps = LookupSteps(LookupSettings(lookup_sqlite=str(tmp_path / "{tenant}.db"), lookup_sqlite_hold_rows=10), mode="local")
    avg = Lookup(store="sqlite", table="customers", keys={"customer_id": "customer"}, features=[{"name": "avg_amount", "datatype": "FP64"}])
    risk = Lookup(store="sqlite", table="customers", keys={"customer_id": "customer"}, features=[{"name": "risk", "datatype": "FP64", "default": -1.0}])
    arrays = {"customer": np.array(["c1", "c3"], dtype=object)}

    def looked(node: Lookup, name: str) -> list[float]:
        return run(steps.call(node, "acme", arrays, timeout_s=5))[0][name].tolist()  # type: ignore[no-any-return]

    assert looked(avg, "avg_amount") == [101.0, 103.0] and looked(risk, "risk") == [-1.0, -1.0]  # no such column yet: the default
    with sqlite3.connect(tmp_path / "acme.db") as db:
        db.execute("ALTER TABLE customers ADD COLUMN risk REAL")
        db.execute("UPDATE customers SET risk = 7.5")
    db.close()
    assert looked(risk, "risk") == [7.5, 7.5]
    every = {"customer": np.array([f"c{i}" for i in range(5)], dtype=object)}
    for _ in range(210):  # the table asked for its first 1,024 keys, more than its rows: held in memory
        run(steps.call(avg, "acme", every, timeout_s=5))
    out, calls = run(steps.call(avg, "acme", arrays, timeout_s=5))
    assert calls == 0 and out["avg_amount"].tolist() == [101.0, 103.0]
    make(tmp_path / "new.db", 900.0)
    os.replace(tmp_path / "new.db", tmp_path / "acme.db")
    monkeypatch.setattr(feature_stores, "FILE_CHECK_S", 0.0)  # the path looked at on every call
    assert looked(avg, "avg_amount") == [901.0, 903.0]
    os.remove(tmp_path / "acme.db")
    with pytest.raises(Unavailable, match="features file"):
        looked(avg, "avg_amount")
