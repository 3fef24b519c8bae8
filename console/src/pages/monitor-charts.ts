// The drawings the monitoring section's two views share (the current windows, pages/monitor.ts,
// and the kept history, pages/history.ts): a verdict, a feature's drift per window as a small
// chart with its threshold, a quality metric's chart with a line per variant, and its legend.
import { h, num, s, when } from "../dom";
import { ALERTS, chart, type FeatureSeries, type QualitySeries } from "../monitor";

export const COLORS = ["#3f51b5", "#e65100", "#2e7d32", "#ad1457", "#00838f", "#6d4c41", "#5e35b1", "#9e9d24"];
const SPARK = { width: 160, height: 34 };
const QUALITY = { width: 260, height: 90 };

export function verdictSpan(verdict: string, attrs: Record<string, string> = {}): HTMLElement {
  const cls = ALERTS.has(verdict) || verdict === "alert" ? "fail" : verdict === "ok" ? "pass" : "none";
  return h("span", { class: `verdict ${cls}`, "data-verdict": verdict, ...attrs }, verdict.replaceAll("_", " "));
}

const polyline = (run: { x: number; y: number }[], pad: number, attrs: Record<string, string>) =>
  s("polyline", { points: run.map((p) => `${(p.x + pad).toFixed(1)},${(p.y + pad).toFixed(1)}`).join(" "), fill: "none", ...attrs });

/** A feature's drift per window: the line, a dot per window (red above the threshold, its
 * window and figure on hover), and the threshold dashed (none where it is not known). */
export function spark(f: FeatureSeries, threshold: number | null, size = SPARK): SVGElement {
  const pad = 3;
  const c = chart(f.t, [f.drift], size.width, size.height, threshold === null ? {} : { threshold });
  const dots = c.points[0].flatMap((point, i) => {
    const v = f.drift[i];
    if (point === null || v === null) return [];
    return [s("circle", { cx: point.x + pad, cy: point.y + pad, r: 2.5, class: threshold !== null && v > threshold ? "over" : "under" }, s("title", {}, `${when(f.t[i])}: PSI ${num(v, 3)}`))];
  });
  return s(
    "svg",
    { class: "spark", width: size.width + 2 * pad, height: size.height + 2 * pad, role: "img", "aria-label": `drift of ${f.name} per window` },
    c.threshold === null ? null : s("line", { class: "threshold", x1: 0, x2: size.width + 2 * pad, y1: c.threshold + pad, y2: c.threshold + pad }, s("title", {}, `threshold ${threshold}`)),
    c.lines[0].map((run) => polyline(run, pad, { class: "drift" })),
    dots,
  );
}

/** A quality metric's chart, a line per variant of `names` (a gap where a window has no figure). */
export function qualityChart(q: QualitySeries, names: string[]): HTMLElement {
  const pad = 4;
  const lines = names.map((v) => q.lines[v] ?? q.t.map(() => null));
  const regressor = q.metric === "mae" || q.metric === "rmse";
  const c = chart(q.t, lines, QUALITY.width, QUALITY.height, { floor: regressor ? 0 : 1 });
  const svg = s(
    "svg",
    { class: "quality", width: QUALITY.width + 2 * pad, height: QUALITY.height + 2 * pad, role: "img", "aria-label": `${q.metric} per window` },
    s("line", { class: "axis", x1: pad, x2: QUALITY.width + pad, y1: QUALITY.height + pad, y2: QUALITY.height + pad }),
    c.lines.map((runs, k) => runs.map((run) => [polyline(run, pad, { stroke: COLORS[k % COLORS.length], "stroke-width": "2" }), run.map((p) => s("circle", { cx: p.x + pad, cy: p.y + pad, r: 2.5, fill: COLORS[k % COLORS.length] }))])),
  );
  const latest = names.map((v) => `${v} ${num(q.lines[v]?.findLast((x) => x !== null) ?? null, 3)}`).join(" · ");
  return h(
    "figure",
    { class: "chart", "data-metric": q.metric },
    h("figcaption", {}, h("strong", {}, q.metric), ` (0 to ${num(c.top, 3)}) · latest: ${latest}`),
    svg,
    h("p", { class: "muted small" }, q.t.length > 1 ? `${when(q.t[0])} → ${when(q.t.at(-1))}` : when(q.t[0])),
  );
}

/** The colour of each variant's line, as `qualityChart` draws them. */
export const legend = (variants: string[]): HTMLElement =>
  h("p", { class: "legend" }, variants.map((v, k) => h("span", { class: "key" }, s("svg", { width: 14, height: 4 }, s("rect", { width: 14, height: 4, fill: COLORS[k % COLORS.length] })), ` ${v}`)));
