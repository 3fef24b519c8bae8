"""The cost arithmetic, against figures worked out by hand from the us-east-1 price file."""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.cost import model
from sluice.cost.prices import PRICES as PRICE_PATHS
from sluice.cost.prices import PRICES_DIR, load_prices, regions
from sluice.domain.errors import BadRequest

PRICES = load_prices("us-east-1")
TEN_MS = model.Measured(10.0, 30.0, "given")
WORK = model.Workload(rps=10.0)


def test_the_price_file_is_dated_and_says_where_its_figures_come_from() -> None:
    assert regions() == ["us-east-1"]
    assert PRICES["as_of"] == "2026-11-26" and "pricing" in PRICES["source"]
    assert PRICES["verified"] is False  # until someone checks the live pages


def test_lambda_in_process_pays_requests_and_gb_seconds() -> None:
    option = model.onnx(PRICES, WORK, TEN_MS)
    # 2 GB x 10 ms x 1e6 x $0.0000166667 + $3.50 (REST API) + $0.20 (Lambda requests)
    assert option.breakdown["lambda_duration"] == pytest.approx(0.333334)
    assert option.usd_per_million == pytest.approx(4.033334)
    assert option.p99_ms == 30.0
    # Lambda bills whole milliseconds: 10.2 ms is billed as 11
    assert model.onnx(PRICES, WORK, model.Measured(10.2, 30, "given")).breakdown["lambda_duration"] == pytest.approx(0.3666674)


def test_a_real_time_endpoint_pays_instance_hours_at_the_traffics_utilization() -> None:
    option = model.realtime(PRICES, WORK, TEN_MS)
    # 4 in flight / 10 ms = 400 req/s an instance: one ml.g5.xlarge at $1.408/h for 36,000 requests an hour
    assert option.instances == 1 and option.utilization == pytest.approx(10 / 400)
    assert option.breakdown["instances"] == pytest.approx(1.408 / 36_000 * 1e6)
    assert option.usd_per_million == pytest.approx(1.408 / 36_000 * 1e6 + 4.033334)
    busy = model.realtime(PRICES, replace(WORK, rps=1000.0), TEN_MS)
    assert busy.instances == 4  # 1000 / (400 x 0.7) -> 4
    assert model.realtime(PRICES, replace(WORK, instance_rps=50.0), TEN_MS).instances == 1
    with pytest.raises(BadRequest) as caught:
        model.realtime(PRICES, replace(WORK, instance_type="ml.z9.huge"), TEN_MS)
    assert caught.value.field == "instance_type"


def test_an_async_endpoint_pays_two_front_door_requests_s3_and_scales_to_zero() -> None:
    option = model.asynchronous(PRICES, WORK, TEN_MS)
    submit, poll = 3.7 + 2 * 0.05 * 1e6 * 0.0000166667, 3.7 + 2 * 0.02 * 1e6 * 0.0000166667
    assert option.breakdown["s3_requests"] == pytest.approx((3 * 0.005 + 3 * 0.0004) * 1000)
    assert option.usd_per_million == pytest.approx(1.408 / 36_000 * 1e6 + submit + poll + 16.2)
    assert option.p99_ms == 1030.0  # the queue and a poll interval on top
    # One request every 10,000 s: the instance is up 900 s of each, 9% of the time.
    rare = model.asynchronous(PRICES, replace(WORK, rps=1e-4), TEN_MS)
    assert rare.instances == pytest.approx(0.09)
    assert rare.breakdown["instances"] == pytest.approx(1.408 * 0.09 / 0.36 * 1e6)
    always_on = model.realtime(PRICES, replace(WORK, rps=1e-4), TEN_MS)
    assert rare.usd_per_million < always_on.usd_per_million  # where scaling to zero pays
    # ...and where each request finds it scaled to zero and waits an instance's start: no p99 a
    # target can be met by (it read the model's p99 and a poll, and met a 2 s target)
    assert rare.p99_ms is None and "scaled to zero" in " ".join(rare.notes)
    assert model.recommend([rare], 2000) is None


def test_batch_pays_transitions_and_score_time_and_is_not_interactive() -> None:
    option = model.batch(PRICES, WORK, TEN_MS)
    assert option.breakdown["step_functions"] == pytest.approx(22 * 0.025 / 1000)  # 4 chunks of 250,000 rows
    assert option.breakdown["lambda_duration"] == pytest.approx(3008 / 1024 * 0.010 * 1e6 * 0.0000166667)
    assert not option.interactive and option.p99_ms is None
    faster = model.batch(PRICES, replace(WORK, batch_row_ms=0.01), TEN_MS)
    assert faster.usd_per_million < option.usd_per_million / 100


def test_the_recommendation_is_the_cheapest_interactive_option_meeting_the_target() -> None:
    latencies = {"onnx": model.Measured(40, 80, "s"), "sagemaker": model.Measured(4, 11, "s")}
    found = model.options(PRICES, WORK, latencies)  # 10 req/s: an instance mostly idle
    assert {o.runtime for o in found} == {"onnx", "lambda-managed", "sagemaker", "sagemaker-serverless", "sagemaker-async", "batch"}
    assert model.recommend(found, None).runtime == "onnx"
    assert model.recommend(found, 20).runtime == "sagemaker"
    assert model.recommend(found, 5) is None


def test_curves_cover_every_runtime_at_every_rate() -> None:
    rates = [0.001, 1.0, 1000.0]
    curves = model.curves(PRICES, WORK, {"onnx": TEN_MS, "sagemaker": TEN_MS}, rates)
    assert set(curves) == set(model.RUNTIMES) and all(len(v) == 3 for v in curves.values())
    assert curves["sagemaker"][0] > curves["sagemaker"][2]  # fixed instances spread over more requests
    assert curves["onnx"][0] == curves["onnx"][2]  # per request only


def test_a_price_file_of_ones_own_and_bad_ones(tmp_path: Path) -> None:
    mine = json.loads((PRICES_DIR / "us-east-1.json").read_text()) | {"region": "eu-west-1"}
    (tmp_path / "p.json").write_text(json.dumps(mine))
    assert load_prices("ignored", tmp_path / "p.json")["region"] == "eu-west-1"
    (tmp_path / "bad.json").write_text("{}")
    for region, path, field in (("../etc", None, "region"), ("eu-west-9", None, "region"), ("x", tmp_path / "bad.json", "prices")):
        with pytest.raises(BadRequest) as caught:
            load_prices(region, path)
        assert caught.value.field == field


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(PRICE_PATHS),
    st.sampled_from([None, "0.2", -1, math.nan, math.inf, True, [0.2], {"x": 0.2}]),
)
def test_a_price_file_missing_or_spoiling_any_price_is_refused_naming_it(where: str, bad: object) -> None:
    """Every price the model reads is there and a number at least 0, or the file is refused,
    never a KeyError or a negative cost later (`--architecture arm64` reading `lambda.arm64`)."""
    import tempfile

    prices = json.loads((PRICES_DIR / "us-east-1.json").read_text())
    *path, last = where.split(".")
    node = prices
    for key in path:
        node = node[key]
    if last == "*":
        node[next(iter(node))] = bad
    elif bad is None:
        del node[last]
    else:
        node[last] = bad
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "p.json"
        file.write_text(json.dumps(prices))  # NaN and Infinity too, as Python's json writes them
        with pytest.raises(BadRequest, match=re.escape(where)) as caught:
            load_prices("us-east-1", file)
    assert caught.value.field == "prices"


def test_managed_instances_pay_instance_hours_for_the_cpu_and_a_management_fee() -> None:
    option = model.managed(PRICES, WORK, TEN_MS)
    # 10 ms of CPU a request: a c7i.xlarge (4 vCPUs) serves 4 x 0.7 x 100 = 280 req/s; 10 req/s
    # still pays Lambda's three instances (one per zone), $0.1785/h each, 15% fee on top.
    assert option.instances == 3 and option.utilization == pytest.approx(10 / 840)
    hours = 3 * 0.1785 / 36_000 * 1e6
    assert option.breakdown == pytest.approx({"api_gateway": 3.5, "lambda_requests": 0.2, "instances": hours, "management_fee": 0.15 * hours})
    assert "lambda_duration" not in option.breakdown  # no GB-seconds on managed instances
    busy = model.managed(PRICES, replace(WORK, rps=1000.0), TEN_MS)
    assert busy.instances == 4 and busy.utilization == pytest.approx(1000 / 1120)
    # The CPU a request uses, not its wall time, sizes the fleet: half the CPU, half the instances.
    lean = model.managed(PRICES, replace(WORK, rps=2000.0, cpu_ms=5.0), TEN_MS)
    assert lean.instances == math.ceil(2000 / 560) == model.managed(PRICES, replace(WORK, rps=1000.0), TEN_MS).instances
    assert model.managed(PRICES, replace(WORK, architecture="arm64"), TEN_MS).how.endswith("c7g.xlarge")
    for kind in ("c7i.metal", "ml.g5.xlarge"):
        with pytest.raises(BadRequest) as caught:
            model.managed(PRICES, replace(WORK, managed_instance_type=kind), TEN_MS)
        assert caught.value.field == "managed_instance_type"


def test_a_serverless_endpoint_pays_its_memorys_gb_seconds_and_the_data() -> None:
    option = model.serverless(PRICES, WORK, TEN_MS)
    assert option.breakdown["serverless_compute"] == pytest.approx(2 * 0.010 * 1e6 * 0.00002)
    assert option.breakdown["data_processed"] == pytest.approx(2 / 1024 / 1024 * 1e6 * 0.016)
    assert option.usd_per_million == pytest.approx(4.033334 + 0.4 + 2 / 1024 / 1024 * 1e6 * 0.016)


def test_the_break_even_rate_of_lambda_and_managed_instances_worked_by_hand() -> None:
    from sluice.cost import breakeven

    same = {"onnx": TEN_MS, "sagemaker": TEN_MS}
    found = breakeven.ranges(breakeven.cheapest_at(PRICES, WORK, same, None))
    assert [r["runtime"] for r in found] == ["onnx", "lambda-managed"]
    # Lambda's 0.333334 $/M of GB-seconds = three instances' hours and fee spread over r req/s.
    edge = 3 * 0.1785 * 1.15 * 1e6 / (3600 * 0.333334)
    assert found[0]["to_rps"] == pytest.approx(edge, rel=1e-5) == pytest.approx(found[1]["from_rps"])
    assert (found[0]["from_rps"], found[-1]["to_rps"]) == (breakeven.LOW, breakeven.HIGH)
    # A p99 target nothing meets: one range, no runtime.
    assert breakeven.ranges(breakeven.cheapest_at(PRICES, WORK, same, 5.0)) == [
        {"runtime": None, "from_rps": breakeven.LOW, "to_rps": breakeven.HIGH}
    ]


@settings(max_examples=12, deadline=None)
@given(
    onnx_ms=st.floats(0.5, 200), sagemaker_ms=st.floats(0.5, 200), instance_rps=st.none() | st.floats(1, 5000),
    cpu_share=st.floats(0.05, 1), memory_mb=st.sampled_from([1024, 2048, 4096]),
)  # fmt: skip
def test_the_cheapest_runtime_by_rate_is_ordered_and_holds_where_it_says(
    onnx_ms: float, sagemaker_ms: float, instance_rps: float | None, cpu_share: float, memory_mb: int
) -> None:
    from sluice.cost import breakeven

    work = replace(WORK, instance_rps=instance_rps, memory_mb=memory_mb, cpu_ms=onnx_ms * cpu_share)
    latencies = {"onnx": model.Measured(onnx_ms, 2 * onnx_ms, "h"), "sagemaker": model.Measured(sagemaker_ms, 2 * sagemaker_ms, "h")}
    best = breakeven.cheapest_at(PRICES, work, latencies, None)
    found = breakeven.ranges(best)
    assert found[0]["from_rps"] == breakeven.LOW and found[-1]["to_rps"] == breakeven.HIGH
    for left, right in itertools.pairwise(found):
        assert left["to_rps"] == right["from_rps"] and left["from_rps"] < left["to_rps"]
        assert left["runtime"] != right["runtime"]
    for span in found:  # each range starts where its runtime is the cheapest
        assert best(span["from_rps"]) == span["runtime"]
    for rate in breakeven.grid():  # and every rate read holds the runtime of its range
        [span] = [s for s in found if s["from_rps"] <= rate < s["to_rps"]] or [found[-1]]
        assert best(rate) == span["runtime"], rate
    assert {s["runtime"] for s in found} <= {"onnx", "lambda-managed", "sagemaker", "sagemaker-serverless", "sagemaker-async"}
