// A policy's nodes as boxes to draw (`picture.ts` places them): what each node says (its kind,
// its model, a transform's ops, a switch's conditions) and, with the deployment's statistics,
// the figures of each step, case, variant and mirror beside it. Pure: no DOM.
import type { Condition, Op, Policy } from "./policy";

/** One subject's counters, as `GET …/stats` gives them. */
export interface Figures {
  requests: number;
  errors: number;
  error_rate?: number | null;
  invalid_input_rate?: number | null; // requests refused for their inputs, over all
  latency_ms: { p50: number | null; p95: number | null; p99: number | null };
  rows?: number; // a case's: the rows that took it (a switch decides row by row)
}

/** What `GET …/stats` gives per subject: a split's variants, a shadow's mirrors, a sequence's
 * steps and a switch's cases, each by its path in the policy (`at`). */
export interface GraphStats {
  variants?: Record<string, Figures>;
  mirrors?: Record<string, Figures>;
  steps?: Record<string, Figures>;
  cases?: Record<string, Figures>;
}

export interface Line {
  text: string;
  cls: "sub" | "op" | "stat" | "mark";
}

export interface Edge {
  label: string;
  note?: string; // figures, under the label
  tip?: string; // the whole text where the label is cut short
  dashed: boolean; // a mirror: its answer goes nowhere
  box: Box;
}

export interface Box {
  kind: string;
  title: string;
  lines: Line[];
  edges: Edge[]; // branches, each drawn in the next column
  chain: Box[]; // a sequence's steps, one after another on its row
  tip?: string;
  href?: string;
}

export const MAX_CHARS = 48; // a line longer than this is cut (its whole text is the hover tip)
export const MAX_OPS = 8; // a transform shows this many ops, then how many more

const sub = (text: string): Line => ({ text: clip(text), cls: "sub" });
const box = (kind: string, title: string, lines: Line[], more: Partial<Box> = {}): Box => ({ kind, title: clip(title), lines, edges: [], chain: [], ...more });

/** A branch's name at `path`, as the statistics name it: a node of the top by its own name
 * (`a`), one nested in another with the names of the variants, mirrors, members, cases and
 * steps above it (`m1/a`: variant `a` of the split in ensemble member `m1`). */
export function at(path: string, name: string): string {
  return path ? `${path}/${name}` : name;
}

export function boxOf(p: Policy, stats?: GraphStats, path = ""): Box {
  switch (p.kind) {
    case "single":
      return box("single", p.model, [sub(`version ${p.version}`)]);
    case "ref":
      return box("ref", "ref", [sub(`→ ${p.deployment}`)], { href: `#/deployments/${encodeURIComponent(p.deployment)}` });
    case "split": {
      const total = p.variants.reduce((a, v) => a + v.weight, 0) || 1;
      const how = p.bandit ? `bandit: ${p.bandit.algorithm}` : p.routing_key ? `sticky by ${p.routing_key}` : "random";
      return box("split", "split", [sub(how)], {
        edges: p.variants.map((v) => ({
          label: `${v.name} · ${p.bandit ? "learned" : `${trim((100 * v.weight) / total)}%`}`,
          note: stats && figures(stats.variants?.[at(path, v.name)]),
          dashed: false,
          box: boxOf(v.target, stats, at(path, v.name)),
        })),
      });
    }
    case "shadow":
      return box("shadow", "shadow", [sub(`${p.mirrors.length} mirror${p.mirrors.length === 1 ? "" : "s"}`)], {
        edges: [
          { label: "primary · answers", dashed: false, box: boxOf(p.primary, stats, path) },
          ...p.mirrors.map((m) => ({
            label: `mirror ${m.name} · ${trim(m.sample_percent)}% sampled`,
            note: stats && figures(stats.mirrors?.[at(path, m.name)]),
            dashed: true,
            box: boxOf(m.target, stats, at(path, m.name)),
          })),
        ],
      });
    case "ensemble":
      return box("ensemble", "ensemble", [sub(`${p.aggregator}${p.min_members ? ` · min ${p.min_members}` : ""}`)], {
        edges: p.members.map((m) => ({
          label: `${m.name} · w ${trim(m.weight ?? 1)}${m.timeout_ms ? ` · ${trim(m.timeout_ms)} ms` : ""}`,
          dashed: false,
          box: boxOf(m.target, stats, at(path, m.name)),
        })),
      });
    case "sequence": {
      const exposed = p.expose ?? [];
      const lines = [sub(`${p.steps.length} steps`), ...(exposed.length ? [sub(`exposes ${exposed.length} output${exposed.length === 1 ? "" : "s"}`)] : [])];
      return box("sequence", "sequence", lines, { chain: p.steps.map((step) => stepBox(step.name, step.target, exposed, stats, path)) });
    }
    case "switch":
      return box("switch", "switch", [sub(`${p.cases.length} case${p.cases.length === 1 ? "" : "s"} + default`)], {
        edges: [
          ...p.cases.map((c) => {
            const whole = `${c.name}: ${conditionText(c.when)}`;
            return { label: clip(whole), tip: whole.length > MAX_CHARS ? whole : undefined, note: stats && figures(stats.cases?.[at(path, c.name)], true), dashed: false, box: boxOf(c.target, stats, at(path, c.name)) };
          }),
          { label: "default", note: stats && figures(stats.cases?.[at(path, "default")], true), dashed: false, box: boxOf(p.default, stats, at(path, "default")) },
        ],
      });
    case "transform": {
      const ops = p.ops.map(opText);
      const lines = [sub(`${ops.length} op${ops.length === 1 ? "" : "s"}`)];
      if (p.inputs?.length) lines.push(sub(`takes ${p.inputs.map((i) => i.name).join(", ")}`));
      lines.push(...ops.slice(0, MAX_OPS).map((text): Line => ({ text: clip(text), cls: "op" })));
      if (ops.length > MAX_OPS) lines.push(sub(`… ${ops.length - MAX_OPS} more`));
      return box("transform", "transform", lines, { tip: ops.join("\n") });
    }
    default:
      return otherBox(p as unknown as Record<string, unknown>, stats, path);
  }
}

/** A sequence's step: titled by its name, then what its node is, the outputs the sequence
 * exposes from it, and its figures. */
function stepBox(name: string, target: Policy, exposed: string[], stats?: GraphStats, path = ""): Box {
  const inner = boxOf(target, stats, at(path, name));
  const [first, ...rest] = inner.lines;
  const what = first?.cls === "sub" ? [sub(`${inner.title} · ${first.text}`), ...rest] : [sub(inner.title), ...inner.lines];
  const outputs = exposed.filter((e) => e.startsWith(`${name}.`)).map((e) => e.slice(name.length + 1));
  if (outputs.length) what.push({ text: clip(`↗ exposes ${outputs.join(", ")}`), cls: "mark" });
  if (stats) what.push({ text: figures(stats.steps?.[at(path, name)], false, true), cls: "stat" });
  return { ...inner, title: clip(name), lines: what };
}

// The fields that name what a function step (or a node of a kind not known here) runs.
const TARGET_FIELDS = ["arn", "function", "target", "callable", "handler", "name", "uri", "url"];

/** A function step, or a node of a kind this console does not know: its kind, a label, and
 * any policies it holds (a field that is a node, or a list of named parts with a `target`). */
function otherBox(p: Record<string, unknown>, stats?: GraphStats, path = ""): Box {
  const kind = String(p.kind ?? "node");
  const fields = Object.entries(p).filter(([k]) => k !== "kind");
  const named = TARGET_FIELDS.map((f) => p[f]).find((v) => typeof v === "string") as string | undefined;
  const label = named ?? (fields.find(([, v]) => typeof v === "string")?.[1] as string | undefined);
  const edges: Edge[] = [];
  for (const [field, value] of fields) {
    if (isNode(value)) edges.push({ label: field, dashed: false, box: boxOf(value as Policy, stats, path) });
    if (Array.isArray(value))
      value.forEach((part, i) => {
        if (part && typeof part === "object" && isNode((part as any).target)) edges.push({ label: String((part as any).name ?? `${field} ${i}`), dashed: false, box: boxOf((part as any).target, stats, path) });
      });
  }
  return box(kind, kind, label ? [sub(shortTarget(label))] : [], { edges, tip: label && label !== shortTarget(label) ? label : undefined });
}

function isNode(value: unknown): boolean {
  return !!value && typeof value === "object" && !Array.isArray(value) && typeof (value as any).kind === "string";
}

/** A Lambda function's ARN as `lambda <name>[:<qualifier>]`; anything else as it is. */
export function shortTarget(target: string): string {
  const parts = target.split(":");
  if (parts[0] === "arn" && parts[2] === "lambda" && parts[5] === "function" && parts[6]) return `lambda ${parts.slice(6).join(":")}`;
  return target;
}

/** A condition as one line: `header x-region in ["eu", "uk"] or routing key == "eu"`. */
export function conditionText(c: Condition, nested = false): string {
  if ("all" in c || "any" in c) {
    const [terms, join] = "all" in c ? [c.all, " and "] : [c.any, " or "];
    const text = terms.map((t) => conditionText(t, true)).join(join);
    return nested && terms.length > 1 ? `(${text})` : text;
  }
  const subject = subjectText(c.field, c.column);
  return c.op === "exists" ? `${subject} exists` : `${subject} ${c.op} ${valueText(c.value)}`;
}

function subjectText(field: string, column?: number | string | null): string {
  if (field === "routing_key") return "routing key";
  const dot = field.indexOf(".");
  if (dot < 0) return field;
  const [source, name] = [field.slice(0, dot), field.slice(dot + 1)];
  if (source === "inputs") return column === null || column === undefined ? `input ${name}` : `${name}[${column}]`;
  return `${source.replace(/s$/, "")} ${name}`; // headers.x -> header x; a source added later alike
}

function valueText(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(valueText).join(", ")}]`;
  return typeof v === "string" ? JSON.stringify(v) : String(v);
}

/** An op by its name and the tensors it reads and writes: `ordinal colour → colour_code`. */
export function opText(op: Op): string {
  if (op.op === "concat") return `concat ${(op.inputs ?? []).join(", ")} → ${op.output}`;
  if (op.op === "keep") return `keep ${(op.names ?? []).join(", ")}`;
  const reads = op.input ?? (op.inputs ?? []).join(", ");
  const writes = [op.output && op.output !== op.input ? op.output : null, op.indices ?? null].filter(Boolean);
  return `${op.op} ${reads}${writes.length ? ` → ${writes.join(", ")}` : ""}`.trim();
}

/** A subject's figures in a few words: `12 req · 30 rows · p50 3.1 ms · 0 err`. */
export function figures(f: Figures | undefined, rows = false, latency = false): string {
  if (!f) return "0 req";
  const parts = [`${f.requests} req`];
  if (rows && f.rows !== undefined) parts.push(`${f.rows} row${f.rows === 1 ? "" : "s"}`);
  if (latency && f.latency_ms.p50 !== null) parts.push(`p50 ${milliseconds(f.latency_ms.p50)} ms`);
  parts.push(`${f.errors} err`);
  return parts.join(" · ");
}

function milliseconds(v: number): string {
  return v < 1 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : v.toFixed(0);
}

function clip(text: string): string {
  return text.length > MAX_CHARS ? `${text.slice(0, MAX_CHARS - 1)}…` : text;
}

function trim(n: number): string {
  return String(Math.round(n * 100) / 100);
}
