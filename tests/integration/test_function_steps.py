"""Function steps end to end: a sequence whose first step is the tenant's own code and whose
second a small ONNX model, on real parts (SQLite, a folder, ONNX Runtime, the HTTP API).

Locally the code is a Python module the test writes into the tenant's functions folder. On
AWS it is a Lambda function: moto's Lambda needs Docker to invoke, so a real boto3 client
answers through botocore's Stubber, every request checked against Lambda's own input shape,
and the events sluice sends are read back as a handler would read them (JSON, or Arrow IPC
with pyarrow)."""

from __future__ import annotations

import base64
import io
import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from sluice.domain.requests import ArrayInputs
from sluice.inference.bulk import Records, Result, score_many
from sluice.inference.loop import run
from sluice.settings import Settings
from tests.integration.conftest import Tenants
from tests.models import score_model

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from botocore.stub import Stubber

    from sluice.wiring import Container

ACME_ARN = "arn:aws:lambda:eu-west-1:123456789012:function:acme-embed"
GLOBEX_ARN = "arn:aws:lambda:eu-west-1:123456789012:function:globex-embed"
ROWS = [[1.0, 2.0, 3.0], [4.0, -1.0, 0.5]]
MODULE = '''
import asyncio
import pathlib
import time

import numpy as np


def embed(inputs):
    raw = inputs["raw"]
    return {"embedding": np.stack([raw.sum(axis=1), raw.max(axis=1)], axis=1)}  # float64: cast to FP32


def one_row_short(inputs):
    return {"embedding": np.zeros((len(inputs["raw"]) - 1, 2), np.float32)}


def nan(inputs):
    return {"embedding": np.full(inputs["embedding"].shape, np.nan)}


class Odd(BaseException):
    pass


def exits(inputs):
    raise SystemExit(3)


def interrupts(inputs):
    raise KeyboardInterrupt


def cancels(inputs):
    raise asyncio.CancelledError


def odd(inputs):
    raise Odd


def blocked(inputs):  # waits for the test to open the gate, so it answers after any step timeout
    gate = pathlib.Path(__file__).with_name("gate")
    for _ in range(2000):
        if gate.exists():
            break
        time.sleep(0.005)
    return embed(inputs)
'''


SLOW_IMPORT = '''
import pathlib
import time

here = pathlib.Path(__file__)
here.with_name("import-started").touch()
for _ in range(2000):  # a slow first load (a download, a cold cache) until the test opens the gate
    if here.with_name("import-gate").exists():
        break
    time.sleep(0.005)


def embed(inputs):
    return {}
'''


def embedding_of(rows: Any) -> np.ndarray:
    raw = np.asarray(rows, np.float32)
    return np.stack([raw.sum(axis=1), raw.max(axis=1)], axis=1).astype(np.float32)


def by_hand(rows: Any) -> list[float]:
    """The function's work, then the score model (`x @ [1, 2]`)."""
    return (embedding_of(rows) @ np.array([1.0, 2.0], np.float32)).tolist()


def predicted_without_acmes_grant(world: World, deployment: str) -> Any:
    """acme's prediction of ROWS from `deployment` with its functions taken off the operator's
    allowlist (globex's alone left), the allowlist put back after."""
    from sluice.settings import FunctionSettings

    steps = world.container.functions
    assert steps is not None
    kept = steps.settings
    steps.settings = FunctionSettings(function_arns={"globex": [GLOBEX_ARN]})
    try:
        return world.predict(deployment, ROWS)
    finally:
        steps.settings = kept


def chain(function: str, **extra: Any) -> dict[str, Any]:
    step = {
        "kind": "function",
        "function": function,
        "inputs": [{"name": "raw", "datatype": "FP32", "shape": [-1, 3]}],
        "outputs": [{"name": "embedding", "datatype": "FP32", "shape": [-1, 2]}],
        **extra,
    }
    return {"kind": "sequence", "steps": [{"name": "features", "target": step}, {"name": "score", "target": {"model": "score", "version": 1}}]}


class World(Tenants):
    def __init__(self, container: Container, lam: Stubber, events: list[bytes], folder: Path) -> None:
        super().__init__(container)
        self.lam, self.events, self.folder = lam, events, folder

    def predict(self, name: str, rows: Any) -> Any:
        return self.client.post("/api/v1/predictions", json={"deployment": name, "batch": [{"raw": r} for r in rows]}, headers=self.acme)

    def answers(self, payload: bytes, function_error: str | None = None) -> None:
        response: dict[str, Any] = {"StatusCode": 200, "Payload": _body(payload)}
        if function_error:
            response["FunctionError"] = function_error
        self.lam.add_response("invoke", response, {"FunctionName": ACME_ARN, "InvocationType": "RequestResponse", "Payload": _any()})


def _body(data: bytes) -> Any:
    from botocore.response import StreamingBody

    return StreamingBody(io.BytesIO(data), len(data))


def _any() -> Any:
    from botocore.stub import ANY

    return ANY


def answered_while_the_step_runs(world: World, name: str, gate: Path) -> Any:
    """The answer to a prediction whose step is held at `gate`, then the gate opened. The
    request's event loop stays up meanwhile, as a server's does: else the test client, closing
    it after the answer, would wait for the thread the step left behind (up to its 10 s)."""
    import anyio.from_thread

    with anyio.from_thread.start_blocking_portal(**world.client.async_backend) as portal:
        world.client.portal = portal
        try:
            return world.predict(name, ROWS)
        finally:
            world.client.portal = None
            gate.touch()  # the thread the step left behind ends


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    import boto3
    from botocore.stub import Stubber

    from sluice.domain import Principal
    from sluice.runtimes.functions import FunctionSteps
    from sluice.wiring import Container
    from sluice.wiring.adapters import build_registry, build_store
    from sluice.wiring.runtimes import build_runtimes

    home = tmp_path_factory.mktemp("functions")
    (home / "functions" / "acme").mkdir(parents=True)
    (home / "functions" / "globex").mkdir(parents=True)
    (home / "functions" / "acme" / "features.py").write_text(MODULE)
    (home / "functions" / "globex" / "secret.py").write_text("def read(inputs):\n    return inputs\n")
    (home / "functions" / "acme" / "borrowed.py").symlink_to(home / "functions" / "globex" / "secret.py")
    settings = Settings(
        mode="local", home=home / "home", registry="", store="", deployment_cache_ttl_s=0,
        functions_dir=str(home / "functions" / "{tenant}"), function_arns={"acme": [ACME_ARN], "globex": [GLOBEX_ARN]},
        function_arrow_min_bytes=256,
    )  # fmt: skip
    client = boto3.client("lambda", region_name="eu-west-1", aws_access_key_id="test", aws_secret_access_key="test")
    events: list[bytes] = []
    client.meta.events.register("provide-client-params.lambda.Invoke", lambda params, **_: events.append(params["Payload"]))
    store = build_store(settings)
    functions = FunctionSteps(settings.functions, mode="local", client=client)
    container = Container(settings, build_registry(settings), store, build_runtimes(settings, store), functions=functions)
    acme = Principal("acme", frozenset({"admin", "predict"}), "test-acme")
    container.models.push(acme, "score", score_model())
    container.models.push(Principal("globex", frozenset({"admin", "predict"}), "test-globex"), "score", score_model())
    with Stubber(client) as lam:
        yield World(container, lam, events, home / "functions")
        lam.assert_no_pending_responses()


def test_a_module_function_feeds_the_model_over_http_and_in_a_bulk_call(world: World) -> None:
    from sluice.domain import Principal

    assert world.save("local", chain("features:embed")).status_code in (200, 201)
    r = world.predict("local", ROWS)
    assert r.status_code == 200, r.text
    body = r.json()
    assert [p["prediction"] for p in body["predictions"]] == pytest.approx(by_hand(ROWS))
    assert [(s["name"], s.get("kind"), s.get("model")) for s in body["steps"]] == [("features", "function", None), ("score", None, "score")]
    meta = world.client.get("/v2/models/local", headers=world.acme).json()  # a caller sends what the function takes
    assert [(i["name"], i["datatype"], i["shape"]) for i in meta["inputs"]] == [("raw", "FP32", [-1, 3])]
    # The bulk call batch jobs, streams and replay score through: each record as alone.
    acme = Principal("acme", frozenset({"predict"}), "test-acme")
    flat = np.asarray([*ROWS, [0.0, 0.0, 9.0]], np.float32)
    done = run(score_many(world.container.predictions, acme, "local", Records({"raw": flat}, np.asarray([2, 1], np.intp)), max_rows=8))
    assert done.failed == 0
    for position, (start, stop) in enumerate([(0, 2), (2, 3)]):
        outcome = done.by_record()[position]
        assert isinstance(outcome, Result)
        j = list(np.arange(2)[outcome.records]).index(position)
        assert outcome.outputs_of(j)["score"][:, 0].tolist() == pytest.approx(by_hand(flat[start:stop]))


def test_a_lambda_function_gets_json_rows_and_large_batches_as_arrow(world: World) -> None:
    import pyarrow as pa

    assert world.save("remote", chain(ACME_ARN)).status_code in (200, 201)
    world.events.clear()
    embedding = embedding_of(ROWS)
    world.answers(json.dumps({"outputs": [{"name": "embedding", "datatype": "FP32", "shape": [2, 2], "data": embedding.reshape(-1).tolist()}]}).encode())
    r = world.predict("remote", ROWS)
    assert r.status_code == 200, r.text
    assert [p["prediction"] for p in r.json()["predictions"]] == pytest.approx(by_hand(ROWS))
    sent = json.loads(world.events[-1])
    assert sent["format"] == "json" and sent["inputs"] == [{"name": "raw", "datatype": "FP32", "shape": [2, 3], "data": np.asarray(ROWS, np.float32).reshape(-1).tolist()}]

    many = np.random.default_rng(7).normal(size=(64, 3)).astype(np.float32)  # 768 bytes: above the threshold
    table = pa.table({"embedding": pa.FixedSizeListArray.from_arrays(pa.array(embedding_of(many).reshape(-1)), 2)})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    world.answers(json.dumps({"format": "arrow", "arrow": base64.b64encode(sink.getvalue().to_pybytes()).decode()}).encode())
    r = world.predict("remote", many.tolist())
    assert r.status_code == 200, r.text
    assert [p["prediction"] for p in r.json()["predictions"]] == pytest.approx(by_hand(many), rel=1e-5)
    sent = json.loads(world.events[-1])
    assert sent["format"] == "arrow" and "inputs" not in sent
    got = pa.ipc.open_stream(base64.b64decode(sent["arrow"])).read_all()
    assert np.asarray(got.column("raw").to_pylist(), np.float32).tolist() == many.tolist()


@pytest.mark.parametrize(
    ("answer", "function_error", "status", "words"),
    [
        ({"outputs": [{"name": "embedding", "datatype": "FP32", "shape": [2, 3], "data": [0.0] * 6}]}, None, 502, "shape [2, 3]; it declares [-1, 2]"),
        ({"outputs": [{"name": "features", "datatype": "FP32", "shape": [2, 2], "data": [0.0] * 4}]}, None, 502, "output 'features', which it does not declare"),
        ({"errorType": "KeyError", "errorMessage": "'raw' secret detail", "stackTrace": []}, "Unhandled", 502, "failed (KeyError)"),
        ({"errorType": "Sandbox.Timedout", "errorMessage": "Task timed out after 5.00 seconds"}, "Unhandled", 504, "ran past its own Lambda timeout"),
        ({"errorMessage": "2026-12-01T10:00:00.000Z 1f2e Task timed out after 5.00 seconds"}, "Unhandled", 504, "ran past its own Lambda timeout"),
        ({"errorType": "KeyError", "errorMessage": "upstream timed out", "stackTrace": []}, "Unhandled", 502, "failed (KeyError)"),
        ({"errorType": "TimeoutError", "errorMessage": "Task timed out after 5.00 seconds", "stackTrace": []}, "Unhandled", 502, "failed (TimeoutError)"),
        ("not a tensor map", None, 502, "not an object with 'outputs'"),
    ],
    ids=["shape", "undeclared-output", "function-error", "lambda-timeout", "lambda-timeout-untyped", "own-error-saying-timed-out", "own-error-as-lambdas", "malformed"],
)
def test_a_lambda_step_that_fails_or_answers_wrongly_fails_the_request_naming_the_step(
    world: World, answer: Any, function_error: str | None, status: int, words: str
) -> None:
    assert world.save("remote", chain(ACME_ARN)).status_code in (200, 201)
    world.answers(json.dumps(answer).encode(), function_error)
    r = world.predict("remote", ROWS)
    assert r.status_code == status, r.text
    error = r.json()
    assert error["error"].startswith("step 'features': ") and words in error["error"], error
    assert error["details"]["step"] == "features" and "secret detail" not in r.text


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (json.dumps({"outputs": [{"name": "embedding", "datatype": "FP32", "shape": [True], "data": [0.0]}]}).encode(), "shape must be a list of non-negative integers"),
        (b'{"outputs": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "answered JSON nested too deep to read"),
        (json.dumps({"outputs": [{"name": "embedding", "datatype": "FP32", "shape": [2, 2], "data": [1e300, 0.0, 0.0, 0.0]}]}).encode(), "'embedding' is not a list of FP32 values"),
    ],
    ids=["boolean-shape", "deeply-nested", "past-fp32-range"],
)
def test_a_malformed_or_out_of_range_lambda_answer_is_a_502_naming_the_step_not_the_callers_fault(world: World, payload: bytes, words: str) -> None:
    """Not a 500, nor FP32's infinity for 1e300 that the model after it would refuse as the caller's 400."""
    assert world.save("remote", chain(ACME_ARN)).status_code in (200, 201)
    world.answers(payload)
    r = world.predict("remote", ROWS)
    assert r.status_code == 502, r.text
    assert r.json()["details"]["step"] == "features" and words in r.json()["error"], r.json()


def test_a_module_step_that_answers_late_or_wrongly_fails_naming_the_step(world: World) -> None:
    assert world.save("short", chain("features:one_row_short")).status_code in (200, 201)
    r = world.predict("short", ROWS)
    assert (r.status_code, r.json()["details"]["step"]) == (502, "features"), r.text
    assert "answered 1 rows of output 'embedding' for 2 rows" in r.json()["error"]

    assert world.save("late", chain("features:blocked", timeout_s=0.2)).status_code in (200, 201)
    r = answered_while_the_step_runs(world, "late", world.folder / "acme" / "gate")
    assert r.status_code == 504, r.text
    assert r.json()["error"] == "step 'features': function features:blocked gave no answer within 0.2 s"



def test_a_step_still_running_at_the_requests_deadline_fails_the_request_naming_it(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its own timeout (5 s) is far off: the request's deadline stops it, and the answer says which step was running.
    (world.folder / "acme" / "waits.py").write_text(MODULE.replace('with_name("gate")', 'with_name("waits-gate")'))
    monkeypatch.setattr(world.container.predictions.settings, "request_timeout_s", 0.3)
    assert world.save("waits", chain("waits:blocked")).status_code in (200, 201)
    r = answered_while_the_step_runs(world, "waits", world.folder / "acme" / "waits-gate")
    assert r.status_code == 504, r.text
    assert r.json()["error"] == "step 'features' gave no answer within the request's deadline"
    assert (r.json()["details"]["step"], r.json()["details"]["steps"]) == ("features", [])
    world.container.predictions.flush_stats_if_due()
    world.container.predictions.stats.flush()
    stats = world.client.get("/api/v1/deployments/waits/stats", headers=world.acme).json()
    assert {name: (c["requests"], c["errors"]) for name, c in stats["steps"].items()} == {"features": (1, 1)}

@pytest.mark.parametrize(
    ("policy", "field", "words"),
    [
        (chain(GLOBEX_ARN), "policy.steps.0.target.function", "not on tenant 'acme''s allowlist"),
        (chain("secret:read"), "policy.steps.0.target.function", "no module 'secret'"),
        (chain("borrowed:read"), "policy.steps.0.target.function", "no module 'borrowed'"),  # a link out of the folder
        (chain("../globex/secret:read"), "policy.steps.0.target.function", "Lambda function ARN"),
        (json.loads(json.dumps(chain("features:embed")).replace('"FP32", "shape": [-1, 2]', '"FP64", "shape": [-1, 2]')), "policy.steps.1", "it is FP64"),
        ({"kind": "sequence", "steps": [chain("features:embed")["steps"][0], {**chain("features:embed")["steps"][0], "name": "again"}]}, "policy.steps", "at least one model"),
        (chain("features:embedd"), "policy.steps.0.target.function", "module 'features' defines no function 'embedd'"),  # a typo: a 502 on every call
        (chain("features:__loader__"), "policy.steps.0.target.function", "module 'features' defines no function '__loader__'"),  # Python's own
    ],
    ids=["another-tenants-arn", "another-tenants-module", "link-out-of-the-folder", "not-a-target", "signature", "no-model", "no-such-callable", "dunder"],
)
def test_a_function_step_its_tenant_may_not_run_or_that_does_not_fit_is_refused_when_saved(
    world: World, policy: dict[str, Any], field: str, words: str
) -> None:
    r = world.save("refused", policy)
    assert r.status_code == 422, r.text
    assert (r.json()["field"], words in r.json()["error"]) == (field, True), r.text


def test_each_tenant_has_its_own_allowlist_and_it_is_checked_again_on_every_call(world: World) -> None:

    assert world.save("theirs", chain(GLOBEX_ARN), world.globex).status_code in (200, 201)
    assert world.save("theirs", chain(GLOBEX_ARN)).status_code == 422  # not acme's
    assert world.save("remote", chain(ACME_ARN)).status_code in (200, 201)
    r = predicted_without_acmes_grant(world, "remote")
    assert r.status_code == 403, r.text
    assert r.json()["details"]["step"] == "features" and "allowlist" in r.json()["error"]


def test_on_aws_a_module_is_refused_sluice_runs_no_tenant_code_in_its_process(world: World) -> None:
    from sluice.domain.policy import parse_policy
    from sluice.runtimes.functions import FunctionSteps

    node = parse_policy(chain("features:embed")).steps[0].target  # type: ignore[union-attr]
    steps = FunctionSteps(world.container.settings.functions, mode="aws")
    assert "names a Lambda function ARN" in (steps.refusal(node, "acme") or "")
    r = run(_predict_with(world, steps))
    assert r == 403


async def _predict_with(world: World, steps: Any) -> int:
    from sluice.domain import Principal
    from sluice.domain.errors import SluiceError
    from sluice.domain.requests import PredictionRequest

    world.save("local", chain("features:embed"))
    runner = world.container.predictions.runner
    kept, runner.functions = runner.functions, steps
    try:
        await world.container.predictions.predict(Principal("acme", frozenset({"predict"}), "k"), PredictionRequest("local", ArrayInputs({"raw": np.asarray(ROWS, np.float32)})))
    except SluiceError as exc:
        return exc.status
    finally:
        runner.functions = kept
    return 200


def test_a_functions_nan_is_refused_by_the_model_after_it_though_a_transform_before_made_that_name_finite(world: World) -> None:
    """Refused as the function's answer (a 502 naming its step, counted against it), never as
    the caller's bad input: the caller sent finite values, the function made the NaN."""
    embedding = [{"name": "embedding", "datatype": "FP32", "shape": [-1, 2]}]
    clip = {"kind": "transform", "inputs": embedding, "ops": [{"op": "clip", "input": "embedding", "min": -100.0, "max": 100.0}]}
    nan = {"kind": "function", "function": "features:nan", "inputs": embedding, "outputs": embedding}
    policy = {"kind": "sequence", "steps": [{"name": "prep", "target": clip}, {"name": "features", "target": nan}, {"name": "score", "target": {"model": "score", "version": 1}}]}
    assert world.save("nan", policy).status_code in (200, 201)
    r = world.client.post("/api/v1/predictions", json={"deployment": "nan", "batch": [{"embedding": [1, 2]}]}, headers=world.acme)
    assert r.status_code == 502, r.text
    error = r.json()
    assert error["error"].startswith("step 'features': function features:nan answered NaN or infinite values, which step 'score' cannot take")
    assert error["details"]["step"] == "features" and error["code"] != "invalid_input"
    # a NaN the caller sent straight to the model is still the caller's: a 400 naming the input
    direct = {"kind": "sequence", "steps": [{"name": "prep", "target": {**clip, "ops": [{"op": "keep", "names": ["embedding"]}]}}, {"name": "score", "target": {"model": "score", "version": 1}}]}
    assert world.save("direct", direct).status_code in (200, 201)
    mine = world.client.post("/api/v1/predictions", content=b'{"deployment": "direct", "batch": [{"embedding": [NaN, 2]}]}', headers={**world.acme, "content-type": "application/json"})
    assert mine.status_code == 400 and mine.json()["code"] == "invalid_input", mine.text
    # a transform between the function and the model passes the function's tensor on: still its NaN
    kept = {"kind": "transform", "ops": [{"op": "keep", "names": ["embedding"]}]}
    through = {"kind": "sequence", "steps": [{"name": "features", "target": nan}, {"name": "prep", "target": kept}, {"name": "score", "target": {"model": "score", "version": 1}}]}
    assert world.save("through", through).status_code in (200, 201)
    again = world.client.post("/api/v1/predictions", json={"deployment": "through", "batch": [{"embedding": [1, 2]}]}, headers=world.acme)
    assert again.status_code == 502 and again.json()["details"]["step"] == "features", again.text
    # a transform after the function whose op refuses the function's NaN (a cast to an integer
    # type) refuses the function's answer too, not an input the caller never sent
    casts = {"kind": "transform", "ops": [{"op": "cast", "input": "embedding", "datatype": "INT64"}, {"op": "cast", "input": "embedding", "datatype": "FP32"}]}
    cast = {"kind": "sequence", "steps": [{"name": "features", "target": nan}, {"name": "prep", "target": casts}, {"name": "score", "target": {"model": "score", "version": 1}}]}
    assert world.save("cast", cast).status_code in (200, 201)
    refused = world.client.post("/api/v1/predictions", json={"deployment": "cast", "batch": [{"embedding": [1, 2]}]}, headers=world.acme)
    assert refused.status_code == 502, refused.text
    error = refused.json()
    assert error["details"]["step"] == "features" and error["code"] != "invalid_input", error
    assert error["error"].startswith("step 'features': function features:nan answered values step 'prep' cannot take"), error
    # the same cast of a NaN the caller sent is the caller's: a 400 naming the input
    first = {"kind": "sequence", "steps": [{"name": "prep", "target": {**casts, "inputs": embedding}}, {"name": "score", "target": {"model": "score", "version": 1}}]}
    assert world.save("first-cast", first).status_code in (200, 201)
    theirs = world.client.post("/api/v1/predictions", content=b'{"deployment": "first-cast", "batch": [{"embedding": [NaN, 2]}]}', headers={**world.acme, "content-type": "application/json"})
    assert theirs.status_code in (400, 422) and theirs.json()["code"] == "invalid_input", theirs.text


@pytest.mark.parametrize(("function", "kind"), [("exits", "SystemExit"), ("interrupts", "KeyboardInterrupt"), ("cancels", "CancelledError"), ("odd", "Odd")])
def test_a_function_raising_any_base_exception_is_a_502_naming_the_step_and_an_error_record_in_bulk(world: World, function: str, kind: str) -> None:
    from sluice.domain import Principal
    from sluice.inference.bulk import Error

    assert world.save(function, chain(f"features:{function}")).status_code in (200, 201)
    r = world.predict(function, ROWS)
    assert r.status_code == 502, r.text
    assert (r.json()["error"], r.json()["details"]["step"]) == (f"step 'features': function features:{function} failed ({kind})", "features")
    acme = Principal("acme", frozenset({"predict"}), "test-acme")
    done = run(score_many(world.container.predictions, acme, function, Records({"raw": np.asarray(ROWS, np.float32)}, np.asarray([1, 1], np.intp)), max_rows=8))
    assert done.failed == 2 and all(isinstance(o, Error) and o.error.status == 502 for o in done.by_record())


def test_a_tenants_function_that_never_returns_holds_up_no_other_tenants_request(world: World) -> None:
    """Each call left running past its step's timeout keeps a thread: its tenant's own, never
    one of those that check keys and run models (a few: the CPUs and 4)."""
    import asyncio
    import os

    import httpx

    (world.folder / "acme" / "hangs.py").write_text(MODULE.replace('with_name("gate")', 'with_name("hangs-gate")'))
    assert world.save("hangs", chain("hangs:blocked", timeout_s=0.1)).status_code in (200, 201)
    assert world.save("plain", {"kind": "single", "model": "score", "version": 1}, world.globex).status_code in (200, 201)
    shared = min(32, (os.cpu_count() or 1) + 4)  # the event loop's own executor

    async def calls() -> tuple[list[int], int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=world.client.app), base_url="http://sluice") as client:
            try:
                hung = await asyncio.wait_for(asyncio.gather(*(client.post("/api/v1/predictions", json={"deployment": "hangs", "batch": [{"raw": ROWS[0]}]}, headers=world.acme) for _ in range(shared))), 5)
                plain = await asyncio.wait_for(client.post("/api/v1/predictions", json={"deployment": "plain", "inputs": {"embedding": [[1, 2]]}}, headers=world.globex), 5)
            finally:
                (world.folder / "acme" / "hangs-gate").touch()
        return [h.status_code for h in hung], plain.status_code

    assert asyncio.run(calls()) == ([504] * shared, 200)


def test_a_modules_slow_first_load_holds_up_no_other_tenants_function(world: World) -> None:
    import asyncio

    import httpx

    (world.folder / "acme" / "slow.py").write_text(SLOW_IMPORT)
    (world.folder / "globex" / "features.py").write_text(MODULE)
    assert world.save("slow", chain("slow:embed", timeout_s=0.2)).status_code in (200, 201)
    assert world.save("theirs", chain("features:embed", timeout_s=2), world.globex).status_code in (200, 201)

    async def calls() -> tuple[int, int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=world.client.app), base_url="http://sluice") as client:
            theirs = lambda: client.post("/api/v1/predictions", json={"deployment": "theirs", "batch": [{"raw": r} for r in ROWS]}, headers=world.globex)  # noqa: E731
            before = (await theirs()).status_code  # globex's module, loaded
            slow = asyncio.ensure_future(client.post("/api/v1/predictions", json={"deployment": "slow", "batch": [{"raw": ROWS[0]}]}, headers=world.acme))
            try:
                while not (world.folder / "acme" / "import-started").exists():
                    await asyncio.sleep(0.005)
                during = (await theirs()).status_code
            finally:
                (world.folder / "acme" / "import-gate").touch()
                await slow  # acme's own call waited for its module, whatever it then answered
            return before, during

    assert asyncio.run(calls()) == (200, 200)


ODD_ANSWERS = '''
import pathlib
import time

import numpy as np


class Raises:
    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("tenant bug")


class Slow:
    def __init__(self, rows):
        self.rows = rows

    def __array__(self, dtype=None, copy=None):
        pathlib.Path(__file__).with_name("reading").touch()
        time.sleep(3)
        return np.zeros((self.rows, 2), np.float32)


def raises(inputs):
    return {"embedding": Raises()}


def slow(inputs):
    return {"embedding": Slow(len(inputs["raw"]))}


def complex_(inputs):
    return {"embedding": np.full((len(inputs["raw"]), 2), 1 + 5j)}


def dates(inputs):
    return {"embedding": np.full((len(inputs["raw"]), 2), np.datetime64("2024-01-01"))}
'''


@pytest.mark.parametrize(
    ("function", "words"),
    [
        ("raises", "answered something that could not be read (RuntimeError)"),
        ("complex_", "answered output 'embedding' with values that are not FP32"),  # not cut to its real part
        ("dates", "answered output 'embedding' with values that are not FP32"),  # not read as days since 1970
    ],
)
def test_a_module_answer_that_cannot_be_read_or_is_no_fp32_is_a_502_naming_the_step(world: World, function: str, words: str) -> None:
    (world.folder / "acme" / "odd_answers.py").write_text(ODD_ANSWERS)
    assert world.save(f"odd-{function}", chain(f"odd_answers:{function}")).status_code in (200, 201)
    r = world.predict(f"odd-{function}", ROWS)
    assert r.status_code == 502, r.text
    assert r.json()["details"]["step"] == "features" and r.json()["error"] == f"step 'features': function odd_answers:{function} {words}"


def test_a_module_answer_slow_to_read_is_held_to_the_steps_timeout_and_holds_up_no_other_tenant(world: World) -> None:
    """Reading the tenant's answer runs its code (an `__array__`): in its own thread, within
    the step's timeout, while another tenant's request is answered meanwhile."""
    import asyncio
    import threading
    import time

    import httpx

    reading = world.folder / "acme" / "reading"
    (world.folder / "acme" / "odd_answers.py").write_text(ODD_ANSWERS)
    assert world.save("odd-slow", chain("odd_answers:slow", timeout_s=0.2)).status_code in (200, 201)
    assert world.save("plain", {"kind": "single", "model": "score", "version": 1}, world.globex).status_code in (200, 201)

    async def calls() -> tuple[int, float]:
        loop = asyncio.get_running_loop()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=world.client.app), base_url="http://sluice") as client:
            took: list[float] = []

            def globex_while_acme_is_read() -> None:  # another thread: sends globex's request once acme's answer is being read
                while not reading.exists():
                    time.sleep(0.005)
                started = time.monotonic()
                plain = asyncio.run_coroutine_threadsafe(client.post("/api/v1/predictions", json={"deployment": "plain", "inputs": {"embedding": [[1, 2]]}}, headers=world.globex), loop)
                assert plain.result(30).status_code == 200
                took.append(time.monotonic() - started)

            other = threading.Thread(target=globex_while_acme_is_read)
            other.start()
            slow = await client.post("/api/v1/predictions", json={"deployment": "odd-slow", "batch": [{"raw": ROWS[0]}]}, headers=world.acme)
            await asyncio.to_thread(other.join, 30)
            return slow.status_code, took[0]

    status, globex_took = asyncio.run(calls())
    assert status == 504  # the step's timeout, though the answer was still being read
    assert globex_took < 1.5  # not the 3 s acme's answer takes to read


NAN_LABELS = '''
import numpy as np


def nan_label(inputs):
    return {"label": np.full(len(inputs["score"]), np.nan, np.float32)}
'''


def test_a_majority_vote_over_a_members_nan_labels_is_a_502_naming_the_member(world: World) -> None:
    def member(name: str) -> dict[str, Any]:
        label = {"kind": "function", "function": "labels:nan_label", "inputs": [{"name": "score", "datatype": "FP32", "shape": [-1, 1]}],
                 "outputs": [{"name": "label", "datatype": "FP32", "shape": [-1], "role": "label"}]}  # fmt: skip
        return {"name": name, "target": {"kind": "sequence", "steps": [{"name": "score", "target": {"model": "score", "version": 1}}, {"name": "label", "target": label}]}}

    (world.folder / "acme" / "labels.py").write_text(NAN_LABELS)
    assert world.save("votes", {"kind": "ensemble", "aggregator": "majority", "members": [member("a"), member("b")]}).status_code in (200, 201)
    r = world.client.post("/api/v1/predictions", json={"deployment": "votes", "batch": [{"embedding": [1, 2]}]}, headers=world.acme)
    assert r.status_code == 502, r.text
    assert r.json()["details"]["member"] == "a" and "member 'a' answered a NaN label" in r.json()["error"]


def test_a_function_taken_off_the_allowlist_is_refused_even_where_its_answer_is_cached(world: World) -> None:
    """Taking an ARN off the list stops it at once, cached answers too: a deployment whose
    cache holds the step's earlier answer runs the policy instead, which refuses it by name."""

    r = world.client.post(
        "/api/v1/deployments", json={"name": "cached-fn", "policy": chain(ACME_ARN, deterministic=True), "cache": {"ttl_s": 600, "max_entries": 100}},
        headers=world.acme,
    )  # fmt: skip
    assert r.status_code in (200, 201), r.text
    world.answers(json.dumps({"outputs": [{"name": "embedding", "datatype": "FP32", "shape": [2, 2], "data": embedding_of(ROWS).reshape(-1).tolist()}]}).encode())
    assert world.predict("cached-fn", ROWS).status_code == 200
    assert world.predict("cached-fn", ROWS).json().get("cached") is True  # kept, and answered from the cache
    refused = predicted_without_acmes_grant(world, "cached-fn")
    assert refused.status_code == 403 and refused.json()["details"]["step"] == "features", refused.text


HOLDS = '''
import pathlib
import time
import uuid

import numpy as np


def hold(inputs):  # counts itself in, then waits for the test's gate (past any timeout)
    here = pathlib.Path(__file__)
    here.with_name(f"held-{uuid.uuid4().hex}").touch()
    for _ in range(2000):
        if here.with_name("mirror-gate").exists():
            break
        time.sleep(0.005)
    raw = inputs["raw"]
    return {"embedding": np.stack([raw.sum(axis=1), raw.max(axis=1)], axis=1)}
'''


def test_a_mirror_whose_function_steps_hang_holds_up_none_of_its_primarys(world: World) -> None:
    """Shadows promise a slow mirror never touches the primary's answer: a mirror's function
    steps run on threads of their own, so mirrors whose calls never return (more of them than a
    tenant has threads) leave the primary's own steps as quick as ever. They shared the
    tenant's threads: the primary's step queued behind the mirrors' and its requests hit their
    deadline."""
    import asyncio

    import httpx

    folder = world.folder / "acme"
    (folder / "holds.py").write_text(HOLDS)
    threads = world.container.settings.functions.function_threads
    mirror = {"name": "held", "target": chain("holds:hold", timeout_s=0.2)}
    assert world.save("shadowed", {"kind": "shadow", "primary": chain("features:embed", timeout_s=2), "mirrors": [mirror]}).status_code in (200, 201)

    async def calls() -> list[int]:
        answered = []
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=world.client.app), base_url="http://sluice") as client:
            try:
                for n in range(1, threads + 3):
                    r = await asyncio.wait_for(client.post("/api/v1/predictions", json={"deployment": "shadowed", "batch": [{"raw": ROWS[0]}]}, headers=world.acme), 5)
                    answered.append(r.status_code)
                    for _ in range(400):  # until this request's mirror holds a thread (or there are none left for it)
                        if len(list(folder.glob("held-*"))) >= min(n, threads):
                            break
                        await asyncio.sleep(0.005)
            finally:
                (folder / "mirror-gate").touch()
        return answered

    assert asyncio.run(calls()) == [200] * (threads + 2)
    assert len(list(folder.glob("held-*"))) >= threads  # the mirrors did hold every thread they had
