// A deployment's monitoring history (`GET …/monitor/history`, what `sluice monitor history`
// reads): each closed window's kept result over a span (the last 24 hours or 7 days) on one
// time line, a verdict per window (no traffic, or nothing recorded, shown as such), each
// feature's drift over the windows with the worst first, and the model's quality per metric
// from the labels so far, a line per variant. Drawn with the current view's charts.
import { describe, enc, get } from "../api";
import { h, mount, num, s, when } from "../dom";
import type { Context } from "../main";
import { featureHistory, type HistoryPage, type HistoryWindow, type PageQuery, qualityHistory, readHistory, timeline, verdicts, type WindowMark } from "../history";
import { poll, table } from "../ui";
import { legend, qualityChart, spark, verdictSpan } from "./monitor-charts";

const SPANS: [string, string][] = [["24h", "last 24 hours"], ["7d", "last 7 days"]];
const CAP = 336; // windows read at once (two pages of the route's most); "Earlier windows" reads on
const POLL_MS = 10 * 60 * 1000; // windows close once an hour by default
const WIDE = { width: 360, height: 34 };
const STRIP = { width: 720, height: 14 };
const MARK: Record<string, string> = { alert: "fail", ok: "pass", too_few_rows: "few", no_traffic: "quiet", not_recorded: "none" };
const SAID: Record<string, string> = { no_traffic: "no traffic (or no sketch read when it closed)", not_recorded: "not recorded (nothing closed it)" };

/** A cell per window, coloured by its verdict; its time, figures and worst columns on hover. */
function strip(marks: WindowMark[]): SVGElement {
  const cell = Math.max(2, Math.min(24, Math.floor(STRIP.width / marks.length)));
  return s(
    "svg",
    { class: "windows", id: "history-verdicts", width: cell * marks.length, height: STRIP.height, role: "img", "aria-label": "verdict per window" },
    marks.map((m, i) => {
      const figures = m.revision === null ? "" : ` · revision ${m.revision}${m.rows ? ` · ${m.rows} rows · PSI ${num(m.drift, 3)}` : ""}${m.worst.length ? ` · worst ${m.worst.join(", ")}` : ""}`;
      return s(
        "rect",
        { x: i * cell, width: Math.max(1, cell - 1), height: STRIP.height, class: MARK[m.verdict] ?? "few", "data-verdict": m.verdict, "data-window": m.start },
        s("title", {}, `${when(m.start)}: ${SAID[m.verdict] ?? m.verdict.replaceAll("_", " ")}${figures}`),
      );
    }),
  );
}

/** The history part of the monitoring section: `variant` is the section's chosen traffic (its
 * quality line alone), `threshold` the drift threshold the current view read (none before). */
export function historySection(ctx: Context, name: string, variant: () => string, threshold: () => number | null): { element: HTMLElement; start: () => Promise<void>; redraw: () => void } {
  const box = h("div", { id: "monitor-history" });
  const span = h("select", { id: "history-span", "aria-label": "span" }, SPANS.map(([value, text]) => h("option", { value }, text)));
  const element = h("div", {}, h("h3", {}, "History"), h("div", { class: "controls" }, h("label", {}, "Span ", span)), box);
  let windows: HistoryWindow[] = [];
  let next: number | null = null;
  let loaded = false; // a history drawn (not an error)

  const page = (q: PageQuery) => {
    const query = new URLSearchParams({ since: q.since, limit: String(q.limit) });
    if (q.before !== undefined) query.set("before", String(q.before));
    return get<HistoryPage>(`/api/v1/deployments/${enc(name)}/monitor/history?${query}`);
  };

  const draw = () => {
    const line = timeline(windows);
    const spanText = span.selectedOptions[0]?.textContent ?? span.value;
    if (!line.t.length) {
      mount(box, h("p", { class: "muted", id: "history-empty" }, `No window closed in the ${spanText}: each window's result is kept once it has closed (a few minutes after it ends).`));
      return;
    }
    const marks = verdicts(line);
    const count = (verdict: string) => marks.filter((m) => m.verdict === verdict).length;
    const revisions = [...new Set(windows.map((w) => w.revision))].sort((a, b) => a - b);
    const limit = threshold();
    const chosen = variant();
    const summary = h(
      "p",
      { id: "history-summary" },
      `${windows.length} windows kept from ${when(line.t[0])} to ${when(line.t.at(-1)! + line.window_s)} (revision${revisions.length > 1 ? "s" : ""} ${revisions.join(", ")}): `,
      `${count("alert")} alerting, ${count("ok")} ok, ${count("too_few_rows")} with too few rows, ${count("no_traffic")} without traffic, ${count("not_recorded")} not recorded`,
    );
    const features = featureHistory(line);
    const driftPart = features.length
      ? table(
          ["feature", "role", "windows alerting", `drift (PSI) per window${limit === null ? "" : `, threshold ${limit}`}`, "largest PSI", "newest verdict"],
          features.map((f) => [h("span", { "data-feature": f.name }, f.name), f.role, String(f.alerts), spark(f, limit, WIDE), num(f.peak, 3), verdictSpan(f.latest.verdict)]),
          { id: "history-features" },
        )
      : h("p", { class: "muted", id: "history-no-traffic" }, "No window in this span had traffic checked against a baseline.");
    const quality = qualityHistory(line, chosen || undefined);
    const names = [...new Set(quality.flatMap((q) => Object.keys(q.lines)))].sort();
    const qualityPart = quality.length
      ? [legend(names), h("div", { class: "charts", id: "history-quality" }, quality.map((q) => qualityChart(q, names)))]
      : h("p", { class: "muted", id: "history-no-labels" }, `No labels for these windows' predictions${chosen ? ` of variant ${chosen}` : ""} yet.`);
    mount(
      box,
      summary,
      strip(marks),
      h("p", { class: "muted small" }, "A cell per window, oldest first: red alerting, green ok, grey too few rows, light without traffic, blank not recorded."),
      chosen ? h("p", { class: "muted", id: "history-all-traffic" }, `Drift is kept per window for all traffic together; the quality below is variant ${chosen}'s.`) : null,
      driftPart,
      h("p", {}, h("strong", {}, "Model quality"), " from the labels posted so far, per window and variant:"),
      qualityPart,
      next === null ? null : h("button", { class: "secondary", id: "history-earlier", onclick: earlier }, "Earlier windows"),
    );
  };

  let reads = 0; // the latest read is drawn (a span changed while one was under way)
  const load = async (before?: number) => {
    const mine = ++reads;
    try {
      const read = await readHistory(page, { since: span.value, before, cap: CAP });
      if (mine !== reads) return;
      windows = before === undefined ? read.windows : [...windows, ...read.windows];
      next = read.next;
      loaded = true;
      draw();
    } catch (error) {
      if (mine !== reads) return;
      loaded = false;
      mount(box, h("p", { class: "error", id: "history-error" }, describe(error)));
    }
  };
  const earlier = () => (next === null ? undefined : void load(next));
  span.addEventListener("change", () => void load());

  const start = async () => {
    let first = true; // `start` read it: the poller's first look is POLL_MS from now
    await load();
    ctx.onLeave(poll(() => (first ? void (first = false) : load()), POLL_MS));
  };
  return { element, start, redraw: () => (loaded ? draw() : undefined) };
}
