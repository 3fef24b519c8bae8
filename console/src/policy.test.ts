// The console's pure parts: run by `make console-test` (vitest) before the browser tests.
import { describe, expect, it } from "vitest";
import { canonical, diffLines, firstModel, modelsIn, type Policy } from "./policy";

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
