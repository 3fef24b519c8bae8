// A deployment's policy as the API gives it: its node types, the models it names, and the line
// diff of two revisions. `nodes.ts` and `picture.ts` draw it.

/** A switch's condition: one comparison of a request's field, or `all` / `any` of conditions. */
export type Condition = { field: string; op: string; value?: unknown; column?: number | string | null } | { all: Condition[] } | { any: Condition[] };

/** A transform's op: its name and the tensors it reads and writes (each op has fields of its own). */
export type Op = { op: string; input?: string; output?: string | null; inputs?: string[]; names?: string[]; indices?: string; [field: string]: unknown };

export type Policy =
  | { kind: "single"; model: string; version: number }
  | { kind: "ref"; deployment: string }
  | { kind: "split"; variants: { name: string; weight: number; target: Policy }[]; routing_key?: string | null; bandit?: { algorithm: string; epsilon?: number } | null }
  | { kind: "shadow"; primary: Policy; mirrors: { name: string; sample_percent: number; target: Policy }[] }
  | { kind: "ensemble"; members: { name: string; target: Policy; weight?: number; timeout_ms?: number | null }[]; aggregator: string; min_members?: number | null }
  | { kind: "sequence"; steps: { name: string; target: Policy; map?: Record<string, string> | null }[]; expose?: string[] | null }
  | { kind: "switch"; cases: { name: string; when: Condition; target: Policy }[]; default: Policy }
  | { kind: "transform"; inputs?: { name: string; datatype: string; shape: number[] }[] | null; ops: Op[] }
  // Answers a batch job published, by entity; `live` answers the rest (and says what it answers).
  | { kind: "precomputed"; table: string; key: string; column?: number | string | null; max_age_s?: number; live: Policy }
  // A step of the tenant's own code (a Lambda function's ARN, a local `module:function`). A kind
  // this console does not know is drawn the same way: by its kind and a label.
  | { kind: "function"; [field: string]: unknown };

// The kinds that run only as a sequence's step, with no model version (the API's `STEPS_ONLY`).
const STEPS_ONLY: readonly string[] = ["transform", "function", "lookup"];
const MAX_HOPS = 64; // more nodes and references than a stored policy can chain (the API refuses cycles)

/** The model whose version a pinned request runs, found as the API finds it: a split's first
 * variant, a shadow's primary, an ensemble's first member, a switch's first case, a precomputed
 * node's live one, a sequence's first step that is not a transform, function or lookup (that
 * step's model, even through a reference), a reference's deployment (`policyOf` gives its
 * policy; null when it cannot be read). */
export function firstModel(p: Policy, policyOf: (deployment: string) => Policy | undefined = () => undefined): string | null {
  let node: Policy | undefined = p;
  for (let hop = 0; node && hop < MAX_HOPS; hop++) {
    switch (node.kind) {
      case "single":
        return node.model;
      case "ref":
        node = policyOf(node.deployment);
        break;
      case "split":
        node = node.variants[0].target;
        break;
      case "shadow":
        node = node.primary;
        break;
      case "ensemble":
        node = node.members[0].target;
        break;
      case "sequence":
        node = node.steps.find((step) => !STEPS_ONLY.includes(step.target.kind))?.target;
        break;
      case "switch":
        node = node.cases[0].target;
        break;
      case "precomputed":
        node = node.live;
        break;
      default: // a transform, a function or a kind not known here
        return null;
    }
  }
  return null;
}

export function modelsIn(p: Policy, out: Set<string> = new Set()): Set<string> {
  switch (p.kind) {
    case "single":
      out.add(p.model);
      break;
    case "split":
      p.variants.forEach((v) => modelsIn(v.target, out));
      break;
    case "shadow":
      modelsIn(p.primary, out);
      p.mirrors.forEach((m) => modelsIn(m.target, out));
      break;
    case "ensemble":
      p.members.forEach((m) => modelsIn(m.target, out));
      break;
    case "sequence":
      p.steps.forEach((step) => modelsIn(step.target, out));
      break;
    case "switch":
      p.cases.forEach((c) => modelsIn(c.target, out));
      modelsIn(p.default, out);
      break;
  }
  return out;
}

/** JSON with sorted keys, one field a line: what the revision diff compares. */
export function canonical(value: unknown): string {
  const sort = (v: unknown): unknown =>
    Array.isArray(v) ? v.map(sort) : v && typeof v === "object" ? Object.fromEntries(Object.keys(v as object).sort().map((k) => [k, sort((v as any)[k])])) : v;
  return value === null || value === undefined ? "" : JSON.stringify(sort(value), null, 2);
}

/** A line diff (longest common subsequence): each line kept, added or removed. */
export function diffLines(before: string, after: string): { op: " " | "+" | "-"; line: string }[] {
  const a = before ? before.split("\n") : [];
  const b = after ? after.split("\n") : [];
  const n = a.length;
  const m = b.length;
  const lcs: number[][] = Array.from({ length: n + 1 }, () => new Array(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const out: { op: " " | "+" | "-"; line: string }[] = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) {
      out.push({ op: " ", line: a[i] });
      i++;
      j++;
    } else if (lcs[i + 1][j] >= lcs[i][j + 1]) out.push({ op: "-", line: a[i++] });
    else out.push({ op: "+", line: b[j++] });
  }
  while (i < n) out.push({ op: "-", line: a[i++] });
  while (j < m) out.push({ op: "+", line: b[j++] });
  return out;
}
