// Batch jobs: status, progress, counts and timings, followed while the tab is visible; and the
// tenant's batch schedules with their next and recent runs, paused and resumed from here.
import { enc, get, post } from "../api";
import { duration, h, mount, when } from "../dom";
import type { Context } from "../main";
import { banner, confirmAction, fail, poll, table } from "../ui";

interface Job {
  id: string;
  status: "PENDING" | "RUNNING" | "SUCCEEDED" | "FAILED" | "CANCELLED";
  deployment: string;
  input_uri: string;
  output_uri: string;
  format: string;
  output_format: string;
  source: string;
  progress: { chunks_done: number; chunks_total: number | null; rows_done: number; rows_total: number | null };
  counts: { rows_in: number; rows_out: number; rows_failed: number };
  timings: { created_at: number; started_at: number | null; finished_at: number | null };
  error: string | null;
}

interface ScheduleRun {
  job_id: string;
  scheduled_for: number | null;
  status: string;
  rows_in: number;
  rows_out: number;
  rows_failed: number;
  error: string | null;
}

interface Schedule {
  name: string;
  deployment: string;
  input_uri: string;
  expression: string;
  timezone: string;
  overlap: string;
  state: "ENABLED" | "PAUSED";
  skipped: number;
  next_run_at: number | null;
  invalid?: string | null; // why it never runs (stored before a bound held); absent from older servers
  refused?: number; // scheduled times refused in a row (no job made for them); absent from older servers
  last_error?: string | null;
  last_refused_at?: number | null;
  runs: ScheduleRun[];
}

interface ErrorRows {
  job: string;
  rows_failed: number;
  rows: Record<string, unknown>[];
  files: string[];
  truncated: boolean;
}

const POLL_MS = 5000;
const SCHEDULES_POLL_MS = 15000; // a list and one read per schedule: less often than the jobs
const SCHEDULES_SHOWN = 20;
const ERROR_ROWS = 20;

/** A URI's scheme and last three parts (the whole of it in the tooltip). */
function short(uri: string): HTMLElement {
  const [scheme, rest = ""] = uri.split("://", 2);
  const parts = rest.split("/").filter(Boolean);
  const tail = parts.length > 3 ? `${scheme}://…/${parts.slice(-3).join("/")}${uri.endsWith("/") ? "/" : ""}` : uri;
  return h("span", { title: uri }, tail);
}

// The job a schedule's run pointed to: its row stays marked across refreshes.
let marked: string | null = null;

function markJob(): void {
  for (const tr of document.querySelectorAll("#jobs-table tr.highlight")) tr.classList.remove("highlight");
  if (marked) document.querySelector(`#jobs-table [data-job-row="${CSS.escape(marked)}"]`)?.closest("tr")?.classList.add("highlight");
}

/** Scrolls to a job's row in the jobs table and marks it. */
function showJob(id: string): void {
  const row = document.querySelector(`#jobs-table [data-job-row="${CSS.escape(id)}"]`)?.closest("tr");
  if (!row) {
    banner(`${id} is not among the 50 newest jobs.`);
    return;
  }
  marked = id;
  markJob();
  row.scrollIntoView({ block: "center" });
}

/** The schedules section: one row per schedule, its recent runs beneath it. */
function schedulesSection(box: HTMLElement): () => Promise<void> {
  const refresh = async () => {
    const list = await get<Schedule[]>("/api/v1/batch-schedules");
    if (!list.length) {
      mount(box, h("p", { id: "no-schedules" }, "No schedules: `sluice batch schedule create` (or POST /api/v1/batch-schedules) makes one."));
      return;
    }
    const shown = list.slice(0, SCHEDULES_SHOWN);
    const details = await Promise.all(shown.map((s) => get<Schedule>(`/api/v1/batch-schedules/${enc(s.name)}`)));
    const act = (s: Schedule, action: "pause" | "resume") =>
      h(
        "button",
        {
          type: "button",
          class: "link",
          "data-action": `schedule-${action}`,
          "data-schedule": s.name,
          onclick: async () => {
            const [title, text, ok] =
              action === "pause"
                ? [`Pause the schedule ${s.name}?`, "No run starts until it is resumed; runs already going finish.", "Pause the schedule"]
                : [`Resume the schedule ${s.name}?`, "Runs start again from the next scheduled time; the times missed while paused are not run.", "Resume the schedule"];
            if (!(await confirmAction(title, text, undefined, ok))) return;
            try {
              await post(`/api/v1/batch-schedules/${enc(s.name)}/${action}`);
              banner(`${s.name} ${action === "pause" ? "paused" : "resumed"}.`, "ok");
              await refresh();
            } catch (error) {
              fail(error);
            }
          },
        },
        action,
      );
    const rows = details.map((s) => {
      const paused = s.state === "PAUSED";
      const runs = s.runs.length
        ? h(
            "ul",
            { class: "runs", "data-runs": s.name },
            s.runs.map((r) =>
              h(
                "li",
                {},
                h("button", { type: "button", class: "link mono", "data-job-link": r.job_id, onclick: () => showJob(r.job_id) }, r.job_id),
                " ",
                h("span", { class: `status ${r.status.toLowerCase()}` }, r.status),
                ` ${r.rows_in} in, ${r.rows_out} out, ${r.rows_failed} failed`,
                r.scheduled_for ? h("span", { class: "muted" }, ` · for ${when(r.scheduled_for)}`) : "",
                r.error ? h("span", { class: "error" }, ` ${r.error}`) : "",
              ),
            ),
          )
        : h("span", { class: "muted" }, "no runs yet");
      return [
        h("span", { class: "mono", "data-schedule-row": s.name }, s.name),
        s.deployment,
        h("span", { class: "mono small" }, s.expression, h("br"), s.timezone),
        h("span", { class: "mono small" }, short(s.input_uri)),
        h("span", {}, s.overlap, s.skipped ? h("span", { class: "muted" }, ` (${s.skipped} skipped)`) : ""),
        h("span", { class: `status ${paused ? "paused" : "active"}`, "data-schedule-state": s.state }, paused ? "paused" : "active"),
        s.invalid
          ? h("span", { class: "error", "data-next-run": s.name }, `never runs: ${s.invalid}`)
          : h("span", { "data-next-run": s.name }, paused ? "— (paused)" : when(s.next_run_at)),
        s.refused
          ? h(
              "div",
              {},
              h(
                "p",
                { class: "error", "data-refused": s.name },
                `${s.refused} ${s.refused === 1 ? "run" : "runs"} refused in a row, the latest for ${when(s.last_refused_at)}: ${s.last_error ?? ""}`,
              ),
              runs,
            )
          : runs,
        act(s, paused ? "resume" : "pause"),
      ];
    });
    mount(
      box,
      list.length > shown.length ? h("p", { class: "muted" }, `The first ${shown.length} of ${list.length} schedules.`) : "",
      h("div", { class: "scroll" }, table(["schedule", "deployment", "expression", "input", "overlap", "state", "next run", "recent runs", ""], rows, { id: "schedules-table" })),
    );
  };
  return refresh;
}

export async function batchPage(ctx: Context): Promise<void> {
  marked = null;
  const box = h("div", { id: "jobs" });
  const schedulesBox = h("div", { id: "schedules" });
  const errorsBox = h("div", { id: "errors" });
  mount(
    ctx.main,
    h("h1", {}, "Batch jobs"),
    h(
      "p",
      { class: "muted" },
      "Newest first, refreshed every 5 s while this tab is visible. Scored parts and error files are written under each job's output URI; a job with failed rows shows the first rows of its error files on request.",
    ),
    box,
    errorsBox,
    h("h2", {}, "Schedules"),
    h(
      "p",
      { class: "muted" },
      "Each schedule starts a job on its cron or rate expression, in its time zone, with its input template filled by the scheduled time; refreshed every 15 s while this tab is visible. A run's job id leads to its row above.",
    ),
    schedulesBox,
  );
  // The job whose first error rows are shown, and how many failed rows they were read at: they
  // are read again only when that count moves (a running job), not at every refresh.
  let shown: { id: string; failed: number } | null = null;
  const showErrors = async (j: Job) => {
    shown = { id: j.id, failed: j.counts.rows_failed };
    const found = await get<ErrorRows>(`/api/v1/batch-jobs/${enc(j.id)}/errors?limit=${ERROR_ROWS}`);
    const keys = [...new Set(found.rows.flatMap((r) => Object.keys(r)))].filter((k) => k !== "row" && k !== "reason" && k !== "input");
    const raw = found.rows.some((r) => r.input !== undefined); // the line of a text row that did not parse
    const cell = (v: unknown) => (v === undefined || v === null ? "—" : typeof v === "string" ? v : JSON.stringify(v));
    mount(
      errorsBox,
      h("h2", {}, `First error rows of ${j.id}`),
      h(
        "p",
        { class: "muted" },
        `${found.rows.length} of ${found.rows_failed} failed rows${found.truncated ? " (the first ones)" : ""}, from ${found.files.length} error file${found.files.length === 1 ? "" : "s"} under `,
        short(`${j.output_uri}errors/`),
        ".",
      ),
      found.rows.length
        ? table(
            ["row", ...keys, "reason", ...(raw ? ["input"] : [])],
            found.rows.map((r) => [
              cell(r.row),
              ...keys.map((k) => cell(r[k])),
              h("span", { class: "error" }, cell(r.reason)),
              ...(raw ? [h("span", { class: "mono small" }, cell(r.input))] : []),
            ]),
            { id: "error-rows", "data-job": j.id },
          )
        : h("p", { id: "no-error-rows" }, "No error rows written yet."),
    );
  };
  const refresh = async () => {
    const jobs = await get<Job[]>("/api/v1/batch-jobs?limit=50");
    if (!jobs.length) {
      mount(box, h("p", { id: "no-jobs" }, "No batch jobs yet: drop a file in the inbox, or use `sluice batch submit`."));
      return;
    }
    const rows = jobs.map((j) => {
      const total = j.progress.rows_total ?? j.progress.chunks_total ?? 0;
      const done = j.progress.rows_total ? j.progress.rows_done : j.progress.chunks_done;
      const finished = j.timings.finished_at;
      const ran = j.timings.started_at ? (finished ?? Date.now() / 1000) - j.timings.started_at : null;
      const cancel =
        j.status === "PENDING" || j.status === "RUNNING"
          ? h(
              "button",
              {
                type: "button",
                class: "link",
                onclick: async () => {
                  if (!(await confirmAction(`Cancel ${j.id}?`, `The job stops scoring; what it wrote so far stays in ${j.output_uri}.`, undefined, "Cancel the job"))) return;
                  try {
                    await post(`/api/v1/batch-jobs/${enc(j.id)}/cancel`);
                    banner(`${j.id} cancelled.`, "ok");
                    await refresh();
                  } catch (error) {
                    fail(error);
                  }
                },
              },
              "cancel",
            )
          : "";
      const errors =
        j.counts.rows_failed > 0
          ? h(
              "button",
              {
                type: "button",
                class: "link",
                "data-errors": j.id,
                onclick: () => showErrors(j).catch(fail),
              },
              "error rows",
            )
          : "";
      if (shown && shown.id === j.id && shown.failed !== j.counts.rows_failed) showErrors(j).catch(fail);
      return [
        h("span", { class: "mono", "data-job-row": j.id }, j.id),
        j.deployment,
        h("span", { class: `status ${j.status.toLowerCase()}`, "data-status": j.status }, j.status),
        h(
          "span",
          { class: "progress" },
          h("progress", { max: total || 1, value: j.status === "SUCCEEDED" ? total || 1 : done }),
          ` ${done}/${total || "?"} ${j.progress.rows_total ? "rows" : "chunks"}`,
        ),
        h("span", {}, `${j.counts.rows_in} in`, h("br"), `${j.counts.rows_out} out`, h("br"), `${j.counts.rows_failed} failed`),
        h("span", {}, `created ${when(j.timings.created_at)}`, h("br"), `ran ${duration(ran)}`),
        h("span", { class: "mono small" }, short(j.input_uri), h("br"), "→ ", short(j.output_uri)),
        j.error ? h("span", { class: "error" }, j.error) : "",
        h("span", {}, errors, errors && cancel ? h("br") : "", cancel),
      ];
    });
    mount(box, h("div", { class: "scroll" }, table(["job", "deployment", "status", "progress", "counts", "timings", "files", "error", ""], rows, { id: "jobs-table" })));
    markJob();
  };
  ctx.onLeave(poll(refresh, POLL_MS));
  ctx.onLeave(poll(schedulesSection(schedulesBox), SCHEDULES_POLL_MS));
}
