"""Routes name the services they use (`sluice.api.deps`): no route is handed the container, and
each service dependency answers with the container's own service, built once."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import threading
import typing
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
from fastapi.routing import APIRoute

from sluice.api import deps
from sluice.api.app import ROUTERS
from sluice.wiring import Container

if TYPE_CHECKING:
    from collections.abc import Callable

# Each dependency and the container's attribute it answers with.
SERVICES: dict[Callable[..., Any], str] = {
    deps.get_settings: "settings",
    deps.get_registry: "registry",
    deps.get_runtimes: "runtimes",
    deps.get_telemetry: "telemetry",
    deps.get_predictions: "predictions",
    deps.get_models: "models",
    deps.get_deployments: "deployments",
    deps.get_keys: "keys",
    deps.get_endpoints: "endpoints",
    deps.get_rollouts: "rollouts",
    deps.get_replay: "replay",
    deps.get_cost: "cost",
    deps.get_results: "results",
    deps.get_uploads: "uploads",
    deps.get_batch: "batch",
    deps.get_schedules: "schedules",
    deps.get_optimizer: "optimizer",
    deps.get_optimize_jobs: "optimize_jobs",
}


def _request(container: Container) -> Any:
    return SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(container=container)))


def test_no_route_takes_the_container() -> None:
    checked = 0
    for module in (importlib.import_module(f"sluice.api.routers.{name}") for name in ROUTERS):
        for route in module.router.routes:
            assert isinstance(route, APIRoute)
            for name, parameter in inspect.signature(route.endpoint).parameters.items():
                hint = parameter.annotation
                hint = eval(hint, vars(module)) if isinstance(hint, str) else hint  # the router's own annotation
                taken = typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint
                assert taken is not Container, f"{route.path}: {name}"
                checked += 1
    assert checked > 100


@pytest.mark.parametrize("dependency", list(SERVICES), ids=lambda d: d.__name__)
def test_each_service_dependency_answers_with_the_containers_own(demo: Container, dependency: Callable[..., Any]) -> None:
    request = _request(demo)
    first = asyncio.run(dependency(request))
    assert first is getattr(demo, SERVICES[dependency])
    assert asyncio.run(dependency(request)) is first


def test_a_service_built_on_first_use_is_built_off_the_event_loop(demo: Container) -> None:
    where: list[threading.Thread] = []
    built = type(demo).cost.func  # type: ignore[attr-defined]

    class Watched(Container):
        @property  # type: ignore[override]
        def cost(self) -> Any:
            where.append(threading.current_thread())
            return built(self)

    watched = Watched(demo.settings, demo.registry, demo.store, demo.runtimes)

    async def ask() -> tuple[Any, threading.Thread]:
        return await deps.get_cost(_request(watched)), threading.current_thread()

    service, loop_thread = asyncio.run(ask())
    assert service is not None and where and where[0] is not loop_thread
