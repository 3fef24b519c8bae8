"""The Triton image URI: sluice's table against the SDK's registry file, tags, and the SDK when present."""

from __future__ import annotations

import importlib.util
import json
import sys
from typing import TYPE_CHECKING

import pytest

from sluice.domain.errors import BadRequest
from sluice.endpoints.image_uris import ACCOUNTS, REGIONS, check_instance_type, triton_image_uri
from tests.conftest import REPO

if TYPE_CHECKING:
    from pathlib import Path

SDK_REGISTRY = REPO / "infra" / "constructs" / "sagemaker-tritonserver.json"


def test_the_table_is_the_sdk_registry() -> None:
    registry = json.loads(SDK_REGISTRY.read_text())
    assert set(REGIONS) == set(registry["versions"])
    for version, entry in registry["versions"].items():
        assert REGIONS[version] == set(entry["registries"]), version
        assert {r: ACCOUNTS[r] for r in REGIONS[version]} == entry["registries"], version
        assert entry["repository"] == "sagemaker-tritonserver" and entry["tag_prefix"] == f"{version}-py3"


@pytest.mark.parametrize(
    ("region", "version", "instance_type", "uri"),
    [
        ("eu-west-1", "25.09", "ml.g5.xlarge", "763104351884.dkr.ecr.eu-west-1.amazonaws.com/sagemaker-tritonserver:25.09-py3"),
        ("us-east-1", "24.09", "ml.p4d.24xlarge", "763104351884.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"),
        ("eu-west-1", "25.09", "ml.c5.xlarge", "763104351884.dkr.ecr.eu-west-1.amazonaws.com/sagemaker-tritonserver:25.09-py3-cpu"),
        ("af-south-1", "26.05", "ml.g6.2xlarge", "626614931356.dkr.ecr.af-south-1.amazonaws.com/sagemaker-tritonserver:26.05-py3"),
        ("cn-north-1", "25.04", "ml.g4dn.xlarge", "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/sagemaker-tritonserver:25.04-py3"),
    ],
)
def test_image_uri_from_the_table(region: str, version: str, instance_type: str, uri: str) -> None:
    assert triton_image_uri(region, instance_type=instance_type, version=version, use_sdk=False) == uri


@pytest.mark.parametrize(
    ("region", "version", "instance_type", "field"),
    [
        ("eu-west-1", "19.01", "ml.g5.xlarge", "triton_version"),
        ("cn-north-1", "25.09", "ml.g5.xlarge", "region"),  # the registry stopped listing China at 25.09
        ("ap-southeast-6", "24.09", "ml.g5.xlarge", "region"),
        ("eu-west-1", "25.09", "g5.xlarge", "instance_type"),
        ("eu-west-1", "25.09", "ml.inf2.xlarge", "instance_type"),
        ("eu-west-1", "25.09", "ml.trn1.2xlarge", "instance_type"),
    ],
)
def test_what_the_registry_does_not_offer_is_refused(region: str, version: str, instance_type: str, field: str) -> None:
    with pytest.raises(BadRequest) as caught:
        triton_image_uri(region, instance_type=instance_type, version=version, use_sdk=False)
    assert caught.value.field == field


def test_instance_types_pick_the_gpu_or_cpu_build() -> None:
    assert [check_instance_type(t) for t in ("ml.g5.xlarge", "ml.p3.2xlarge", "ml.m5.large", "ml.c7i.xlarge")] == ["gpu", "gpu", "cpu", "cpu"]


def _forget_sagemaker() -> None:
    for name in [m for m in sys.modules if m == "sagemaker" or m.startswith("sagemaker.")]:
        del sys.modules[name]


def test_the_sdk_answers_when_it_is_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    # A stand-in for SDK v3's `sagemaker.core.image_uris`, recording what it was asked; it
    # must not outlive this test in sys.modules.
    request.addfinalizer(_forget_sagemaker)
    core = tmp_path / "sagemaker" / "core"
    core.mkdir(parents=True)
    (tmp_path / "sagemaker" / "__init__.py").write_text("")
    (core / "__init__.py").write_text("")
    (core / "image_uris.py").write_text(
        "ASKED = []\n"
        "def retrieve(framework, region, version=None, instance_type=None, **kw):\n"
        "    ASKED.append((framework, region, version, instance_type))\n"
        "    if region == 'xx-nowhere-1':\n"
        "        raise ValueError('Unsupported region')\n"
        "    return 'sdk-image:' + version\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "sagemaker" or m.startswith("sagemaker.")]:
        monkeypatch.delitem(sys.modules, name)
    assert importlib.util.find_spec("sagemaker") is not None
    assert triton_image_uri("eu-west-1", instance_type="ml.g5.xlarge", version="25.09") == "sdk-image:25.09"
    from sagemaker.core import image_uris  # type: ignore[import-not-found]

    assert image_uris.ASKED == [("sagemaker-tritonserver", "eu-west-1", "25.09", "ml.g5.xlarge")]
    with pytest.raises(BadRequest) as caught:  # the SDK's refusal, in sluice's words
        triton_image_uri("xx-nowhere-1", instance_type="ml.g5.xlarge", version="25.09")
    assert caught.value.field == "region"


@pytest.mark.skipif(importlib.util.find_spec("sagemaker") is None, reason="the SageMaker SDK is not installed")
def test_the_real_sdk_agrees_with_the_table() -> None:
    for version, regions in REGIONS.items():
        for region in sorted(regions):
            for instance_type in ("ml.g5.xlarge", "ml.c5.xlarge"):
                assert triton_image_uri(region, instance_type=instance_type, version=version) == triton_image_uri(
                    region, instance_type=instance_type, version=version, use_sdk=False
                )
