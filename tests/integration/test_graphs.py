"""Sequences and switches end to end, on real parts: the demo container (SQLite, a folder,
ONNX Runtime), two small ONNX models where one's output feeds the other, the demo iris models,
through the HTTP API (simple JSON and the Open Inference Protocol) and the bulk call that batch
jobs, streams and replay score through."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.api.app import create_app
from sluice.domain.requests import ArrayInputs, PredictionRequest
from sluice.inference.bulk import Records, Result, score_many
from sluice.inference.loop import run
from tests.conftest import MODELS, REPO
from tests.integration.conftest import api_keys, auth
from tests.models import EMBED_WEIGHTS, SCORE_WEIGHTS, embed_model, lookup_model, score_model
from tests.support import single

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.wiring import Container

ROWS = [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]]
CHAIN = {
    "kind": "sequence",
    "steps": [
        {"name": "embed", "target": single("embed", 1)},
        {"name": "score", "target": single("scorez", 1), "map": {"z": "embedding"}},
    ],
    "expose": ["embed.embedding"],
}
PETALS = {
    "kind": "switch",
    "cases": [{"name": "short", "when": {"field": "inputs.input", "column": "petal_length", "op": "<", "value": 2.5}, "target": single("iris", 1)}],
    "default": single("iris", 2),
}
REGION = {
    "kind": "switch",
    "cases": [
        {"name": "eu", "when": {"any": [{"field": "headers.x-region", "op": "in", "value": ["eu", "uk"]}, {"field": "routing_key", "op": "==", "value": "eu"}]}, "target": single("iris", 1)},
    ],
    "default": single("iris", 2),
}


@pytest.fixture
def graphs(demo: Container, acme: Principal) -> Container:
    for name, model in [("embed", embed_model()), ("score", score_model()), ("scorez", score_model("z")), ("lookup", lookup_model()), ("score1", score_model("s", 1))]:
        demo.models.push(acme, name, model)
    demo.models.push(acme, "iris", (MODELS / "iris_forest.onnx").read_bytes())
    demo.deployments.create(acme, "chain", CHAIN)
    demo.deployments.create(acme, "petals", PETALS)
    demo.deployments.create(acme, "region", REGION)
    return demo


@pytest.fixture
def http(graphs: Container) -> tuple[TestClient, dict[str, str]]:
    return TestClient(create_app(graphs)), auth(api_keys(graphs)["acme"])


def expected_scores(rows: list[list[float]]) -> list[float]:
    return (np.asarray(rows, np.float32) @ EMBED_WEIGHTS @ SCORE_WEIGHTS)[:, 0].tolist()


def test_a_sequence_answers_with_its_last_step_and_names_every_step(http: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = http
    before = client.get("/api/v1/deployments/chain/stats", headers=headers).json().get("steps", {})  # none before a first request
    r = client.post("/api/v1/predictions", json={"deployment": "chain", "batch": ROWS}, headers=headers)
    assert r.status_code == 200, r.text
    body = r.json()
    # The statistics count each step's answer (`sluice deployments stats`, the console).
    after = client.get("/api/v1/deployments/chain/stats", headers=headers).json()["steps"]
    counted = {name: (c["requests"], c["errors"]) for name, c in after.items()}
    assert counted == {name: (before.get(name, {}).get("requests", 0) + 1, before.get(name, {}).get("errors", 0)) for name in ("embed", "score")}
    assert all(c["latency_ms"]["p50"] is not None for c in after.values())
    assert [p["prediction"]["score"] for p in body["predictions"]] == pytest.approx(expected_scores(ROWS))
    embedded = [p["prediction"]["embed.embedding"] for p in body["predictions"]]
    np.testing.assert_allclose(embedded, np.asarray(ROWS, np.float32) @ EMBED_WEIGHTS, rtol=1e-6)
    assert (body["model"], body["version"]) == ("scorez", 1)
    assert [(s["name"], s["model"], s["version"]) for s in body["steps"]] == [("embed", "embed", 1), ("score", "scorez", 1)]
    assert all(s["latency_ms"] >= 0 for s in body["steps"])


def test_a_sequence_through_the_open_inference_protocol(http: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = http
    meta = client.get("/v2/models/chain", headers=headers).json()
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}]  # the first step's
    assert [o["name"] for o in meta["outputs"]] == ["score", "embed.embedding"]  # the last step's, and what is exposed
    body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [2, 4], "data": [x for row in ROWS for x in row]}], "outputs": [{"name": "score"}]}
    r = client.post("/v2/models/chain/infer", json=body, headers=headers)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert [o["name"] for o in answer["outputs"]] == ["score"]
    assert answer["outputs"][0]["data"] == pytest.approx(expected_scores(ROWS))
    assert [s["name"] for s in answer["parameters"]["steps"]] == ["embed", "score"]
    plain = client.post("/v2/models/iris/infer", json=body | {"outputs": [{"name": "output_label"}]}, headers=headers).json()
    assert set(plain["parameters"]) == {"model", "version", "latency_ms"}  # no graph: the body as before


def test_requests_one_after_another_each_get_the_outputs_they_ask_for(graphs: Container) -> None:
    """What a sequence works out once is kept on its parsed policy, per outputs asked for: one
    request's choice never shapes the next one's answer (the same parsed node, as a process
    that holds its deployments runs it)."""
    from sluice.domain.policy import parse_policy
    from sluice.inference.execution import Call, no_routing

    dep = graphs.registry.get_deployment("acme", "chain")
    node = parse_policy(dep.policy)
    inputs = {"input": np.asarray(ROWS, np.float32)}
    both = ["score", "embed.embedding"]
    for asked, answered in ((["score"], ["score"]), (None, both), (["score"], ["score"]), (both, both)):
        call = Call(dep, time.monotonic() + 30, no_routing, outputs=asked)
        answer = run(graphs.predictions.runner.run(node, call, inputs))
        assert list(answer.result.outputs) == answered
        assert [s["name"] for s in answer.steps] == ["embed", "score"]


def test_the_deployment_shows_the_inputs_a_caller_sends_and_the_outputs_it_answers(graphs: Container, acme: Principal, http: tuple[TestClient, dict[str, str]]) -> None:
    import json

    client, headers = http
    chain = client.get("/api/v1/deployments/chain", headers=headers).json()
    assert chain["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}]  # the first step's
    assert [o["name"] for o in chain["outputs"]] == ["score", "embed.embedding"]
    assert chain["inputs"] == client.get("/v2/models/chain", headers=headers).json()["inputs"]
    # Triton's model config (what tritonclient and perf_analyzer pick outputs from) says the same
    config = client.get("/v2/models/chain/config", headers=headers).json()
    assert [o["name"] for o in config["output"]] == ["score", "embed.embedding"] and [i["name"] for i in config["input"]] == ["input"]
    graphs.deployments.create(acme, "raw", json.loads((REPO / "examples" / "policies" / "transform.json").read_text()))
    raw = client.get("/api/v1/deployments/raw", headers=headers).json()
    assert [(i["name"], i["datatype"]) for i in raw["inputs"]] == [("length", "FP32"), ("colour", "BYTES")]  # what the transform declares
    assert "inputs" not in client.get("/api/v1/deployments", headers=headers).json()[0]  # the list stays as it was


def test_a_failing_step_fails_the_request_naming_the_step(graphs: Container, acme: Principal, http: tuple[TestClient, dict[str, str]]) -> None:
    graphs.deployments.create(acme, "codes", {"kind": "sequence", "steps": [{"name": "look", "target": single("lookup", 1)}, {"name": "sum", "target": single("score1", 1), "map": {"s": "score"}}]})
    client, headers = http
    ok = client.post("/api/v1/predictions", json={"deployment": "codes", "inputs": [[3]]}, headers=headers)
    assert ok.status_code == 200, ok.text
    r = client.post("/api/v1/predictions", json={"deployment": "codes", "inputs": [[99]]}, headers=headers)  # ONNX Runtime refuses it
    assert 400 <= r.status_code < 600
    error = r.json()
    assert error["error"].startswith("step 'look': ")
    assert error["details"]["step"] == "look"


@pytest.mark.parametrize(
    ("policy", "field", "words"),
    [
        ({**CHAIN, "steps": [CHAIN["steps"][0], {"name": "score", "target": single("scorez", 1)}]}, "policy.steps.1", "takes input 'z' from output 'z'"),
        ({**CHAIN, "steps": [CHAIN["steps"][0], {"name": "score", "target": single("scorez", 1), "map": {"y": "embedding"}}]}, "policy.steps.1.map.y", "has no input 'y'"),
        ({**CHAIN, "steps": [CHAIN["steps"][0], {"name": "look", "target": single("lookup", 1), "map": {"code": "embedding"}}]}, "policy.steps.1.map.code", "FP32"),
        ({**CHAIN, "expose": ["embed.nothing"]}, "policy.expose.0", "no output 'nothing'"),
        ({**PETALS, "cases": [{**PETALS["cases"][0], "when": {"field": "inputs.input", "column": "petal_size", "op": "<", "value": 2}}]}, "policy.cases.0.when", "no feature 'petal_size'"),
        ({**PETALS, "cases": [{**PETALS["cases"][0], "when": {"field": "inputs.input", "column": 1, "op": "==", "value": "x"}}]}, "policy.cases.0.when", "holds numbers"),
        ({**PETALS, "cases": [{**PETALS["cases"][0], "when": {"field": "inputs.input", "op": ">", "value": 1}}]}, "policy.cases.0.when", "name a column"),
        (
            {"kind": "switch", "cases": [{"name": "short", "when": {"field": "inputs.input", "column": 2, "op": "<", "value": 2.5}, "target": single("embed", 1)}], "default": CHAIN},
            "policy.default",
            "answers ['score', 'embed.embedding'] and case 'short' answers ['embedding']",
        ),
        ({**REGION, "default": single("lookup", 1)}, "policy.default", "different inputs"),
    ],
)
def test_a_graph_that_cannot_run_is_refused_when_saved(http: tuple[TestClient, dict[str, str]], policy: dict[str, Any], field: str, words: str) -> None:
    client, headers = http
    r = client.put("/api/v1/deployments/chain", json={"policy": policy}, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field
    assert words in r.json()["error"]


def test_a_switch_by_header_or_routing_key_names_its_case_in_the_answer_and_the_statistics(http: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = http
    one = {"deployment": "region", "features": dict(zip(["sepal_length", "sepal_width", "petal_length", "petal_width"], ROWS[1], strict=True))}
    eu = client.post("/api/v1/predictions", json=one, headers={**headers, "x-region": "uk"}).json()
    assert (eu["case"], eu["version"]) == ("eu", 1)
    keyed = client.post("/api/v1/predictions", json=one | {"routing_key": "eu"}, headers=headers).json()
    assert (keyed["case"], keyed["version"]) == ("eu", 1)
    other = client.post("/api/v1/predictions", json=one, headers={**headers, "x-region": "us"}).json()
    assert (other["case"], other["version"]) == ("default", 2)
    stats = client.get("/api/v1/deployments/region/stats", headers=headers).json()
    assert {name: c["requests"] for name, c in stats["cases"].items()} == {"eu": 2, "default": 1}


def test_splits_in_a_sequences_steps_count_apart_by_their_step(graphs: Container, acme: Principal, http: tuple[TestClient, dict[str, str]]) -> None:
    """Each step holding a split with a variant `v`: the request counts `embed/v` and
    `score/v` once each (and each step), not one `v` twice; a split at the top of a sequence's
    step keeps the step's name in its path only."""
    client, headers = http
    only_v = lambda target: {"kind": "split", "variants": [{"name": "v", "weight": 1, "target": target}]}  # noqa: E731
    policy = {
        "kind": "sequence",
        "steps": [{"name": "embed", "target": only_v(single("embed", 1))}, {"name": "score", "target": only_v(single("scorez", 1)), "map": {"z": "embedding"}}],
    }
    graphs.deployments.create(acme, "split-steps", policy)
    body = client.post("/api/v1/predictions", json={"deployment": "split-steps", "inputs": ROWS}, headers=headers).json()
    assert [p["prediction"] for p in body["predictions"]] == pytest.approx(expected_scores(ROWS), rel=1e-5)
    stats = client.get("/api/v1/deployments/split-steps/stats", headers=headers).json()
    assert {k: v["requests"] for k, v in stats["variants"].items()} == {"embed/v": 1, "score/v": 1}
    assert {k: v["requests"] for k, v in stats["steps"].items()} == {"embed": 1, "score": 1}


def test_a_switch_on_a_request_parameter_through_simple_json_and_the_open_inference_protocol(graphs: Container, acme: Principal, http: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = http
    urgent = {"field": "parameters.priority", "op": ">=", "value": 5}
    graphs.deployments.create(acme, "priority", {"kind": "switch", "cases": [{"name": "urgent", "when": urgent, "target": single("iris", 1)}], "default": single("iris", 2)})
    simple = [client.post("/api/v1/predictions", json={"deployment": "priority", "inputs": ROWS[1:], **extra}, headers=headers).json() for extra in ({"parameters": {"priority": 9}}, {})]
    assert [(a["case"], a["version"]) for a in simple] == [("urgent", 1), ("default", 2)]
    tensor = {"name": "input", "datatype": "FP32", "shape": [1, 4], "data": ROWS[1]}
    v2 = [client.post("/v2/models/priority/infer", json={"inputs": [tensor], **extra}, headers=headers).json() for extra in ({"parameters": {"priority": 9}}, {"parameters": {"priority": 1}})]
    assert [(a["parameters"]["case"], a["model_version"]) for a in v2] == [("urgent", "1"), ("default", "2")]
    r = client.post("/api/v1/predictions", json={"deployment": "priority", "inputs": ROWS[1:], "parameters": {"priority": [9]}}, headers=headers)
    assert r.status_code == 422 and r.json()["field"].startswith("parameters.priority")  # simple JSON's are strings, numbers or booleans


def test_a_switch_on_a_customer_id_past_2_53_tells_it_from_its_neighbour(graphs: Container, acme: Principal, http: tuple[TestClient, dict[str, str]]) -> None:
    """Ids past 2**53 are told apart in a parameter and a header alike (as floats the two
    below are one number)."""
    client, headers = http
    vip = {"any": [{"field": "parameters.customer", "op": "==", "value": 9007199254740993}, {"field": "headers.x-customer", "op": "==", "value": 9007199254740993}]}
    graphs.deployments.create(acme, "vip", {"kind": "switch", "cases": [{"name": "vip", "when": vip, "target": single("iris", 1)}], "default": single("iris", 2)})
    body = {"deployment": "vip", "inputs": ROWS[1:]}
    cases = [
        client.post("/api/v1/predictions", json={**body, "parameters": {"customer": 9007199254740993}}, headers=headers).json()["case"],
        client.post("/api/v1/predictions", json={**body, "parameters": {"customer": 9007199254740992}}, headers=headers).json()["case"],
        client.post("/api/v1/predictions", json=body, headers={**headers, "x-customer": "9007199254740993"}).json()["case"],
        client.post("/api/v1/predictions", json=body, headers={**headers, "x-customer": "9007199254740992"}).json()["case"],
    ]
    assert cases == ["vip", "default", "vip", "default"]
    tensor = {"name": "input", "datatype": "FP32", "shape": [1, 4], "data": ROWS[1]}
    v2 = [client.post("/v2/models/vip/infer", json={"inputs": [tensor], "parameters": {"customer": c}}, headers=headers).json()["parameters"]["case"] for c in (9007199254740993, 9007199254740994)]
    assert v2 == ["vip", "default"]


def test_a_switch_on_feature_values_routes_each_row_and_puts_the_rows_back_in_order(http: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = http
    rows = [ROWS[1], ROWS[0], ROWS[1]]
    r = client.post("/api/v1/predictions", json={"deployment": "petals", "batch": rows}, headers=headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["case"] == ["default", "short", "default"]
    assert body["models"] == ["iris:2", "iris:1", "iris:2"]  # who answered each row
    assert (body["model"], body["version"]) == ("iris", 2)  # the first row's
    alone = [client.post("/api/v1/predictions", json={"deployment": "petals", "batch": [row]}, headers=headers).json() for row in rows]
    assert [a["case"] for a in alone] == ["default", "short", "default"]
    assert [p["probabilities"] for p in body["predictions"]] == [a["predictions"][0]["probabilities"] for a in alone]
    # The statistics count each case's requests and the rows that took it (the console draws both).
    stats = client.get("/api/v1/deployments/petals/stats", headers=headers).json()
    assert {name: (c["requests"], c["rows"]) for name, c in stats["cases"].items()} == {"default": (3, 4), "short": (2, 2)}


IRIS_ROWS = st.lists(st.sampled_from([*ROWS, [5.9, 3.0, 5.1, 1.8], [4.9, 3.0, 2.4, 0.2]]), min_size=1, max_size=3)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(records=st.lists(st.tuples(IRIS_ROWS, st.sampled_from([None, "eu", "us"])), min_size=1, max_size=8))
def test_in_a_bulk_call_each_record_takes_the_case_it_takes_alone(graphs: Container, acme: Principal, records: list[tuple[list[list[float]], str | None]]) -> None:
    both = {"kind": "switch", "cases": [{"name": "keyed", "when": {"field": "routing_key", "op": "==", "value": "eu"}, "target": single("iris", 1)}, *PETALS["cases"]], "default": single("iris", 2)}
    graphs.deployments.update(acme, "petals", both)
    flat = np.asarray([row for rows, _ in records for row in rows], np.float32)
    bulk = Records({"input": flat}, np.asarray([len(rows) for rows, _ in records], np.intp), keys=[key for _, key in records])
    done = run(score_many(graphs.predictions, acme, "petals", bulk, max_rows=5))
    assert done.failed == 0
    for position, outcome in enumerate(done.by_record()):
        assert isinstance(outcome, Result)
        rows, key = records[position]
        alone = run(graphs.predictions.predict(acme, PredictionRequest("petals", ArrayInputs({"input": np.asarray(rows, np.float32)}), routing_key=key)))
        j = list(np.arange(len(records))[outcome.records]).index(position)
        assert outcome.outputs_of(j)["output_label"].tolist() == alone.answer.result.outputs["output_label"].tolist()
        cases = outcome.answer.case if isinstance(outcome.answer.case, list) else [outcome.answer.case] * len(outcome.answer.result.outputs["output_label"])
        mine = cases[outcome.rows_of(j)]
        theirs = alone.answer.case if isinstance(alone.answer.case, list) else [alone.answer.case] * len(rows)
        assert mine == theirs


@pytest.mark.parametrize("example", sorted((REPO / "examples" / "policies").glob("*.json")), ids=lambda p: p.name)
def test_every_example_policy_saves_and_answers(graphs: Container, acme: Principal, example: Any) -> None:
    """The examples in `examples/policies/` are saved as they are (every check of a policy
    passes on the demo models and the two chained ones) and answer a request."""
    import json

    graphs.deployments.create(acme, example.stem, json.loads(example.read_text()))
    inputs = {"input": np.asarray(ROWS, np.float32)}
    if example.stem == "transform":  # raw fields: a length and a colour a row
        inputs = {"length": np.asarray([5.1, 6.7], np.float32), "colour": np.asarray(["red", "teal"], dtype=object)}
    if example.stem == "nightly":  # the demo diabetes model behind a table nothing was published to yet: live
        inputs = {"input": np.full((2, 10), 0.02, np.float32)}
    request = PredictionRequest(example.stem, ArrayInputs(inputs))
    prediction = run(graphs.predictions.predict(acme, request))
    assert prediction.rows == len(ROWS)


def test_graphs_answer_over_grpc_as_over_rest(graphs: Container) -> None:
    """Triton's own gRPC client: a sequence's answer and exposed output, its metadata, and a
    switch on a header read from the call's metadata, as the REST doors give them."""
    pytest.importorskip("grpc", reason="needs the grpc extra")
    grpcclient = pytest.importorskip("tritonclient.grpc")
    from tests.integration.grpc.conftest import auth as grpc_auth
    from tests.integration.grpc.conftest import run_server

    key = grpc_auth(api_keys(graphs)["acme"])  # gRPC metadata keys are lower case
    rows = np.asarray(ROWS, np.float32)
    with run_server(graphs) as url:
        client = grpcclient.InferenceServerClient(url)
        meta = client.get_model_metadata("chain", headers=key, as_json=True)
        assert [(i["name"], i["shape"]) for i in meta["inputs"]] == [("input", ["-1", "4"])]
        assert [o["name"] for o in meta["outputs"]] == ["score", "embed.embedding"]
        tensor = grpcclient.InferInput("input", list(rows.shape), "FP32")
        tensor.set_data_from_numpy(rows)
        answer = client.infer("chain", [tensor], headers=key)
        np.testing.assert_allclose(answer.as_numpy("score")[:, 0], expected_scores(ROWS), rtol=1e-5)
        np.testing.assert_allclose(answer.as_numpy("embed.embedding"), rows @ EMBED_WEIGHTS, rtol=1e-5)
        assert answer.get_response().model_version == "1"  # the last step's: scorez 1
        one = grpcclient.InferInput("input", [1, 4], "FP32")
        one.set_data_from_numpy(rows[1:])
        eu = client.infer("region", [one], headers={**key, "x-region": "uk"})
        other = client.infer("region", [one], headers={**key, "x-region": "us"})
        assert (eu.get_response().model_version, other.get_response().model_version) == ("1", "2")


# The prediction cache ----------------------------------------------------------------------
CACHE = {"ttl_s": 60, "max_entries": 100}


def test_a_cached_graph_answers_again_from_the_cache_and_any_changed_step_misses(graphs: Container, acme: Principal, http: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = http
    calibrated = {**CHAIN, "steps": [*CHAIN["steps"], {"name": "calibrate", "target": {"kind": "transform", "ops": [{"op": "standardize", "input": "score", "mean": 0.0, "std": 2.0}]}}]}
    graphs.deployments.create(acme, "cached", calibrated, cache=CACHE)

    def ask() -> dict[str, Any]:
        r = client.post("/api/v1/predictions", json={"deployment": "cached", "batch": ROWS}, headers=headers)
        assert r.status_code == 200, r.text
        return r.json()

    first, second = ask(), ask()
    assert "cached" not in first and second["cached"] is True
    expected = np.asarray(expected_scores(ROWS)) / 2
    assert [p["prediction"]["score"] for p in second["predictions"]] == pytest.approx(expected.tolist())
    assert second["predictions"] == first["predictions"] and [s["name"] for s in second["steps"]] == ["embed", "score", "calibrate"]
    # A changed transform: a new revision, computed afresh.
    changed = {**calibrated, "steps": [*CHAIN["steps"], {"name": "calibrate", "target": {"kind": "transform", "ops": [{"op": "standardize", "input": "score", "mean": 1.0, "std": 2.0}]}}]}
    graphs.deployments.update(acme, "cached", changed)
    third = ask()
    assert "cached" not in third
    assert [p["prediction"]["score"] for p in third["predictions"]] == pytest.approx(((np.asarray(expected_scores(ROWS)) - 1) / 2).tolist())
    assert ask()["cached"] is True
    # A new version of a model a step runs.
    graphs.models.push(acme, "scorez", score_model("z"))
    graphs.deployments.update(acme, "cached", {**changed, "steps": [changed["steps"][0], {**changed["steps"][1], "target": single("scorez", 2)}, changed["steps"][2]]})
    fourth = ask()
    assert "cached" not in fourth and fourth["steps"][1]["version"] == 2


def test_a_cached_switch_keys_by_the_case_a_parameter_picks(graphs: Container, acme: Principal, http: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = http
    tiers = {"kind": "switch", "cases": [{"name": "gold", "when": {"field": "parameters.tier", "op": "==", "value": "gold"}, "target": single("iris", 1)}], "default": single("iris", 2)}
    graphs.deployments.create(acme, "tiers", tiers, cache=CACHE)

    def ask(tier: str) -> dict[str, Any]:
        r = client.post("/api/v1/predictions", json={"deployment": "tiers", "inputs": ROWS[1:], "parameters": {"tier": tier}}, headers=headers)
        assert r.status_code == 200, r.text
        return r.json()

    gold, basic = ask("gold"), ask("basic")  # the same inputs: another case is another entry
    assert (gold["case"], gold["version"], "cached" in basic) == ("gold", 1, False)
    assert (basic["case"], basic["version"]) == ("default", 2)
    again = ask("gold")
    assert (again["cached"], again["case"], again["version"]) == (True, "gold", 1)


def test_a_step_that_is_not_deterministic_is_refused_when_the_cache_is_on(graphs: Container, http: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = http
    coin = {"kind": "split", "variants": [{"name": "a", "weight": 1, "target": single("scorez", 1)}, {"name": "b", "weight": 1, "target": single("scorez", 1)}]}
    policy = {**CHAIN, "steps": [CHAIN["steps"][0], {**CHAIN["steps"][1], "target": coin}]}
    r = client.post("/api/v1/deployments", json={"name": "coin", "policy": policy, "cache": CACHE}, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "policy.steps.1.target.routing_key" and "cache" in r.json()["error"]


def test_the_shared_tier_gives_another_container_a_graphs_answer_as_computed(settings: Any, acme: Principal) -> None:
    from sluice.wiring import Container as Made

    shared = settings.replace(prediction_cache_shared=True)
    first, second = Made.from_settings(shared), Made.from_settings(shared)
    for name, model in [("embed", embed_model()), ("scorez", score_model("z"))]:
        first.models.push(acme, name, model)
    first.deployments.create(acme, "chain", CHAIN, cache=CACHE)
    request = PredictionRequest("chain", ArrayInputs({"input": np.asarray(ROWS, np.float32)}))
    computed = run(first.predictions.predict(acme, request))
    kept = run(second.predictions.predict(acme, request))
    assert kept.cached and not computed.cached
    assert kept.answer.signature == computed.answer.signature  # the exposed output's spec with it
    assert kept.answer.steps == computed.answer.steps
    np.testing.assert_array_equal(kept.result.outputs["embed.embedding"], computed.result.outputs["embed.embedding"])


def test_sluice_deployments_stats_prints_the_cases_taken_and_each_step(cli_home: Any, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from tests.integration.conftest import run_cli

    for name, model in [("embed", embed_model()), ("scorez", score_model("z"))]:
        (tmp_path / f"{name}.onnx").write_bytes(model)
        assert run_cli(capsys, "models", "push", name, str(tmp_path / f"{name}.onnx"))[0] == 0
    run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
    run_cli(capsys, "models", "push", "iris", str(MODELS / "iris_forest.onnx"))
    assert run_cli(capsys, "deployments", "create", "chain", "--policy", json.dumps(CHAIN))[0] == 0
    assert run_cli(capsys, "deployments", "create", "petals", "--policy", json.dumps(PETALS))[0] == 0
    assert run_cli(capsys, "predict", "chain", "--inputs", json.dumps(ROWS))[0] == 0
    assert run_cli(capsys, "predict", "petals", "--batch", json.dumps([ROWS[1], ROWS[0], ROWS[1]]))[0] == 0
    code, out, _ = run_cli(capsys, "deployments", "stats", "chain")
    assert code == 0
    steps = [line.split() for line in out.splitlines() if line.startswith("step ")]
    assert [(s[1], s[2], s[3]) for s in steps] == [("embed", "1", "0"), ("score", "1", "0")]  # in the sequence's order
    code, out, _ = run_cli(capsys, "deployments", "stats", "petals")
    cases = {line.split()[1]: line.split() for line in out.splitlines() if line.startswith("case ")}
    assert (cases["short"][2], cases["short"][4]) == ("1", "1") and (cases["default"][2], cases["default"][4]) == ("1", "2")  # requests, rows
    shown = json.loads(run_cli(capsys, "deployments", "stats", "petals", "--json")[1])
    assert {name: c["rows"] for name, c in shown["cases"].items()} == {"short": 1, "default": 2}


def test_sluice_predict_sends_parameters_a_switch_reads(cli_home: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from tests.integration.conftest import run_cli

    run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
    run_cli(capsys, "models", "push", "iris", str(MODELS / "iris_forest.onnx"))
    tiers = {"kind": "switch", "cases": [{"name": "gold", "when": {"all": [{"field": "parameters.tier", "op": "==", "value": "gold"}, {"field": "parameters.priority", "op": ">=", "value": 5}]}, "target": single("iris", 1)}], "default": single("iris", 2)}
    assert run_cli(capsys, "deployments", "create", "tiers", "--policy", json.dumps(tiers))[0] == 0
    answers = [run_cli(capsys, "predict", "tiers", "--inputs", json.dumps(ROWS[:1]), *extra) for extra in (["--param", "tier=gold", "--param", "priority=7"], ["--param", "tier=gold", "--param", "priority=2"], [])]
    assert [json.loads(out)["version"] for _, out, _ in answers] == [1, 2, 2]
    code, _, err = run_cli(capsys, "predict", "tiers", "--inputs", json.dumps(ROWS[:1]), "--param", "tier")
    assert code != 0 and "NAME=VALUE" in err and "Traceback" not in err


# Through the other drivers -----------------------------------------------------------------
def test_a_graph_over_a_websocket_in_simple_json_and_v2_with_parameters(graphs: Container, acme: Principal, http: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = http
    urgent = {"field": "parameters.priority", "op": ">=", "value": 5}
    graphs.deployments.create(acme, "priority", {"kind": "switch", "cases": [{"name": "urgent", "when": urgent, "target": single("iris", 1)}], "default": single("iris", 2)})
    with client.websocket_connect("/api/v1/stream", headers=headers) as ws:
        ws.send_json({"deployment": "chain", "batch": ROWS, "request_id": "seq"})
        chained = ws.receive_json()
        assert [p["prediction"]["score"] for p in chained["predictions"]] == pytest.approx(expected_scores(ROWS))
        assert [s["name"] for s in chained["steps"]] == ["embed", "score"]
        tensor = {"name": "input", "datatype": "FP32", "shape": [1, 4], "data": ROWS[1]}
        ws.send_json({"deployment": "priority", "request_id": "v2", "v2": {"inputs": [tensor], "parameters": {"priority": 7}}})
        v2 = ws.receive_json()
        ws.send_json({"deployment": "priority", "request_id": "plain", "inputs": ROWS[1:], "parameters": {"priority": 1}})
        plain = ws.receive_json()
    assert (v2["parameters"]["case"], v2["model_version"]) == ("urgent", "1")
    assert (plain["case"], plain["version"]) == ("default", 2)


def test_a_shadows_mirror_that_is_a_graph_and_a_replay_against_a_graph_give_the_graphs_answers(graphs: Container, acme: Principal, http: tuple[TestClient, dict[str, str]]) -> None:
    """The mirror is embed then a transform that takes 1 from each value: against the primary
    (embed alone) every value differs by 1, live and replayed from what was captured."""
    client, headers = http
    shifted = {"kind": "sequence", "steps": [{"name": "embed", "target": single("embed", 1)}, {"name": "shift", "target": {"kind": "transform", "ops": [{"op": "standardize", "input": "embedding", "mean": 1.0, "std": 1.0}]}}]}
    policy = {"kind": "shadow", "primary": single("embed", 1), "mirrors": [{"name": "shifted", "target": shifted}]}
    graphs.deployments.create(acme, "embedded", policy, capture={"sample_percent": 100})
    for i in range(3):
        r = client.post("/api/v1/predictions", json={"deployment": "embedded", "batch": ROWS, "request_id": f"e{i}"}, headers=headers)
        assert r.status_code == 200, r.text
    live = graphs.deployments.stats(acme, "embedded")["mirrors"]["shifted"]
    assert (live["requests"], live["compared"], live["errors"]) == (3, 3, 0)
    assert live["mean_abs_diff"] == pytest.approx(1.0, abs=1e-5) and live["max_abs_diff"] == pytest.approx(1.0, abs=1e-5)
    assert graphs.capture is not None and graphs.capture.drain()
    graphs.deployments.create(acme, "shifted", shifted)
    out = graphs.replay.replay(acme, "embedded", since="1h", against="shifted")
    assert (out["records"], out["rows"], out["scored_rows"], out["failed_rows"]) == (3, 6, 6, 0)
    assert out["verdict"]["mean_abs_diff"] == pytest.approx(live["mean_abs_diff"], abs=1e-6)
    graphs.predictions.stats.flush()  # the mirror's steps count as its mirror, never under a placeholder deployment
    assert all(graphs.registry.read_stats("acme", "(mirror)", r) == {} for r in (0, 1, 2))


def test_a_re_read_of_the_same_deployment_keeps_its_parsed_policy_and_a_changed_one_is_answered_from(graphs: Container, http: tuple[TestClient, dict[str, str]]) -> None:
    """A process re-reads a deployment whenever its copy expires (here on every request: the
    tests' `deployment_cache_ttl_s` is 0). The same record read again keeps the policy parsed
    before, and with it the plans the sequence worked out; a record another process changed
    is answered from at the next read, as before."""
    import dataclasses

    client, headers = http
    predictions = graphs.predictions

    def ask() -> dict[str, Any]:
        r = client.post("/api/v1/predictions", json={"deployment": "chain", "batch": ROWS}, headers=headers)
        assert r.status_code == 200, r.text
        return r.json()

    assert "embed.embedding" in ask()["predictions"][0]["prediction"]
    node = run(predictions.node_of("acme", "chain"))
    plans, parses = dict(node.prepared), predictions.parsed.parses
    ask()
    assert run(predictions.node_of("acme", "chain")) is node and predictions.parsed.parses == parses
    assert node.prepared == plans  # the very plans: nothing worked out again
    # Another process stores a new revision: no longer exposing the embedding, the second step mapped anew.
    dep = graphs.registry.get_deployment("acme", "chain")
    changed = {**CHAIN, "expose": []}
    graphs.registry.update_deployment(dataclasses.replace(dep, policy=changed), expected_revision=dep.revision)
    body = ask()
    assert [p["prediction"] for p in body["predictions"]] == pytest.approx(expected_scores(ROWS))  # the score alone
    assert predictions.parsed.parses == parses + 1 and run(predictions.node_of("acme", "chain")) is not node


def test_a_cache_turned_on_by_another_process_takes_effect_when_the_copy_expires_though_the_policy_is_the_same(graphs: Container, http: tuple[TestClient, dict[str, str]]) -> None:
    """What `resolve` derives from a graph is kept with the deployment it was derived for: a
    record changed in anything but its policy (here its cache turned on) is the one answered
    from once the process's copy of the deployment expires, though its parsed policy is kept."""
    import dataclasses

    from sluice.domain.objects import check_cache

    client, headers = http
    predictions = graphs.predictions
    predictions._deployments.ttl_s = predictions._resolved.ttl_s = 3600.0  # held until dropped below

    def ask() -> dict[str, Any]:
        r = client.post("/api/v1/predictions", json={"deployment": "chain", "batch": ROWS}, headers=headers)
        assert r.status_code == 200, r.text
        return r.json()

    ask()
    node = run(predictions.node_of("acme", "chain"))
    dep = graphs.registry.get_deployment("acme", "chain")
    graphs.registry.update_deployment(dataclasses.replace(dep, cache=check_cache(CACHE)), expected_revision=dep.revision)
    assert "cached" not in ask() and "cached" not in ask()  # this process's copy holds for its TTL
    predictions._deployments.pop(("acme", "chain"))  # as the copy's TTL running out drops it
    first, second = ask(), ask()
    assert run(predictions.node_of("acme", "chain")) is node  # the policy did not change
    assert "cached" not in first and second.get("cached") is True
