"""The prediction cache's shared tier on DynamoDB (moto): two containers over one registry
table, the second answering from what the first computed; items carry the table's time-to-live
attribute under the tenant's partition prefix, and a read ignores one past it."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import boto3
import numpy as np

from sluice.registry.dynamodb import DynamoRegistry, create_table
from sluice.registry.dynamodb.answers import MAX_BODY_BYTES
from sluice.settings import Settings
from sluice.storage.folder import FolderStore
from sluice.wiring import Container, build_runtimes
from tests.conftest import MODELS
from tests.support import OneCallAtATime

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal

TABLE = "sluice-registry"
ROW = [[5.9, 3.0, 5.1, 1.8]]


def container(tmp_path: Path, *, shared: bool = True) -> Container:
    settings = Settings(
        mode="local", home=tmp_path / "home", registry=f"dynamodb://{TABLE}", store="",
        deployment_cache_ttl_s=0, prediction_cache_shared=shared,
    )  # fmt: skip
    store = FolderStore(tmp_path / "artifacts")
    registry = DynamoRegistry(TABLE, client=boto3.client("dynamodb"))
    return Container(settings, registry, store, build_runtimes(settings, store))


def predict(c: Container, principal: Principal, rows: Any = ROW) -> Any:
    from sluice.domain.requests import ArrayInputs, PredictionRequest

    request = PredictionRequest(deployment="ic", inputs=ArrayInputs({"input": np.array(rows, dtype=np.float32)}))
    return asyncio.run(c.predictions.predict(principal, request))


def test_two_containers_share_answers_through_dynamodb(aws: None, tmp_path: Path, acme: Principal, globex: Principal) -> None:
    client = boto3.client("dynamodb")
    create_table(client, TABLE)
    first, second = container(tmp_path), container(tmp_path)
    first.models.push(acme, "iris", (MODELS / "iris.onnx").read_bytes())
    first.deployments.create(acme, "ic", {"kind": "single", "model": "iris", "version": 1}, cache={"ttl_s": 120, "max_entries": 10})
    first.models.push(globex, "iris", (MODELS / "iris_forest.onnx").read_bytes())
    first.deployments.create(globex, "ic", {"kind": "single", "model": "iris", "version": 1}, cache={"ttl_s": 120, "max_entries": 10})

    computed = predict(first, acme)
    kept = predict(second, acme)
    assert not computed.cached and kept.cached
    for name, array in computed.result.outputs.items():
        np.testing.assert_array_equal(kept.result.outputs[name], array)
    assert kept.result.classes == computed.result.classes and kept.answer.version.ref == "iris:1"
    assert not predict(second, globex).cached  # same name and inputs, another tenant
    assert not predict(container(tmp_path, shared=False), acme).cached  # the shared tier is opt-in

    items = [i for i in client.scan(TableName=TABLE)["Items"] if i["sk"]["S"] == "ANSWER"]
    assert {i["pk"]["S"].split("#A#")[0] for i in items} == {"T#acme#D#ic", "T#globex#D#ic"}
    import time

    for item in items:
        assert time.time() + 100 < int(item["expires_at"]["N"]) <= time.time() + 121


def test_an_item_past_its_expiry_is_not_read(aws: None) -> None:
    client = boto3.client("dynamodb")
    create_table(client, TABLE)
    registry = DynamoRegistry(TABLE, client=OneCallAtATime(client))
    registry.put_cached_answer("acme", "ic", "k1", b"answer", expires_at=1000.4)
    assert registry.get_cached_answer("acme", "ic", "k1", now=1000.0) == b"answer"
    assert registry.get_cached_answer("acme", "ic", "k1", now=1000.5) is None  # past its expiry, before the whole second DynamoDB's TTL is
    assert registry.get_cached_answer("acme", "ic", "k1", now=1001.0) is None  # DynamoDB may not have removed it yet
    assert registry.get_cached_answer("globex", "ic", "k1", now=1000.0) is None
    registry.put_cached_answer("acme", "ic", "big", b"x" * (MAX_BODY_BYTES + 1), expires_at=2000)
    assert registry.get_cached_answer("acme", "ic", "big", now=1000.0) is None  # over the item limit: not kept


def test_a_shared_answer_is_not_served_past_its_ttl(aws: None, tmp_path: Path, acme: Principal) -> None:
    """The table's time to live is whole seconds; an answer's `ttl_s` is not: another container
    computes an answer again once its time is up, not up to a second later."""
    create_table(boto3.client("dynamodb"), TABLE)
    first, second = container(tmp_path), container(tmp_path)
    first.models.push(acme, "iris", (MODELS / "iris.onnx").read_bytes())
    first.deployments.create(acme, "ic", {"kind": "single", "model": "iris", "version": 1}, cache={"ttl_s": 10, "max_entries": 10})
    computed_at = 2_000_000_000.5
    first.predictions.cache.wall = lambda: computed_at  # type: ignore[union-attr]
    assert not predict(first, acme).cached  # kept in the shared tier until computed_at + 10
    second.predictions.cache.wall = lambda: computed_at + 9.9  # type: ignore[union-attr]
    assert predict(second, acme).cached
    third = container(tmp_path)
    third.predictions.cache.wall = lambda: computed_at + 10.2  # type: ignore[union-attr]  # 0.2 s past its ttl
    assert not predict(third, acme).cached
