"""Two writers of one deployment at once: an update that gives no `revision` (the last writer
wins) is decided again on what is stored when another write got in after its read, where it was
refused with a 409 naming a revision its caller never sent; one that gives a `revision` is still
refused when it is stale."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from sluice.domain.errors import Conflict

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.wiring import Container


def _racing(container: Container, acme: Principal, times: int) -> list[int]:
    """The registry's next `times` deployment writes each find another written first (a PUT
    of the same deployment made between this update's read and its write)."""
    registry = container.registry
    write = registry.update_deployment
    got_in: list[int] = []

    def update_deployment(updated: Any, **kw: Any) -> Any:
        if len(got_in) < times:
            current = registry.get_deployment(updated.tenant, updated.name)
            got_in.append(write(current, expected_revision=current.revision).revision)  # the other writer's
        return write(updated, **kw)

    registry.update_deployment = update_deployment  # type: ignore[method-assign]
    return got_in


@pytest.mark.parametrize("others", [1, 2])
def test_an_update_without_a_revision_is_written_after_another_that_got_in(demo: Container, acme: Principal, others: int) -> None:
    got_in = _racing(demo, acme, others)
    stored = demo.deployments.update(acme, "iris", {"kind": "single", "model": "iris", "version": 1}, cache={"ttl_s": 30, "max_entries": 100})
    assert len(got_in) == others and stored.revision == got_in[-1] + 1
    assert demo.registry.get_deployment("acme", "iris").cache is not None  # this update's, written last


def test_an_update_with_a_stale_revision_is_still_refused_naming_it(demo: Container, acme: Principal) -> None:
    before = demo.registry.get_deployment("acme", "iris").revision
    _racing(demo, acme, 1)
    with pytest.raises(Conflict) as refused:
        demo.deployments.update(acme, "iris", {"kind": "single", "model": "iris", "version": 1}, expected_revision=before)
    assert refused.value.field == "revision"


def test_rollout_commands_are_decided_again_after_another_write_got_in(demo: Container, acme: Principal) -> None:
    """start, pause, resume and abort read the deployment and write at the revision they read:
    another write in between was a 409 naming `revision`, which their callers never send. Now each
    is decided again on what is stored: it is made, or refused for what it is."""
    from sluice.services.rollouts import RolloutService
    from tests.conftest import MODELS

    demo.models.push(acme, "iris", (MODELS / "iris.onnx").read_bytes())
    rollouts = RolloutService(demo.registry, demo.deployments)
    spec = {"to": "iris:2", "steps": [10, 50, 100], "every": "10m", "gates": "error_rate<=0.005", "min_requests": 10}
    _racing(demo, acme, 1)
    assert rollouts.start(acme, "iris", **spec).rollout.state == "running"  # type: ignore[union-attr]
    for command, state in ((rollouts.pause, "paused"), (rollouts.resume, "running"), (rollouts.abort, "aborted")):
        _racing(demo, acme, 1)
        assert command(acme, "iris").rollout.state == state  # type: ignore[union-attr]
    rollouts.start(acme, "iris", **spec)
    with pytest.raises(Conflict) as again:  # a second start finds the first's rollout: refused for that
        rollouts.start(acme, "iris", **spec)
    assert again.value.field == "deployment"
