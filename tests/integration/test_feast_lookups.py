"""Lookup steps reading Feast (`store: feast`) end to end, on real Feast repositories made here:
each tenant's own folder with a feature_store.yaml naming Feast's SQLite online store and a
Parquet offline source, registered through Feast's SDK (what `feast apply` does) and loaded
with `write_to_online_store`; the fraud example's repository as examples/features/feast/load.py
makes it. One module fixture: Feast costs seconds to import and to apply."""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime, timedelta
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from sluice.inference.loop import run
from sluice.runtimes.feast_store import import_feast
from tests.conftest import REPO
from tests.integration.test_lookup_steps import (
    ACME,
    EXAMPLE_ROWS,
    GLOBEX,
    World,
    answers_by_hand,
    by_hand,
    check_staleness_and_event_times,
    fraud,
    fraud_example_decisions,
    make_world,
    refusals_without_defaults,
    run_fraud_job,
    score_in_one_bulk_call,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

# Found, not imported: every pytest worker collects this module, and Feast takes seconds to import.
pytestmark = pytest.mark.skipif(find_spec("feast") is None, reason="Feast's SDK comes with sluice[feast], which the dev install has")

MANY = 2500  # customers m0..m2499, for calls of 1,000 keys


def feast_fraud(**extra: Any) -> dict[str, Any]:
    return fraud("feast", "customers", **extra)


def make_repo(repo: Path, customers: dict[str, tuple[Any, ...]], *, many: int = 0) -> None:
    """A Feast repository at `repo`: a `customers` view (avg_amount, chargebacks; the rows'
    event times as given) and a `card_merchant` view keyed by two entities (an integer card,
    a merchant), loaded into its SQLite online store."""
    import pandas as pd
    from feast import Entity, FeatureStore, FeatureView, Field, FileSource, ValueType
    from feast.types import Float32, Float64, Int64

    (repo / "data").mkdir(parents=True, exist_ok=True)
    if not (repo / "feature_store.yaml").exists():
        (repo / "feature_store.yaml").write_text(
            "project: fraud\nregistry: data/registry.db\nprovider: local\n"
            "online_store:\n  type: sqlite\n  path: data/online_store.db\noffline_store:\n  type: file\n"
            "entity_key_serialization_version: 3\n"
        )
    ids = [*customers, *(f"m{i}" for i in range(many))]
    rows = pd.DataFrame(
        {
            "customer_id": ids,
            "avg_amount": [*(v[0] for v in customers.values()), *map(float, range(many))],
            "chargebacks": pd.array([*(v[1] for v in customers.values()), *[1] * many], dtype="Int64"),
            "event_timestamp": [datetime.fromtimestamp(v[2], UTC) for v in customers.values()] + [datetime.now(UTC)] * many,
        }
    )
    now, old = datetime.now(UTC), datetime.now(UTC) - timedelta(days=3)  # card 10's record: past the view's ttl of a day
    cards = pd.DataFrame({"card_id": [7, 7, 8, 10], "merchant_id": ["shop", "cafe", "shop", "shop"], "spend": [12.5, 3.0, 99.0, 5.0], "event_timestamp": [now, now, now, old]})
    rows.to_parquet(repo / "data" / "customers.parquet")
    cards.to_parquet(repo / "data" / "cards.parquet")
    customer = Entity(name="customer", join_keys=["customer_id"], value_type=ValueType.STRING)
    card = Entity(name="card", join_keys=["card_id"], value_type=ValueType.INT64)
    merchant = Entity(name="merchant", join_keys=["merchant_id"], value_type=ValueType.STRING)
    views = [
        FeatureView(
            name="customers", entities=[customer], ttl=timedelta(days=3650),
            schema=[Field(name="avg_amount", dtype=Float32), Field(name="chargebacks", dtype=Int64)],
            source=FileSource(path=str(repo / "data" / "customers.parquet"), timestamp_field="event_timestamp"),
        ),
        FeatureView(
            name="card_merchant", entities=[card, merchant], ttl=timedelta(days=1),
            schema=[Field(name="spend", dtype=Float64)],
            source=FileSource(path=str(repo / "data" / "cards.parquet"), timestamp_field="event_timestamp"),
        ),
    ]  # fmt: skip
    store = FeatureStore(repo_path=str(repo))
    store.apply([customer, card, merchant, *views])
    store.write_to_online_store("customers", rows)
    store.write_to_online_store("card_merchant", cards)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    import runpy

    from sluice.runtimes.lookups import LookupSteps
    from sluice.settings import Settings

    import_feast()  # before the example imports it: the worker's environment stays as it was
    home = tmp_path_factory.mktemp("feast")
    acme = home / "repos" / "acme"
    shutil.copytree(REPO / "examples" / "features" / "feast", acme, ignore=shutil.ignore_patterns("data"))
    runpy.run_path(str(acme / "load.py"))["load"](acme)  # the example's repository, as its README says
    make_repo(acme, ACME, many=MANY)
    make_repo(home / "repos" / "globex", GLOBEX)
    views = ["feast:customers", "feast:customer_features", "feast:card_merchant", "feast:not_in_the_repo"]
    settings = Settings(
        mode="local", home=home / "home", registry="", store="", deployment_cache_ttl_s=0,
        lookup_feast_repo=str(home / "repos" / "{tenant}"), lookup_sources={"acme": views, "globex": ["feast:customers"]},
    )  # fmt: skip
    yield make_world(settings, LookupSteps(settings.lookups, mode="local"))


def _store_of(world: World, tenant: str = "acme") -> Any:
    from sluice.domain.policy import parse_policy

    return world.lookups.store(parse_policy(feast_fraud()).steps[0].target, tenant)  # type: ignore[union-attr]


def test_features_read_through_feast_feed_the_model_in_one_call(world: World) -> None:
    body = answers_by_hand(world, "fraud", feast_fraud())
    assert body["steps"][0]["store_calls"] == 1  # three customers (one unknown), one get_online_features


def test_missing_entities_null_and_undefined_features_take_defaults_or_name_the_key(world: World) -> None:
    unknown, null = refusals_without_defaults(world, feast_fraud(default=False))
    assert unknown["field"] == "inputs.customer" and "customer_id='nobody' in feast 'customers': the entity is not in the store" in unknown["error"]
    assert unknown["details"]["key"] == {"customer_id": "nobody"}
    assert "feature 'chargebacks'" in null["error"] and "the feature is missing" in null["error"]
    undefined = feast_fraud()  # a feature the view does not define: missing, so its default
    undefined["steps"][0]["target"]["features"].append({"name": "refunds", "datatype": "INT64", "default": 5})
    undefined["steps"][1]["target"]["ops"][0]["inputs"] = ["amount", "avg_amount", "refunds"]
    assert world.save("undefined", undefined).status_code in (200, 201)
    r = world.predict("undefined", [("c1", 1.0)])
    assert r.status_code == 200 and r.json()["predictions"][0]["prediction"] == pytest.approx(1.0 + 10.0 + 5)


def test_feasts_event_times_decide_staleness_and_come_back_on_request(world: World) -> None:
    check_staleness_and_event_times(world, feast_fraud, within_s=1)  # Feast's SQLite online store keeps whole seconds


def test_each_tenant_reads_its_own_repository_and_only_the_views_listed_for_it(world: World) -> None:
    assert world.save("fraud", feast_fraud(), world.globex).status_code in (200, 201)
    r = world.predict("fraud", [("c1", 1.0)], world.globex)  # the same view name in globex's own repository
    assert r.status_code == 200 and r.json()["predictions"][0]["prediction"] == pytest.approx(by_hand([("c1", 1.0)], GLOBEX)[0])
    r = world.save("stolen", fraud("feast", "card_merchant"), world.globex)  # in globex's repository too, but not on its list
    assert r.status_code == 422 and r.json()["field"] == "policy.steps.0.target.table" and "globex" in r.json()["error"]


def test_a_view_not_in_the_repository_is_a_502_naming_it(world: World) -> None:
    assert world.save("nowhere", fraud("feast", "not_in_the_repo")).status_code in (200, 201)
    r = world.predict("nowhere", [("c1", 1.0)])
    assert r.status_code == 502 and "no feature view 'not_in_the_repo'" in r.json()["error"], r.text


def test_two_entities_one_an_integer_key(world: World) -> None:
    from sluice.domain.lookups import Lookup

    node = Lookup.model_validate({
        "store": "feast", "table": "card_merchant", "keys": {"card_id": "card", "merchant_id": "merchant"},
        "features": [{"name": "spend", "datatype": "FP64", "default": -1.0}],
    })  # fmt: skip
    arrays = {"card": np.array([7, 8, 7, 9]), "merchant": np.array(["cafe", "shop", "shop", "shop"], dtype=object)}
    out, calls = run(world.lookups.call(node, "acme", arrays, timeout_s=30))
    assert out["spend"].tolist() == [3.0, 99.0, 12.5, -1.0] and calls == 1


def test_a_value_older_than_its_views_ttl_is_missing_and_a_key_not_joined_on_is_named(world: World) -> None:
    """Feast's online read serves a value past its view's `ttl` as present: sluice applies the
    `ttl` (card 10's spend, three days old in a view of a day, takes its default, or fails
    naming the entity), as the docs say. A key the view does not join on names the view's keys."""
    from sluice.domain.errors import BackendError, Unprocessable
    from sluice.domain.lookups import Lookup

    def node(default: bool, **keys: str) -> Lookup:
        return Lookup.model_validate({
            "store": "feast", "table": "card_merchant", "keys": keys or {"card_id": "card", "merchant_id": "merchant"},
            "features": [{"name": "spend", "datatype": "FP64", **({"default": -1.0} if default else {})}],
        })  # fmt: skip

    arrays = {"card": np.array([10, 8]), "merchant": np.array(["shop", "shop"], dtype=object)}
    assert run(world.lookups.call(node(True), "acme", arrays, timeout_s=30))[0]["spend"].tolist() == [-1.0, 99.0]
    with pytest.raises(Unprocessable, match="card_id='10', merchant_id='shop' in feast 'card_merchant': the feature is missing"):
        run(world.lookups.call(node(False), "acme", arrays, timeout_s=30))
    with pytest.raises(BackendError, match="no join key 'card' \\(its join keys: card_id, merchant_id\\)"):
        run(world.lookups.call(node(True, card="card", merchant_id="merchant"), "acme", arrays, timeout_s=30))


def test_distinct_keys_go_in_calls_of_a_thousand_never_one_a_row(world: World) -> None:
    assert world.save("fraud", feast_fraud()).status_code in (200, 201)
    rows = 3000  # 2,500 distinct customers in one inference call: three store calls (1,000, 1,000, 500 keys)
    customers = np.array([f"m{i % MANY}" for i in range(rows)], dtype=object)
    calls, last = score_in_one_bulk_call(world, "fraud", _store_of(world), customers)
    assert calls == 3 and last == pytest.approx([1.0 + 499 + 1])  # m499: amount 1, avg 499, chargebacks 1


def test_a_batch_job_reads_feast_once_per_inference_call(world: World, tmp_path: Path) -> None:
    rows = 20_000  # 5 inference calls of 4,096 rows
    customers, amounts, scores = run_fraud_job(world, tmp_path, feast_fraud(), rows, _store_of)
    assert scores[:6].tolist() == pytest.approx(by_hand(list(zip(customers[:6], amounts[:6].tolist(), strict=True)), ACME))


def test_the_fraud_example_reads_its_feast_repository(world: World) -> None:
    """examples/features/fraud.json as it is, on the repository examples/features/feast/load.py made."""
    policy = json.loads((REPO / "examples" / "features" / "fraud.json").read_text())
    assert policy["steps"][0]["target"]["store"] == "feast"
    assert world.save("fraud-example", policy).status_code in (200, 201)
    r = world.predict("fraud-example", EXAMPLE_ROWS)
    assert r.status_code == 200, r.text
    assert [a["prediction"] for a in r.json()["predictions"]] == fraud_example_decisions()


def test_a_cached_feast_lookup_reads_each_tenants_repository_once(world: World) -> None:
    """The feature cache holds Feast's values as any store's, per tenant: the same view name in
    globex's repository is never answered from acme's entries."""
    for headers, table in ((world.acme, ACME), (world.globex, GLOBEX), (world.acme, ACME), (world.globex, GLOBEX)):
        assert world.save("fraud-cached", feast_fraud(cache_ttl_s=300), headers).status_code in (200, 201)
        r = world.predict("fraud-cached", [("c1", 1.0)], headers)
        assert r.status_code == 200 and r.json()["predictions"][0]["prediction"] == pytest.approx(by_hand([("c1", 1.0)], table)[0])
    step = r.json()["steps"][0]
    assert (step["store_calls"], step["cache_hits"], step["cache_misses"]) == (0, 1, 0)  # globex's second request


def test_importing_feast_turns_on_no_prometheus_series(world: World) -> None:
    """Feast's import points Prometheus' multiprocess folders at a temporary folder of its own
    where they are unset; sluice puts the environment back, so a process that never asked for
    `/metrics` series (a CLI, a batch job, a test worker) does not start writing them."""
    assert world is not None
    assert not {"PROMETHEUS_MULTIPROC_DIR", "PROMETHEUS_MULTIPROCESS_DIR"} & set(os.environ)


@pytest.mark.skipif(find_spec("aiobotocore") is None, reason="Feast's DynamoDB online store imports aiobotocore, which sluice[feast] brings (feast[aws])")
def test_feasts_dynamodb_online_store_on_moto(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A repository whose feature_store.yaml names Feast's DynamoDB online store (as on AWS),
    materialized by Feast from its offline files into DynamoDB (moto, in process), read by a
    lookup through Feast's SDK: values, a null and an unknown entity taking their defaults, the
    event times, one store call; a table gone is a 502 naming the view's online store."""
    import boto3
    import pandas as pd
    from feast import Entity, FeatureStore, FeatureView, Field, FileSource, ValueType
    from feast.types import Float32, Int64
    from moto import mock_aws

    from sluice.domain.errors import BackendError
    from sluice.domain.lookups import Lookup
    from sluice.runtimes.lookups import LookupSteps
    from sluice.settings import LookupSettings
    from tests.support import fake_aws_credentials

    fake_aws_credentials(monkeypatch, "us-east-1")
    repo = tmp_path / "acme"
    (repo / "data").mkdir(parents=True)
    (repo / "feature_store.yaml").write_text(
        "project: fraud\nregistry: data/registry.db\nprovider: aws\n"
        "online_store:\n  type: dynamodb\n  region: us-east-1\noffline_store:\n  type: file\n"
        "entity_key_serialization_version: 3\n"
    )
    now = datetime.now(UTC).replace(microsecond=0)
    rows = pd.DataFrame({
        "customer_id": ["c1", "c2", "c3"], "avg_amount": [10.5, 20.0, 30.0],
        "chargebacks": pd.array([0, 2, None], dtype="Int64"), "event_timestamp": [now - timedelta(hours=h) for h in (1, 2, 3)],
    })  # fmt: skip
    rows.to_parquet(repo / "data" / "customers.parquet")
    customer = Entity(name="customer", join_keys=["customer_id"], value_type=ValueType.STRING)
    view = FeatureView(
        name="customers", entities=[customer], ttl=timedelta(days=30),
        schema=[Field(name="avg_amount", dtype=Float32), Field(name="chargebacks", dtype=Int64)],
        source=FileSource(path=str(repo / "data" / "customers.parquet"), timestamp_field="event_timestamp"),
    )  # fmt: skip
    node = Lookup(
        store="feast", table="customers", keys={"customer_id": "customer"}, event_time_output="at",
        features=[{"name": "avg_amount", "datatype": "FP32", "default": -1.0}, {"name": "chargebacks", "datatype": "INT64", "default": 9}],
    )  # fmt: skip
    with mock_aws():
        feast = FeatureStore(repo_path=str(repo))
        feast.apply([customer, view])
        feast.materialize(now - timedelta(days=1), now + timedelta(seconds=1))
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        assert dynamodb.scan(TableName="fraud.customers", Select="COUNT")["Count"] == 3  # the values live in DynamoDB
        steps = LookupSteps(LookupSettings(lookup_feast_repo=str(tmp_path / "{tenant}"), lookup_sources={"acme": ["feast:customers"]}), mode="local")
        keys = np.array(["c1", "nobody", "c3", "c2"], dtype=object)
        looked = run(steps.lookup(node, "acme", {"customer": keys}, timeout_s=30))
        assert looked.store_calls == 1
        assert looked.outputs["avg_amount"].tolist() == [10.5, -1.0, 30.0, 20.0] and looked.outputs["chargebacks"].tolist() == [0, 9, 9, 2]
        at = looked.outputs["at"]
        assert np.isnan(at[1]) and at[[0, 2, 3]].tolist() == [(now - timedelta(hours=h)).timestamp() for h in (1, 3, 2)]
        dynamodb.delete_table(TableName="fraud.customers")
        with pytest.raises(BackendError, match="online store of Feast feature view 'customers' does not exist"):
            run(steps.lookup(node, "acme", {"customer": keys}, timeout_s=30))
