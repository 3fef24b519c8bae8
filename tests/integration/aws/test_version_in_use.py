"""A model version (or a deployment) a deployment names is never deleted, even when the delete
and the deployment write interleave (`sluice.registry.guards`, `Catalog`), alike in SQLite and
in DynamoDB: each is decided on reads (a delete finds no deployment naming what it deletes; a
deployment write finds what it names), so of the two, the one whose reads the other's write
made stale is refused and decided again on what is stored now. Before, both went through and
the deployment named a version that was gone.

Each test makes the other write happen at the worst moment: after the first one's check, before
its write (a registry that runs it just then)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from sluice.domain import Principal
from sluice.domain.errors import Conflict, Unprocessable
from tests.models import score_model

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.settings import Settings
    from sluice.wiring import Container

ACME = Principal("acme", frozenset({"admin", "predict"}), "test-acme")


@pytest.fixture(params=["sqlite", "dynamodb"])
def service(request: pytest.FixtureRequest, settings: Settings) -> Container:
    from sluice.wiring import Container

    container = request.getfixturevalue("on_dynamodb") if request.param == "dynamodb" else Container.from_settings(settings)
    for _ in range(2):
        container.models.push(ACME, "scorer", score_model("features", 1))
    container.deployments.create(ACME, "first", _on(1))
    return container


def _on(version: int) -> dict[str, Any]:
    return {"kind": "single", "model": "scorer", "version": version}


class Meanwhile:
    """The registry, where the first call of `method` runs `other` (another writer) just before
    it, or just after it where `after`."""

    def __init__(self, registry: Any, method: str, other: Callable[[], Any], *, after: bool = False) -> None:
        self._registry, self._method, self._other, self._after = registry, method, other, after
        self.done: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._registry, name)
        if name != self._method or self.done:
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            if not self._after:
                self.done.append(self._other())
            out = real(*args, **kwargs)
            if self._after:
                self.done.append(self._other())
            return out

        return call


def _versions(service: Container) -> list[int]:
    return [v.version for v in service.registry.list_versions("acme", "scorer")]


def test_a_deployment_written_after_a_deletes_check_keeps_its_version(service: Container, monkeypatch: pytest.MonkeyPatch) -> None:
    """The delete found no deployment naming version 2; a deployment naming it is written before
    the delete's write: the delete is refused and, checked again, finds it (409)."""
    other = Meanwhile(service.registry, "list_deployments", lambda: service.deployments.create(ACME, "second", _on(2)), after=True)
    monkeypatch.setattr(service.models, "registry", other)
    with pytest.raises(Conflict) as refused:
        service.models.delete_version(ACME, "scorer", 2)
    assert other.done and refused.value.field == "model" and "'second'" in refused.value.message
    assert _versions(service) == [1, 2]
    assert service.deployments.get(ACME, "second").policy["version"] == 2


def test_a_model_deleted_after_a_deployment_was_written_meanwhile_is_kept(service: Container, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for the whole model: its deletes are refused once a deployment names it."""
    service.deployments.delete(ACME, "first")
    other = Meanwhile(service.registry, "list_deployments", lambda: service.deployments.create(ACME, "second", _on(2)), after=True)
    monkeypatch.setattr(service.models, "registry", other)
    with pytest.raises(Conflict) as refused:
        service.models.delete_model(ACME, "scorer")
    assert other.done and "'second'" in refused.value.message
    assert 2 in _versions(service)


def test_a_deployment_whose_version_is_deleted_before_its_write_is_refused(service: Container, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deployment write found version 2; it is deleted before the write (nothing named it
    yet): the write is refused and, checked again, finds it gone (422 naming `policy`)."""
    other = Meanwhile(service.registry, "create_deployment", lambda: service.models.delete_version(ACME, "scorer", 2))
    monkeypatch.setattr(service.deployments, "registry", other)
    with pytest.raises(Unprocessable) as refused:
        service.deployments.create(ACME, "second", _on(2))
    assert other.done and refused.value.field == "policy"
    assert _versions(service) == [1]
    assert [d.name for d in service.registry.list_deployments("acme")] == ["first"]


def test_writes_of_one_kind_do_not_refuse_each_other(service: Container, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two deployment writes, or two deletes, interleaved: both go through at once."""
    service.models.push(ACME, "scorer", score_model("features", 1))  # version 3
    other = Meanwhile(service.registry, "create_deployment", lambda: service.registry.update_deployment(
        service.registry.get_deployment("acme", "first"), expected_revision=service.registry.get_deployment("acme", "first").revision,
        catalog=service.registry.catalog_read("acme"),
    ))  # fmt: skip
    monkeypatch.setattr(service.deployments, "registry", other)
    service.deployments.create(ACME, "second", _on(2))
    assert other.done
    deletes = Meanwhile(service.registry, "delete_version", lambda: service.registry.delete_version("acme", "scorer", 3, catalog=service.registry.catalog_read("acme")))
    monkeypatch.setattr(service.models, "registry", deletes)
    service.deployments.delete(ACME, "second")
    service.models.delete_version(ACME, "scorer", 2)
    assert deletes.done and _versions(service) == [1]


def test_a_deployment_referred_to_after_its_deletes_check_is_kept(service: Container, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same counters keep a deployment another refers to: the delete of `first` found
    nothing referring to it; `front` (a ref to it) is written just before the delete's write:
    the delete is refused and, checked again, names `front` (409). Before, `first` went and
    every request to `front` was a 404."""
    other = Meanwhile(service.registry, "delete_deployment", lambda: service.deployments.create(ACME, "front", {"kind": "ref", "deployment": "first"}))
    monkeypatch.setattr(service.deployments, "registry", other)
    with pytest.raises(Conflict) as refused:
        service.deployments.delete(ACME, "first")
    assert other.done and refused.value.field == "deployment" and "referenced by ['front']" in refused.value.message
    assert sorted(d.name for d in service.registry.list_deployments("acme")) == ["first", "front"]


def test_a_model_of_many_versions_is_deleted_in_transactions_of_the_most_items(on_dynamodb: Container, monkeypatch: pytest.MonkeyPatch) -> None:
    """On DynamoDB a model's versions go 99 to a transaction, each with the counters' update
    (a transaction's 100 items), then the model item: none is left, and each step was guarded.
    Here 4 to a transaction, for 10 versions: moto takes its time over each write."""
    from sluice.registry.dynamodb import layout, models

    assert models.VERSIONS_PER_DELETE + 1 == 100  # DynamoDB's most items in one transaction
    monkeypatch.setattr(models, "VERSIONS_PER_DELETE", 4)
    first = on_dynamodb.models.push(ACME, "many", score_model("features", 1))
    for _ in range(9):  # the same artifact under new numbers: the registry's writes alone
        on_dynamodb.registry.add_version(first)
    client = on_dynamodb.registry.table.client  # type: ignore[attr-defined]
    sizes: list[int] = []
    send = client.transact_write_items

    def counted(**params: Any) -> Any:
        sizes.append(len(params["TransactItems"]))
        return send(**params)

    monkeypatch.setattr(client, "transact_write_items", counted)
    on_dynamodb.models.delete_model(ACME, "many")
    assert sizes == [5, 5, 3, 3]  # the counters' update with 4, 4 and 2 versions; then the model item and where its count stood
    assert "many" not in {m.name for m in on_dynamodb.registry.list_models("acme")}
    assert not list(on_dynamodb.registry.table.query(layout.versions_pk("acme", "many"), layout.VERSION))  # type: ignore[attr-defined]
