// A deployment's progressive rollout: its steps and where it is, each gate against its
// threshold, the next decision time, the decisions recorded in the history, and pause /
// resume / abort (each confirmed), the routes `sluice rollout` calls.
import { describe, enc, get, post } from "../api";
import { h, mount, num, when } from "../dom";
import type { Context } from "../main";
import { banner, confirmAction, fail, poll, table } from "../ui";

interface Check {
  gate: string;
  metric: string;
  op: string;
  threshold: number;
  value: number | null;
  passes: boolean | null;
}

interface Rollout {
  state: "running" | "paused" | "completed" | "rolled_back" | "aborted";
  to: string;
  steps: number[];
  step: number;
  weight: number;
  every_s: number;
  gates: string;
  min_requests: number;
  started_at: number;
  started_by: string;
  step_started_at: number;
  updated_at: number;
  reason: string;
}

interface Status {
  deployment: string;
  revision: number;
  rollout: Rollout | null;
  now?: {
    metrics: Record<string, number | null>;
    checks: Check[];
    next: string;
    reason: string;
    at: number;
    step_ends_at: number;
    next_decision_at: number | null;
  } | null;
}

export interface Decision {
  revision: number;
  at: number;
  by: string;
  note: Record<string, unknown> | null;
}

const POLL_MS = 10000;
const ACTIVE = new Set(["running", "paused"]);

function inSeconds(at: number, now: number): string {
  const s = Math.round(at - now);
  if (s <= 0) return "at the controller's next look";
  return s < 120 ? `in ${s} s` : `in ${Math.floor(s / 60)} min ${s % 60} s`;
}

/** The rollout section of a deployment's page. `changed` is called when a decision made a new
 * revision (the page redraws its policy and history); `decisions` reads them from the history. */
export function rolloutSection(
  ctx: Context,
  name: string,
  changed: () => Promise<void>,
  decisions: () => Promise<Decision[]>,
): { element: HTMLElement; start: () => Promise<void> } {
  const box = h("div", { id: "rollout" });
  const element = h("section", {}, h("h2", {}, "Rollout"), box);
  let revision: number | null = null;
  let stop: (() => void) | null = null;

  const act = async (verb: "pause" | "resume" | "abort", title: string, text: string) => {
    if (!(await confirmAction(title, text, undefined, verb[0].toUpperCase() + verb.slice(1)))) return;
    try {
      await post(`/api/v1/deployments/${enc(name)}/rollout/${verb}`);
      banner(`Rollout of ${name}: ${verb === "pause" ? "paused" : verb === "resume" ? "resumed" : "aborted"}.`, "ok");
      await refresh();
    } catch (error) {
      fail(error);
    }
  };

  const draw = (status: Status, recorded: Decision[]) => {
    const r = status.rollout;
    if (!r) {
      mount(box, h("p", { class: "muted", id: "no-rollout" }, `No rollout. Start one with \`sluice rollout start ${name} --to MODEL:VERSION --gate …\` (docs: Progressive rollouts).`));
      return;
    }
    const now = status.now;
    const steps = h(
      "ol",
      { class: "steps", id: "rollout-steps" },
      r.steps.map((w, i) =>
        h(
          "li",
          { class: i < r.step || (r.state === "completed" && i === r.step) ? "done" : i === r.step && ACTIVE.has(r.state) ? "current" : "todo", "data-step": i },
          `${w}%`,
        ),
      ),
    );
    const actions: Node[] = [];
    if (!ctx.admin) actions.push(h("p", { class: "muted" }, "Pausing, resuming or aborting a rollout needs a key with the admin scope."));
    if (r.state === "running")
      actions.push(
        h("button", { type: "button", class: "action", "data-action": "rollout-pause", onclick: () => act("pause", `Pause the rollout of ${name}?`, `It holds at ${r.weight}% for ${r.to}; nothing advances or rolls back until it is resumed.`) }, "Pause"),
      );
    if (r.state === "paused")
      actions.push(
        h("button", { type: "button", class: "action", "data-action": "rollout-resume", onclick: () => act("resume", `Resume the rollout of ${name}?`, `The step at ${r.weight}% for ${r.to} starts again: its split is restored and its clock and counts start afresh.`) }, "Resume"),
      );
    if (ACTIVE.has(r.state))
      actions.push(
        h("button", { type: "button", class: "action danger", "data-action": "rollout-abort", onclick: () => act("abort", `Abort the rollout of ${name}?`, `Every request goes back to the stable policy; ${r.to} gets no more traffic. This saves a new revision.`) }, "Abort"),
      );
    const gates = now
      ? table(
          ["gate", "threshold", "value now", "verdict"],
          now.checks.map((c) => [
            c.metric,
            `${c.op} ${c.threshold}`,
            c.value === null ? "—" : num(c.value, 4),
            h("span", { class: `verdict ${c.passes === null ? "none" : c.passes ? "pass" : "fail"}`, "data-gate": c.metric }, c.passes === null ? "no value yet" : c.passes ? "pass" : "FAIL"),
          ]),
          { id: "rollout-gates" },
        )
      : null;
    const decided = recorded
      .filter((d) => d.note && "rollout" in d.note)
      .sort((a, b) => b.revision - a.revision)
      .map((d) => {
        const n = d.note!;
        const weight = n.to_weight ?? n.weight;
        return [`revision ${d.revision}`, when(d.at), d.by, String(n.rollout), weight === undefined ? "—" : `${weight}%`, String(n.reason ?? (n.to ? `to ${n.to}` : ""))];
      });
    mount(
      box,
      h(
        "p",
        { id: "rollout-state" },
        h("span", { class: `status ${r.state}`, "data-state": r.state }, r.state.replace("_", " ")),
        ` to ${r.to} · step ${r.step + 1} of ${r.steps.length} at ${r.weight}% · each step at least ${r.every_s >= 120 ? `${num(r.every_s / 60, 1)} min` : `${num(r.every_s, 0)} s`} and ${r.min_requests} candidate requests · started ${when(r.started_at)} by ${r.started_by}`,
      ),
      steps,
      now
        ? h(
            "p",
            { id: "rollout-next" },
            h("strong", {}, `Next: ${now.next}`),
            ` — ${now.reason}. `,
            now.next_decision_at === null
              ? "Paused: nothing is decided until it is resumed."
              : `Next decision ${when(now.next_decision_at)} (${inSeconds(now.next_decision_at, now.at)}; a failing gate rolls back at any look). Candidate requests this step: ${now.metrics.candidate_requests ?? 0} of ${r.min_requests}.`,
          )
        : h("p", { id: "rollout-next" }, `Last decision: ${r.reason}`),
      gates,
      h("div", { class: "actions", id: "rollout-actions" }, actions),
      h("h3", {}, "Decisions"),
      decided.length ? table(["revision", "at", "by", "decision", "weight", "why"], decided, { id: "rollout-decisions" }) : h("p", { class: "muted" }, "None yet."),
    );
  };

  let recorded: Decision[] = [];
  let lastUpdate: number | null = null;
  const refresh = async () => {
    const status = await get<Status>(`/api/v1/deployments/${enc(name)}/rollout`);
    if (revision !== null && status.revision !== revision) await changed();
    revision = status.revision;
    // The decisions are in the history: read it again only when the rollout decided something.
    if (status.rollout && status.rollout.updated_at !== lastUpdate) {
      recorded = await decisions();
      lastUpdate = status.rollout.updated_at;
    }
    draw(status, recorded);
    // Followed while it may still move; a finished (or absent) rollout is read once.
    const active = !!status.rollout && ACTIVE.has(status.rollout.state);
    if (active && !stop) {
      let first = true; // this look was the first: the poller's own starts POLL_MS from now
      stop = poll(() => (first ? void (first = false) : refresh()), POLL_MS);
      ctx.onLeave(() => stop?.());
    } else if (!active && stop) {
      stop();
      stop = null;
    }
  };

  const start = async () => {
    try {
      await refresh();
    } catch (error) {
      mount(box, h("p", { class: "error", id: "rollout-error" }, describe(error)));
    }
  };
  return { element, start };
}
