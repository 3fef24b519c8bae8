// A deployment's model monitoring (`GET …/monitor`, the route `sluice monitor status` calls):
// per feature its drift in each window as a small chart with the threshold, its verdict and
// its data quality, the worst features first; the model's quality over the windows with
// labels, a line per variant; all traffic or one variant's. Below it, the kept history of the
// closed windows (pages/history.ts).
import { ApiError, describe, enc, get } from "../api";
import { h, mount, num, percent, when } from "../dom";
import type { Context } from "../main";
import { featureSeries, type MonitorAnswer, qualityCells, qualitySeries } from "../monitor";
import type { Policy } from "../policy";
import { poll, table } from "../ui";
import { historySection } from "./history";
import { legend, qualityChart, spark, verdictSpan } from "./monitor-charts";

const POLL_MS = 15000;

/** The monitoring section of a deployment's page; `policy` gives the variants to choose from
 * (`refill` reads them again after the policy changed). */
export function monitorSection(ctx: Context, name: string, policy: () => Policy): { element: HTMLElement; start: () => Promise<void>; refill: () => void } {
  const box = h("div", { id: "monitor" });
  const variant = h("select", { id: "monitor-variant", "aria-label": "traffic" });
  const windows = h("select", { id: "monitor-windows", "aria-label": "windows" }, [24, 72, 168].map((n) => h("option", { value: n }, `last ${n} windows`)));
  let threshold: number | null = null; // the drift threshold, once read
  const history = historySection(ctx, name, () => variant.value, () => threshold);
  const element = h("section", {}, h("h2", {}, "Monitoring"), h("div", { class: "controls" }, h("label", {}, "Traffic ", variant), h("label", {}, "Windows ", windows)), box, history.element);

  const fillVariants = () => {
    const p = policy();
    const names = p.kind === "split" ? p.variants.map((v) => v.name) : [];
    const chosen = variant.value;
    mount(variant, h("option", { value: "" }, "all variants"), names.map((v) => h("option", { value: v, selected: v === chosen }, `variant ${v}`)));
  };

  const draw = (m: MonitorAnswer) => {
    const t = m.thresholds;
    threshold = t.drift;
    const base = m.baseline;
    const summary = h(
      "p",
      { id: "monitor-summary" },
      verdictSpan(m.verdict, { id: "monitor-verdict" }),
      ` revision ${m.revision}${m.variant ? `, variant ${m.variant}` : ""} · `,
      base ? `baseline of revision ${base.revision} (${base.rows} rows from ${base.source}, ${when(base.created_at)})` : "no baseline",
      ` · windows of ${m.window_s >= 3600 ? `${num(m.window_s / 3600, 1)} h` : `${num(m.window_s / 60, 1)} min`} · a feature alerts on drift (PSI) over ${t.drift}, a missing rate up by ${percent(t.missing)}, ${percent(t.out_of_range)} out of range or unseen, with at least ${t.min_rows} rows for drift`,
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
          legend(variants),
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
  variant.addEventListener("change", () => void refresh().then(history.redraw));
  windows.addEventListener("change", refresh);

  const start = async () => {
    fillVariants();
    let first = true; // `start` drew it: the poller's first look is POLL_MS from now
    await refresh();
    ctx.onLeave(poll(() => (first ? void (first = false) : refresh()), POLL_MS));
    await history.start();
  };
  return { element, start, refill: fillVariants };
}
