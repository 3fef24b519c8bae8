"""What one registry record holds is bounded where it is written, alike in SQLite and in
DynamoDB (an item holds at most 400 KB): a policy (its history entry holds it twice, old ->
new) and a description. A policy with a large vocabulary was stored on this machine and
refused on AWS with a 502; now both take the same policies and refuse the same ones, naming
the field."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from sluice.domain import Principal
from sluice.domain.errors import BadRequest
from sluice.domain.objects import MAX_DESCRIPTION, MAX_LABEL, MAX_POLICY_BYTES
from sluice.domain.requests import ArrayInputs, PredictionRequest
from sluice.inference.loop import run
from tests.models import score_model

if TYPE_CHECKING:
    from sluice.settings import Settings
    from sluice.wiring import Container

ACME = Principal("acme", frozenset({"admin", "predict"}), "test-acme")


@pytest.fixture(params=["sqlite", "dynamodb"])
def service(request: pytest.FixtureRequest, settings: Settings) -> Container:
    from sluice.wiring import Container

    container = request.getfixturevalue("on_dynamodb") if request.param == "dynamodb" else Container.from_settings(settings)
    container.models.push(ACME, "scorer", score_model("features", 1))
    return container


def _policy(words: int, first: int = 0) -> dict[str, Any]:
    """A colour's code from a vocabulary of `words` words, scored: the size grows with the words
    (long ones: DynamoDB spends its time per element, and the bound is on bytes)."""
    encode = {
        "kind": "transform",
        "inputs": [{"name": "colour", "datatype": "BYTES", "shape": [-1]}],
        "ops": [
            {"op": "ordinal", "input": "colour", "vocabulary": [f"w{i:07d}" + "-" * 120 for i in range(first, first + words)], "output": "features"},
            {"op": "keep", "names": ["features"]},
        ],
    }
    return {"kind": "sequence", "steps": [{"name": "encode", "target": encode}, {"name": "score", "target": {"kind": "single", "model": "scorer", "version": 1}}]}


def _size(policy: dict[str, Any]) -> int:
    """The policy as it is stored: parsed, with its defaults."""
    from sluice.domain.policy import parse_policy, policy_dict

    return len(json.dumps(policy_dict(parse_policy(policy)), separators=(",", ":")).encode())


def _most_words() -> int:
    """The most words whose policy, as stored, is within the bound."""
    low, high = 1, MAX_POLICY_BYTES // 100  # a word takes more than 100 bytes
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if _size(_policy(middle)) <= MAX_POLICY_BYTES else (low, middle - 1)
    return low


def test_the_largest_policy_is_stored_and_changed_and_one_word_more_is_refused_in_both_registries(service: Container) -> None:
    most = _most_words()
    service.deployments.create(ACME, "colours", _policy(most))
    changed = service.deployments.update(ACME, "colours", _policy(most, first=1))  # the history entry holds both
    assert changed.revision == 2 and len(service.deployments.history(ACME, "colours")) == 2
    for write in (lambda: service.deployments.create(ACME, "more", _policy(most + 1)), lambda: service.deployments.update(ACME, "colours", _policy(most + 1))):
        with pytest.raises(BadRequest, match=f"at most {MAX_POLICY_BYTES:,}") as caught:
            write()
        assert caught.value.field == "policy"
    assert service.deployments.get(ACME, "colours").revision == 2
    request = PredictionRequest("colours", ArrayInputs({"colour": np.array(["w0000001" + "-" * 120, "w0000002" + "-" * 120], dtype=object)}))
    answer = run(service.predictions.predict(ACME, request)).answer.result.outputs["score"]
    assert answer.ravel().tolist() == [0.0, 1.0]  # the stored vocabulary, read back whole: w0000001 is its first word now


def test_a_description_and_a_keys_name_are_bounded_alike(service: Container) -> None:
    service.models.create(ACME, "described", "d" * MAX_DESCRIPTION)
    service.deployments.create(ACME, "described", {"kind": "single", "model": "scorer", "version": 1}, description="é" * MAX_DESCRIPTION)
    for write in (
        lambda: service.models.create(ACME, "longer", "d" * (MAX_DESCRIPTION + 1)),
        lambda: service.models.push(ACME, "longer", score_model("features", 1), description="d" * (MAX_DESCRIPTION + 1)),
        lambda: service.deployments.create(ACME, "longer", {"kind": "single", "model": "scorer", "version": 1}, description="d" * (MAX_DESCRIPTION + 1)),
        lambda: service.keys.create("acme", ["predict"], name="k" * (MAX_LABEL + 1)),
    ):
        with pytest.raises(BadRequest) as caught:
            write()
        assert caught.value.field in ("description", "name")
    service.keys.create("acme", ["predict"], name="k" * MAX_LABEL)
    assert [m.name for m in service.registry.list_models("acme")] == ["described", "scorer"]


def test_a_signature_no_record_can_hold_is_refused_before_anything_is_written(service: Container) -> None:
    """1,500 inputs and outputs of long names: a 413 naming the artifact, alike in both
    registries, and no model left without versions."""
    from onnx import TensorProto, helper

    from sluice.domain.errors import PayloadTooLarge

    names = [f"{'x' * 300}_{i}" for i in range(1500)]
    nodes = [helper.make_node("Identity", [n], [n + "_out"]) for n in names]
    graph = helper.make_graph(
        nodes, "wide", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, 1]) for n in names],
        [helper.make_tensor_value_info(n + "_out", TensorProto.FLOAT, [None, 1]) for n in names],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with pytest.raises(PayloadTooLarge, match="signature") as refused:
        service.models.push(ACME, "wide", model.SerializeToString())
    assert refused.value.field == "artifact"
    assert [m.name for m in service.registry.list_models("acme")] == ["scorer"]


SCORER = {"kind": "single", "model": "scorer", "version": 1}


@pytest.mark.parametrize(
    ("policy", "options", "field"),
    [
        ({"kind": "split", "variants": [{"name": "a", "weight": 1e-200, "target": SCORER}, {"name": "b", "weight": 1, "target": SCORER}]}, {}, "policy.variants.0.weight"),
        ({"kind": "switch", "cases": [{"name": "a", "when": {"field": "parameters.p", "op": "==", "value": 10**400}, "target": SCORER}], "default": SCORER}, {}, "policy.cases.0.when.value"),
        (SCORER, {"capture": {"sample_percent": 1e-200}}, "capture.sample_percent"),
        (SCORER, {"cache": {"ttl_s": 1e-200, "max_entries": 10}}, "cache.ttl_s"),
    ],
)
def test_a_number_beyond_what_a_registry_stores_is_refused_not_a_500(service: Container, policy: dict[str, Any], options: dict[str, Any], field: str) -> None:
    """DynamoDB holds numbers of 1e-130 to 9.9e125 in magnitude and 38 digits: beyond them a
    400 naming the field, never boto3's own error (SQLite holds them)."""
    from sluice.registry.dynamodb import DynamoRegistry

    if not isinstance(service.registry, DynamoRegistry):
        assert service.deployments.create(ACME, "tiny", policy, **options).revision == 1
        return
    with pytest.raises(BadRequest, match=r"the registry stores") as refused:
        service.deployments.create(ACME, "tiny", policy, **options)
    assert refused.value.field == field
