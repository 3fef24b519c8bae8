// Model monitoring as `GET …/monitor` answers it, turned into what the deployment page draws:
// per column its drift in each window (oldest first) and its latest verdict, the worst columns
// first; the model's quality per metric and variant over the windows with labels; the points of
// a small chart. Pure: no DOM; tested by `make console-test`.

/** One column of one window, checked against the baseline. */
export interface ColumnCheck {
  kind: "number" | "category";
  role: "input" | "output";
  rows: number;
  verdict: string; // ok, too_few_rows, missing, unseen_categories, out_of_range, drift, absent, type_changed
  drift: number | null; // the population stability index
  psi?: number;
  js?: number;
  ks?: number;
  tv?: number;
  missing_rate?: number | null;
  missing_change?: number | null;
  out_of_range?: number;
  unseen?: number;
}

export interface WindowCheck {
  window_start: number;
  window_end: number;
  rows: number;
  verdict: string; // ok, alert, too_few_rows
  drift: number | null;
  worst: string[];
  columns: Record<string, ColumnCheck>;
}

export type Metrics = { rows: number } & Partial<Record<QualityMetric, number | null>>;

export interface QualityWindow extends Metrics {
  window_start: number;
  window_end: number;
  variants: Record<string, Metrics>;
}

export interface MonitorAnswer {
  deployment: string;
  revision: number;
  variant: string | null;
  baseline: { revision: number; rows: number; source: string; created_at: number } | null;
  window_s: number;
  thresholds: { drift: number; missing: number; out_of_range: number; min_rows: number };
  verdict: string; // alert, ok, too_few_rows, no_traffic, no_baseline
  windows: WindowCheck[]; // newest first
  quality: QualityWindow[]; // newest first
}

/** A column's drift over the windows, oldest first (null: no drift figure in that window). */
export interface FeatureSeries {
  name: string;
  role: string;
  kind: string;
  t: number[];
  drift: (number | null)[];
  latest: ColumnCheck; // in the newest window
}

export const ALERTS = new Set(["missing", "unseen_categories", "out_of_range", "drift", "absent", "type_changed"]);

/** Every column of the baseline with its drift per window, alerting columns first (the largest
 * drift first, as the API's `worst`), then the others by their latest drift; no figure last. */
export function featureSeries(answer: MonitorAnswer): FeatureSeries[] {
  const windows = [...answer.windows].sort((a, b) => a.window_start - b.window_start);
  const newest = windows.at(-1);
  if (!newest) return [];
  const out = Object.entries(newest.columns).map(([name, latest]) => ({
    name,
    role: latest.role,
    kind: latest.kind,
    t: windows.map((w) => w.window_start),
    drift: windows.map((w) => w.columns[name]?.drift ?? null),
    latest,
  }));
  const rank = (f: FeatureSeries) => (ALERTS.has(f.latest.verdict) ? 0 : 1);
  // An alerting column with no drift figure (absent, missing, its type changed) is the worst, as
  // the API's `worst` and the rollouts' drift gate count it; a column with none otherwise, the least.
  const size = (f: FeatureSeries) => f.latest.drift ?? (ALERTS.has(f.latest.verdict) ? Infinity : -Infinity);
  return out.sort((a, b) => rank(a) - rank(b) || size(b) - size(a) || a.name.localeCompare(b.name));
}

export type QualityMetric = "accuracy" | "precision" | "recall" | "auc" | "mae" | "rmse";
const CLASSIFIER: QualityMetric[] = ["accuracy", "precision", "recall", "auc"];
const REGRESSOR: QualityMetric[] = ["mae", "rmse"];

/** One quality metric over the windows with labels, oldest first, a line per variant. */
export interface QualitySeries {
  metric: QualityMetric;
  t: number[];
  lines: Record<string, (number | null)[]>;
}

/** The metrics the labels gave (a classifier's or a regressor's), each a line per variant; a
 * metric no window has (an AUC without scores) is left out. */
export function qualitySeries(answer: MonitorAnswer): QualitySeries[] {
  const windows = [...answer.quality].sort((a, b) => a.window_start - b.window_start);
  if (!windows.length) return [];
  const variants = [...new Set(windows.flatMap((w) => Object.keys(w.variants)))].sort();
  const metrics = windows.some((w) => w.mae !== undefined) ? REGRESSOR : CLASSIFIER;
  return metrics
    .map((metric) => ({
      metric,
      t: windows.map((w) => w.window_start),
      lines: Object.fromEntries(variants.map((v) => [v, windows.map((w) => w.variants[v]?.[metric] ?? null)])),
    }))
    .filter((s) => Object.values(s.lines).some((line) => line.some((x) => x !== null)));
}

/** A small chart's geometry: each line's points in a `width` × `height` box (time along, the
 * value up, from 0 to the largest value or `floor`, whichever is higher), and the y of a
 * threshold line. A single window is drawn in the middle; a null breaks the line. */
export interface Chart {
  lines: { x: number; y: number }[][][]; // per line, its runs of points
  points: ({ x: number; y: number } | null)[][]; // per line, the point of each value (null: none)
  threshold: number | null; // y of the threshold, or null
  top: number; // the value at the top edge
}

export function chart(t: number[], lines: (number | null)[][], width: number, height: number, options: { threshold?: number; floor?: number } = {}): Chart {
  const values = lines.flat().filter((v): v is number => v !== null && Number.isFinite(v));
  const top = Math.max(options.floor ?? 0, ...values, options.threshold !== undefined ? options.threshold * 1.25 : 0) || 1;
  const lo = Math.min(...t);
  const hi = Math.max(...t);
  const x = (at: number) => (hi > lo ? ((at - lo) / (hi - lo)) * width : width / 2);
  const y = (v: number) => height - (Math.min(v, top) / top) * height;
  const points = lines.map((line) => line.map((v, i) => (v === null || !Number.isFinite(v) ? null : { x: x(t[i]), y: y(v) })));
  const runs = points.map((line) => {
    const out: { x: number; y: number }[][] = [];
    let run: { x: number; y: number }[] = [];
    for (const p of line) {
      if (p === null) {
        if (run.length) out.push(run);
        run = [];
      } else run.push(p);
    }
    if (run.length) out.push(run);
    return out;
  });
  return { lines: runs, points, threshold: options.threshold === undefined ? null : y(options.threshold), top };
}

/** The data-quality cells of a column: its missing rate (and rise), out-of-range share and
 * unseen-category share, each flagged when it is over its threshold. */
export function qualityCells(c: ColumnCheck, limits: MonitorAnswer["thresholds"]): { text: string; over: boolean }[] {
  const pct = (v: number) => `${Number((v * 100).toPrecision(2))}%`;
  const change = c.missing_change ?? null;
  const missing =
    c.missing_rate == null ? { text: "—", over: false } : { text: `${pct(c.missing_rate)}${change ? ` (${change > 0 ? "+" : ""}${pct(change)})` : ""}`, over: change !== null && change > limits.missing };
  const share = (v: number | undefined) => (v === undefined ? { text: "—", over: false } : { text: pct(v), over: v > limits.out_of_range });
  return [missing, share(c.out_of_range), share(c.unseen)];
}
