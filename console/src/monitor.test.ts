// The monitoring view's pure parts: run by `make console-test`.
import { describe, expect, it } from "vitest";
import { chart, type ColumnCheck, featureSeries, type MonitorAnswer, qualityCells, qualitySeries } from "./monitor";

const LIMITS = { drift: 0.2, missing: 0.05, out_of_range: 0.05, min_rows: 500 };
const col = (verdict: string, drift: number | null, more: Partial<ColumnCheck> = {}): ColumnCheck => ({ kind: "number", role: "input", rows: 1000, verdict, drift, ...more });

function answer(windows: MonitorAnswer["windows"], quality: MonitorAnswer["quality"] = []): MonitorAnswer {
  return { deployment: "iris", revision: 2, variant: null, baseline: { revision: 1, rows: 3000, source: "train.csv", created_at: 1 }, window_s: 3600, thresholds: LIMITS, verdict: "alert", windows, quality };
}

// Newest first, as the route answers.
const WINDOWS: MonitorAnswer["windows"] = [
  {
    window_start: 7200, window_end: 10800, rows: 1000, verdict: "alert", drift: 1.4, worst: ["petal_length", "sepal_width"],
    columns: { sepal_length: col("ok", 0.05), petal_length: col("drift", 1.4), sepal_width: col("missing", 0.02, { missing_rate: 0.3, missing_change: 0.3 }), output_label: col("ok", 0.1, { kind: "category", role: "output" }), petal_width: col("too_few_rows", null) },
  },
  { window_start: 0, window_end: 3600, rows: 1000, verdict: "ok", drift: 0.04, worst: [], columns: { sepal_length: col("ok", 0.01), petal_length: col("ok", 0.04), sepal_width: col("ok", 0.02) } },
];

describe("drift per feature", () => {
  it("puts the alerting features first, the largest drift first, then the rest by drift", () => {
    const names = featureSeries(answer(WINDOWS)).map((f) => f.name);
    expect(names).toEqual(["petal_length", "sepal_width", "output_label", "sepal_length", "petal_width"]);
  });

  it("gives each feature its drift per window, oldest first, a gap where a window lacks it", () => {
    const [petal, , output] = featureSeries(answer(WINDOWS));
    expect(petal.t).toEqual([0, 7200]);
    expect(petal.drift).toEqual([0.04, 1.4]);
    expect(petal.latest.verdict).toBe("drift");
    expect(output.drift).toEqual([null, 0.1]); // the older window had no such column
  });

  it("puts an alerting column with no drift figure (absent, missing) first, as the API's worst", () => {
    const windows: MonitorAnswer["windows"] = [
      {
        window_start: 0, window_end: 3600, rows: 1000, verdict: "alert", drift: 0.35, worst: ["petal_width", "sepal_length"],
        columns: { petal_width: col("absent", null, { rows: 0 }), sepal_length: col("drift", 0.35), sepal_width: col("ok", 0.01), petal_length: col("too_few_rows", null) },
      },
    ]; // prettier-ignore
    const names = featureSeries(answer(windows)).map((f) => f.name);
    expect(names.slice(0, 2)).toEqual(windows[0].worst);
    expect(names.slice(2)).toEqual(["sepal_width", "petal_length"]); // no figure and no alert: last
  });

  it("has nothing to draw before any window has traffic", () => {
    expect(featureSeries(answer([]))).toEqual([]);
  });
});

describe("model quality over time", () => {
  const q = (start: number, variants: Record<string, number>) => ({
    window_start: start, window_end: start + 3600, rows: 200, accuracy: 0.9, precision: 0.9, recall: 0.9, auc: null,
    variants: Object.fromEntries(Object.entries(variants).map(([v, a]) => [v, { rows: 100, accuracy: a, precision: a, recall: a, auc: null }])),
  });

  it("draws a line per variant for each metric the labels gave, oldest window first", () => {
    const series = qualitySeries(answer([], [q(3600, { stable: 0.95, candidate: 0.5 }), q(0, { stable: 0.9 })]));
    expect(series.map((s) => s.metric)).toEqual(["accuracy", "precision", "recall"]); // no AUC without scores
    expect(series[0].t).toEqual([0, 3600]);
    expect(series[0].lines).toEqual({ candidate: [null, 0.5], stable: [0.9, 0.95] });
  });

  it("shows a regressor's errors", () => {
    const series = qualitySeries(answer([], [{ window_start: 0, window_end: 3600, rows: 10, mae: 1.5, rmse: 2, variants: { default: { rows: 10, mae: 1.5, rmse: 2 } } }]));
    expect(series.map((s) => [s.metric, s.lines.default])).toEqual([["mae", [1.5]], ["rmse", [2]]]);
  });

  it("has nothing without labels", () => {
    expect(qualitySeries(answer(WINDOWS))).toEqual([]);
  });
});

describe("a small chart", () => {
  it("puts the threshold line where its value is, and a drift above it above the line", () => {
    const c = chart([0, 3600, 7200], [[0.05, 0.1, 1.0]], 100, 40, { threshold: 0.2 });
    expect(c.top).toBe(1.0);
    expect(c.threshold).toBeCloseTo(40 - 0.2 * 40);
    const [points] = c.lines[0];
    expect(points.map((p) => p.x)).toEqual([0, 50, 100]);
    expect(points[2].y).toBeLessThan(c.threshold!);
    expect(points[0].y).toBeGreaterThan(c.threshold!);
  });

  it("keeps the threshold in view when every drift is small, and breaks a line at a gap", () => {
    const c = chart([0, 1, 2], [[0.01, null, 0.02]], 100, 40, { threshold: 0.2 });
    expect(c.top).toBeCloseTo(0.25);
    expect(c.lines[0]).toHaveLength(2);
    expect(c.points[0].map((p) => p?.x ?? null)).toEqual([0, null, 100]);
  });

  it("draws a single window in the middle", () => {
    expect(chart([5], [[0.3]], 100, 40).lines[0][0][0].x).toBe(50);
  });
});

describe("data quality", () => {
  it("flags a missing rate that rose past its threshold, and shares out of range", () => {
    expect(qualityCells(col("missing", 0.02, { missing_rate: 0.31, missing_change: 0.3, out_of_range: 0.01 }), LIMITS)).toEqual([
      { text: "31% (+30%)", over: true },
      { text: "1%", over: false },
      { text: "—", over: false },
    ]);
    expect(qualityCells(col("unseen_categories", 0.5, { kind: "category", missing_rate: 0, missing_change: 0, unseen: 0.1 }), LIMITS)).toEqual([
      { text: "0%", over: false },
      { text: "—", over: false },
      { text: "10%", over: true },
    ]);
  });
});
