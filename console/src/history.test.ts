// The monitoring history's pure parts: run by `make console-test`.
import { describe, expect, it } from "vitest";
import { featureHistory, type HistoryPage, type HistoryWindow, type PageQuery, qualityHistory, readHistory, timeline, verdicts } from "./history";
import type { ColumnCheck } from "./monitor";

const H = 3600;
const col = (verdict: string, drift: number | null, more: Partial<ColumnCheck> = {}): ColumnCheck => ({ kind: "number", role: "input", rows: 1000, verdict, drift, ...more });

function checked(hour: number, columns: Record<string, ColumnCheck>, verdict = "ok"): HistoryWindow {
  const drifts = Object.values(columns).map((c) => c.drift ?? 0);
  return { deployment: "iris", revision: 2, window_start: hour * H, window_end: (hour + 1) * H, check: { rows: 1000, verdict, drift: Math.max(...drifts), worst: [], columns }, quality: null };
}
const quiet = (hour: number): HistoryWindow => ({ deployment: "iris", revision: 2, window_start: hour * H, window_end: (hour + 1) * H, check: null, quality: null });

// Newest first, as the route answers: hour 13 drifted on petal_length, hour 12 had no traffic,
// nothing closed hour 11, hour 10 was quiet, hour 9 drifted on sepal_width alone.
const WINDOWS: HistoryWindow[] = [
  checked(13, { sepal_length: col("ok", 0.05), petal_length: col("drift", 1.4), sepal_width: col("ok", 0.02) }, "alert"),
  quiet(12),
  checked(10, { sepal_length: col("ok", 0.01), petal_length: col("drift", 0.9), sepal_width: col("ok", 0.03) }, "alert"),
  checked(9, { sepal_length: col("ok", 0.01), petal_length: col("ok", 0.04), sepal_width: col("drift", 2.5), output_label: col("ok", 0.1, { kind: "category", role: "output" }) }, "alert"),
];

describe("the windows on one time line", () => {
  it("runs oldest first, one window apart, a window nothing closed a gap", () => {
    const line = timeline(WINDOWS);
    expect(line.t).toEqual([9 * H, 10 * H, 11 * H, 12 * H, 13 * H]);
    expect(line.windows.map((w) => w?.window_start ?? null)).toEqual([9 * H, 10 * H, null, 12 * H, 13 * H]);
  });

  it("counts a window read on two pages once", () => {
    expect(timeline([...WINDOWS, WINDOWS[0]]).t).toHaveLength(5);
  });

  it("gives each window its verdict, saying which had no traffic and which has no record", () => {
    expect(verdicts(timeline(WINDOWS)).map((m) => m.verdict)).toEqual(["alert", "alert", "not_recorded", "no_traffic", "alert"]);
  });

  it("has nothing without windows", () => {
    expect(timeline([])).toEqual({ t: [], window_s: 0, windows: [] });
  });
});

describe("drift per feature over the span", () => {
  it("puts the feature alerting in most windows first, then by its largest drift", () => {
    const names = featureHistory(timeline(WINDOWS)).map((f) => f.name);
    // petal_length alerted twice; sepal_width once though its drift was the largest.
    expect(names).toEqual(["petal_length", "sepal_width", "output_label", "sepal_length"]);
  });

  it("gives each feature its drift per window, oldest first, gaps where no window checked it", () => {
    const [petal, sepal, output] = featureHistory(timeline(WINDOWS));
    expect(petal.t).toEqual([9 * H, 10 * H, 11 * H, 12 * H, 13 * H]);
    expect(petal.drift).toEqual([0.04, 0.9, null, null, 1.4]);
    expect([petal.alerts, petal.peak, petal.latest.verdict]).toEqual([2, 1.4, "drift"]);
    expect(sepal.latest.verdict).toBe("ok"); // its newest check
    expect(output.drift).toEqual([0.1, null, null, null, null]);
    expect(output.latest.role).toBe("output");
  });
});

describe("model quality over the span", () => {
  const labelled = (w: HistoryWindow, variants: Record<string, number>): HistoryWindow => ({
    ...w,
    quality: { rows: 200, accuracy: 0.9, variants: Object.fromEntries(Object.entries(variants).map(([v, a]) => [v, { rows: 100, accuracy: a, precision: a, recall: a, auc: null }])) },
  });
  const windows = [labelled(WINDOWS[0], { stable: 0.95, candidate: 0.5 }), WINDOWS[1], labelled(WINDOWS[2], { stable: 0.9 }), WINDOWS[3]];

  it("draws a line per variant on the time line, a gap where a window had no labels for it", () => {
    const series = qualityHistory(timeline(windows));
    expect(series.map((s) => s.metric)).toEqual(["accuracy", "precision", "recall"]); // no AUC without scores
    expect(series[0].t).toEqual([9 * H, 10 * H, 11 * H, 12 * H, 13 * H]);
    expect(series[0].lines).toEqual({ candidate: [null, null, null, null, 0.5], stable: [null, 0.9, null, null, 0.95] });
  });

  it("keeps one variant's line where one is chosen", () => {
    expect(Object.keys(qualityHistory(timeline(windows), "candidate")[0].lines)).toEqual(["candidate"]);
    expect(qualityHistory(timeline(windows), "nosuch")).toEqual([]);
  });

  it("shows a regressor's errors, and nothing without labels", () => {
    const regressor = { ...WINDOWS[0], quality: { rows: 10, mae: 1.5, rmse: 2, variants: { default: { rows: 10, mae: 1.5, rmse: 2 } } } };
    expect(qualityHistory(timeline([regressor])).map((s) => [s.metric, s.lines.default])).toEqual([["mae", [1.5]], ["rmse", [2]]]);
    expect(qualityHistory(timeline(WINDOWS))).toEqual([]);
  });
});

describe("reading a span a page at a time", () => {
  // A route over 10 hourly windows, newest first, as the API pages them.
  const ALL = Array.from({ length: 10 }, (_, i) => quiet(100 - i));
  const asked: PageQuery[] = [];
  const route = async (q: PageQuery): Promise<HistoryPage> => {
    asked.push(q);
    const rest = ALL.filter((w) => q.before === undefined || w.window_start < q.before);
    const page = rest.slice(0, q.limit);
    return { deployment: "iris", windows: page, next: rest.length > q.limit ? page.at(-1)!.window_start : null };
  };

  it("follows each page's next as the following page's before, to the last", async () => {
    asked.length = 0;
    const read = await readHistory(async (q) => route({ ...q, limit: Math.min(q.limit, 4) }), { since: "24h", cap: 100 });
    expect(read.windows.map((w) => w.window_start / H)).toEqual([100, 99, 98, 97, 96, 95, 94, 93, 92, 91]);
    expect(read.next).toBeNull();
    expect(asked.map((q) => q.before)).toEqual([undefined, 97 * H, 93 * H]);
    expect(asked.every((q) => q.since === "24h")).toBe(true);
  });

  it("stops at its cap, saying where the earlier windows start, and goes on from there", async () => {
    const first = await readHistory(route, { since: "7d", cap: 6 });
    expect(first.windows).toHaveLength(6);
    expect(first.next).toBe(95 * H);
    const earlier = await readHistory(route, { since: "7d", cap: 6, before: first.next! });
    expect(earlier.windows.map((w) => w.window_start / H)).toEqual([94, 93, 92, 91]);
    expect(earlier.next).toBeNull();
  });
});
