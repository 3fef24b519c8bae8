"""`sluice optimize` on the demo models: candidates built by ONNX Runtime's tooling, measured
against the original, a verdict under the budget, tuned session options the runtime loads
with, registered candidates with their lineage, a shadow mirror; and its API route."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.domain import Principal, SessionTuning
from sluice.optimize.measure import Timing
from sluice.optimize.report import Budget
from sluice.optimize.service import OptimizeRequest
from tests.integration.conftest import auth

if TYPE_CHECKING:
    from pathlib import Path

    from fastapi.testclient import TestClient

    from sluice.wiring import Container

FAST = Timing(budget_s=0.02, min_runs=3, warmup=1)


def diabetes_rows(path: Path, n: int = 400) -> Path:
    rng = np.random.default_rng(7)
    names = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]
    values = rng.normal(0, 0.05, (n, 10))
    pq.write_table(pa.table({name: values[:, i] for i, name in enumerate(names)}), path)
    return path


def iris_rows(path: Path, n: int = 300) -> Path:
    rng = np.random.default_rng(3)
    lows, highs = [4.3, 2.0, 1.0, 0.1], [7.9, 4.4, 6.9, 2.5]
    lines = ["sepal_length,sepal_width,petal_length,petal_width"]
    lines += [",".join(f"{rng.uniform(lo, hi):.2f}" for lo, hi in zip(lows, highs, strict=True)) for _ in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_neural_network_gets_every_candidate_measured_against_the_original(demo: Container, acme: Principal, tmp_path: Path) -> None:
    from sluice.batch.sample import read_rows

    source = demo.models.get_version(acme, "diabetes", "latest")
    rows = read_rows(diabetes_rows(tmp_path / "d.parquet"), source.signature, limit=400)
    report = demo.optimizer.run(acme, OptimizeRequest("diabetes", source.version, Budget(0.99, 0.5), timing=FAST, tune=False), rows)
    by_name = {row["candidate"]: row for row in report["candidates"]}
    assert list(by_name) == ["original", "graph", "int8-dynamic", "int8-static", "fp16"]
    assert report["rows"] == {"calibration": 200, "evaluation": 200, "held_out": True}
    for name, row in by_name.items():
        assert "skipped" not in row, (name, row)
        assert row["size_bytes"] > 0 and row["p50_ms_b1"] > 0 and row["p50_ms_b64"] > 0
        assert row["max_abs_diff"] >= 0 and row["mean_abs_diff"] <= row["max_abs_diff"]
    assert by_name["original"]["max_abs_diff"] == 0 and by_name["original"]["within_budget"] is True
    # Quantized weights change the values: the differences are real, and the budget judges them.
    assert by_name["int8-dynamic"]["max_abs_diff"] > 0
    assert by_name["int8-static"]["how"]["calibration_rows"] == 200
    for row in by_name.values():
        assert row["within_budget"] is (row["max_abs_diff"] <= 0.5)
    verdict = report["recommendation"]
    assert verdict["candidate"] == "original" or by_name[verdict["candidate"]]["within_budget"]
    assert set(report["triton"]) == {"tensorrt_fp16", "tensorrt_int8"}


def test_a_classifier_of_ml_operators_says_why_candidates_do_not_apply(demo: Container, acme: Principal, tmp_path: Path) -> None:
    from sluice.batch.sample import read_rows

    source = demo.models.get_version(acme, "iris", "latest")
    rows = read_rows(iris_rows(tmp_path / "i.csv"), source.signature, limit=300)
    report = demo.optimizer.run(acme, OptimizeRequest("iris", source.version, timing=FAST, tune=False), rows)
    by_name = {row["candidate"]: row for row in report["candidates"]}
    assert "ai.onnx.ml" in by_name["int8-dynamic"]["skipped"] and "ai.onnx.ml" in by_name["fp16"]["skipped"]
    graph = by_name["graph"]
    assert graph["agreement"] == 1.0 and graph["agreement_of"] == "label (output_label)"
    low, high = graph["agreement_ci95"]
    assert low < 1.0 and high == 1.0  # a Wilson interval on 100 held-out rows
    assert report["triton"]["tensorrt_fp16"]["use"] is False


def _argmax_network(labels: int = 1) -> bytes:
    """Three MatMuls and an ArgMax: an int64 `label` output alone (or `labels` a row, several
    heads), the label a quantized candidate changes on a few rows in a hundred."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(0, 1, shape).astype(np.float32), f"w{i}") for i, shape in enumerate([(32, 256), (256, 256), (256, 10 * labels)])]
    nodes = [
        helper.make_node("MatMul", ["x", "w0"], ["h0"]), helper.make_node("Relu", ["h0"], ["r0"]),
        helper.make_node("MatMul", ["r0", "w1"], ["h1"]), helper.make_node("Relu", ["h1"], ["r1"]),
        helper.make_node("MatMul", ["r1", "w2"], ["logits"]),
    ]  # fmt: skip
    if labels == 1:
        nodes.append(helper.make_node("ArgMax", ["logits"], ["label"], axis=1, keepdims=0))
        out = helper.make_tensor_value_info("label", TensorProto.INT64, ["batch"])
    else:
        shape = helper.make_tensor("heads", TensorProto.INT64, [3], [0, labels, 10])
        nodes += [helper.make_node("Constant", [], ["shape"], value=shape), helper.make_node("Reshape", ["logits", "shape"], ["split"]),
                  helper.make_node("ArgMax", ["split"], ["label"], axis=2, keepdims=0)]  # fmt: skip
        out = helper.make_tensor_value_info("label", TensorProto.INT64, ["batch", labels])
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])], [out], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


@pytest.mark.parametrize("labels", [1, 3])
def test_a_network_answering_its_class_alone_is_held_to_its_label_agreement(container: Container, acme: Principal, labels: int) -> None:
    """Its only output is its label: no agreement was measured, so every candidate was within
    the budget (a quantized one changing 3.5% of labels recommended "within min agreement 0.99");
    several labels a row were counted by element, an agreement of 3.0 that failed the interval."""
    import onnxruntime as ort

    from sluice.optimize.candidates import build_candidates

    data = _argmax_network(labels)
    container.models.push(acme, "clf", data)
    rows = {"x": np.random.default_rng(1).normal(0, 1, (1200, 32)).astype(np.float32)}
    kinds = ("int8-dynamic", "int8-static")
    report = container.optimizer.run(acme, OptimizeRequest("clf", 1, Budget(), kinds=kinds, timing=FAST, tune=False), rows)
    by = {r["candidate"]: r for r in report["candidates"]}
    ev = rows["x"][200:]
    want = ort.InferenceSession(data).run(None, {"x": ev})[0]
    for made in build_candidates(data, calibration={"x": rows["x"][:200]}, kinds=kinds):
        got = ort.InferenceSession(made.data).run(None, {"x": ev})[0]
        same = float(np.mean((got == want).reshape(len(ev), -1).all(axis=1)))
        assert by[made.name]["agreement"] == pytest.approx(same, abs=0.01) and 0 <= by[made.name]["agreement"] <= 1
        assert by[made.name]["within_budget"] == (by[made.name]["agreement"] >= 0.99)
    assert report["recommendation"]["candidate"] == "original" or by[report["recommendation"]["candidate"]]["agreement"] >= 0.99


def test_a_model_of_a_fixed_batch_is_refused_saying_so(container: Container, acme: Principal) -> None:
    """Exported without a dynamic batch (torch.onnx.export without dynamic_axes): the run fed it
    batches of rows and failed with ONNX Runtime's InvalidArgument (a traceback from the CLI)."""
    from onnx import TensorProto, helper

    from sluice.domain.errors import Unprocessable

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    container.models.push(acme, "fixed", model.SerializeToString())
    rows = {"x": np.ones((300, 4), np.float32)}
    with pytest.raises(Unprocessable) as refused:
        container.optimizer.run(acme, OptimizeRequest("fixed", 1, Budget(), timing=FAST, tune=False), rows)
    assert refused.value.field == "model" and "fixed batch of 1" in refused.value.message


def test_a_regressor_is_within_no_budget_until_its_values_are_bounded() -> None:
    from sluice.optimize.report import judge

    rows = [
        {"candidate": "original", "size_bytes": 100, "p50_ms_b64": 10.0},
        {"candidate": "fp16", "size_bytes": 50, "p50_ms_b64": 5.0, "max_abs_diff": 0.2},
    ]
    assert judge([dict(r) for r in rows], Budget())["candidate"] == "original"  # nothing measured its agreement
    assert judge([dict(r) for r in rows], Budget(max_abs_diff=0.5))["candidate"] == "fp16"


def test_cli_registers_with_lineage_shadows_and_records_tuning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from sluice import cli
    from tests.conftest import MODELS
    from tests.support import cli_environment

    with cli_environment(monkeypatch, tmp_path / "home"):
        assert cli.main(["models", "push", "diabetes", str(MODELS / "diabetes_mlp.onnx")]) == 0
        assert cli.main(["deployments", "create", "diabetes", "--model", "diabetes"]) == 0
        data = diabetes_rows(tmp_path / "d.parquet")
        capsys.readouterr()
        code = cli.main(["optimize", "diabetes:1", "--data", str(data), "--seconds", "0.02", "--candidates", "int8-dynamic,fp16",
                         "--register", "fp16", "--shadow", "diabetes"])  # fmt: skip
        out, err = capsys.readouterr()
        assert code == 0, err
        assert "CANDIDATE" in out and "int8-dynamic" in out and "recommended:" in out
        assert "registered fp16 as diabetes version 2 (derived from diabetes:1)" in out
        assert "mirror 'optimized-fp16' -> version 2" in out
        assert cli.main(["models", "show", "diabetes"]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["lineage"] == [{"version": 2, "derived_from": "diabetes:1", "candidate": "fp16",
                                     "tool": "onnxruntime.transformers.float16.convert_float_to_float16"}]  # fmt: skip
        v1, v2 = shown["versions"]
        assert [t["vcpus"] for t in v1["session_options"]] == [1, 2, 3, 4, 5, 6]
        assert [t["memory_mb"] for t in v1["session_options"]] == [1769, 3538, 5307, 7076, 8845, 10240]
        assert v2["optimization"]["measured"]["size_bytes"] == v2["size_bytes"] and v2["session_options"]
        assert cli.main(["deployments", "show", "diabetes"]) == 0
        policy = json.loads(capsys.readouterr().out)["policy"]
        assert policy["kind"] == "shadow" and policy["primary"]["version"] == 1
        assert policy["mirrors"][0]["target"] == {"kind": "single", "model": "diabetes", "version": 2}
        # No candidate keeps the budget (a regressor measured by agreement alone): the report is
        # printed whole and says the deployment is unchanged (it said only that nothing was registered).
        code = cli.main(["optimize", "diabetes:1", "--data", str(data), "--seconds", "0.02", "--candidates", "int8-dynamic",
                         "--no-tune", "--register", "recommended", "--shadow", "diabetes"])  # fmt: skip
        out, err = capsys.readouterr()
        assert code == 0 and "CANDIDATE" in out and "recommended: original" in out, (out, err)
        assert "deployment diabetes unchanged: no candidate was registered to mirror (recommended: original)" in out
        # Bad input: a message and a non-zero exit.
        assert cli.main(["optimize", "diabetes:1", "--data", str(tmp_path / "none.csv")]) == 2
        # --shadow without --register is refused at once, before any candidate is built and measured.
        monkeypatch.setattr("sluice.optimize.service.build_candidates", lambda *_, **__: pytest.fail("candidates were built"))
        assert cli.main(["optimize", "diabetes:1", "--data", str(data), "--shadow", "diabetes", "--no-tune"]) == 2
        assert "--register" in capsys.readouterr().err


def test_the_onnx_runtime_loads_a_version_with_its_tuned_options(container: Container, acme: Principal, iris_bytes: bytes) -> None:
    import asyncio
    import dataclasses

    from sluice.runtimes.onnx import OnnxRuntime

    tuned = (SessionTuning(1, 1769, 1, 1, "sequential"), SessionTuning(2, 3538, 2, 2, "parallel"))
    version = container.models.push(acme, "iris", iris_bytes, session_options=tuned)
    assert container.registry.get_version("acme", "iris", version.version).session_options == tuned

    def loaded_with(settings_update: dict[str, object]) -> dict[str, object]:
        runtime = OnnxRuntime(container.store, container.settings.onnx.model_copy(update=settings_update))
        asyncio.run(runtime.load(version))
        return runtime.cache.peek(version.sha256).options  # type: ignore[union-attr]

    assert loaded_with({"ort_vcpus": 2}) == {"intra_op_threads": 2, "inter_op_threads": 2, "execution_mode": "parallel"}
    assert loaded_with({"ort_vcpus": 1}) == {"intra_op_threads": 1, "inter_op_threads": 1, "execution_mode": "sequential"}
    assert loaded_with({"ort_vcpus": 4})["intra_op_threads"] == 2  # the largest size that fits
    off = {"ort_vcpus": 2, "ort_tuned_sessions": False, "ort_intra_op_threads": 3}
    assert loaded_with(off) == {"intra_op_threads": 3, "inter_op_threads": 1, "execution_mode": "sequential"}
    untuned = dataclasses.replace(version, session_options=())
    runtime = OnnxRuntime(container.store, container.settings.onnx)
    assert runtime.session_options(untuned)["intra_op_threads"] == container.settings.onnx.ort_intra_op_threads


def _wait(client: TestClient, job_id: str, key: str) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job = client.get(f"/api/v1/optimize-jobs/{job_id}", headers=auth(key)).json()
        if job["status"] != "RUNNING":
            return job
        time.sleep(0.2)
    raise AssertionError("the optimize job did not finish")


def test_api_runs_an_optimize_job_for_its_tenant_only(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    imports = demo.settings.home_path / "imports" / "acme"
    imports.mkdir(parents=True)
    data = diabetes_rows(imports / "d.parquet", 300)
    body = {"data_uri": data.as_uri(), "candidates": ["int8-dynamic"], "seconds": 0.02, "tune": False, "register": ["int8-dynamic"]}
    started = client.post("/api/v1/models/diabetes/versions/latest/optimize", json=body, headers=auth(keys["acme"]))
    assert started.status_code == 202, started.text
    job = _wait(client, started.json()["id"], keys["acme"])
    assert job["status"] == "SUCCEEDED", job
    assert [r["candidate"] for r in job["report"]["candidates"]] == ["original", "int8-dynamic"]
    registered = job["report"]["registered"][0]
    version = client.get(f"/api/v1/models/diabetes/versions/{registered['version']}", headers=auth(keys["acme"])).json()
    assert version["derived_from"] == "diabetes:1" and version["optimization"]["candidate"] == "int8-dynamic"
    # Another tenant sees neither the job nor the model.
    assert client.get(f"/api/v1/optimize-jobs/{job['id']}", headers=auth(keys["globex"])).status_code == 404
    other = client.post("/api/v1/models/diabetes/versions/1/optimize", json=body, headers=auth(keys["globex"]))
    assert other.status_code == 404


@pytest.mark.parametrize(
    ("change", "status", "field"),
    [
        ({"data_uri": "file:///etc/passwd.csv"}, 403, "data_uri"),
        # Finding 2 of the security review: an encoded climb into another tenant's imports.
        ({"data_uri": "{imports}/%2e%2e/globex/d.parquet"}, 403, "data_uri"),
        ({"data_uri": "{imports}/%2E%2E/%2e%2e/%2e%2e/registry.db"}, 403, "data_uri"),
        ({"min_agreement": 2}, 422, None),
        ({"candidates": ["int4"]}, 422, None),
        ({"register": ["original"]}, 422, "register"),
        ({"register": ["nope"]}, 422, "register"),
        ({"shadow": "diabetes"}, 400, "shadow"),
        ({"data_uri": "{imports}/x.txt"}, 400, "data_uri"),  # the body has no `format` to name
        ({"data_uri": "{imports}/x.csv.gz"}, 400, "data_uri"),  # nor `input_uri`
        ({"data_uri": "{imports}/"}, 400, "data_uri"),  # a folder
        ({"data_uri": "{imports}/missing.parquet"}, 404, None),
    ],
)
def test_api_refuses_bad_optimize_input_with_a_4xx(
    client: TestClient, keys: dict[str, str], demo: Container, change: dict, status: int, field: str | None  # type: ignore[type-arg]
) -> None:
    imports = (demo.settings.home_path / "imports" / "acme").as_uri()
    (demo.settings.home_path / "imports" / "globex").mkdir(parents=True)
    diabetes_rows(demo.settings.home_path / "imports" / "globex" / "d.parquet", 20)
    body = {"data_uri": "file:///nowhere/x.parquet"} | {k: v.replace("{imports}", imports) if isinstance(v, str) else v for k, v in change.items()}
    answer = client.post("/api/v1/models/diabetes/versions/1/optimize", json=body, headers=auth(keys["acme"]))
    assert answer.status_code == status, answer.text
    if field:
        assert answer.json()["field"] == field


def test_api_optimize_needs_the_admin_scope(client: TestClient, keys: dict[str, str]) -> None:
    body = {"data_uri": "file:///nowhere/x.parquet"}
    answer = client.post("/api/v1/models/diabetes/versions/1/optimize", json=body, headers=auth(keys["acme_predict"]))
    assert answer.status_code == 403
    assert client.post("/api/v1/models/iris/versions/1/optimize", json={}, headers=auth(keys["acme"])).status_code == 422


def test_a_model_deleted_and_made_again_while_it_is_optimized_gets_nothing_registered(
    demo: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job optimizes `m:1`; before it registers, `m` is deleted and made again (its first
    version `m:2`: numbers are never given again). Nothing is registered into the new model,
    refused naming the version it optimized, and its `m:2` stays as pushed."""
    from sluice.batch.sample import read_rows
    from sluice.domain.errors import NotFound
    from tests.conftest import MODELS

    source = demo.models.push(acme, "m", (MODELS / "diabetes_mlp.onnx").read_bytes())
    rows = read_rows(diabetes_rows(tmp_path / "d.parquet"), source.signature, limit=400)
    optimizer = demo.optimizer
    register = optimizer._register

    def made_again(*args: object, **kw: object) -> object:
        demo.models.delete_model(acme, "m")
        demo.models.push(acme, "m", (MODELS / "iris.onnx").read_bytes())
        return register(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(optimizer, "_register", made_again)
    request = OptimizeRequest("m", source.version, Budget(0.99, 0.5), kinds=("graph",), timing=FAST, tune=False, register=("graph",))
    with pytest.raises(NotFound) as refused:
        optimizer.run(acme, request, rows)
    assert refused.value.field == "version" and "no version 1" in refused.value.message, refused.value.message
    assert [v.version for v in demo.models.list_versions(acme, "m")] == [2]
    assert demo.models.get_version(acme, "m", 2).sha256 != source.sha256 and demo.models.get_version(acme, "m", 2).session_options == ()


def test_the_cli_refuses_what_it_would_refuse_late_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A deployment to mirror into that is not there or takes other inputs, a candidate to
    register that is not among those asked, or the original: refused before any candidate is
    built, and nothing registered or tuned (the CLI registered a version, or wrote the tuned
    session options, then failed), as the API refuses them before its job starts."""
    from sluice import cli
    from tests.conftest import MODELS
    from tests.support import cli_environment

    with cli_environment(monkeypatch, tmp_path / "home"):
        assert cli.main(["models", "push", "diabetes", str(MODELS / "diabetes_mlp.onnx")]) == 0
        assert cli.main(["models", "push", "iris", str(MODELS / "iris.onnx")]) == 0
        assert cli.main(["deployments", "create", "iris", "--model", "iris"]) == 0
        data = str(diabetes_rows(tmp_path / "d.parquet"))
        monkeypatch.setattr("sluice.optimize.service.build_candidates", lambda *_, **__: pytest.fail("candidates were built"))
        capsys.readouterr()
        for args, words in [
            (["--register", "fp16", "--shadow", "nowhere"], "deployment 'nowhere' not found"),
            (["--register", "fp16", "--shadow", "iris"], "takes different inputs"),
            (["--candidates", "int8-dynamic", "--register", "fp16"], "not among the candidates asked (int8-dynamic)"),
            (["--register", "original"], "not ['original']"),
        ]:
            assert cli.main(["optimize", "diabetes:1", "--data", data, *args]) == 2, args
            assert words in capsys.readouterr().err, args
        assert cli.main(["models", "show", "diabetes"]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert len(shown["versions"]) == 1 and not shown["versions"][0]["session_options"]


def test_a_model_answering_a_constant_and_a_scalar_beside_its_rows_is_measured(container: Container, acme: Principal) -> None:
    """Outputs without a batch dimension (a constant [3], a scalar) are compared whole: the run
    measured nothing ("zero-dimensional arrays cannot be concatenated"), or joined a constant
    once per batch of rows."""
    from tests.models import with_constants_model

    container.models.push(acme, "constants", with_constants_model())
    rows = {"x": np.random.default_rng(0).normal(size=(300, 3)).astype(np.float32)}
    report = container.optimizer.run(acme, OptimizeRequest("constants", 1, Budget(), kinds=("graph", "fp16"), timing=FAST, tune=False), rows)
    measured = {row["candidate"]: row for row in report["candidates"]}
    assert measured["graph"]["max_abs_diff"] == 0.0 and measured["graph"]["rows"] == 300 - 200  # the rows held out of calibration
    assert measured["fp16"]["max_abs_diff"] < 0.05
