"""The control plane taking what nobody on the team would send: text no store can carry, numbers
beyond what a threshold or a weight can be, booleans where numbers go, and changes that would
break what other objects rest on (a rollout's versions, a deployment another references). Each
is a 4xx naming the field or the object in the way, and nothing is stored."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import hypothesis
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.domain.errors import BadRequest
from sluice.domain.objects import check_description
from sluice.domain.rollout_specs import parse_gates
from tests.conftest import MODELS
from tests.integration.conftest import auth
from tests.support import single

if TYPE_CHECKING:
    from pathlib import Path

    from fastapi.testclient import TestClient

    from sluice.wiring import Container

LONE = "a\ud800b"  # JSON's "a\ud800b": a lone surrogate, which no UTF-8 store or answer can carry


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/keys", {"scopes": ["predict"], "name": LONE}, "name"),
        ("/api/v1/deployments", {"name": "odd", "model": "iris", "description": LONE}, "description"),
    ],
)
def test_text_with_a_lone_surrogate_is_refused_and_listings_stay_readable(client: TestClient, keys: dict[str, str], path: str, body: dict[str, Any], field: str) -> None:
    r = client.post(path, content=json.dumps(body), headers={**auth(keys["acme"]), "content-type": "application/json"})  # "\\ud800", as JSON writes it
    assert r.status_code == 400 and r.json()["field"] == field, r.text
    assert client.get(path, headers=auth(keys["acme"])).status_code == 200


SPOOF = "ok\r4f1c0a9e2b7d6e31  old-ci  predict  False\x1b[K\x1b[8m"  # rewrites the operator's row on a terminal


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/keys", {"scopes": ["predict"], "name": SPOOF}, "name"),
        ("/api/v1/keys", {"scopes": ["predict"], "name": "a\u202eb"}, "name"),  # right-to-left override
        ("/api/v1/keys", {"scopes": ["predict"], "name": "two\nlines"}, "name"),
        ("/api/v1/keys", {"scopes": ["predict"], "name": "two\r\nlines"}, "name"),  # a name is one line
        ("/api/v1/deployments", {"name": "odd", "model": "iris", "description": "x\x1b]0;pwned\x07"}, "description"),
    ],
)
def test_text_that_would_move_an_operators_terminal_is_refused(client: TestClient, keys: dict[str, str], path: str, body: dict[str, Any], field: str) -> None:
    r = client.post(path, json=body, headers=auth(keys["acme"]))
    assert r.status_code == 400 and r.json()["field"] == field, r.text
    described = client.post("/api/v1/deployments", json={"name": "fine", "model": "iris", "description": "line one\n\tline two"}, headers=auth(keys["acme"]))
    assert described.status_code in (200, 201), described.text  # a description's line breaks and tabs stay


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/deployments", {"name": "crlf", "model": "iris", "description": "line one\r\nline two"}),  # a textarea's line break
        ("/api/v1/deployments", {"name": "persian", "model": "iris", "description": "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"}),  # ZWNJ
        ("/api/v1/keys", {"scopes": ["predict"], "name": "ci \U0001f469\u200d\U0001f4bb"}),  # an emoji joined by ZWJ
        ("/api/v1/keys", {"scopes": ["predict"], "name": "pre\u00addict"}),  # a soft hyphen
    ],
)
def test_ordinary_text_with_joiners_or_a_windows_line_break_is_kept(client: TestClient, keys: dict[str, str], path: str, body: dict[str, Any]) -> None:
    r = client.post(path, json=body, headers=auth(keys["acme"]))
    assert r.status_code in (200, 201), r.text
    assert r.json()["description" if "description" in body else "name"] == body.get("description", body["name"])


# Text a person writes: any character but a control, a lone surrogate or a bidi control, with
# line breaks (LF or CRLF) and tabs between.
_BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_WORDS = st.text(st.characters(exclude_categories=("Cc", "Cs"), exclude_characters=_BIDI), max_size=12)
_PROSE = st.lists(st.tuples(_WORDS, st.sampled_from(["\n", "\r\n", "\t", " "])), max_size=6).map(lambda parts: "".join(w + b for w, b in parts))
_SPOOFING = st.sampled_from([chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if chr(c) not in "\n\t"] + list(_BIDI))


@hypothesis.settings(max_examples=200, deadline=None)
@given(text=_PROSE)
def test_a_description_keeps_any_text_a_person_writes(text: str) -> None:
    assert check_description(text) == text


@hypothesis.settings(max_examples=200, deadline=None)
@given(before=_PROSE, char=_SPOOFING, after=_PROSE)
def test_a_control_or_bidi_character_is_refused_where_it_stands(before: str, char: str, after: str) -> None:
    """Anything that moves a terminal's cursor or reorders what it shows (a bare CR among them)
    is refused, naming the field and where it stands."""
    hypothesis.assume(not (char == "\r" and after.startswith("\n")))
    with pytest.raises(BadRequest) as refused:
        check_description(before + char + after)
    assert refused.value.field == "description" and f" at {len(before)}," in refused.value.message


def test_serve_reads_its_saved_admin_key_past_a_byte_order_mark_and_any_bytes(demo: Container, tmp_path: Path) -> None:
    """`sluice serve` says what its saved admin key is; a key saved by a Windows editor (with a
    byte-order mark and CRLF) still works, and a file that is not text is a key that no longer
    works, never a reason not to start."""
    from sluice.cli.serve import _whose

    _, plain = demo.keys.create("acme", ["admin", "predict"])
    saved = tmp_path / "admin-key"
    saved.write_bytes(b"\xef\xbb\xbf" + plain.encode() + b"\r\n")
    assert _whose(demo.keys, saved, "acme") == ""
    saved.write_bytes(b"sk_\xff\xfe\n")
    assert "no longer works" in _whose(demo.keys, saved, "acme")


def test_a_listing_shows_control_characters_kept_from_before_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    from sluice.cli.common import table

    table([{"key_id": "64ae905451067a07", "name": SPOOF}], ["key_id", "name"])
    shown = capsys.readouterr().out
    assert "\x1b" not in shown and "\r" not in shown and "\\x1b[K" in shown and "64ae905451067a07" in shown


def test_a_lone_surrogate_kept_from_before_is_answered_escaped(client: TestClient, keys: dict[str, str]) -> None:
    """A record written before such text was refused is still listed: its text escaped, as
    JSON writes it."""
    from sluice.api.responses import JSONResponse

    assert JSONResponse({"name": LONE, "n": [1, 2]}).body == b'{"name":"a\\ud800b","n":[1,2]}'


def test_a_gate_is_judged_as_given_and_one_beyond_any_number_is_refused(client: TestClient, keys: dict[str, str]) -> None:
    gates = parse_gates("agreement>=0.9999995,error_rate<=0.0012345678,p99_ratio<=1")
    assert [str(g) for g in gates] == ["agreement>=0.9999995", "error_rate<=0.0012345678", "p99_ratio<=1"]
    assert parse_gates(",".join(map(str, gates))) == gates  # what is stored reads back as the same gates
    push = client.post("/api/v1/models/iris/versions", content=(MODELS / "iris.onnx").read_bytes(), headers={**auth(keys["acme"]), "content-type": "application/octet-stream"})
    assert push.status_code == 201, push.text
    r = client.post("/api/v1/deployments/iris/rollout", json={"to": "iris:2", "gate": "error_rate<=1e400"}, headers=auth(keys["acme"]))
    assert r.status_code == 422 and r.json()["field"] == "gate", r.text


def test_a_version_a_rollout_holds_cannot_be_deleted(client: TestClient, keys: dict[str, str]) -> None:
    """A paused rollout restores version 1 when aborted and moves version 2 in when resumed:
    neither may go while it lasts; once it is aborted, version 2 may."""
    headers = auth(keys["acme"])
    client.post("/api/v1/models/iris/versions", content=(MODELS / "iris.onnx").read_bytes(), headers={**headers, "content-type": "application/octet-stream"})
    assert client.post("/api/v1/deployments/iris/rollout", json={"to": "iris:2", "gate": "error_rate<=0.5", "steps": "10,100"}, headers=headers).status_code == 201
    assert client.put("/api/v1/deployments/iris", json={"model": "iris", "version": 2}, headers=headers).status_code == 200  # pauses it
    r = client.delete("/api/v1/models/iris/versions/1", headers=headers)  # what an abort restores
    assert r.status_code == 409 and "held by the paused rollout of deployment 'iris'" in r.json()["error"], r.text
    assert client.post("/api/v1/deployments/iris/rollout/abort", headers=headers).status_code == 200  # back on version 1
    assert client.delete("/api/v1/models/iris/versions/2", headers=headers).status_code == 204


def test_a_deployment_another_references_keeps_what_that_one_rests_on(client: TestClient, keys: dict[str, str]) -> None:
    headers = auth(keys["acme"])
    assert client.post("/api/v1/deployments", json={"name": "q", "model": "iris"}, headers=headers).status_code == 201
    split = {"kind": "split", "variants": [{"name": "a", "weight": 50, "target": {"kind": "single", "model": "iris", "version": 1}}, {"name": "b", "weight": 50, "target": {"kind": "ref", "deployment": "q"}}]}
    assert client.post("/api/v1/deployments", json={"name": "p", "policy": split}, headers=headers).status_code == 201
    r = client.put("/api/v1/deployments/q", json={"model": "diabetes", "version": 1}, headers=headers)  # other inputs than p's variant a
    assert r.status_code == 422 and r.json()["field"] == "policy" and "deployment 'p' references 'q'" in r.json()["error"], r.text
    assert client.put("/api/v1/deployments/q", json={"policy": {"kind": "single", "model": "iris", "version": 1}}, headers=headers).status_code == 200
    r = client.delete("/api/v1/deployments/q", headers=headers)
    assert r.status_code == 409 and "referenced by ['p']" in r.json()["error"], r.text
    assert client.delete("/api/v1/deployments/p", headers=headers).status_code == 204
    assert client.delete("/api/v1/deployments/q", headers=headers).status_code == 204


def _members(weight: Any, aggregator: str = "majority") -> dict[str, Any]:
    single = {"kind": "single", "model": "iris", "version": 1}
    return {"kind": "ensemble", "aggregator": aggregator, "members": [{"name": n, "target": single, "weight": weight} for n in ("a", "b")]}


@pytest.mark.parametrize("aggregator", ["majority", "soft_vote", "weighted_mean"])
def test_members_that_all_weigh_nothing_count_alike(client: TestClient, keys: dict[str, str], aggregator: str) -> None:
    headers = auth(keys["acme"])
    assert client.post("/api/v1/deployments", json={"name": "zero", "policy": _members(0, aggregator)}, headers=headers).status_code == 201
    r = client.post("/api/v1/predictions", json={"deployment": "zero", "inputs": [[6.7, 3.0, 5.2, 2.3]]}, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json()["prediction"] == "virginica" and sum(r.json()["probabilities"].values()) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/deployments", {"name": "w", "policy": _members(True)}, "policy.members.0.weight"),
        ("/api/v1/deployments", {"name": "w", "policy": _members(1e308)}, "policy.members.0.weight"),
        ("/api/v1/deployments", {"name": "w", "model": "iris", "capture": {"sample_percent": True}}, "capture.sample_percent"),
        ("/api/v1/deployments", {"name": "w", "model": "iris", "cache": {"ttl_s": True}}, "cache.ttl_s"),
        ("/api/v1/deployments/iris/rollout", {"to": "iris:1", "gate": "error_rate<=0.1", "mirror_percent": True}, "mirror_percent"),
    ],
)
def test_a_boolean_or_a_number_too_large_is_no_weight_or_share(client: TestClient, keys: dict[str, str], path: str, body: dict[str, Any], field: str) -> None:
    """JSON true is not 1; a weight of 1e308 is no weight (two of them add up to infinity)."""
    r = client.post(path, json=body, headers=auth(keys["acme"]))
    assert r.status_code == 422 and r.json()["field"] == field, r.text


def test_a_weight_stored_before_its_bound_still_serves_and_holds_up_nothing_else(demo: Container, client: TestClient, keys: dict[str, str]) -> None:
    """A split stored when a weight had no bound (5e9) reads, answers and takes a change of its
    other settings; the tenant's other deployments change and go as before; a policy that keeps
    it is written (a rollout started on it goes and is aborted back to it). A weight past the
    bound that the deployment does not hold already is refused naming it."""
    headers = auth(keys["acme"])
    split = {"kind": "split", "variants": [{"name": n, "weight": 1, "target": single("iris", 1)} for n in ("a", "b")]}
    assert client.post("/api/v1/deployments", json={"name": "old", "policy": split}, headers=headers).status_code == 201
    stored = demo.registry.get_deployment("acme", "old")
    before = json.loads(json.dumps(stored.policy))
    before["variants"][0]["weight"] = 5e9
    demo.registry.update_deployment(replace(stored, policy=before), expected_revision=stored.revision)
    r = client.post("/api/v1/predictions", json={"deployment": "old", "inputs": [[5.1, 3.5, 1.4, 0.2]]}, headers=headers)
    assert r.status_code == 200, r.text
    r = client.get("/api/v1/deployments/old", headers=headers)
    assert r.status_code == 200 and r.json()["policy"]["variants"][0]["weight"] == 5e9, r.text
    assert client.get("/api/v1/deployments/old/history", headers=headers).status_code == 200
    assert client.put("/api/v1/deployments/old", json={"capture": {"sample_percent": 10}}, headers=headers).status_code == 200
    assert client.put("/api/v1/deployments/iris", json={"policy": single("iris", 1)}, headers=headers).status_code == 200
    assert client.delete("/api/v1/deployments/diabetes", headers=headers).status_code == 204
    larger = {**before, "variants": [{**before["variants"][0], "weight": 6e9}, before["variants"][1]]}
    r = client.put("/api/v1/deployments/old", json={"policy": larger}, headers=headers)
    assert r.status_code == 422 and r.json()["field"] == "policy.variants.0.weight", r.text
    r = client.put("/api/v1/deployments/old", json={"policy": before}, headers=headers)
    assert r.status_code == 200, r.text
    pushed = client.post("/api/v1/models/iris/versions", content=(MODELS / "iris.onnx").read_bytes(), headers={**headers, "content-type": "application/octet-stream"})
    assert pushed.status_code == 201, pushed.text
    r = client.post("/api/v1/deployments/old/rollout", json={"to": f"iris:{pushed.json()['version']}", "steps": [10, 50, 100], "every": "10m", "gate": "error_rate<=0.01"}, headers=headers)
    assert r.status_code in (200, 201), r.text
    r = client.post("/api/v1/deployments/old/rollout/abort", headers=headers)
    assert r.status_code == 200, r.text
    assert demo.registry.get_deployment("acme", "old").policy == before


def test_a_model_whose_weights_name_a_file_is_refused_and_no_file_is_read(client: TestClient, keys: dict[str, str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """ONNX external data names a file relative to where the model is read from: the server's
    working folder (an operator's home, Lambda's code) for bytes a tenant sent. Such a model is
    refused when pushed, naming the artifact; nothing of the file reaches an answer."""
    from onnx import TensorProto, helper

    secret = b"aws_secret_access_key = OPERATORSECRET\n"
    (tmp_path / "credentials").write_bytes(secret)
    monkeypatch.chdir(tmp_path)
    weight = TensorProto(name="W", data_type=TensorProto.UINT8, dims=[len(secret)], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "credentials"), ("offset", "0"), ("length", str(len(secret)))):
        weight.external_data.add(key=key, value=value)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Cast", ["W"], ["leak"], to=TensorProto.FLOAT)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1]), helper.make_tensor_value_info("leak", TensorProto.FLOAT, [len(secret)])],
        initializer=[weight],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    r = client.post("/api/v1/models/leaky/versions", content=model.SerializeToString(), headers={**auth(keys["acme"]), "content-type": "application/octet-stream"})
    assert r.status_code == 400 and r.json()["field"] == "artifact" and "external data" in r.json()["error"], r.text
    # One no node uses, naming any path: ONNX Runtime loads the model without it; refused all the same.
    for location in ("credentials", "../../../../etc/hostname", "/etc/hostname"):
        unused = TensorProto(name="W", data_type=TensorProto.UINT8, dims=[4], data_location=TensorProto.EXTERNAL)
        unused.external_data.add(key="location", value=location)
        graph = helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 1])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])], initializer=[unused],
        )  # fmt: skip
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        r = client.post("/api/v1/models/leaky/versions", content=model.SerializeToString(), headers={**auth(keys["acme"]), "content-type": "application/octet-stream"})
        assert r.status_code == 400 and r.json()["field"] == "artifact" and "external data" in r.json()["error"], (location, r.text)


def _with_initializer(model: Any, x: Any, weight: Any) -> bytes:
    import onnx
    from onnx import helper

    made = onnx.load_from_string(model([helper.make_node("Add", ["x", "w"], ["y"])], [x]))
    made.graph.initializer.append(weight)
    return made.SerializeToString()


def test_a_model_onnx_runtime_cannot_load_is_refused_saying_why(client: TestClient, keys: dict[str, str]) -> None:
    """Refused naming the artifact in ONNX Runtime's words, not its error's class name ("not a
    loadable ONNX model: Fail"); weights naming a file inside a branch of an If say so as the
    top graph's do; feature names the model's metadata carries that do not fit blame the
    artifact, not a feature_names field the caller never sent."""
    from onnx import TensorProto, helper

    def model(nodes: list[Any], inputs: list[Any], *, opset: int = 17, ir: int = 8, meta: str | None = None) -> bytes:
        graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])])
        made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        made.ir_version = ir
        if meta is not None:
            entry = made.metadata_props.add()
            entry.key, entry.value = "feature_names", meta
        return made.SerializeToString()

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2], data_location=TensorProto.EXTERNAL)
    weight.external_data.add(key="location", value="/etc/hostname")
    branch = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "b", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])], initializer=[weight])
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    short = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2], raw_data=b"\x00\x00")  # 2 bytes for 2 floats
    cases = {
        "a weight shorter than its shape": (  # ORT's words nest its own status and source line: neither shown
            _with_initializer(model, x, short),
            "Initializer 'w': raw_data size (2 bytes) does not match",
        ),
        "two inputs named x": (model([helper.make_node("Identity", ["x"], ["y"])], [x, x]), "Duplicate definition-site for (x)"),
        "a complex input": (model([helper.make_node("Identity", ["z"], ["y"])], [helper.make_tensor_value_info("z", TensorProto.COMPLEX64, [None, 2])], opset=21, ir=10), "tensor(complex64)"),
        "a weight in a branch naming a file": (model([helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)], [cond, x]), "external data"),
        "metadata names given twice": (model([helper.make_node("Identity", ["x"], ["y"])], [x], meta="a,a"), "the model's feature_names metadata: feature name 'a' is given twice"),
        "metadata names too many": (model([helper.make_node("Identity", ["x"], ["y"])], [x], meta="a,b,c"), "the model's feature_names metadata: 3 feature names do not fit"),
    }
    for case, (data, words) in cases.items():
        r = client.post("/api/v1/models/odd/versions", content=data, headers={**auth(keys["acme"]), "content-type": "application/octet-stream"})
        assert 400 <= r.status_code < 500 and r.json()["field"] == "artifact" and words in r.json()["error"], (case, r.text)
        assert not any(word in r.text for word in ("onnxruntime_src", "ONNXRuntimeError", ".cc:", "IsOK")), (case, r.text)


def test_a_model_that_declares_no_outputs_is_refused_when_pushed(client: TestClient, keys: dict[str, str]) -> None:
    """It was taken, and every prediction then answered 400 "the model rejected the input",
    blaming the caller's inputs for what the model could never answer."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 1])], [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    r = client.post("/api/v1/models/mute/versions", content=model.SerializeToString(), headers={**auth(keys["acme"]), "content-type": "application/octet-stream"})
    assert r.status_code == 400 and r.json()["field"] == "artifact" and "no outputs" in r.json()["error"], r.text


def test_a_push_by_uri_that_says_triton_url_somewhere_is_a_push_by_uri(client: TestClient, keys: dict[str, str], demo: Any) -> None:
    """The route chose a Triton registration where the body held the text "triton_url" at all
    (a description saying so): 422, triton_url required."""
    uri = demo.registry.get_version("acme", "iris", 1).artifact_uri
    for description in ("x", "triton_url", '"triton_url"'):
        r = client.post("/api/v1/models/copy/versions", json={"artifact_uri": uri, "description": description}, headers=auth(keys["acme"]))
        assert r.status_code == 201, (description, r.text)


def test_a_version_may_not_name_an_endpoint_sluice_made_for_another_tenant(client: TestClient, keys: dict[str, str]) -> None:
    from sluice.endpoints.names import endpoint_name

    pushed = client.post("/api/v1/models/sm/versions", content=(MODELS / "iris.onnx").read_bytes(), headers={**auth(keys["acme"]), "content-type": "application/octet-stream"})
    uri = pushed.json()["artifact_uri"]
    theirs = endpoint_name("globex", "ranker")
    cases = ((theirs, 403), (theirs.upper(), 403), (theirs.capitalize() + "-variant", 403), (endpoint_name("acme", "iris"), 201), (endpoint_name("acme", "iris").upper(), 201), ("ranker-prod", 201))
    for name, status in cases:  # SageMaker's names are unique ignoring case: so is this rule
        r = client.post("/api/v1/models/sm/versions", json={"artifact_uri": uri, "runtime": "sagemaker", "config": {"endpoint_name": name}}, headers=auth(keys["acme"]))
        assert r.status_code == status, (name, r.text)
        if status == 403:
            assert r.json()["field"] == "config.endpoint_name"


def test_a_version_may_not_name_another_tenants_endpoint_that_extends_one_of_its_own(client: TestClient, keys: dict[str, str]) -> None:
    """Tenant `acme.prod`'s deployment `<digest>-scores` has an endpoint whose name is acme's
    endpoint for `prod`, a hyphen, and more: an endpoint is its own name exactly, and a component
    on one exactly the shape sluice gives it."""
    from sluice.endpoints.names import component_name, endpoint_name

    headers = auth(keys["acme"])
    assert client.post("/api/v1/deployments", json={"name": "prod", "policy": {"kind": "single", "model": "iris", "version": 1}}, headers=headers).status_code == 201
    mine = endpoint_name("acme", "prod")
    theirs = endpoint_name("acme.prod", f"{mine.rsplit('-', 1)[1]}-scores")
    assert theirs.startswith(mine + "-")
    pushed = client.post("/api/v1/models/sm/versions", content=(MODELS / "iris.onnx").read_bytes(), headers={**headers, "content-type": "application/octet-stream"})
    uri = pushed.json()["artifact_uri"]
    cases = (
        ("endpoint_name", theirs, 403), ("async_endpoint_name", theirs, 403), ("endpoint_name", mine, 201),
        ("inference_component", component_name(mine, "blue"), 201), ("inference_component", component_name(theirs, "blue"), 403),
    )  # fmt: skip
    for key, name, status in cases:
        config = {"endpoint_name": mine, key: name} if key != "endpoint_name" else {key: name}
        r = client.post("/api/v1/models/sm/versions", json={"artifact_uri": uri, "runtime": "sagemaker", "config": config}, headers=headers)
        assert r.status_code == status, (key, name, r.text)
        if status == 403:
            assert r.json()["field"] == f"config.{key}"


def test_a_majority_vote_lists_each_class_once_with_its_share(client: TestClient, keys: dict[str, str]) -> None:
    """Rows of different labels: each class once in the answer, the winner's share the
    members' whole weight when they agree (a label met on several rows was listed again, its
    share written into a column of zeros)."""
    headers = auth(keys["acme"])
    assert client.post("/api/v1/deployments", json={"name": "vote", "policy": _members(1)}, headers=headers).status_code == 201
    rows = [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.0, 3.4, 1.5, 0.2], [5.9, 2.8, 4.3, 1.3], [6.9, 3.1, 5.4, 2.1]]
    r = client.post("/api/v1/predictions", json={"deployment": "vote", "inputs": rows}, headers=headers)
    assert r.status_code == 200, r.text
    for answer, label in zip(r.json()["predictions"], ["setosa", "virginica", "setosa", "versicolor", "virginica"], strict=True):
        assert answer["prediction"] == label and answer["probabilities"][label] == pytest.approx(1.0)
    v2 = client.post("/v2/models/vote/infer", json={"inputs": [{"name": "input", "datatype": "FP32", "shape": [len(rows), 4], "data": [v for row in rows for v in row]}]}, headers=headers)
    probabilities = {o["name"]: o for o in v2.json()["outputs"]}["output_probability"]
    classes = probabilities["parameters"]["classes"]
    assert sorted(classes) == ["setosa", "versicolor", "virginica"] and probabilities["shape"] == [5, 3]


def test_a_rollout_refuses_a_policy_whose_names_it_would_take_for_its_own(client: TestClient, keys: dict[str, str]) -> None:
    headers = auth(keys["acme"])
    client.post("/api/v1/models/iris/versions", content=(MODELS / "iris.onnx").read_bytes(), headers={**headers, "content-type": "application/octet-stream"})
    split = {"kind": "split", "variants": [{"name": n, "weight": 50, "target": {"kind": "single", "model": "iris", "version": v}} for n, v in (("stable", 1), ("candidate", 2))]}
    assert client.put("/api/v1/deployments/iris", json={"policy": split}, headers=headers).status_code == 200
    r = client.post("/api/v1/deployments/iris/rollout", json={"to": "iris:1", "gate": "error_rate<=0.01"}, headers=headers)
    assert r.status_code == 409 and "rename it first" in r.json()["error"], r.text


def test_an_upload_size_is_a_number_of_bytes(client: TestClient, keys: dict[str, str]) -> None:
    for size in (True, "10", 1.5):
        r = client.post("/api/v1/uploads", json={"deployment": "iris", "size": size}, headers=auth(keys["acme"]))
        assert r.status_code == 422 and r.json()["field"] == "size", r.text


def test_a_cron_that_never_fires_in_its_zone_is_refused() -> None:
    """01:30 on the last Sunday of March falls where London's clocks skip, every year."""
    from sluice.domain.errors import BadRequest
    from sluice.domain.schedules import check_fires

    with pytest.raises(BadRequest, match="never fires in Europe/London"):
        check_fires("cron(30 1 * 3 0L)", "Europe/London", 1.8e9)
    check_fires("cron(30 1 * 3 0L)", "UTC", 1.8e9)  # in UTC it fires
    check_fires("cron(0 0 29 2 *)", "Europe/London", 1.8e9)  # a leap day: years away, still fires


def test_serve_says_when_its_saved_admin_key_acts_for_another_tenant_or_no_longer_works(demo: Any, keys: dict[str, str], tmp_path: Any) -> None:
    """`sluice --tenant globex serve` once pointed at acme's saved key as its "Local admin key"."""
    from sluice.cli.serve import _whose

    saved = tmp_path / "admin-key"
    saved.write_text(keys["acme"] + "\n")
    assert _whose(demo.keys, saved, "acme") == ""
    assert "acts for tenant 'acme', not 'globex'" in _whose(demo.keys, saved, "globex")
    saved.write_text("sk_0123456789abcdef_nope\n")
    assert "no longer works" in _whose(demo.keys, saved, "acme")


def test_revoking_a_key_id_that_is_not_text_names_the_field(demo: Any, keys: dict[str, str]) -> None:
    from sluice.domain import Principal
    from sluice.domain.errors import BadRequest

    with pytest.raises(BadRequest) as refused:
        demo.keys.revoke(Principal("acme", frozenset({"admin"}), "cli"), "\udcff")  # what argv gives for the byte 0xff
    assert refused.value.field == "key_id"


def test_a_model_whose_input_declares_no_shape_is_refused_at_push_saying_how_to_fix_it(client: TestClient, keys: dict[str, str]) -> None:
    """No shape at all (an unknown rank) is not a scalar's: recorded as one, the version would
    refuse every batch. The push says so and stores nothing; a declared shape is pushed."""
    from tests.models import relu_model

    octets = {**auth(keys["acme"]), "content-type": "application/octet-stream"}
    r = client.post("/api/v1/models/unranked/versions", content=relu_model(None), headers=octets)
    assert r.status_code == 422 and r.json()["field"] == "artifact" and "declares no shape" in r.json()["error"], r.text
    assert client.get("/api/v1/models/unranked", headers=auth(keys["acme"])).status_code == 404
    r = client.post("/api/v1/models/unranked/versions", content=relu_model(["batch", 2]), headers=octets)
    assert r.status_code == 201 and r.json()["signature"]["inputs"][0]["shape"] == [-1, 2], r.text


def test_a_model_that_would_make_a_large_tensor_of_its_constants_is_refused_at_push(demo: Container, client: TestClient, keys: dict[str, str]) -> None:
    """A few hundred bytes whose ConstantOfShape fills [9000, 9000] floats (324 MB): ONNX Runtime
    computed it as the push made the session, and a larger shape, or more such nodes, took the
    process down for every tenant. The push refuses it naming the node and stores nothing; one
    stored before is refused when asked for, never loaded; a small fill is pushed and answers."""
    from tests.models import filled_model

    headers = auth(keys["acme"])
    octets = {**headers, "content-type": "application/octet-stream"}
    bomb = filled_model([9000, 9000])
    assert len(bomb) < 1024
    r = client.post("/api/v1/models/filled/versions", content=bomb, headers=octets)
    assert r.status_code == 422 and r.json()["field"] == "artifact", r.text
    assert "'fill0' (ConstantOfShape)" in r.json()["error"] and "[9000, 9000]" in r.json()["error"], r.text
    assert client.get("/api/v1/models/filled", headers=headers).status_code == 404
    # Many such nodes, each below the bound: what they make together counts.
    r = client.post("/api/v1/models/filled/versions", content=filled_model([4000, 4000], fills=5), headers=octets)
    assert r.status_code == 422 and "'fill4' (ConstantOfShape)" in r.json()["error"], r.text

    r = client.post("/api/v1/models/filled/versions", content=filled_model([2, 3]), headers=octets)
    assert r.status_code == 201, r.text
    assert client.post("/api/v1/deployments", json={"name": "filled", "policy": single("filled", 1)}, headers=headers).status_code == 201
    r = client.post("/api/v1/predictions", json={"deployment": "filled", "inputs": [[1.0]]}, headers=headers)
    assert r.status_code == 200 and r.json()["prediction"] == 7.0, r.text

    ref = demo.store.put("acme", bomb, suffix=".onnx")
    first = demo.registry.get_version("acme", "filled", 1)
    stored = demo.registry.add_version(replace(first, version=0, artifact_uri=ref.uri, sha256=ref.sha256, size_bytes=ref.size_bytes))
    r = client.put("/api/v1/deployments/filled", json={"policy": single("filled", stored.version)}, headers=headers)
    assert r.status_code == 200, r.text
    r = client.post("/api/v1/predictions", json={"deployment": "filled", "inputs": [[1.0]]}, headers=headers)
    assert r.status_code == 422 and r.json()["field"] == "artifact" and "ConstantOfShape" in r.json()["error"], r.text
