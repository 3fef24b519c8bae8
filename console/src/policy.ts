// A deployment's policy as a picture: a left-to-right tree drawn as SVG from the policy JSON.
import { s } from "./dom";

export type Policy =
  | { kind: "single"; model: string; version: number }
  | { kind: "ref"; deployment: string }
  | { kind: "split"; variants: { name: string; weight: number; target: Policy }[]; routing_key?: string | null; bandit?: { algorithm: string; epsilon?: number } | null }
  | { kind: "shadow"; primary: Policy; mirrors: { name: string; sample_percent: number; target: Policy }[] }
  | { kind: "ensemble"; members: { name: string; target: Policy; weight?: number; timeout_ms?: number | null }[]; aggregator: string; min_members?: number | null };

interface Box {
  kind: string;
  lines: string[];
  edges: { label: string; dashed: boolean; box: Box }[];
  href?: string;
}

function boxOf(p: Policy): Box {
  switch (p.kind) {
    case "single":
      return { kind: "single", lines: [`${p.model}`, `version ${p.version}`], edges: [] };
    case "ref":
      return { kind: "ref", lines: ["ref", `→ ${p.deployment}`], edges: [], href: `#/deployments/${encodeURIComponent(p.deployment)}` };
    case "split": {
      const total = p.variants.reduce((a, v) => a + v.weight, 0) || 1;
      const how = p.bandit ? `bandit: ${p.bandit.algorithm}` : p.routing_key ? `sticky by ${p.routing_key}` : "random";
      return {
        kind: "split",
        lines: ["split", how],
        edges: p.variants.map((v) => ({
          label: `${v.name} · ${p.bandit ? "learned" : `${trim((100 * v.weight) / total)}%`}`,
          dashed: false,
          box: boxOf(v.target),
        })),
      };
    }
    case "shadow":
      return {
        kind: "shadow",
        lines: ["shadow", `${p.mirrors.length} mirror${p.mirrors.length === 1 ? "" : "s"}`],
        edges: [
          { label: "primary · answers", dashed: false, box: boxOf(p.primary) },
          ...p.mirrors.map((m) => ({ label: `mirror ${m.name} · ${trim(m.sample_percent)}% sampled`, dashed: true, box: boxOf(m.target) })),
        ],
      };
    case "ensemble":
      return {
        kind: "ensemble",
        lines: ["ensemble", `${p.aggregator}${p.min_members ? ` · min ${p.min_members}` : ""}`],
        edges: p.members.map((m) => ({
          label: `${m.name} · w ${trim(m.weight ?? 1)}${m.timeout_ms ? ` · ${trim(m.timeout_ms)} ms` : ""}`,
          dashed: false,
          box: boxOf(m.target),
        })),
      };
  }
}

function trim(n: number): string {
  return String(Math.round(n * 100) / 100);
}

const W = 150; // box width
const H = 44; // box height
const GAP_Y = 18;
const CHAR = 7; // about one character's width at 12px

interface Placed {
  box: Box;
  x: number;
  y: number;
}

function height(b: Box): number {
  if (!b.edges.length) return H;
  return Math.max(H, b.edges.reduce((a, e) => a + height(e.box), 0) + GAP_Y * (b.edges.length - 1));
}

function longestLabel(b: Box): number {
  return Math.max(0, ...b.edges.map((e) => Math.max(e.label.length, longestLabel(e.box))));
}

function depth(b: Box): number {
  return 1 + Math.max(0, ...b.edges.map((e) => depth(e.box)));
}

/** The SVG picture of `policy`; `title` names it for screen readers. `links`: a reference
 * links to its deployment (not inside another link, such as a card). */
export function policySvg(policy: Policy, title: string, links = true): SVGElement {
  const root = boxOf(policy);
  // Column pitch: a box, the curve, then the straight run that carries the longest label.
  const COL = W + 86 + longestLabel(root) * CHAR;
  const width = (depth(root) - 1) * COL + W + 20;
  const total = height(root) + 20;
  const shapes: SVGElement[] = [];
  const place = (b: Box, x: number, top: number): Placed => {
    const hgt = height(b);
    const y = top + hgt / 2 - H / 2;
    let childTop = top;
    for (const e of b.edges) {
      const ch = height(e.box);
      const child = place(e.box, x + COL, childTop);
      const x1 = x + W;
      const y1 = y + H / 2;
      const x2 = child.x;
      const y2 = child.y + H / 2;
      const mid = x1 + 40;
      shapes.unshift(
        s("path", { d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x1 + 70},${y2} L${x2},${y2}`, class: `edge${e.dashed ? " dashed" : ""}` }),
        s("text", { x: x1 + 76, y: y2 - 6, class: "edge-label" }, e.label),
      );
      childTop += ch + GAP_Y;
    }
    const node = [
      s("rect", { x, y, width: W, height: H, rx: 6, class: `node ${b.kind}` }),
      s("text", { x: x + 10, y: y + 18, class: "node-title" }, b.lines[0]),
      s("text", { x: x + 10, y: y + 35, class: "node-sub" }, b.lines[1] ?? ""),
    ];
    shapes.push(...(b.href && links ? [s("a", { href: b.href, class: "node-link" }, ...node)] : node));
    return { box: b, x, y };
  };
  place(root, 10, 10);
  return s(
    "svg",
    { class: "policy", viewBox: `0 0 ${width} ${total}`, width, height: total, role: "img", "aria-label": title },
    s("title", {}, title),
    s("defs", {}),
    ...shapes,
  );
}

/** The model and version that answer first (a pinned version replaces it, as the API does). */
export function firstModel(p: Policy): string | null {
  switch (p.kind) {
    case "single":
      return p.model;
    case "ref":
      return null;
    case "split":
      return firstModel(p.variants[0].target);
    case "shadow":
      return firstModel(p.primary);
    case "ensemble":
      return firstModel(p.members[0].target);
  }
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
