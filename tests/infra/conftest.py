"""Fixtures of the infra tier: the CDK app synthesized once per session (see synth.py)."""

from __future__ import annotations

import pytest
from infra.config import SluiceConfig, load_config

from tests.infra.synth import FULL_CONFIG, Synthesized, synthesize


@pytest.fixture(scope="session")
def default_app(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    from aws_cdk import Environment

    # What `cdk synth` passes when no account is configured: a default region, no account.
    cli_environment = Environment(region="us-east-1")
    return synthesize(tmp_path_factory.mktemp("default"), load_config(), env=cli_environment)


@pytest.fixture(scope="session")
def full_app(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(tmp_path_factory.mktemp("full"), SluiceConfig.model_validate(FULL_CONFIG))
