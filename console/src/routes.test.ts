// The console's routes: run by `make console-test`.
import { describe, expect, it } from "vitest";
import { route } from "./routes";

describe("routes", () => {
  it("reads a page and its percent-encoded argument", () => {
    expect(route("")).toEqual({ page: "deployments", arg: null });
    expect(route("#/models")).toEqual({ page: "models", arg: null });
    expect(route("#/deployments/fraud%2Fv2%20eu")).toEqual({ page: "deployments", arg: "fraud/v2 eu" });
    expect(route("#/models/a/b")).toEqual({ page: "models", arg: "a/b" });
  });

  it("names no page for a link whose argument is not valid percent-encoding, rather than throwing", () => {
    for (const hash of ["#/deployments/%E0%A4%A", "#/models/%", "#/deployments/%ZZ", "#/models/%C3"]) expect(route(hash)).toBeNull();
  });
});
