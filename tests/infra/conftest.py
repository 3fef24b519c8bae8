"""Fixtures of the infra tier: the CDK app synthesized once per session (see synth.py), and the
CDK's runtime for the tests that build constructs of their own."""

from __future__ import annotations

import pytest
from infra.config import SluiceConfig, load_config

from tests.infra.synth import FULL_CONFIG, Synthesized, synthesize


@pytest.fixture(scope="session")
def cdk_runtime() -> None:
    """The CDK's runtime: importing aws_cdk starts a node process (jsii) that loads the CDK
    library, ~13 CPU-s, once in each process that does. The tests that build constructs of
    their own (not the session's apps) ask for it, and tests/conftest.py keeps them on one
    worker together (SHARED_SESSION): it starts in at most two workers, the apps' and theirs,
    not in every worker that happens to run one of them."""
    import aws_cdk  # noqa: F401


@pytest.fixture(scope="session")
def default_app(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    from aws_cdk import Environment

    # What `cdk synth` passes when no account is configured: a default region, no account.
    cli_environment = Environment(region="us-east-1")
    return synthesize(tmp_path_factory.mktemp("default"), load_config(), env=cli_environment)


@pytest.fixture(scope="session")
def full_app(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(tmp_path_factory.mktemp("full"), SluiceConfig.model_validate(FULL_CONFIG))
