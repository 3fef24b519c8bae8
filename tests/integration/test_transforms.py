"""Transform steps end to end: `examples/policies/transform.json` (raw fields scaled and
encoded, a model, its score turned into a label) on the demo container and a small ONNX model,
through simple JSON and the Open Inference Protocol, against NumPy and ONNX Runtime by hand;
and the refusals a policy gets when saved, each naming the field at fault."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort
import pytest
from fastapi.testclient import TestClient

from sluice.api.app import create_app
from tests.conftest import MODELS, REPO
from tests.integration.conftest import api_keys, auth
from tests.models import score_model

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.wiring import Container

EXAMPLE = json.loads((REPO / "examples" / "policies" / "transform.json").read_text())
LENGTHS = [5.1, 6.0, 7.0, 4.4]
COLOURS = ["red", "blue", "purple", "green"]


@pytest.fixture
def http(demo: Container, acme: Principal) -> tuple[TestClient, dict[str, str]]:
    demo.models.push(acme, "score", score_model())
    demo.deployments.create(acme, "labelled", EXAMPLE)
    return TestClient(create_app(demo)), auth(api_keys(demo)["acme"])


def by_hand(lengths: list[float], colours: list[str]) -> tuple[np.ndarray, list[str]]:
    """The example's work in NumPy and one ONNX Runtime call."""
    length = np.nan_to_num(np.asarray(lengths, np.float32), nan=5.8)
    length = (length - np.float32(5.8)) / np.float32(0.8)
    vocabulary = ["red", "green", "blue"]
    code = np.asarray([vocabulary.index(c) if c in vocabulary else -1 for c in colours], np.float32)
    session = ort.InferenceSession(score_model(), providers=["CPUExecutionProvider"])
    (score,) = session.run(None, {"embedding": np.stack([length, code], axis=1)})
    probability = 1 / (1 + np.exp(-1.5 * score[:, 0]))
    return probability, ["yes" if p >= 0.5 else "no" for p in probability]


def test_raw_fields_are_scaled_encoded_scored_and_labelled_in_simple_json(http: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = http
    rows = [{"length": x, "colour": c} for x, c in zip(LENGTHS, COLOURS, strict=True)]
    r = client.post("/api/v1/predictions", json={"deployment": "labelled", "batch": rows}, headers=headers)
    assert r.status_code == 200, r.text
    body = r.json()
    probability, labels = by_hand(LENGTHS, COLOURS)
    assert [p["prediction"] for p in body["predictions"]] == labels  # the label the last transform made
    assert [p["probabilities"]["0"] for p in body["predictions"]] == pytest.approx(probability.tolist(), rel=1e-5)
    assert [s["name"] for s in body["steps"]] == ["features", "score", "label"]
    assert body["steps"][0]["kind"] == "transform" and (body["steps"][1]["model"], body["steps"][1]["version"]) == ("score", 1)


def test_the_same_graph_through_the_open_inference_protocol(http: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = http
    meta = client.get("/v2/models/labelled", headers=headers).json()
    assert [(i["name"], i["datatype"]) for i in meta["inputs"]] == [("length", "FP32"), ("colour", "BYTES")]  # the transform's
    assert "label" in [o["name"] for o in meta["outputs"]]
    lengths = [5.1, 7.0, 4.4]
    body = {
        "inputs": [
            {"name": "length", "datatype": "FP32", "shape": [3], "data": lengths},
            {"name": "colour", "datatype": "BYTES", "shape": [3], "data": ["red", "purple", "green"]},
        ],
        "outputs": [{"name": "label"}],
    }
    r = client.post("/v2/models/labelled/infer", json=body, headers=headers)
    assert r.status_code == 200, r.text
    outputs = {o["name"]: o for o in r.json()["outputs"]}
    assert list(outputs) == ["label"]
    assert outputs["label"]["data"] == by_hand(lengths, ["red", "purple", "green"])[1]


def _with(policy: dict[str, Any], step: int, **target: Any) -> dict[str, Any]:
    steps = [dict(s) for s in policy["steps"]]
    steps[step] = {**steps[step], "target": {**steps[step]["target"], **target}}
    return {**policy, "steps": steps}


FEATURE_OPS = EXAMPLE["steps"][0]["target"]["ops"]


@pytest.mark.parametrize(
    ("policy", "field", "words"),
    [
        (_with(EXAMPLE, 0, ops=[*FEATURE_OPS[:3], {"op": "concat", "inputs": ["length"], "output": "embedding"}]), "policy.steps.1", "does not fit"),
        (_with(EXAMPLE, 0, ops=[{"op": "standardize", "input": "length", "mean": [1, 2], "std": 1}]), "policy.steps.0.target.ops.0.mean", "2 values"),
        (_with(EXAMPLE, 0, ops=[{"op": "log1p", "input": "colour"}]), "policy.steps.0.target.ops.0.input", "holds BYTES"),
        (_with(EXAMPLE, 0, ops=[{"op": "one_hot", "input": "colour", "vocabulary": [1, 2]}]), "policy.steps.0.target.ops.0.vocabulary", "vocabulary"),
        (_with(EXAMPLE, 2, ops=[{"op": "argmax", "input": "score", "labels": ["a", "b"]}]), "policy.steps.2.target.ops.0.labels", "2 labels"),
        (_with(EXAMPLE, 2, ops=[{"op": "platt", "input": "nothing", "a": 1, "b": 0}]), "policy.steps.2.target.ops.0.input", "no tensor 'nothing'"),
        (_with(EXAMPLE, 0, inputs=None), "policy.steps.0.target.inputs", "declares the inputs"),
        (_with(EXAMPLE, 0, ops=[{"op": "clip", "input": "length"}]), "policy.steps.0.target.ops.0", "min, max or both"),
        # JSON has no bound on digits: a whole number no float holds is refused here, not met per request (a 500)
        (_with(EXAMPLE, 0, ops=[{"op": "standardize", "input": "length", "mean": 10**400, "std": 1}]), "policy.steps.0.target.ops.0.mean", "64-bit float"),
        (_with(EXAMPLE, 0, ops=[{"op": "bucketize", "input": "length", "boundaries": [1, 10**309]}]), "policy.steps.0.target.ops.0.boundaries.1", "64-bit float"),
        (_with(EXAMPLE, 2, ops=[{"op": "platt", "input": "score", "a": 10**400, "b": 0}]), "policy.steps.2.target.ops.0.a", "64-bit float"),
        # a plain union's member labels (pydantic's `int`, `constrained-int`) are no field of the request
        (_with(EXAMPLE, 0, ops=[{"op": "standardize", "input": "length", "mean": "x", "std": 1}]), "policy.steps.0.target.ops.0.mean", "valid"),
        # top_k's two tensors under one name: the signature said scores, the step held columns (a wrong answer)
        (_with(EXAMPLE, 2, ops=[{"op": "top_k", "input": "score", "k": 1, "indices": "score"}]), "policy.steps.2.target.ops.0.indices", "its own name"),
        (_with(EXAMPLE, 2, ops=[{"op": "min_max", "input": "score", "min": 1, "max": [1, 2]}]), "policy.steps.2.target.ops.0", "max must be above min"),
        (_with(EXAMPLE, 2, ops=[{"op": "select", "input": "score", "columns": [-1]}]), "policy.steps.2.target.ops.0.columns.0", "0 or more"),
        (_with(EXAMPLE, 0, inputs=[{"name": "length", "datatype": "FP32", "shape": [-1]}] * 2), "policy.steps.0.target.inputs", "declared twice"),
    ],
)
def test_a_transform_that_does_not_fit_is_refused_when_saved(http: tuple[TestClient, dict[str, str]], policy: dict[str, Any], field: str, words: str) -> None:
    client, headers = http
    if policy["steps"][0]["target"].get("inputs", 1) is None:
        del policy["steps"][0]["target"]["inputs"]
    r = client.post("/api/v1/deployments", json={"name": "bad", "policy": policy}, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field, r.text
    assert words in r.json()["error"], r.text


def test_a_number_past_a_float_stored_before_its_bound_reads_as_infinity_and_holds_up_nothing(demo: Container, acme: Principal, http: tuple[TestClient, dict[str, str]]) -> None:
    """A policy stored when a transform's number had no bound (a cutoff of 400 digits) reads,
    answers (the number is the infinity a float reads it as: every score is below it, never a
    500) and holds up no other change of the tenant's; a number past the bound that the
    deployment does not hold already is refused naming it (`sluice.services.written_bounds`)."""
    from dataclasses import replace

    client, headers = http
    stored = demo.registry.get_deployment("acme", "labelled")
    before = json.loads(json.dumps(stored.policy))
    before["steps"][2]["target"]["ops"][1]["cutoff"] = 10**400
    demo.registry.update_deployment(replace(stored, policy=before), expected_revision=stored.revision)
    r = client.post("/api/v1/predictions", json={"deployment": "labelled", "batch": [{"length": 5.1, "colour": "red"}]}, headers=headers)
    assert r.status_code == 200 and r.json()["predictions"][0]["prediction"] == "no", r.text
    r = client.get("/api/v1/deployments/labelled", headers=headers)
    assert r.status_code == 200 and r.json()["policy"]["steps"][2]["target"]["ops"][1]["cutoff"] == 10**400, r.text
    assert client.get("/api/v1/deployments", headers=headers).status_code == 200
    assert client.put("/api/v1/deployments/iris", json={"policy": {"kind": "single", "model": "iris", "version": 1}}, headers=headers).status_code == 200
    assert client.delete("/api/v1/deployments/diabetes", headers=headers).status_code == 204
    assert client.put("/api/v1/deployments/labelled", json={"policy": before}, headers=headers).status_code == 200  # kept as it was
    larger = json.loads(json.dumps(before))
    larger["steps"][2]["target"]["ops"][1]["cutoff"] = -(10**401)
    r = client.put("/api/v1/deployments/labelled", json={"policy": larger}, headers=headers)
    assert r.status_code == 422 and r.json()["field"] == "policy.steps.2.target.ops.1.cutoff" and "64-bit float" in r.json()["error"], r.text


def test_nan_a_transform_makes_is_refused_by_the_model_step_and_rows_that_do_not_pair_up_by_the_transform(
    http: tuple[TestClient, dict[str, str]],
) -> None:
    """A model fed by a transform is spared the look for NaN and infinity only where no op
    could make them: log1p of a length at or below -1 still meets the model's check, which
    names its step. Tensors sent with different numbers of rows are the caller's error (a 400
    naming the transform), not a failure of the server."""
    client, headers = http
    logged = _with(EXAMPLE, 0, ops=[{"op": "log1p", "input": "length"}, *FEATURE_OPS[2:]])
    assert client.post("/api/v1/deployments", json={"name": "logged", "policy": logged}, headers=headers).status_code == 201
    rows = [{"length": 5.0, "colour": "red"}, {"length": -2.0, "colour": "blue"}]
    r = client.post("/api/v1/predictions", json={"deployment": "logged", "batch": rows}, headers=headers)
    assert r.status_code == 400, r.text
    assert r.json()["field"] == "inputs.embedding" and "step 'score'" in r.json()["error"] and "NaN or infinite" in r.json()["error"], r.text
    assert client.post("/api/v1/predictions", json={"deployment": "logged", "batch": rows[:1]}, headers=headers).status_code == 200
    # a parameter past FP32's range is infinite where the op computes: clipped to it, every row is
    clipped = _with(EXAMPLE, 0, ops=[{"op": "clip", "input": "length", "min": 1e39}, *FEATURE_OPS[2:]])
    assert client.post("/api/v1/deployments", json={"name": "clipped", "policy": clipped}, headers=headers).status_code == 201
    r = client.post("/api/v1/predictions", json={"deployment": "clipped", "batch": rows[:1]}, headers=headers)
    assert r.status_code == 400 and "step 'score'" in r.json()["error"] and "NaN or infinite" in r.json()["error"], r.text
    body = {"inputs": [
        {"name": "length", "datatype": "FP32", "shape": [3], "data": [5.1, 7.0, 4.4]},
        {"name": "colour", "datatype": "BYTES", "shape": [2], "data": ["red", "blue"]},
    ]}  # fmt: skip
    r = client.post("/v2/models/labelled/infer", json=body, headers=headers)
    assert r.status_code == 400, r.text
    assert "step 'features'" in r.json()["error"] and "rows" in r.json()["error"], r.text


def test_a_transform_alone_is_refused_naming_where_it_may_go(http: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = http
    alone = {**EXAMPLE["steps"][0]["target"]}
    r = client.post("/api/v1/deployments", json={"name": "alone", "policy": alone}, headers=headers)
    assert r.status_code == 422, r.text
    assert (r.json()["field"], "step of a sequence" in r.json()["error"]) == ("policy", True)



def test_a_new_revision_of_the_graph_answers_at_once(tmp_path: Path, acme: Principal) -> None:
    """What a graph takes and answers is worked out once per policy and kept (deployments
    kept a minute here, as a server does): a new revision (the leading transform takes `size`,
    not `length`, and the label is worded anew) is what the next request meets."""
    from sluice.demo import install_demo
    from sluice.settings import Settings
    from sluice.wiring import Container

    container = Container.from_settings(Settings(mode="local", home=tmp_path / "home", registry="", store="", deployment_cache_ttl_s=60))
    install_demo(container, acme, MODELS)
    container.models.push(acme, "score", score_model())
    container.deployments.create(acme, "labelled", EXAMPLE)
    client, headers = TestClient(create_app(container)), auth(api_keys(container)["acme"])
    rows = [{"length": x, "colour": c} for x, c in zip(LENGTHS, COLOURS, strict=True)]
    assert client.post("/api/v1/predictions", json={"deployment": "labelled", "batch": rows}, headers=headers).status_code == 200
    policy = json.loads(json.dumps(EXAMPLE).replace('"length"', '"size"').replace('"no", "yes"', '"low", "high"'))
    container.deployments.update(acme, "labelled", policy)
    r = client.post("/api/v1/predictions", json={"deployment": "labelled", "batch": rows}, headers=headers)
    assert r.status_code == 400 and "length" in r.text, r.text
    sized = [{"size": x, "colour": c} for x, c in zip(LENGTHS, COLOURS, strict=True)]
    r = client.post("/api/v1/predictions", json={"deployment": "labelled", "batch": sized}, headers=headers)
    assert r.status_code == 200, r.text
    _, labels = by_hand(LENGTHS, COLOURS)
    assert [p["prediction"] for p in r.json()["predictions"]] == [{"no": "low", "yes": "high"}[label] for label in labels]


def test_a_policy_stored_before_the_write_time_transform_rules_is_read_served_and_updated(demo: Container, acme: Principal, http: tuple[TestClient, dict[str, str]]) -> None:
    """The rules a transform is held to when written (top_k's two names, inputs declared once,
    min_max's bounds, a select's column) are not asked of a policy stored before them: it is
    read, listed, served and its settings changed as it was (checked on read, they made every
    request of the tenant a 422)."""
    from dataclasses import replace

    client, headers = http
    stored = _with(EXAMPLE, 2, ops=[{"op": "top_k", "input": "score", "k": 1, "indices": "score"}])
    current = demo.registry.get_deployment("acme", "labelled")
    demo.registry.update_deployment(replace(current, policy=stored), expected_revision=current.revision)
    assert client.get("/api/v1/deployments", headers=headers).status_code == 200
    assert client.get("/api/v1/deployments/labelled", headers=headers).status_code == 200
    r = client.post("/api/v1/predictions", json={"deployment": "labelled", "inputs": {"length": [5.1], "colour": ["red"]}}, headers=headers)
    assert r.status_code == 200, r.text
    r = client.put("/api/v1/deployments/labelled", json={"capture": {"sample_percent": 10}}, headers=headers)
    assert r.status_code == 200, r.text
    r = client.put("/api/v1/deployments/labelled", json={"policy": _with(EXAMPLE, 2, ops=[{"op": "top_k", "input": "score", "k": 1, "indices": "idx"}])}, headers=headers)
    assert r.status_code == 200, r.text
