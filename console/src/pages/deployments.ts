// Deployments: each policy as a picture (a graph's steps and cases with their figures), its
// live statistics, its model monitoring, its revisions, and the actions the CLI has (promote a mirror, shift a split's weights, pin a version), each confirmed.
import { enc, get, post, put } from "../api";
import { LiveCharts, type Sample } from "../charts";
import { h, mount, num, when } from "../dom";
import type { Context } from "../main";
import type { Figures } from "../nodes";
import { policySvg } from "../picture";
import { rateCells } from "../rates";
import { canonical, diffLines, modelsIn, type Policy } from "../policy";
import { monitorSection } from "./monitor";
import { type Decision, rolloutSection } from "./rollout";
import { banner, confirmAction, fail, poll, pretty, table } from "../ui";

interface Deployment {
  name: string;
  policy: Policy;
  revision: number;
  description: string;
  created_at: number;
  updated_at: number;
  updated_by: string;
  cache?: { ttl_s: number; max_entries: number } | null;
}

interface Traffic {
  requests: number;
  errors: number;
  error_rate: number | null;
  invalid_inputs?: number;
  invalid_input_rate?: number | null;
  latency_ms: { p50: number | null; p95: number | null; p99: number | null };
  cache_hits?: number; // the prediction cache's (the deployment's overall counts, where it is on)
  cache_misses?: number;
  cache_hit_rate?: number | null;
}

interface Stats {
  deployment: string;
  revision: number;
  overall: Traffic;
  variants: Record<string, Traffic & { mean_reward?: number | null; rewards?: number }>;
  mirrors: Record<string, Traffic & { compared: number; agreement: number | null; agreement_ci95: number[] | null; mean_abs_diff: number | null; max_abs_diff: number | null }>;
  steps?: Record<string, Figures>; // a sequence's steps, by name (a graph's only)
  cases?: Record<string, Figures>; // a switch's cases, by name, `default` among them
}

interface Change {
  revision: number;
  at: number;
  by: string;
  old_policy: Policy | null;
  new_policy: Policy | null;
  note?: Record<string, unknown> | null;
}

const POLL_MS = 5000;

export async function deploymentsPage(ctx: Context): Promise<void> {
  const list = await get<Deployment[]>("/api/v1/deployments");
  mount(
    ctx.main,
    h("h1", {}, "Deployments"),
    list.length
      ? h(
          "div",
          { class: "cards", id: "deployments" },
          list.map((d) =>
            h(
              "a",
              { class: "card", href: `#/deployments/${enc(d.name)}`, "data-deployment": d.name },
              h("h2", {}, d.name, h("span", { class: `kind ${d.policy.kind}` }, d.policy.kind)),
              h("p", { class: "muted" }, `revision ${d.revision} · updated ${when(d.updated_at)} by ${d.updated_by}`),
              policySvg(d.policy, `policy of ${d.name}`, false),
            ),
          ),
        )
      : h("p", { id: "empty" }, "No deployments in this tenant yet."),
  );
}

export async function deploymentPage(ctx: Context, name: string): Promise<void> {
  let dep = await get<Deployment>(`/api/v1/deployments/${enc(name)}`);
  const drawing = h("div", { id: "policy-drawing" });
  const picture = h("div", { class: "picture", id: "policy" });
  let lastStats: Stats | null = null; // the figures drawn beside the policy's nodes
  const actions = h("div", { class: "actions", id: "actions" });
  const statsBox = h("div", { id: "stats" });
  const historyBox = h("div", { id: "history" });
  const header = h("p", { class: "muted", id: "revision" });
  const charts = new LiveCharts();
  let statsRevision: number | null = null; // null: the current one
  const revisionSelect = h("select", { id: "stats-revision" });
  const rangeSelect = h(
    "select",
    { id: "range" },
    [
      [0, "since this page opened"],
      [300, "last 5 minutes"],
      [900, "last 15 minutes"],
      [3600, "last hour"],
    ].map(([s, label]) => h("option", { value: s }, label)),
  );
  rangeSelect.addEventListener("change", () => {
    charts.windowS = Number(rangeSelect.value);
    charts.reset();
  });
  revisionSelect.addEventListener("change", () => {
    statsRevision = revisionSelect.value ? Number(revisionSelect.value) : null;
    charts.reset();
    refreshStats();
  });

  const monitoring = monitorSection(ctx, name, () => dep.policy);
  const showDeployment = () => {
    monitoring.refill();
    header.textContent = `revision ${dep.revision} · updated ${when(dep.updated_at)} by ${dep.updated_by}${dep.description ? ` · ${dep.description}` : ""}`;
    drawPolicy();
    mount(picture, drawing, h("details", {}, h("summary", {}, "Policy JSON"), h("pre", {}, pretty(dep.policy))));
    drawActions();
  };

  // Redrawn with each sample of the statistics: their figures beside the nodes, when they are
  // the drawn revision's.
  const drawPolicy = () => {
    const figures = lastStats && lastStats.revision === dep.revision ? lastStats : undefined;
    mount(drawing, policySvg(dep.policy, `policy of ${dep.name}, revision ${dep.revision}`, true, figures));
  };

  const apply = async (title: string, text: string, detail: unknown, send: () => Promise<Deployment>) => {
    if (!(await confirmAction(title, text, detail === undefined ? undefined : pretty(detail)))) return;
    try {
      dep = await send();
      banner(`${dep.name} is now at revision ${dep.revision}.`, "ok");
      showDeployment();
      charts.reset();
      await Promise.all([refreshStats(), refreshHistory()]);
    } catch (error) {
      fail(error);
    }
  };

  const drawActions = () => {
    const parts: Node[] = [];
    if (!ctx.admin) parts.push(h("p", { class: "muted" }, "Changing a deployment needs a key with the admin scope."));
    const p = dep.policy;
    if (p.kind === "shadow") {
      for (const m of p.mirrors) {
        parts.push(
          h(
            "button",
            {
              type: "button",
              class: "action",
              "data-action": `promote-${m.name}`,
              onclick: () =>
                apply(`Promote mirror ${m.name}?`, `Mirror "${m.name}" becomes what answers every request of "${dep.name}"; its other mirrors stop. This saves a new revision.`, m.target, () =>
                  post<Deployment>(`/api/v1/deployments/${enc(dep.name)}/promote`, { mirror: m.name }),
                ),
            },
            `Promote ${m.name}`,
          ),
        );
      }
    }
    if (p.kind === "split" && !p.bandit) {
      const inputs = p.variants.map((v) => h("input", { type: "number", min: 0, step: "any", value: v.weight, name: v.name, "aria-label": `weight of ${v.name}` }));
      const form = h(
        "form",
        { class: "weights", id: "weights" },
        h("strong", {}, "Shift weights"),
        p.variants.map((v, i) => h("label", {}, `${v.name} `, inputs[i])),
        h("button", { type: "submit", class: "action" }, "Apply weights"),
      );
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        const policy = { ...p, variants: p.variants.map((v, i) => ({ ...v, weight: Number(inputs[i].value) })) };
        apply(`Shift the weights of ${dep.name}?`, p.variants.map((v, i) => `${v.name}: ${v.weight} → ${inputs[i].value}`).join(", "), policy, () =>
          put<Deployment>(`/api/v1/deployments/${enc(dep.name)}`, { policy, revision: dep.revision }),
        );
      });
      parts.push(form);
    }
    const models = [...modelsIn(p)];
    if (models.length) {
      const model = h("select", { name: "model", "aria-label": "model" }, models.map((m) => h("option", { value: m }, m)));
      const version = h("select", { name: "version", "aria-label": "version" });
      const loadVersions = async () => {
        try {
          const versions = await get<{ version: number }[]>(`/api/v1/models/${enc(model.value)}/versions`);
          mount(version, versions.map((v) => h("option", { value: v.version }, `version ${v.version}`)));
        } catch (error) {
          fail(error);
        }
      };
      model.addEventListener("change", loadVersions);
      if (ctx.admin) loadVersions();
      const form = h("form", { class: "pin", id: "pin" }, h("strong", {}, "Pin a version"), model, version, h("button", { type: "submit", class: "action" }, "Pin"));
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        const body = { model: model.value, version: Number(version.value), revision: dep.revision };
        apply(`Pin ${dep.name} to ${body.model} version ${body.version}?`, `Every request of "${dep.name}" goes to ${body.model} version ${body.version}; the current policy is replaced (it stays in the history).`, body, () =>
          put<Deployment>(`/api/v1/deployments/${enc(dep.name)}`, body),
        );
      });
      parts.push(form);
    }
    mount(actions, parts);
  };

  const refreshStats = async () => {
    const query = statsRevision ? `?revision=${statsRevision}` : "";
    const stats = await get<Stats>(`/api/v1/deployments/${enc(dep.name)}/stats${query}`);
    const subjects: Sample["subjects"] = { all: { requests: stats.overall.requests, errors: stats.overall.errors, p50: stats.overall.latency_ms.p50, p95: stats.overall.latency_ms.p95 } };
    const rows: (Node | string)[][] = [["all", "-", String(stats.overall.requests), String(stats.overall.errors), ...rateCells(stats.overall), num(stats.overall.latency_ms.p50), num(stats.overall.latency_ms.p95), num(stats.overall.latency_ms.p99), "—", "—"]];
    for (const [name, v] of Object.entries(stats.variants)) {
      subjects[`variant ${name}`] = { requests: v.requests, errors: v.errors, p50: v.latency_ms.p50, p95: v.latency_ms.p95 };
      rows.push(["variant", name, String(v.requests), String(v.errors), ...rateCells(v), num(v.latency_ms.p50), num(v.latency_ms.p95), num(v.latency_ms.p99), "—", v.mean_reward == null ? "—" : num(v.mean_reward, 3)]);
    }
    for (const [name, m] of Object.entries(stats.mirrors)) {
      subjects[`mirror ${name}`] = { requests: m.requests, errors: m.errors, p50: m.latency_ms.p50, p95: m.latency_ms.p95 };
      const ci = m.agreement_ci95 ? ` [${m.agreement_ci95[0].toFixed(3)}, ${m.agreement_ci95[1].toFixed(3)}]` : "";
      rows.push(["mirror", name, String(m.requests), String(m.errors), ...rateCells(m), num(m.latency_ms.p50), num(m.latency_ms.p95), num(m.latency_ms.p99), m.agreement == null ? "—" : `${m.agreement.toFixed(3)}${ci}`, "—"]);
    }
    for (const [kind, items] of [["step", stats.steps], ["case", stats.cases]] as const) {
      for (const [name, f] of Object.entries(items ?? {})) {
        const what = kind === "case" && f.rows !== undefined ? `${name} (${f.rows} row${f.rows === 1 ? "" : "s"})` : name;
        rows.push([kind, what, String(f.requests), String(f.errors), ...rateCells(f), num(f.latency_ms.p50), num(f.latency_ms.p95), num(f.latency_ms.p99), "—", "—"]);
      }
    }
    lastStats = stats;
    drawPolicy();
    charts.add({ t: Date.now() / 1000, subjects });
    const cache = stats.overall;
    mount(
      statsBox,
      h("p", { class: "muted" }, `Counters of revision ${stats.revision}, merged from every container; sampled every ${POLL_MS / 1000} s while this tab is visible.`),
      table(["kind", "name", "requests", "errors", "error rate", "refused inputs", "p50 ms", "p95 ms", "p99 ms", "agreement (95% CI)", "mean reward"], rows, { id: "stats-table" }),
      cache.cache_hits === undefined
        ? null
        : h(
            "p",
            { id: "cache-stats" },
            `Prediction cache: ${cache.cache_hits} hits, ${cache.cache_misses ?? 0} misses` +
              (cache.cache_hit_rate == null ? "" : ` (hit rate ${(cache.cache_hit_rate * 100).toFixed(1)}%)`) +
              ". A hit is counted among the requests; the latency quantiles are of computed answers.",
          ),
    );
  };

  const refreshHistory = async () => {
    const changes = await get<Change[]>(`/api/v1/deployments/${enc(dep.name)}/history`);
    const diffBox = h("div", { class: "diff", id: "diff" });
    const showDiff = (c: Change) => {
      const lines = diffLines(canonical(c.old_policy), canonical(c.new_policy));
      mount(
        diffBox,
        h("h3", {}, `Revision ${c.revision}: ${c.old_policy ? `from revision ${c.revision - 1}` : "created"}`),
        h("pre", {}, lines.map((l) => h("span", { class: l.op === "+" ? "add" : l.op === "-" ? "del" : "same" }, `${l.op} ${l.line}\n`))),
      );
    };
    const rows = [...changes]
      .sort((a, b) => b.revision - a.revision)
      .map((c) => [
        h("button", { type: "button", class: "link", "data-revision": c.revision, onclick: () => showDiff(c) }, `revision ${c.revision}`),
        when(c.at),
        c.by,
        c.new_policy ? c.new_policy.kind : "deleted",
      ]);
    mount(revisionSelect, h("option", { value: "" }, "current revision"), changes.map((c) => h("option", { value: c.revision, selected: c.revision === statsRevision }, `revision ${c.revision}`)));
    mount(historyBox, table(["revision", "at", "by", "policy"], rows, { id: "history-table" }), diffBox);
    const latest = changes.reduce<Change | null>((a, c) => (!a || c.revision > a.revision ? c : a), null);
    if (latest) showDiff(latest);
  };

  // A rollout's decision makes a new revision: the page follows it.
  const rollout = rolloutSection(
    ctx,
    dep.name,
    async () => {
      dep = await get<Deployment>(`/api/v1/deployments/${enc(dep.name)}`);
      showDeployment();
      charts.reset();
      await refreshHistory();
    },
    () => get<Decision[]>(`/api/v1/deployments/${enc(dep.name)}/history`),
  );

  mount(
    ctx.main,
    h("p", {}, h("a", { href: "#/deployments" }, "← Deployments")),
    h("h1", {}, dep.name, h("span", { class: `kind ${dep.policy.kind}` }, dep.policy.kind)),
    header,
    picture,
    h("section", {}, h("h2", {}, "Actions"), actions),
    rollout.element,
    h("section", {}, h("h2", {}, "Live statistics"), h("div", { class: "controls" }, h("label", {}, "Time range ", rangeSelect), h("label", {}, "Revision ", revisionSelect)), statsBox, charts.element),
    monitoring.element,
    h("section", {}, h("h2", {}, "Revisions"), historyBox),
  );
  showDeployment();
  await Promise.all([refreshHistory(), rollout.start(), monitoring.start()]);
  ctx.onLeave(poll(refreshStats, POLL_MS));
}
