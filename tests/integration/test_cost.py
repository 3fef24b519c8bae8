"""`GET /api/v1/deployments/{name}/cost` and `sluice cost`: a deployment's measured latency
priced on each runtime, the recommendation under a p99 target, and the curves as a PNG."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient

from tests.conftest import MODELS, REPO
from tests.integration.conftest import auth, run_cli

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.wiring import Container

ROW = [[5.9, 3.0, 5.1, 1.8]]


def _traffic(client: TestClient, key: str, n: int = 5) -> None:
    for _ in range(n):
        r = client.post("/api/v1/predictions", json={"deployment": "iris", "inputs": ROW}, headers=auth(key))
        assert r.status_code == 200


def test_the_route_prices_every_runtime_from_the_deployments_statistics(
    client: TestClient, keys: dict[str, str], demo: Container
) -> None:
    _traffic(client, keys["acme"])
    stats = client.get("/api/v1/deployments/iris/stats", headers=auth(keys["acme"])).json()["overall"]
    # The target is far above any p99 a loaded machine gives these five requests (the first one
    # loads the model): the recommendation must not depend on how busy the machine is.
    r = client.get("/api/v1/deployments/iris/cost", params={"rps": 20, "p99_ms": 60_000}, headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    report = r.json()
    assert report["runs_on"] == ["onnx"] and report["prices"]["region"] == "us-east-1" and report["prices"]["as_of"]
    onnx = report["latency"]["onnx"]
    assert (onnx["p50_ms"], onnx["p99_ms"]) == (stats["latency_ms"]["p50"], stats["latency_ms"]["p99"])
    assert onnx["source"] == "statistics: 5 requests"
    assert report["latency"]["sagemaker"]["source"].startswith("assumed")
    by_runtime = {o["runtime"]: o for o in report["options"]}
    assert set(by_runtime) == {"onnx", "lambda-managed", "sagemaker", "sagemaker-serverless", "sagemaker-async", "batch"}
    costs = [o["usd_per_million"] for o in report["options"]]
    assert costs == sorted(costs)
    assert report["recommendation"]["runtime"] == "onnx"  # the same latency for all: Lambda alone is cheapest
    # At sustained traffic the instances' hours, spread over more requests, cost less than
    # Lambda's GB-seconds: on demand below the break-even rate, managed instances above.
    spans = report["cheapest_by_rate"]
    assert [s["runtime"] for s in spans] == ["onnx", "lambda-managed"]
    assert 20 < spans[0]["to_rps"] == spans[1]["from_rps"] < spans[1]["to_rps"]


def test_a_benchmarks_latency_changes_the_recommendation(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    _traffic(client, keys["acme"])
    params = {"rps": 3000, "p99_ms": 20, "sagemaker_p50_ms": 4.55, "sagemaker_p99_ms": 11.5, "onnx_p50_ms": 60, "onnx_p99_ms": 90}
    report = client.get("/api/v1/deployments/iris/cost", params=params, headers=auth(keys["acme"])).json()
    assert report["latency"]["onnx"]["source"] == "given"
    assert report["recommendation"]["runtime"] == "sagemaker"
    realtime = next(o for o in report["options"] if o["runtime"] == "sagemaker")
    assert realtime["instances"] >= 1 and 0 < realtime["utilization"] <= 1


def test_bad_parameters_are_4xx_naming_the_field(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    for params, status, field in (
        ({"rps": 0}, 422, "rps"),
        ({"p99_ms": -1}, 422, "p99_ms"),
        ({"region": "../../etc"}, 400, "region"),
        ({"instance_type": "ml.z9.huge", "onnx_p50_ms": 1}, 400, "instance_type"),
        ({"onnx_p99_ms": 3}, 400, "onnx_p50_ms"),
        ({"cpu_ms": 0}, 422, "cpu_ms"),
        ({"managed_instance_type": "ml.g5.xlarge", "onnx_p50_ms": 1}, 400, "managed_instance_type"),
    ):
        r = client.get("/api/v1/deployments/iris/cost", params=params, headers=auth(keys["acme"]))
        assert r.status_code == status and r.json()["field"] == field, (params, r.text)
    # no traffic yet and no latency given: nothing to price
    r = client.get("/api/v1/deployments/iris/cost", headers=auth(keys["acme"]))
    assert (r.status_code, r.json()["field"]) == (422, "latency")
    assert client.get("/api/v1/deployments/iris/cost", headers=auth(keys["acme_predict"])).status_code == 403


# the CLI -----------------------------------------------------------------------------------
def test_sluice_cost_prints_the_table_and_draws_the_curves(
    cli_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0
    assert run_cli(capsys, "deployments", "create", "iris", "--model", "iris")[0] == 0
    code, out, err = run_cli(capsys, "cost", "iris", "--latency", "onnx=2/9", "--latency", "sagemaker=4.5/11.5", "--p99-ms", "10")
    assert code == 0, err
    assert "recommended: onnx" in out and "prices as of" in out
    assert "cheapest at a steady rate (p99 at or under 10 ms):" in out and "req/s: lambda-managed" in out
    code, out, _ = run_cli(capsys, "cost", "iris", "--latency", "onnx=2/9", "--rps", "5", "--json")
    report = json.loads(out)
    assert report["workload"]["rps"] == 5.0 and report["latency"]["sagemaker"]["source"].startswith("assumed")
    # At a request every 10,000 s the asynchronous endpoint is scaled to zero for each: no p99, meets nothing
    code, out, err = run_cli(capsys, "cost", "iris", "--latency", "onnx=2/9", "--rps", "0.0001", "--p99-ms", "2000")
    assert code == 0, err
    (row,) = [line.split() for line in out.splitlines() if line.startswith("sagemaker-async")]
    assert row[2:4] == ["-", "no"], row
    code, _, err = run_cli(capsys, "cost", "iris", "--latency", "onnx=2/9", "--plot", str(tmp_path / "c.svg"))
    assert code == 2 and "[plot]" in err
    code, _, err = run_cli(capsys, "cost", "iris", "--latency", "gpu=2/9")
    assert code == 2 and "[latency]" in err

    gpu = REPO / "benchmarks" / "gpu" / "results" / "gpu-e2e-sluice-triton-h100.json"
    code, out, err = run_cli(capsys, "cost", "iris", "--latency", "onnx=12/40", "--benchmark", str(gpu), "--rps", "2000", "--json")
    assert code == 0, err
    report = json.loads(out)
    measured = json.loads(gpu.read_text())["latency"]
    assert report["latency"]["sagemaker"]["p50_ms"] == measured["concurrency_1"]["sluice_json"]["p50_ms"]
    assert report["latency"]["sagemaker"]["source"].startswith("benchmark gpu-e2e-sluice-triton-h100.json")
    assert report["workload"]["instance_rps"] == measured["concurrency_16"]["sluice_json"]["rps"]
    # A run with both encodings: the binary one (what tritonclient sends) is the one priced.
    both = REPO / "benchmarks" / "gpu" / "results" / "gpu-e2e-sluice-triton-h100-2026-11-26.json"
    code, out, err = run_cli(capsys, "cost", "iris", "--latency", "onnx=12/40", "--benchmark", str(both), "--json")
    assert code == 0, err
    report, measured = json.loads(out), json.loads(both.read_text())["latency"]
    assert report["latency"]["sagemaker"]["p50_ms"] == measured["concurrency_1"]["sluice_binary"]["p50_ms"]
    assert "sluice serve, binary" in report["latency"]["sagemaker"]["source"]
    # A SageMaker latency given on the command line wins over the benchmark's, and says so.
    code, out, err = run_cli(capsys, "cost", "iris", "--latency", "onnx=12/40", "--latency", "sagemaker=30/90", "--benchmark", str(both), "--json")
    assert code == 0, err
    sagemaker = json.loads(out)["latency"]["sagemaker"]
    assert (sagemaker["p50_ms"], sagemaker["p99_ms"], sagemaker["source"]) == (30.0, 90.0, "given")
    code, _, err = run_cli(capsys, "cost", "iris", "--benchmark", str(MODELS / "iris.onnx"))
    assert code == 2 and "[benchmark]" in err

    pytest.importorskip("matplotlib")
    png = tmp_path / "curves.png"
    code, out, err = run_cli(capsys, "cost", "iris", "--latency", "onnx=2/9", "--plot", str(png))
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"curves: {png}" in out


def test_odd_cost_inputs_are_refused_naming_the_field(cli_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No negative or NaN price, and no traceback for a malformed benchmark or price file."""
    assert run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0
    assert run_cli(capsys, "deployments", "create", "iris", "--model", "iris")[0] == 0
    for row_ms in ("-5", "0", "nan", "inf"):
        code, out, err = run_cli(capsys, "cost", "iris", "--latency", "onnx=12/40", "--batch-row-ms", row_ms, "--json")
        assert (code, out) == (2, "") and "[batch_row_ms]" in err, row_ms
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "shallow.json").write_text(json.dumps({"latency": {"concurrency_1": {"sluice_json": {"p50_ms": 4}},
                                                                   "concurrency_16": {"sluice_json": []}}}))  # fmt: skip
    for bench, said in (("list.json", "is an array"), ("shallow.json", "concurrency_16.sluice_json is an array")):
        code, _, err = run_cli(capsys, "cost", "iris", "--benchmark", str(tmp_path / bench))
        assert code == 2 and "[benchmark]" in err and said in err, err
    prices = json.loads((REPO / "functions" / "sluice" / "cost" / "prices" / "us-east-1.json").read_text())
    del prices["lambda"]["arm64"]
    (tmp_path / "prices.json").write_text(json.dumps(prices))
    code, _, err = run_cli(capsys, "cost", "iris", "--latency", "onnx=12/40", "--prices", str(tmp_path / "prices.json"), "--architecture", "arm64")
    assert code == 2 and "[prices]" in err and "lambda.arm64.gb_second" in err


def test_the_plot_names_the_extra_when_matplotlib_is_missing(
    cli_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: object, **kwargs: object) -> object:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    assert run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0
    assert run_cli(capsys, "deployments", "create", "iris", "--model", "iris")[0] == 0
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    code, _, err = run_cli(capsys, "cost", "iris", "--latency", "onnx=2/9", "--plot", str(tmp_path / "c.png"))
    assert code == 2 and "sluice[cost]" in err and not (tmp_path / "c.png").exists()


def test_no_lambda_layer_carries_matplotlib() -> None:
    for requirements in (REPO / "layers").glob("*/requirements.txt"):
        assert "matplotlib" not in requirements.read_text().lower()
