// The console's pure parts: run by `make console-test` (vitest) before the browser tests.
import { describe, expect, it } from "vitest";
import { type Box, boxOf, conditionText, type Figures, MAX_CHARS, MAX_OPS, opText } from "./nodes";
import { type Layout, layout } from "./picture";
import { canonical, type Condition, diffLines, firstModel, modelsIn, type Policy } from "./policy";

const canary: Policy = {
  kind: "split",
  routing_key: "x-user-id",
  variants: [
    { name: "stable", weight: 90, target: { kind: "single", model: "iris", version: 1 } },
    { name: "canary", weight: 10, target: { kind: "single", model: "iris", version: 2 } },
  ],
};

const nested: Policy = {
  kind: "shadow",
  primary: { kind: "ensemble", aggregator: "soft_vote", members: [{ name: "a", target: { kind: "single", model: "churn", version: 3 } }] },
  mirrors: [{ name: "m", sample_percent: 10, target: { kind: "ref", deployment: "other" } }],
};

describe("policies", () => {
  it("finds the model that answers first, as the API pins a version", () => {
    expect(firstModel(canary)).toBe("iris");
    expect(firstModel(nested)).toBe("churn");
    expect(firstModel({ kind: "ref", deployment: "x" })).toBeNull();
  });

  it("follows a reference, a precomputed node's live one and a sequence's first model step, as the API pins a version", () => {
    const stored: Record<string, Policy> = {
      "forest-d": { kind: "single", model: "forest", version: 1 },
      canary,
      via: { kind: "ref", deployment: "forest-d" },
    };
    const policyOf = (name: string) => stored[name];
    // The step that runs first answers, even through a reference: not the next step's model.
    const seq: Policy = {
      kind: "sequence",
      steps: [
        { name: "pre", target: { kind: "ref", deployment: "forest-d" } },
        { name: "main", target: { kind: "single", model: "iris", version: 1 }, map: { input: "output_probability" } },
      ],
    };
    expect(firstModel(seq, policyOf)).toBe("forest");
    expect(firstModel(seq)).toBeNull(); // a reference that cannot be read answers with no model known here
    expect(firstModel({ kind: "ref", deployment: "via" }, policyOf)).toBe("forest");
    expect(firstModel({ kind: "split", variants: [{ name: "a", weight: 1, target: { kind: "ref", deployment: "canary" } }] }, policyOf)).toBe("iris");
    const recs: Policy = { kind: "precomputed", table: "recs", key: "routing_key", live: { kind: "single", model: "recommender", version: 3 } };
    expect(firstModel(recs)).toBe("recommender");
    expect(firstModel({ kind: "sequence", steps: [{ name: "cached", target: recs }, ...chain.steps] })).toBe("recommender");
    // A transform, function or lookup step has no version: the next step is the first model.
    const steps = ["transform", "function", "lookup"].map((kind, i) => ({ name: `s${i}`, target: { kind, ops: [] } as unknown as Policy }));
    expect(firstModel({ kind: "sequence", steps: [...steps, { name: "m", target: { kind: "ref", deployment: "via" } }, ...chain.steps] }, policyOf)).toBe("forest");
  });

  it("lists every model a policy names, references left out", () => {
    expect([...modelsIn(canary)]).toEqual(["iris"]);
    expect([...modelsIn(nested)]).toEqual(["churn"]);
  });
});

describe("revision diffs", () => {
  it("compares policies whatever their key order", () => {
    expect(canonical({ b: 1, a: { d: 2, c: 3 } })).toBe(canonical({ a: { c: 3, d: 2 }, b: 1 }));
    expect(canonical(null)).toBe("");
  });

  it("keeps, adds and removes lines", () => {
    const before = canonical(canary);
    const after = canonical({ ...canary, variants: canary.variants.map((v) => ({ ...v, weight: 50 })) });
    const diff = diffLines(before, after);
    expect(diff.filter((l) => l.op === "-").map((l) => l.line.trim())).toEqual(['"weight": 90', '"weight": 10']);
    expect(diff.filter((l) => l.op === "+").map((l) => l.line.trim())).toEqual(['"weight": 50', '"weight": 50']);
    expect(diff.filter((l) => l.op === " ").length).toBe(before.split("\n").length - 2);
  });

  it("shows a created deployment as all added", () => {
    const diff = diffLines("", canonical(canary));
    expect(diff.every((l) => l.op === "+")).toBe(true);
  });
});

// Graphs: the nodes of examples/policies/ (sequence.json, switch.json, transform.json).
const chain: Policy = {
  kind: "sequence",
  steps: [
    { name: "embed", target: { kind: "single", model: "embed", version: 1 } },
    { name: "score", target: { kind: "single", model: "score", version: 1 }, map: { embedding: "embedding" } },
  ],
  expose: ["embed.embedding"],
};

const region: Policy = {
  kind: "switch",
  cases: [
    {
      name: "europe",
      when: { any: [{ field: "headers.x-region", op: "in", value: ["eu", "uk"] }, { field: "routing_key", op: "==", value: "eu" }] },
      target: { kind: "single", model: "iris", version: 1 },
    },
    { name: "short-petals", when: { field: "inputs.input", column: "petal_length", op: "<", value: 2.5 }, target: { kind: "single", model: "iris", version: 1 } },
  ],
  default: { kind: "single", model: "iris", version: 2 },
};

const features: Policy = {
  kind: "transform",
  inputs: [
    { name: "length", datatype: "FP32", shape: [-1] },
    { name: "colour", datatype: "BYTES", shape: [-1] },
  ],
  ops: [
    { op: "fill", input: "length", value: 5.8 },
    { op: "standardize", input: "length", mean: 5.8, std: 0.8 },
    { op: "ordinal", input: "colour", vocabulary: ["red", "green", "blue"], output: "colour_code" },
    { op: "concat", inputs: ["length", "colour_code"], output: "embedding" },
    { op: "keep", names: ["embedding"] },
  ],
};

const traffic = (requests: number, errors = 0, p50: number | null = null, rows?: number): Figures => ({ requests, errors, latency_ms: { p50, p95: p50, p99: p50 }, rows });
const texts = (b: Box): string[] => [b.title, ...b.lines.map((l) => l.text)];
const centre = (l: Layout, b: Box) => {
  const n = l.nodes.find((p) => p.box === b)!;
  return { left: n.x, right: n.x + n.w, y: n.y + n.h / 2 };
};

describe("graph nodes", () => {
  it("draws a sequence as a chain of its steps on one row, its exposed output marked", () => {
    const root = boxOf(chain);
    expect(texts(root)).toEqual(["sequence", "2 steps", "exposes 1 output"]);
    const [embed, score] = root.chain;
    expect(texts(embed)).toEqual(["embed", "embed · version 1", "↗ exposes embedding"]);
    expect(texts(score)).toEqual(["score", "score · version 1"]);
    const l = layout(root);
    const [a, b, c] = [centre(l, root), centre(l, embed), centre(l, score)];
    expect([b.y, c.y]).toEqual([a.y, a.y]);
    expect(a.right < b.left && b.right < c.left).toBe(true);
    expect(l.paths.length).toBe(2); // sequence → embed → score
    expect(l.width).toBeGreaterThanOrEqual(c.right);
  });

  it("shows each step's requests, median latency and errors beside it", () => {
    const root = boxOf(chain, { steps: { embed: traffic(12, 1, 3.14159) } });
    expect(root.chain[0].lines.at(-1)).toEqual({ text: "12 req · p50 3.1 ms · 1 err", cls: "stat" });
    expect(root.chain[1].lines.at(-1)).toEqual({ text: "0 req", cls: "stat" }); // no request reached it yet
    expect(boxOf(chain, { steps: { embed: traffic(2, 0, 0.0213) } }).chain[0].lines.at(-1)!.text).toBe("2 req · p50 0.02 ms · 0 err"); // a transform's fraction of a millisecond
    expect(boxOf(chain).chain[0].lines.some((l) => l.cls === "stat")).toBe(false); // no figures asked (a card)
  });

  it("shows a split nested in an ensemble member or a case with its own figures, by its path", () => {
    const split = (model: string): Policy => ({ kind: "split", variants: [{ name: "a", weight: 1, target: { kind: "single", model, version: 1 } }] }) as Policy;
    const twin = { kind: "ensemble", aggregator: "mean", members: [{ name: "m1", target: split("ra") }, { name: "m2", target: split("rb") }] } as Policy;
    const root = boxOf(twin, { variants: { "m1/a": traffic(4, 0, 1), "m2/a": traffic(7, 1, 1), a: traffic(99, 0, 1) } });
    expect(root.edges.map((e) => e.box.edges[0].note)).toEqual(["4 req · 0 err", "7 req · 1 err"]);
    const cases = { kind: "switch", cases: [{ name: "low", when: { field: "routing_key", op: "==", value: "x" }, target: split("ra") }], default: split("rb") } as Policy;
    const sw = boxOf(cases, { variants: { "low/a": traffic(2, 0, 1), "default/a": traffic(3, 0, 1) }, cases: { low: traffic(2, 0, 1, 2), default: traffic(3, 0, 1, 3) } });
    expect(sw.edges.map((e) => e.box.edges[0].note)).toEqual(["2 req · 0 err", "3 req · 0 err"]);
  });

  it("draws a switch's cases with readable conditions, then its default, each with its count", () => {
    const root = boxOf(region, { cases: { europe: traffic(3, 0, 2, 5), default: traffic(1, 1, 2, 1) } });
    expect(texts(root)).toEqual(["switch", "2 cases + default"]);
    expect(root.edges.map((e) => e.label)).toEqual(['europe: header x-region in ["eu", "uk"] or routing key == "eu"'.slice(0, MAX_CHARS - 1) + "…", "short-petals: input[petal_length] < 2.5", "default"]);
    expect(root.edges[0].tip).toBe('europe: header x-region in ["eu", "uk"] or routing key == "eu"'); // the whole text on hover
    expect(root.edges.map((e) => e.note)).toEqual(["3 req · 5 rows · 0 err", "0 req", "1 req · 1 row · 1 err"]);
    expect(root.edges.map((e) => texts(e.box))).toEqual([
      ["iris", "version 1"],
      ["iris", "version 1"],
      ["iris", "version 2"],
    ]);
    const l = layout(root);
    const ys = root.edges.map((e) => centre(l, e.box).y);
    expect(ys).toEqual([...ys].sort((x, y) => x - y)); // stacked in order, the default last
  });

  it("renders conditions: all/any groups, exists, numbers, another request field", () => {
    const when: Condition = { all: [{ any: [{ field: "headers.x-beta", op: "exists" }, { field: "routing_key", op: "!=", value: "b" }] }, { field: "inputs.age", op: ">=", value: 18 }] };
    expect(conditionText(when)).toBe('(header x-beta exists or routing key != "b") and input age >= 18');
    expect(conditionText({ field: "inputs.input", column: 2, op: "in", value: [1, 2] })).toBe("input[2] in [1, 2]");
    expect(conditionText({ field: "parameters.tier", op: "==", value: "gold" })).toBe('parameter tier == "gold"');
    expect(conditionText({ all: [{ field: "headers.x-region", op: "==", value: "eu" }] })).toBe('header x-region == "eu"');
  });

  it("draws a transform as the list of its ops and the tensors each touches", () => {
    const root = boxOf(features);
    expect(texts(root)).toEqual([
      "transform",
      "5 ops",
      "takes length, colour",
      "fill length",
      "standardize length",
      "ordinal colour → colour_code",
      "concat length, colour_code → embedding",
      "keep embedding",
    ]);
    expect(root.lines.filter((l) => l.cls === "op").length).toBe(5);
    const long = boxOf({ kind: "transform", ops: [...Array(MAX_OPS + 3)].map((_, i) => ({ op: "top_k", input: `s${i}`, output: "top", indices: "idx", k: 2 })) });
    expect(long.lines.filter((l) => l.cls === "op").length).toBe(MAX_OPS);
    expect(long.lines.at(-1)!.text).toBe("… 3 more");
    expect(opText({ op: "top_k", input: "scores", indices: "idx", k: 3 })).toBe("top_k scores → idx");
    expect(opText({ op: "rename", input: "a", output: "b" })).toBe("rename a → b");
  });

  it("draws a function step by its target, and a kind it does not know by its kind and a label", () => {
    const arn = "arn:aws:lambda:eu-west-1:123456789012:function:clean-rows:live";
    const steps: Policy = {
      kind: "sequence",
      steps: [
        { name: "clean", target: { kind: "function", arn } },
        { name: "local", target: { kind: "function", function: "rules:apply" } },
        { name: "score", target: { kind: "single", model: "score", version: 1 } },
      ],
    };
    const [clean, local] = boxOf(steps, {}).chain;
    expect(texts(clean)).toEqual(["clean", "function · lambda clean-rows:live", "0 req"]);
    expect(clean.tip).toBe(arn);
    expect(texts(local)).toEqual(["local", "function · rules:apply", "0 req"]);
    const other = boxOf({ kind: "retry", attempts: 3, policy: "backoff", target: { kind: "single", model: "iris", version: 1 } } as unknown as Policy);
    expect(texts(other)).toEqual(["retry", "backoff"]);
    expect(other.edges.map((e) => [e.label, e.box.title])).toEqual([["target", "iris"]]);
  });

  it("nests: a switch whose case is a sequence, and a sequence whose step is a switch", () => {
    const nested: Policy = { kind: "switch", cases: [{ name: "eu", when: { field: "headers.x-region", op: "==", value: "eu" }, target: chain }], default: { kind: "single", model: "iris", version: 2 } };
    const root = boxOf(nested, { steps: { "eu/score": traffic(4, 0, 1.5), score: traffic(99) }, cases: { eu: traffic(4, 0, 9, 4) } }); // the case's steps by their path
    expect(root.edges[0].label).toBe('eu: header x-region == "eu"');
    const seq = root.edges[0].box;
    expect(seq.kind).toBe("sequence");
    expect(seq.chain.map((b) => b.title)).toEqual(["embed", "score"]);
    expect(seq.chain[1].lines.at(-1)!.text).toBe("4 req · p50 1.5 ms · 0 err");
    const l = layout(root);
    expect(centre(l, seq.chain[0]).y).toBe(centre(l, seq).y);
    expect(centre(l, seq).left).toBeGreaterThan(centre(l, root).right);

    // A step that branches: its cases join again before the next step, which comes after them all.
    const routed: Policy = { kind: "sequence", steps: [{ name: "route", target: region }, { name: "label", target: { kind: "transform", ops: [{ op: "argmax", input: "scores", labels: ["a", "b"] }] } }] };
    const r = boxOf(routed, {});
    const [route, label] = r.chain;
    expect(texts(route).slice(0, 2)).toEqual(["route", "switch · 2 cases + default"]);
    expect(texts(label)).toEqual(["label", "transform · 1 op", "argmax scores", "0 req"]);
    const rl = layout(r);
    const cases = route.edges.map((e) => centre(rl, e.box));
    expect(Math.max(...cases.map((c) => c.right))).toBeLessThan(centre(rl, label).left);
    expect(rl.paths.length).toBe(1 + 3 + 3); // into the switch, to its three branches, and each back into the next step
  });

  it("finds the models of a graph", () => {
    expect(firstModel({ kind: "sequence", steps: [{ name: "f", target: features }, ...chain.steps.slice(1)] })).toBe("score");
    expect(firstModel(region)).toBe("iris");
    expect([...modelsIn({ kind: "switch", cases: [{ name: "a", when: { field: "routing_key", op: "exists" }, target: chain }], default: { kind: "single", model: "iris", version: 2 } })]).toEqual(["embed", "score", "iris"]);
  });
});
