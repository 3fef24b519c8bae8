"""Precomputed answers served from what a container holds between reads (the table's
publication for `precomputed_publication_ttl_s`, the live model's version for
`deployment_cache_ttl_s`, both at their defaults here): every request answers as one that read
them afresh."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient

from sluice.api.app import create_app
from sluice.settings import Settings
from tests.integration.batch.jobs import run_job
from tests.integration.test_precomputed import RECS, ask, scored, users_csv

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.wiring import Container


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(mode="local", home=tmp_path / "home", registry="", store="")


def test_answers_from_the_held_publication_are_the_fresh_reads_answers(demo: Container, acme: Principal, tmp_path: Path) -> None:
    demo.deployments.create(acme, "recs", RECS)
    _, key = demo.keys.create("acme", ["predict"])
    client = TestClient(create_app(demo))
    job = run_job(demo, acme, users_csv(tmp_path / "night.csv", ["u1", "u2"], 0.01), deployment="diabetes", key_columns=["user"], publish={"table": "recs", "key": "user"})
    first = ask(client, key, "u1")  # reads the publication and the live model's version
    again = [ask(client, key, user) for user in ("u1", "u2", "u1")]  # from what the container holds
    assert [a["source"] for a in (first, *again)] == ["precomputed"] * 4
    assert [a["prediction"] for a in (first, *again)] == pytest.approx([scored(job)[u] for u in ("u1", "u1", "u2", "u1")], rel=1e-5)
    assert first["computed_at"] == again[0]["computed_at"] == again[2]["computed_at"]
    assert {(a["model"], a["version"]) for a in (first, *again)} == {("diabetes", 1)}
    assert ask(client, key, "new-user")["source"] == "live"
    sources = demo.deployments.stats(acme, "recs")["sources"]
    assert (sources["precomputed"]["rows"], sources["live"]["rows"]) == (4, 1)
