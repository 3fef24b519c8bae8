import { describe, expect, it } from "vitest";
import { duration, percent } from "./dom";

describe("durations", () => {
  it("never shows 60 seconds within a minute, and adds up to the seconds rounded", () => {
    expect(duration(179.6)).toBe("3 min 0 s");
    for (let tenths = 1200; tenths < 100_000; tenths += 7) {
      const [, min, sec] = /^(\d+) min (\d+) s$/.exec(duration(tenths / 10))!;
      expect(Number(sec)).toBeLessThan(60);
      expect(Number(min) * 60 + Number(sec)).toBe(Math.round(tenths / 10));
    }
  });
});

describe("percentages", () => {
  it("shows a share as the operator wrote it, without floating-point noise", () => {
    expect(percent(0.07)).toBe("7%");
    expect(percent(0.29)).toBe("29%");
    expect(percent(0.125)).toBe("12.5%");
    expect(percent(0.05)).toBe("5%");
  });
});
