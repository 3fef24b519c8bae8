// The "Try it" form's rows: run by `make console-test`.
import { describe, expect, it } from "vitest";
import { nest, rowShape, rowSize } from "./tensors";

/** The shape of nested arrays (the first element's at each depth) and their values in order. */
const shapeOf = (v: unknown): number[] => (Array.isArray(v) ? [v.length, ...shapeOf(v[0])] : []);
const flat = (v: unknown): unknown[] => (Array.isArray(v) ? v.flatMap(flat) : [v]);

describe("a row of a tensor", () => {
  it("sends a rank-3 input as one row of its shape, not one flat list", () => {
    // The reviewer's model: input [-1, 2, 2]; the API refused [[1, 2, 3, 4]] ("needs size 2 on axis 1").
    expect(rowSize([-1, 2, 2])).toBe(4);
    const shape = rowShape("x", [-1, 2, 2], 4);
    expect(shape).toEqual([2, 2]);
    expect([nest([1, 2, 3, 4], shape)]).toEqual([
      [
        [1, 2],
        [3, 4],
      ],
    ]);
  });

  it("keeps the rows of rank 1 and 2 as they were", () => {
    expect(nest([5, 6, 7], rowShape("x", [-1, 3], 3))).toEqual([5, 6, 7]);
    expect(nest(["a", "b"], rowShape("x", [-1, -1], 2))).toEqual(["a", "b"]); // an unknown width takes every value
    expect(nest([5], rowShape("x", [-1], 1))).toBe(5); // a rank-1 input: a row is one value
  });

  it("gives the first unknown size what the fixed ones leave", () => {
    expect(rowShape("x", [-1, -1, 3], 6)).toEqual([2, 3]);
    expect(rowShape("x", [-1, 2, -1, -1], 8)).toEqual([2, 4, 1]);
    expect(rowSize([-1, -1, 3])).toBe(3);
  });

  it("says what the tensor takes when the values do not fill a row", () => {
    expect(() => rowShape("x", [-1, 2, 2], 3)).toThrow("x takes 4 values a row (shape [-1, 2, 2]), got 3");
    expect(() => rowShape("pixels", [-1, -1, 3], 7)).toThrow("pixels takes a multiple of 3 values a row (shape [-1, -1, 3]), got 7");
    expect(() => rowShape("x", [-1], 2)).toThrow("x takes 1 value a row (shape [-1]), got 2");
  });

  it("nests every shape's values in order, to that shape", () => {
    // Every row shape of rank 0 to 4 with sizes 1 to 3, fixed or unknown in the signature.
    const shapes: number[][] = [[]];
    for (let rank = 1; rank <= 4; rank++) for (const s of shapes.filter((s) => s.length === rank - 1)) for (const d of [1, 2, 3]) shapes.push([...s, d]);
    for (const dims of shapes) {
      const count = dims.reduce((a, d) => a * d, 1);
      const values = Array.from({ length: count }, (_, i) => i);
      for (const unknown of [-1, ...dims.keys()]) {
        const signature = [-1, ...dims.map((d, i) => (i === unknown ? -1 : d))];
        const shape = rowShape("x", signature, count);
        expect(shape.reduce((a, d) => a * d, 1)).toBe(count);
        const row = nest(values, shape);
        expect(shapeOf(row)).toEqual(shape);
        expect(flat(row)).toEqual(values);
        if (unknown < 0) expect(shape).toEqual(dims);
      }
    }
  });
});
