// A deployment's model monitoring (`GET …/monitor`, the route `sluice monitor status` calls):
// per feature its drift in each window as a small chart with the threshold, its verdict and
// its data quality, the worst features first; the model's quality over the windows with
// labels, a line per variant; all traffic or one variant's.
import { ApiError, describe, enc, get } from "../api";
import { h, mount, num, s, when } from "../dom";
import type { Context } from "../main";
import { ALERTS, chart, type FeatureSeries, featureSeries, type MonitorAnswer, qualityCells, qualitySeries, type QualitySeries } from "../monitor";
import type { Policy } from "../policy";
import { poll, table } from "../ui";

const POLL_MS = 15000;
const COLORS = ["#3f51b5", "#e65100", "#2e7d32", "#ad1457", "#00838f", "#6d4c41", "#5e35b1", "#9e9d24"];
const SPARK = { width: 160, height: 34 };
const QUALITY = { width: 260, height: 90 };

function verdictSpan(verdict: string, attrs: Record<string, string> = {}): HTMLElement {
  const cls = ALERTS.has(verdict) || verdict === "alert" ? "fail" : verdict === "ok" ? "pass" : "none";
  return h("span", { class: `verdict ${cls}`, "data-verdict": verdict, ...attrs }, verdict.replaceAll("_", " "));
}

const polyline = (run: { x: number; y: number }[], pad: number, attrs: Record<string, string>) =>
  s("polyline", { points: run.map((p) => `${(p.x + pad).toFixed(1)},${(p.y + pad).toFixed(1)}`).join(" "), fill: "none", ...attrs });

/** A feature's drift per window: the line, a dot per window (red above the threshold, its
 * window and figure on hover), and the threshold dashed. */
function spark(f: FeatureSeries, threshold: number): SVGElement {
  const pad = 3;
  const c = chart(f.t, [f.drift], SPARK.width, SPARK.height, { threshold });
  const dots = c.points[0].flatMap((point, i) => {
    const v = f.drift[i];
    if (point === null || v === null) return [];
    return [s("circle", { cx: point.x + pad, cy: point.y + pad, r: 2.5, class: v > threshold ? "over" : "under" }, s("title", {}, `${when(f.t[i])}: PSI ${num(v, 3)}`))];
  });
  return s(
    "svg",
    { class: "spark", width: SPARK.width + 2 * pad, height: SPARK.height + 2 * pad, role: "img", "aria-label": `drift of ${f.name} per window` },
    c.threshold === null ? null : s("line", { class: "threshold", x1: 0, x2: SPARK.width + 2 * pad, y1: c.threshold + pad, y2: c.threshold + pad }, s("title", {}, `threshold ${threshold}`)),
    c.lines[0].map((run) => polyline(run, pad, { class: "drift" })),
    dots,
  );
}

function qualityChart(q: QualitySeries, names: string[]): HTMLElement {
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
  const latest = names.map((v) => `${v} ${num(q.lines[v]?.at(-1) ?? null, 3)}`).join(" · ");
  return h(
    "figure",
    { class: "chart", "data-metric": q.metric },
    h("figcaption", {}, h("strong", {}, q.metric), ` (0 to ${num(c.top, 3)}) · latest: ${latest}`),
    svg,
    h("p", { class: "muted small" }, q.t.length > 1 ? `${when(q.t[0])} → ${when(q.t.at(-1))}` : when(q.t[0])),
  );
}

/** The monitoring section of a deployment's page; `policy` gives the variants to choose from
 * (`refill` reads them again after the policy changed). */
export function monitorSection(ctx: Context, name: string, policy: () => Policy): { element: HTMLElement; start: () => Promise<void>; refill: () => void } {
  const box = h("div", { id: "monitor" });
  const variant = h("select", { id: "monitor-variant", "aria-label": "traffic" });
  const windows = h("select", { id: "monitor-windows", "aria-label": "windows" }, [24, 72, 168].map((n) => h("option", { value: n }, `last ${n} windows`)));
  const element = h("section", {}, h("h2", {}, "Monitoring"), h("div", { class: "controls" }, h("label", {}, "Traffic ", variant), h("label", {}, "Windows ", windows)), box);

  const fillVariants = () => {
    const p = policy();
    const names = p.kind === "split" ? p.variants.map((v) => v.name) : [];
    const chosen = variant.value;
    mount(variant, h("option", { value: "" }, "all variants"), names.map((v) => h("option", { value: v, selected: v === chosen }, `variant ${v}`)));
  };

  const draw = (m: MonitorAnswer) => {
    const t = m.thresholds;
    const base = m.baseline;
    const summary = h(
      "p",
      { id: "monitor-summary" },
      verdictSpan(m.verdict, { id: "monitor-verdict" }),
      ` revision ${m.revision}${m.variant ? `, variant ${m.variant}` : ""} · `,
      base ? `baseline of revision ${base.revision} (${base.rows} rows from ${base.source}, ${when(base.created_at)})` : "no baseline",
      ` · windows of ${m.window_s >= 3600 ? `${num(m.window_s / 3600, 1)} h` : `${num(m.window_s / 60, 1)} min`} · a feature alerts on drift (PSI) over ${t.drift}, a missing rate up by ${t.missing * 100}%, ${t.out_of_range * 100}% out of range or unseen, with at least ${t.min_rows} rows for drift`,
    );
    const features = featureSeries(m);
    const driftPart = !base
      ? h("p", { class: "muted", id: "no-baseline" }, `No baseline: set one with \`sluice monitor baseline ${name} --data train.parquet\` to check drift and data quality.`)
      : !features.length
        ? h("p", { class: "muted", id: "monitor-no-traffic" }, `No traffic profiled at revision ${m.revision}${m.variant ? ` for variant ${m.variant}` : ""} yet.`)
        : table(
            ["feature", "role", "verdict", `drift (PSI) per window, threshold ${t.drift}`, "PSI now", "missing (change)", "out of range", "unseen", "rows"],
            features.map((f) => {
              const cells = qualityCells(f.latest, t).map((c) => h("span", { class: c.over ? "verdict fail" : "" }, c.text));
              return [h("span", { "data-feature": f.name }, f.name), f.role, verdictSpan(f.latest.verdict), spark(f, t.drift), num(f.latest.drift, 3), ...cells, String(f.latest.rows)];
            }),
            { id: "monitor-features" },
          );
    const quality = qualitySeries(m);
    const variants = [...new Set(quality.flatMap((q) => Object.keys(q.lines)))].sort();
    const newest = m.quality[0];
    const qualityPart = quality.length
      ? [
          h("p", { class: "legend" }, variants.map((v, k) => h("span", { class: "key" }, s("svg", { width: 14, height: 4 }, s("rect", { width: 14, height: 4, fill: COLORS[k % COLORS.length] })), ` ${v}`))),
          h("div", { class: "charts", id: "monitor-quality" }, quality.map((q) => qualityChart(q, variants))),
          h("p", { class: "muted" }, `Latest window with labels, from ${when(newest.window_start)}:`),
          table(
            ["variant", "labelled rows", ...quality.map((q) => q.metric)],
            Object.entries(newest.variants).map(([v, x]) => [v, String(x.rows), ...quality.map((q) => num(x[q.metric] ?? null, 3))]),
            { id: "monitor-quality-table" },
          ),
        ]
      : h("p", { class: "muted", id: "no-labels" }, `No labels yet: post them with \`sluice monitor labels ${name} --file labels.csv\` (request_id,label) to see the model's quality per window.`);
    mount(box, summary, driftPart, h("h3", {}, "Model quality"), qualityPart);
  };

  const refresh = async () => {
    const query = new URLSearchParams({ windows: windows.value });
    if (variant.value) query.set("variant", variant.value);
    try {
      draw(await get<MonitorAnswer>(`/api/v1/deployments/${enc(name)}/monitor?${query}`));
    } catch (error) {
      if (error instanceof ApiError && error.status === 404 && error.field === "baseline") {
        mount(box, h("p", { id: "no-baseline" }, `No baseline yet. Set one with \`sluice monitor baseline ${name} --data train.parquet\` (rows of the training data; or \`PUT /api/v1/deployments/${name}/baseline\`): each window of traffic is then checked against it, feature by feature.`));
      } else mount(box, h("p", { class: "error", id: "monitor-error" }, describe(error)));
    }
  };
  variant.addEventListener("change", refresh);
  windows.addEventListener("change", refresh);

  const start = async () => {
    fillVariants();
    let first = true; // `start` drew it: the poller's first look is POLL_MS from now
    await refresh();
    ctx.onLeave(poll(() => (first ? void (first = false) : refresh()), POLL_MS));
  };
  return { element, start, refill: fillVariants };
}
