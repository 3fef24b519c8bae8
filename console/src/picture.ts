// A deployment's policy as a picture, drawn as SVG from its boxes (`nodes.ts`), left to right:
// a split's, shadow's, ensemble's or switch's branches each in the next column, stacked; a
// sequence's steps one after another on its row, a step that branches joining again before
// the next. `layout` is pure (tested under vitest); `policySvg` draws what it places.
import { s } from "./dom";
import { type Box, boxOf, type GraphStats } from "./nodes";
import type { Policy } from "./policy";

const W = 150; // a box's least width
const LINE = 16; // a line's height in a box
const GAP_Y = 18; // between stacked branches
const CHAR = 7; // about one character's width at 12px
const RUN = 86; // a branch's curve and margin, before the run that carries its label
const ARROW = 40; // between a sequence's steps

export interface Size {
  w: number;
  h: number;
}

export interface Layout {
  width: number;
  height: number;
  nodes: { box: Box; x: number; y: number; w: number; h: number }[];
  paths: { d: string; dashed: boolean }[];
  labels: { x: number; y: number; text: string; note?: string; tip?: string }[];
}

export function boxSize(b: Box): Size {
  const longest = Math.max(b.title.length, ...b.lines.map((l) => l.text.length));
  return { w: Math.max(W, 20 + longest * CHAR), h: 12 + LINE * (1 + b.lines.length) };
}

function run(b: Box): number {
  return RUN + CHAR * Math.max(0, ...b.edges.map((e) => Math.max(e.label.length, e.note?.length ?? 0)));
}

/** Where each box goes, and the lines between them. */
export function layout(root: Box): Layout {
  const sizes = new Map<Box, Size>();
  const size = (b: Box): Size => {
    let found = sizes.get(b);
    if (!found) {
      const own = boxSize(b);
      if (b.chain.length) {
        const steps = b.chain.map(size);
        found = { w: own.w + steps.reduce((a, st) => a + ARROW + st.w, 0), h: Math.max(own.h, ...steps.map((st) => st.h)) };
      } else if (b.edges.length) {
        const kids = b.edges.map((e) => size(e.box));
        found = { w: own.w + run(b) + Math.max(...kids.map((k) => k.w)), h: Math.max(own.h, kids.reduce((a, k) => a + k.h, 0) + GAP_Y * (kids.length - 1)) };
      } else found = own;
      sizes.set(b, found);
    }
    return found;
  };
  const out: Layout = { width: size(root).w + 20, height: size(root).h + 20, nodes: [], paths: [], labels: [] };

  // Places `b`'s tree in the band from `top`, its box centred; gives the points where its answer
  // leaves it (a mirror's goes nowhere), for a sequence's next step to join.
  const place = (b: Box, x: number, top: number): { x: number; y: number }[] => {
    const own = boxSize(b);
    const all = size(b);
    const cy = top + all.h / 2;
    out.nodes.push({ box: b, x, y: cy - own.h / 2, w: own.w, h: own.h });
    if (b.chain.length) {
      let from = [{ x: x + own.w, y: cy }];
      let cx = x + own.w; // the right end of what is placed so far
      for (const step of b.chain) {
        const st = size(step);
        for (const end of from) {
          const bend = cx + ARROW / 2;
          out.paths.push({ d: end.y === cy ? `M${end.x},${cy} L${cx + ARROW},${cy}` : `M${end.x},${end.y} L${cx},${end.y} C${bend},${end.y} ${bend},${cy} ${cx + ARROW},${cy}`, dashed: false });
        }
        from = place(step, cx + ARROW, cy - st.h / 2);
        cx += ARROW + st.w;
      }
      return from;
    }
    const ends: { x: number; y: number }[] = [];
    const kids = b.edges.map((e) => size(e.box));
    let childTop = top + (all.h - (kids.reduce((a, k) => a + k.h, 0) + GAP_Y * (kids.length - 1))) / 2;
    const x1 = x + own.w;
    const x2 = x1 + run(b);
    b.edges.forEach((e, i) => {
      const y2 = childTop + kids[i].h / 2;
      const mid = x1 + 40;
      out.paths.push({ d: `M${x1},${cy} C${mid},${cy} ${mid},${y2} ${x1 + 70},${y2} L${x2},${y2}`, dashed: e.dashed });
      out.labels.push({ x: x1 + 76, y: y2 - 6, text: e.label, note: e.note, tip: e.tip });
      const left = place(e.box, x2, childTop);
      if (!e.dashed) ends.push(...left);
      childTop += kids[i].h + GAP_Y;
    });
    return ends.length ? ends : [{ x: x1, y: cy }];
  };
  place(root, 10, 10);
  return out;
}

/** The SVG picture of `policy`; `title` names it for screen readers. `links`: a reference
 * links to its deployment (not inside another link, such as a card). `stats`: the deployment's
 * figures, shown beside its steps, cases, variants and mirrors. */
export function policySvg(policy: Policy, title: string, links = true, stats?: GraphStats): SVGElement {
  const placed = layout(boxOf(policy, stats));
  const tipped = (tip: string | undefined, ...parts: SVGElement[]): SVGElement[] => (tip ? [s("g", {}, s("title", {}, tip), ...parts)] : parts);
  const shapes: SVGElement[] = placed.paths.map((p) => s("path", { d: p.d, class: `edge${p.dashed ? " dashed" : ""}` }));
  for (const l of placed.labels) {
    shapes.push(...tipped(l.tip, s("text", { x: l.x, y: l.y, class: "edge-label" }, l.text), ...(l.note ? [s("text", { x: l.x, y: l.y + 20, class: "edge-note" }, l.note)] : [])));
  }
  for (const { box: b, x, y, w, h } of placed.nodes) {
    const node = [
      s("rect", { x, y, width: w, height: h, rx: 6, class: `node ${b.kind}` }),
      s("text", { x: x + 10, y: y + 18, class: "node-title" }, b.title),
      ...b.lines.map((line, i) => s("text", { x: x + 10, y: y + 18 + LINE * (i + 1), class: `node-${line.cls}` }, line.text)),
    ];
    shapes.push(...(b.href && links ? [s("a", { href: b.href, class: "node-link" }, ...node)] : tipped(b.tip, ...node)));
  }
  return s(
    "svg",
    { class: "policy", viewBox: `0 0 ${placed.width} ${placed.height}`, width: placed.width, height: placed.height, role: "img", "aria-label": title },
    s("title", {}, title),
    ...shapes,
  );
}
