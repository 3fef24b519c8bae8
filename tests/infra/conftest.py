"""Fixtures of the infra tier: the CDK app synthesized once per session (see synth.py)."""

from __future__ import annotations

import pytest
from aws_cdk import Environment
from infra.config import SluiceConfig, load_config

from tests.infra.synth import FULL_CONFIG, Synthesized, synthesize

# What `cdk synth` passes when no account is configured: a default region, no account.
CLI_ENVIRONMENT = Environment(region="us-east-1")


@pytest.fixture(scope="session")
def default_app(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(tmp_path_factory.mktemp("default"), load_config(), env=CLI_ENVIRONMENT)


@pytest.fixture(scope="session")
def full_app(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(tmp_path_factory.mktemp("full"), SluiceConfig.model_validate(FULL_CONFIG))
