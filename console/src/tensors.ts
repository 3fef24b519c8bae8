// One row of a tensor as the "Try it" form reads it: values typed flat (row-major), shaped to
// the tensor's shape without its batch axis, so a row is one row whatever the tensor's rank.
// Pure: tested by `make console-test`.

/** How many values a row takes by default: an unknown size (-1) counts as 1. */
export function rowSize(shape: number[]): number {
  return shape.slice(1).reduce((a, d) => a * (d < 0 ? 1 : d), 1);
}

/** The shape of one row of `count` values: the sizes the signature fixes, its first unknown
 * size taking what they leave (any other unknown one 1). Throws, saying what the tensor takes,
 * when the values do not fill it. */
export function rowShape(name: string, shape: number[], count: number): number[] {
  const dims = shape.slice(1).map((d) => (d < 0 ? 1 : d));
  const free = shape.slice(1).findIndex((d) => d < 0);
  const fixed = rowSize(shape);
  if (free >= 0 && fixed > 0 && count % fixed === 0) dims[free] = count / fixed;
  if (dims.reduce((a, d) => a * d, 1) !== count) {
    const takes = free >= 0 ? `a multiple of ${fixed}` : String(fixed);
    throw new Error(`${name} takes ${takes} value${takes === "1" ? "" : "s"} a row (shape [${shape.join(", ")}]), got ${count}`);
  }
  return dims;
}

/** Flat values nested to `dims` (row-major): a value alone for no dimension. */
export function nest<T>(values: T[], dims: number[]): unknown {
  if (!dims.length) return values[0];
  const [first, ...rest] = dims;
  const step = rest.reduce((a, d) => a * d, 1);
  return Array.from({ length: first }, (_, i) => nest(values.slice(i * step, (i + 1) * step), rest));
}
