"""What an answer says of each of its rows (its switch case, the version that answered it,
whether it came from a precomputed table, and when), where rows went different ways: each row
says what a request of that row alone says (docs/graphs.md), and a batch job counts every row
under the version that answered it. Found by a black-box review: a precomputed node over a
switch said fewer cases than rows (and a job's manifest left the table's rows out), a switch
over a precomputed node dropped where its rows came from, and a switch inside a switch lost
its case where the outer rows took different ones."""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

import hypothesis
import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from sluice.codecs.plain import who_answered
from sluice.codecs.stored_rows import encode_rows
from sluice.domain.requests import ArrayInputs, PredictionRequest
from sluice.registry.precomputed import Publication
from sluice.settings import Settings
from tests.integration.batch.jobs import run_job
from tests.models import echo_int_model, ratio_model
from tests.support import single

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.wiring import Container

STORED = {"t": {1: 7, 3: 21, 5: 35, 30: 99}, "t2": {2: 11, 20: 12, 50: 13}}  # each table's entities (x) and their answers


def _table(x: str, live: dict[str, Any] | None = None, table: str = "t") -> dict[str, Any]:
    return {"kind": "precomputed", "table": table, "key": f"inputs.{x}", "max_age_s": 3600, "live": live or single("ratio", 1)}


INNER = {"kind": "switch", "cases": [{"name": "wide", "when": {"field": "inputs.x", "op": ">", "value": 25}, "target": single("echo", 1)}], "default": single("ratio", 1)}
SWITCH = {
    "kind": "switch",
    "cases": [
        {"name": "small", "when": {"field": "inputs.x", "op": "<", "value": 4}, "target": _table("x")},
        {"name": "mid", "when": {"field": "inputs.x", "op": "<", "value": 40}, "target": INNER},
    ],
    "default": single("echo", 1),
}
# A switch on a header no request sends: the whole request takes its default (the one-case path).
HEADER = {"kind": "switch", "cases": [{"name": "never", "when": {"field": "headers.x-a", "op": "==", "value": "zz"}, "target": single("echo", 1)}]}
INNER_TABLE = {"kind": "switch", "cases": [{"name": "t2", "when": {"field": "inputs.x", "op": "<", "value": 25}, "target": _table("x", table="t2")}], "default": INNER}
POLICIES = {
    "table over a switch": {"kind": "precomputed", "table": "t", "key": "inputs.x", "max_age_s": 3600, "live": SWITCH},
    "switch over a table": SWITCH,
    "table over a switch over a table": _table("x", INNER_TABLE),
    "header switch over a table over a switch": {**HEADER, "default": _table("x", INNER)},
}
XS = st.lists(st.sampled_from([1, 2, 3, 5, 7, 20, 30, 50, 60]), min_size=1, max_size=9)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(mode="local", home=tmp_path / "home", registry="", store="", deployment_cache_ttl_s=0, precomputed_publication_ttl_s=0)


@pytest.fixture
def rowed(demo: Container, acme: Principal) -> Container:
    demo.models.push(acme, "echo", echo_int_model())
    demo.models.push(acme, "ratio", ratio_model())
    store, now = demo.precomputed, time.time()
    assert store is not None
    for table, stored in STORED.items():  # each table's answers computed at another time
        rows = [(str(x), encode_rows({"y": np.full((1, 1), y, np.int64)}, 1)[0]) for x, y in stored.items()]
        store.put_answers("acme", table, "g1", rows, computed_at=now - 60 * len(table), expires_at=now + 3600)
        outputs = [{"name": "y", "datatype": "INT64", "shape": [-1, 1]}]
        store.publish("acme", table, Publication("g1", "job-g1", "ratio", outputs, published_at=now), expires_at=now + 3600)
    for name, policy in POLICIES.items():
        demo.deployments.create(acme, name.replace(" ", "-"), policy)
    return demo


def _said(c: Container, acme: Principal, deployment: str, xs: list[int]) -> tuple[list[int], list[dict[str, Any]]]:
    """The answer's values and what it says of each row (`who_answered`, row by row)."""
    prediction = asyncio.run(c.predictions.predict(acme, PredictionRequest(deployment, ArrayInputs({"x": np.asarray(xs, np.int64).reshape(-1, 1)}))))
    who, n = who_answered(prediction), len(xs)
    for part in ("case", "models", "source", "computed_at"):
        value = who.get(part)
        assert not isinstance(value, list) or len(value) == n, (part, value, n)  # one entry a row, or one for all

    def row(i: int) -> dict[str, Any]:
        each = {part: who[part][i] if isinstance(who.get(part), list) else who.get(part) for part in ("case", "source", "computed_at")}
        models = who.get("models")
        each["model"] = models[i] if isinstance(models, list) else f"{who['model']}:{who['version']}"
        return each

    return prediction.answer.result.outputs["y"].reshape(-1).tolist(), [row(i) for i in range(n)]


@hypothesis.settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(xs=XS, name=st.sampled_from(sorted(POLICIES)))
def test_each_row_says_what_a_request_of_that_row_alone_says(rowed: Container, acme: Principal, xs: list[int], name: str) -> None:
    deployment = name.replace(" ", "-")
    values, rows = _said(rowed, acme, deployment, xs)
    for x, value, said in zip(xs, values, rows, strict=True):
        alone_values, (alone,) = _said(rowed, acme, deployment, [x])
        assert value == alone_values[0], (x, xs)
        # The one thing a row says beside others and not alone: `live`, where other rows came
        # from a table and it passed no precomputed node (alone it has no source to say).
        if alone["source"] is None and said["source"] == "live":
            alone["source"] = "live"
        assert said == alone, (x, xs, said, alone)
        assert said["case"] is None or "None" not in said["case"], said  # never the text of a missing inner case


def test_a_batch_job_counts_every_row_under_the_version_that_answered_it(rowed: Container, acme: Principal, tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    xs = [1, 2, 20, 3, 30, 5, 50]
    path.write_text("id,x\n" + "".join(f"r{i},{x}\n" for i, x in enumerate(xs)))
    for deployment in ("table-over-a-switch", "switch-over-a-table"):
        job = run_job(rowed, acme, path, deployment=deployment, key_columns=["id"], output_uri=str(tmp_path / deployment))
        assert job.status == "SUCCEEDED" and job.rows_out == len(xs), job.error
        versions = json.loads((tmp_path / deployment / "_manifest.json").read_text())["versions"]
        assert sum(versions.values()) == len(xs), versions


@pytest.mark.parametrize("xs", [[0], [0, 20], [20, 0, 50]])
def test_a_case_that_fails_is_named_as_a_sequences_step_is(rowed: Container, acme: Principal, xs: list[int]) -> None:
    """A case whose model fails (ratio of 0: the whole call fails) names the case in its
    message and details, whether the request took that case alone or its rows went apart."""
    from sluice.domain.errors import SluiceError

    with pytest.raises(SluiceError) as failed:
        _said(rowed, acme, "switch-over-a-table", xs)
    assert failed.value.status == 502 and failed.value.message.startswith("case 'small': ")
    assert failed.value.details["case"] == "small"
