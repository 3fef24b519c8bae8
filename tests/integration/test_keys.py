"""API keys: a revoke holds in every process at once; a key never grants more than it has;
the last admin key of a tenant stays."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient

from sluice.api.app import create_app
from sluice.domain.errors import Conflict, Forbidden, Unauthenticated
from sluice.wiring import Container
from tests.integration.conftest import auth
from tests.support import ReadThen, Together, at_once

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.settings import Settings


def test_a_revoke_reaches_every_process_sharing_the_registry_at_once(settings: Settings, acme: Principal) -> None:
    # Two containers built from the same settings are two workers of `sluice serve`.
    first, second = Container.from_settings(settings), Container.from_settings(settings)
    record, key = first.keys.create("acme", ["predict"])
    _, spare_admin = first.keys.create("acme", ["admin", "predict"])
    assert first.keys.authenticate(key).tenant == "acme"
    assert second.keys.authenticate(key).tenant == "acme"  # now cached in the second worker
    first.keys.revoke(acme, record.key_id)
    with pytest.raises(Unauthenticated):
        second.keys.authenticate(key)
    with pytest.raises(Unauthenticated):
        first.keys.authenticate(key)
    assert second.keys.authenticate(spare_admin).tenant == "acme"  # other keys still work


def test_a_revoked_admin_key_can_do_nothing_through_another_worker(settings: Settings) -> None:
    first, second = Container.from_settings(settings), Container.from_settings(settings)
    admin, admin_key = first.keys.create("acme", ["admin", "predict"])
    _, other_admin = first.keys.create("acme", ["admin", "predict"])
    one, two = TestClient(create_app(first)), TestClient(create_app(second))
    assert two.get("/api/v1/keys", headers=auth(admin_key)).status_code == 200
    assert one.delete(f"/api/v1/keys/{admin.key_id}", headers=auth(other_admin)).status_code == 200
    made = two.post("/api/v1/keys", json={"scopes": ["admin"]}, headers=auth(admin_key))
    assert made.status_code == 401
    assert len([k for k in first.keys.list(first.keys.authenticate(other_admin)) if k.active]) == 1


def test_a_key_cannot_grant_scopes_it_lacks(container: Container) -> None:
    _, admin = container.keys.create("acme", ["admin"])
    _, predict_only = container.keys.create("acme", ["predict"])
    client = TestClient(create_app(container))
    refused = client.post("/api/v1/keys", json={"scopes": ["admin"]}, headers=auth(predict_only))
    assert refused.status_code == 403
    ok = client.post("/api/v1/keys", json={"scopes": ["predict"]}, headers=auth(admin))
    assert ok.status_code == 201 and ok.json()["scopes"] == ["predict"]
    with pytest.raises(Forbidden):
        container.keys.create("acme", ["admin"], issuer=container.keys.authenticate(predict_only))


def test_the_last_admin_key_of_a_tenant_cannot_be_revoked(container: Container) -> None:
    only, key = container.keys.create("acme", ["admin", "predict"])
    client = TestClient(create_app(container))
    r = client.delete(f"/api/v1/keys/{only.key_id}", headers=auth(key))
    assert r.status_code == 409 and r.json()["field"] == "key_id"
    with pytest.raises(Conflict):
        container.keys.revoke(container.keys.authenticate(key), only.key_id)
    second, _ = container.keys.create("acme", ["admin"])
    assert client.delete(f"/api/v1/keys/{only.key_id}", headers=auth(key)).status_code == 200
    assert client.get("/api/v1/keys", headers=auth(key)).status_code == 401
    assert second.active


def test_two_admin_keys_revoking_each_other_at_once_leave_the_tenant_one(settings: Settings) -> None:
    """Two workers of `sluice serve`, each asked by one of the tenant's two admin keys to
    revoke the other, and each past whatever it reads before its write (`Together`): one
    revoke goes through, the other is a 409 naming `key_id`, and the winner's key still works."""
    made = Container.from_settings(settings)
    one, one_key = made.keys.create("acme", ["admin"])
    two, two_key = made.keys.create("acme", ["admin"])
    meeting = Together(made.registry, "revoke_api_key", parties=2)
    first, second = (TestClient(create_app(Container(settings, meeting, made.store, made.runtimes))) for _ in range(2))  # type: ignore[arg-type]
    answers = at_once(
        lambda: first.delete(f"/api/v1/keys/{two.key_id}", headers=auth(one_key)),
        lambda: second.delete(f"/api/v1/keys/{one.key_id}", headers=auth(two_key)),
    )
    assert sorted(r.status_code for r in answers) == [200, 409], [r.text for r in answers]
    refused = next(r for r in answers if r.status_code == 409)
    assert refused.json()["field"] == "key_id"
    kept, kept_key = (one, one_key) if answers[0].status_code == 200 else (two, two_key)
    assert [k.key_id for k in made.registry.list_api_keys("acme") if k.active] == [kept.key_id]
    assert first.get("/api/v1/keys", headers=auth(kept_key)).status_code == 200


def test_the_registry_file_is_readable_by_its_owner_only(container: Container) -> None:
    import stat

    container.keys.create("acme", ["admin"])  # a write: the -wal and -shm files exist now too
    files = list(container.settings.home_path.rglob("*.db*"))
    assert len(files) >= 2
    for found in files:
        assert stat.S_IMODE(found.stat().st_mode) == 0o600, found



@pytest.mark.parametrize("check", ["authenticate", "active"])
def test_a_key_revoked_while_a_request_reads_it_is_not_trusted_after(settings: Settings, acme: Principal, check: str) -> None:
    """A request reads its key (active); before the read comes back, another process revokes
    the key and another request of this process looks at the revocation signal. The key must
    not be trusted from then on: what was read before a revocation is never cached past it."""
    first, second = Container.from_settings(settings), Container.from_settings(settings)
    record, key = first.keys.create("acme", ["predict"])
    _, other = first.keys.create("acme", ["admin", "predict"])
    keys = first.keys

    def meanwhile() -> None:
        second.keys.revoke(acme, record.key_id)  # another worker
        assert keys.authenticate(other).tenant == "acme"  # a request here, after the revoke

    keys.registry = ReadThen(keys.registry, "get_api_key", (record.key_id,), meanwhile)  # type: ignore[assignment]
    if check == "authenticate":
        assert keys.authenticate(key).subject == record.key_id  # read before the revoke: answered
        with pytest.raises(Unauthenticated):
            keys.authenticate(key)
    else:
        assert keys.active(record.key_id) is True
        assert keys.active(record.key_id) is False
