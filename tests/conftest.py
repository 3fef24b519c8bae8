"""Fixtures shared by every tier: settings on a temporary home, a container of real
adapters (SQLite, a folder, ONNX Runtime), the demo models, and principals of two tenants."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

# gRPC's C core logs to the process's stderr from its own threads (an epoll error when a test
# closes descriptors behind it, in a worker that imported grpc for an earlier test), which lands
# in the stderr of whatever CLI command a later test runs in that worker and reads whole. Set
# before any test imports grpc; a test that wants gRPC's logs sets it itself.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from sluice.domain import Principal
from sluice.settings import Settings
from sluice.wiring import Container
from tests.support import run_folder, share_botocore_data

# Hypothesis's health check on slow generation times the machine, not the code (a draw that
# took a second because the two cores were busy failed a run): every property test is spared
# it, as the tests that list their own health checks spare it themselves; and so is its
# deadline of 200 ms an example (an example of a policy parsed in more, under a full run's
# load, failed one). Timed assertions belong in benchmarks/.
hypothesis_settings.register_profile("sluice", suppress_health_check=[HealthCheck.too_slow], deadline=None)
hypothesis_settings.load_profile("sluice")

# botocore's service descriptions parsed once per worker, not once per session (see
# share_botocore_data): collection imports botocore in every worker already (moto's fixtures).
share_botocore_data()

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "models"
EVENTS = REPO / "events"
# The tracking servers the suite's follow bindings name, admitted by `settings` (never called).
MLFLOW_SERVERS = ("https://mlflow.example.com", "http://mlflow.example.com")

# Under pytest-xdist (`make test` runs `-n N --dist loadgroup`) a module's tests stay on one
# worker, in order, with its module fixtures built once (a module may be a story told test by
# test, such as the console's); and the tests that use one expensive session fixture (a
# synthesized CDK app, a running Triton server, the e2e tier's shared `sluice serve --demo`;
# directly or through another fixture) stay on one worker together, so the fixture is built
# once, not once per worker. The first fixture named
# that a test uses decides; a test that uses none goes with its module. The two synthesized apps
# share one group: many tests read both (the checkov scan, the acknowledgements, tests
# parametrized by the app's name), and an app built in two workers is built twice (~25-45 CPU-s
# each). The tests that build CDK constructs of their own (`cdk_runtime`: the CDK's node process,
# ~13 CPU-s in each worker that starts it) share another, so the heavy ones among them (layer
# builds, bytecode, uv resolutions, mostly waiting on builds and the index) run beside the apps'
# on another worker, and the CDK starts in two workers, not in all of them.
SHARED_SESSION = {
    "full_app": "infra", "default_app": "infra", "cdk_runtime": "cdk", "triton_server": "triton", "demo_serve": "demo-serve",
}  # fmt: skip


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Iterator[None]:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)  # a fixture named by a parameter (getfixturevalue)
        used |= {value for value in (callspec.params.values() if callspec else ()) if isinstance(value, str)}
        group = next((name for fixture, name in SHARED_SESSION.items() if fixture in used), None)
        item.add_marker(pytest.mark.xdist_group(group or Path(str(item.fspath)).relative_to(REPO).as_posix()))
    yield  # xdist's hook, on a worker, names each test's group in its id
    if getattr(config.option, "loadgroup", False) and items and "@" not in items[0].nodeid:
        raise pytest.UsageError("pytest-xdist ignored the xdist_group marks (pytest-dev/pytest-xdist#1386): use a pytest it supports")


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collecting built (every test module, the libraries they import, the tests' items)
    lives until the worker ends: frozen out of the collector's reach, so that its full passes
    during the run walk only what the tests make (~10% less of a worker's garbage-collection
    time, as Lambda entry modules freeze their start-up: sluice.startup)."""
    import gc

    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """What the run's workers shared (`tests.support.built_once`) removed by the first to end:
    pytest-xdist starts no test before every worker has collected."""
    folder = run_folder()
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


# What `sluice.cli.main` sets in the environment of the process it runs in (its defaults for a
# command's logs), put back after each test: a command run in a test's process must not change
# what later tests, or the processes they start, read.
_CLI_DEFAULTS = ("SLUICE_LOG_LEVEL", "SLUICE_LOG_STREAM")


@pytest.fixture(autouse=True)
def _cli_defaults_put_back() -> Iterator[None]:
    saved = [(name, os.environ.get(name)) for name in _CLI_DEFAULTS]
    yield
    for name, value in saved:
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """A fresh home; the MLflow server the suite's bindings name (never called) is admitted."""
    return Settings(
        mode="local", home=tmp_path / "home", registry="", store="", deployment_cache_ttl_s=0,
        mlflow_tracking_servers=list(MLFLOW_SERVERS),
    )  # fmt: skip


@pytest.fixture
def container(settings: Settings) -> Container:
    return Container.from_settings(settings)


@pytest.fixture
def acme() -> Principal:
    return Principal("acme", frozenset({"admin", "predict"}), "test-acme")


@pytest.fixture
def globex() -> Principal:
    return Principal("globex", frozenset({"admin", "predict"}), "test-globex")


@pytest.fixture
def iris_bytes() -> bytes:
    return (MODELS / "iris.onnx").read_bytes()


@pytest.fixture
def demo(container: Container, acme: Principal) -> Container:
    """acme has the demo deployments `iris` and `diabetes`."""
    from sluice.demo import install_demo

    install_demo(container, acme, MODELS)
    return container
