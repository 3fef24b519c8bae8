// Model monitoring's history as `GET …/monitor/history` answers it (each closed window's kept
// result, newest first, a page at a time), turned into what the deployment page draws: the
// windows of a span on one time line (a window with no traffic, or none recorded, a gap), a
// verdict per window, each column's drift over them (the worst columns first) and the model's
// quality per metric, a line per variant. The shapes are monitor.ts's, so the current view's
// charts draw them. Pure: no DOM; tested by `make console-test`.
import { ALERTS, type FeatureSeries, type Metrics, type QualityMetric, type QualitySeries, type WindowCheck } from "./monitor";

/** One closed window's document (docs/monitoring.md, "History"). */
export interface HistoryWindow {
  deployment: string;
  revision: number;
  window_start: number;
  window_end: number;
  check: Omit<WindowCheck, "window_start" | "window_end"> | null; // null: no traffic, or no sketch read
  quality: (Metrics & { variants: Record<string, Metrics> }) | null; // from the labels so far; null: none
  quality_at_close?: unknown;
  closed_at?: number;
}

export interface HistoryPage {
  deployment: string;
  windows: HistoryWindow[]; // newest first
  next: number | null; // the next page's `before`; null on the last
}

export interface PageQuery {
  since: string;
  before?: number;
  limit: number;
}

export const PAGE = 168; // the route's most windows a page (a week of hourly windows)

/** The windows that started since `since` (`24h`, `7d`: the route reads it), newest first:
 * pages of `PAGE` followed by their `next` until the last, or until `cap` windows are read;
 * `next` then says where the earlier ones start (null: none are left). `before` starts
 * below a window already shown (the "earlier windows" of a page that stopped at its cap). */
export async function readHistory(
  fetchPage: (q: PageQuery) => Promise<HistoryPage>,
  options: { since: string; before?: number; cap: number },
): Promise<{ windows: HistoryWindow[]; next: number | null }> {
  const windows: HistoryWindow[] = [];
  let before = options.before;
  for (;;) {
    const page = await fetchPage({ since: options.since, before, limit: Math.min(PAGE, options.cap - windows.length) });
    windows.push(...page.windows);
    if (page.next === null || windows.length >= options.cap) return { windows, next: page.next };
    before = page.next;
  }
}

export interface Timeline {
  t: number[]; // each window's start, oldest first, one window apart
  window_s: number;
  windows: (HistoryWindow | null)[]; // null: none recorded
}

/** The windows on one time line, oldest first, one window length apart from the oldest to the
 * newest: a window missing in between is a null, so a chart breaks there. Pages read twice
 * count once. */
export function timeline(windows: HistoryWindow[]): Timeline {
  const byStart = new Map(windows.map((w) => [w.window_start, w]));
  const starts = [...byStart.keys()].sort((a, b) => a - b);
  if (!starts.length) return { t: [], window_s: 0, windows: [] };
  const newest = byStart.get(starts.at(-1)!)!;
  const step = newest.window_end - newest.window_start || 3600;
  const t = new Set(starts);
  for (let at = starts[0]; at < starts.at(-1)!; at += step) t.add(at); // a window length changed: both kept
  const all = [...t].sort((a, b) => a - b);
  return { t: all, window_s: step, windows: all.map((at) => byStart.get(at) ?? null) };
}

export interface WindowMark {
  start: number;
  end: number;
  verdict: string; // the check's (alert, ok, too_few_rows); no_traffic: its document has no check (no
  // traffic, or the closer read no sketch); not_recorded: no document (nothing closed that window)
  rows: number;
  drift: number | null;
  worst: string[];
  revision: number | null;
}

/** A verdict per window of the time line. */
export function verdicts(line: Timeline): WindowMark[] {
  return line.windows.map((w, i) => {
    const start = line.t[i];
    if (w === null) return { start, end: start + line.window_s, verdict: "not_recorded", rows: 0, drift: null, worst: [], revision: null };
    const c = w.check;
    return { start, end: w.window_end, verdict: c?.verdict ?? "no_traffic", rows: c?.rows ?? 0, drift: c?.drift ?? null, worst: c?.worst ?? [], revision: w.revision };
  });
}

/** A column's drift over the span: `alerts`, the windows where its verdict was an alert;
 * `peak`, its largest drift; `latest`, its check in the newest window that has one. */
export interface FeatureHistory extends FeatureSeries {
  alerts: number;
  peak: number | null;
}

/** Every column any window checked, its drift per window of the time line (null: no check, or
 * not in that window), the worst first: the most windows alerting, then the largest drift,
 * then by name. */
export function featureHistory(line: Timeline): FeatureHistory[] {
  const checked = line.windows.map((w) => w?.check ?? null);
  const names = [...new Set(checked.flatMap((c) => (c ? Object.keys(c.columns) : [])))];
  const out = names.map((name) => {
    const cols = checked.map((c) => c?.columns[name] ?? null);
    const drift = cols.map((c) => c?.drift ?? null);
    const latest = cols.findLast((c) => c !== null)!;
    const values = drift.filter((v): v is number => v !== null);
    return {
      name, role: latest.role, kind: latest.kind, t: line.t, drift, latest,
      alerts: cols.filter((c) => c !== null && ALERTS.has(c.verdict)).length,
      peak: values.length ? Math.max(...values) : null,
    }; // prettier-ignore
  });
  return out.sort((a, b) => b.alerts - a.alerts || (b.peak ?? -Infinity) - (a.peak ?? -Infinity) || a.name.localeCompare(b.name));
}

const CLASSIFIER: QualityMetric[] = ["accuracy", "precision", "recall", "auc"];
const REGRESSOR: QualityMetric[] = ["mae", "rmse"];

/** The model's quality per metric over the time line, a line per variant (`variant`: that
 * one's alone), null where a window had no labels for it; a metric no window has is left out. */
export function qualityHistory(line: Timeline, variant?: string): QualitySeries[] {
  const quality = line.windows.map((w) => w?.quality ?? null);
  const seen = [...new Set(quality.flatMap((q) => (q ? Object.keys(q.variants) : [])))].sort();
  const variants = variant ? seen.filter((v) => v === variant) : seen;
  const metrics = quality.some((q) => q?.mae !== undefined) ? REGRESSOR : CLASSIFIER;
  return metrics
    .map((metric) => ({
      metric,
      t: line.t,
      lines: Object.fromEntries(variants.map((v) => [v, quality.map((q) => q?.variants[v]?.[metric] ?? null)])),
    }))
    .filter((s) => Object.values(s.lines).some((values) => values.some((x) => x !== null)));
}
