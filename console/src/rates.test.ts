// The statistics table's failure rates: run by `make console-test`.
import { describe, expect, it } from "vitest";
import { percent, rateCells } from "./rates";

describe("failure rates", () => {
  it("shows both rates of a subject that refused inputs", () => {
    expect(rateCells({ requests: 200, error_rate: 0.25, invalid_input_rate: 0.2 })).toEqual(["25%", "20%"]);
  });

  it("tells no traffic from no failures", () => {
    expect(rateCells({ requests: 0, error_rate: null, invalid_input_rate: null })).toEqual(["—", "—"]);
    expect(rateCells({ requests: 5, error_rate: 0, invalid_input_rate: 0 })).toEqual(["0%", "0%"]);
  });

  it("never rounds a small rate down to nothing", () => {
    expect(percent(0.00012)).toBe("0.012%");
    expect(percent(0.005)).toBe("0.5%");
    expect(percent(1)).toBe("100%");
  });

  it("shows a dash where an older server sent no refused-input rate", () => {
    expect(rateCells({ requests: 3, error_rate: 1 / 3 })).toEqual(["33%", "—"]);
  });
});
