"""The benchmark runner's pure parts: statistics, figures and goals, the Markdown report,
plug-in results, and the wrk script's quoting. (The benchmarks themselves run with `make bench`.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from benchmarks.common import Goal, figure, percentile, rotate, rotated_p50s, spread
from benchmarks.loadgen import LITTLE_SLACK, _lua_string, latency_notes, latency_occupancy
from benchmarks.report import DOC_SECTIONS, SLOTS, section, to_markdown
from benchmarks.run import _as_section, fill_slots


def test_percentile_interpolates_like_numpy() -> None:
    values = [10.0, 20.0, 30.0, 40.0]
    assert percentile(values, 50) == 25.0
    assert percentile(values, 0) == 10.0 and percentile(values, 100) == 40.0
    assert percentile([7.0], 99) == 7.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0  # unsorted input
    with pytest.raises(ValueError):
        percentile([], 50)


def test_spread_is_median_and_min_max() -> None:
    assert spread([3.0, 1.0, 10.0]) == {"median": 3.0, "min": 1.0, "max": 10.0, "n": 3}


def test_rotated_p50s_takes_a_rounds_calls_in_turns_of_the_subjects() -> None:
    """With `blocks`, a round's calls of each subject come in that many turns, the subjects'
    order rotated from turn to turn; each round's p50 is over all of its calls."""
    order: list[tuple[str, int]] = []

    def calls(subject: str) -> object:
        def call(count: int) -> list[float]:
            order.append((subject, count))
            return [float(len(order))] * count

        return call

    runs = rotated_p50s({"a": calls("a"), "b": calls("b")}, ["a", "b"], repeats=2, n=10, blocks=5)
    assert len(order) == 2 * 5 * 2 and {count for _, count in order} == {2}
    assert [s for s, _ in order[:4]] == ["a", "b", "b", "a"]  # the first turn's first subject, then the other's
    assert all(len(v) == 2 for v in runs.values())
    single = rotated_p50s({"a": calls("a")}, ["a"], repeats=1, n=3)
    assert order[-1] == ("a", 3) and single == {"a": [float(len(order))]}  # one turn of all n calls by default


def test_rotate_alternates_who_goes_first() -> None:
    subjects = ["a", "b", "c"]
    assert [rotate(subjects, r)[0] for r in range(4)] == ["a", "b", "c", "a"]
    assert sorted(rotate(subjects, 5)) == subjects
    assert rotate([], 3) == []


def test_figure_ratio_and_goal() -> None:
    row = figure("x.p50", "p50", "µs", "sluice", [150.0, 140.0, 160.0], reference="peer",
                 ref_values=[100.0, 90.0, 110.0], goal=Goal("<=", 1.5))
    assert row["ratio"] == pytest.approx(1.5)
    assert row["met"] is True and row["goal"] == "<= 1.5x"
    slower = figure("x.rps", "req/s", "req/s", "sluice", [100.0], reference="peer", ref_values=[200.0],
                    goal=Goal(">=", 1.2), better="higher")
    assert slower["ratio"] == 0.5 and slower["met"] is False
    alone = figure("floor", "run()", "µs", "ort", [5.0])
    assert alone["ratio"] is None and alone["met"] is None and alone["ref_value"] is None


def _doc(sections: list[dict]) -> dict:
    meta = {
        "date": "2026-11-21T06:00:00+00:00", "cpu_model": "AMD EPYC", "cores": 2, "memory_gib": 24,
        "os": "Linux", "python": "3.11.7", "quick": True, "duration_s": 100.0, "loadavg_start": [0.5],
        "packages": {"onnxruntime": "1.31.1"}, "peers": None, "loadgen": "wrk",
    }
    return {"schema": 1, "meta": meta, "sections": sections, "slots": fill_slots(sections)}


def test_markdown_has_goals_sections_noise_and_slots() -> None:
    good = figure("inprocess.iris.b1.auth.p50", "iris, batch 1: p50", "µs", "sluice (authorizer)", [200.0, 190.0, 230.0],
                  reference="hand-written Mangum", ref_values=[160.0, 150.0, 170.0], goal=Goal("<=", 1.5))
    text = to_markdown(_doc([{"key": "inprocess", "title": "In process", "figures": [good]}]))
    assert "## Goals" in text and "| yes |" in text
    assert "200 (190\u2013230)" in text  # median (min-max)
    assert "1.25x (goal <= 1.5x: met)" in text
    for slot in SLOTS:
        assert f"| {slot} |" in text
    assert "not measured yet" in text


def test_a_plugin_fills_its_slot_and_raw_data_is_shown() -> None:
    shaped = _as_section("bench_shadow", {"title": "Shadow on vs off", "figures": [], "notes": ["n"], "extra": 1})
    assert shaped["title"] == "Shadow on vs off" and shaped["notes"] == ["n"] and shaped["extra"] == 1
    raw = _as_section("triton_overhead", {"latency": {"p50_ms": 1.2}})
    assert raw["figures"] == [] and raw["data"] == {"latency": {"p50_ms": 1.2}}
    doc = _doc([shaped, raw])
    assert doc["slots"]["shadow"].startswith("measured") and doc["slots"]["triton_client"].startswith("measured")
    text = to_markdown(doc)
    assert '"p50_ms": 1.2' in text


def test_a_failed_section_says_why() -> None:
    text = to_markdown(_doc([{"key": "bench_batch", "title": "bench_batch", "figures": [], "error": "ValueError: boom"}]))
    assert "Did not run: ValueError: boom" in text
    assert "error: ValueError: boom" in text  # in the slot table too


def test_lua_long_string_survives_any_body() -> None:
    assert _lua_string(b'{"a": 1}') == '[====[{"a": 1}]====]'
    tricky = b'{"x": "]====]"}'
    quoted = _lua_string(tricky)
    assert quoted.startswith("[=====[") and quoted.endswith("]=====]")


def test_the_docs_include_sections_the_report_writes() -> None:
    """docs/benchmarks/index.md shows the latest run by including sections of latest.md: each
    section it names must be one that every report carries, and the committed report has them."""
    repo = Path(__file__).resolve().parents[2]
    page = (repo / "docs" / "benchmarks" / "index.md").read_text()
    named = set(re.findall(r'--8<-- "benchmarks/results/latest\.md:([a-z_]+)"', page))
    assert named == set(DOC_SECTIONS)
    text = to_markdown(_doc([]))
    committed = (repo / "benchmarks" / "results" / "latest.md").read_text()
    for name in DOC_SECTIONS:
        for report in (text, committed):
            start, end = report.find(section("start", name)), report.find(section("end", name))
            assert 0 <= start < end, f"no {name} section"
    goals = text[text.find(section("start", "goals")) : text.find(section("end", "goals"))]
    assert "| goal | sluice | reference |" in goals


def test_the_billed_duration_is_whole_milliseconds_rounded_up() -> None:
    """What the SQS stream goal compares: Lambda bills at least one millisecond, in whole ones."""
    from benchmarks.bench_stream import billed_ms

    assert [billed_ms(s) for s in (0.0, 0.00022, 0.001, 0.0010001, 0.0072)] == [1.0, 1.0, 1.0, 2.0, 8.0]


def test_the_two_worker_goal_is_the_machine_s_second_thread() -> None:
    """The batch goal with two workers: 0.9x of what a second ONNX Runtime thread gave in the run."""
    from benchmarks.bench_batch import SIZES, second_thread_gain

    rows = SIZES[0]
    results = {(rows, "ort1"): [(1.0, 0, 0), (1.2, 0, 0), (0.8, 0, 0)], (rows, "ort2"): [(0.9, 0, 0), (0.95, 0, 0), (1.1, 0, 0)]}
    assert abs(second_thread_gain(results) - (rows / 0.95) / (rows / 1.0)) < 1e-9  # medians of each


def test_latencies_longer_than_the_requests_counted_allow_are_noted() -> None:
    """Little's law: 8 closed loops answering 8,000 requests a second can have kept each
    request 1 ms on average, no longer; wrk's figures past that carry its correction for
    coordinated omission, and the report says so."""
    assert latency_occupancy(16_000, 2.0, 1000.0, 8) == pytest.approx(1.0)
    assert latency_occupancy(16_000, 2.0, 1700.0, 8) == pytest.approx(1.7)
    assert latency_occupancy(16_000, 2.0, 1700.0, 8) > LITTLE_SLACK >= latency_occupancy(16_000, 2.0, 1000.0, 8)
    runs = {
        "sluice": [{"latency_occupancy": 1.7, "latency_ok": False}, {"latency_occupancy": 0.98, "latency_ok": True}],
        "peer": [{"latency_occupancy": 0.99, "latency_ok": True}],
        "python generator": [{"p99_us": 400.0}],  # no such check: no note
    }
    (note,) = latency_notes("diabetes, 8 conn", runs)
    assert note.startswith("diabetes, 8 conn, sluice:") and "1.70" in note and "1 of 2 runs" in note
