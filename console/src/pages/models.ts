// Models: versions with signatures, runtime, size and lineage, and a "try it" form built from
// a version's signature that sends one prediction and shows the whole answer.
import { call, enc, get } from "../api";
import { bytes, h, mount, when } from "../dom";
import type { Context } from "../main";
import { firstModel, type Policy } from "../policy";
import { nest, rowShape, rowSize } from "../tensors";
import { fail, pretty, table } from "../ui";

interface Model {
  name: string;
  description: string;
  created_at: number;
  created_by: string;
  latest_version: number | null;
}

interface Tensor {
  name: string;
  datatype: string;
  shape: number[];
  role?: string | null;
  feature_names?: string[] | null;
}

interface Version {
  model: string;
  version: number;
  runtime: string;
  artifact_uri: string;
  sha256: string;
  size_bytes: number;
  signature: { inputs: Tensor[]; outputs: Tensor[] };
  created_at: number;
  created_by: string;
  derived_from?: string | null;
  optimization?: Record<string, unknown> | null;
  source?: Record<string, string | number | null> | null;
}

/** Where a version came from: the version it was optimized from, or the registry it was pushed from. */
function lineage(v: Version): string {
  if (v.derived_from) return ` · derived from ${v.derived_from}`;
  const s = v.source;
  if (s?.registry === "mlflow") return ` · from MLflow ${s.name ?? s.uri}${s.version != null ? ` version ${s.version}` : ""}${s.alias ? ` (@${s.alias})` : ""}${s.run_id ? `, run ${s.run_id}` : ""}`;
  if (s?.registry === "sagemaker") return ` · from SageMaker ${s.group} version ${s.version} (${s.approval_status})`;
  return " · pushed as is (no lineage)";
}

export async function modelsPage(ctx: Context): Promise<void> {
  const models = await get<Model[]>("/api/v1/models");
  mount(
    ctx.main,
    h("h1", {}, "Models"),
    models.length
      ? table(
          ["model", "latest version", "created", "description"],
          models.map((m) => [h("a", { href: `#/models/${enc(m.name)}`, "data-model": m.name }, m.name), m.latest_version == null ? "—" : String(m.latest_version), when(m.created_at), m.description]),
          { id: "models-table" },
        )
      : h("p", {}, "No models in this tenant yet."),
  );
}

function signature(v: Version): HTMLElement {
  const rows = [...v.signature.inputs.map((t) => ["input", t] as const), ...v.signature.outputs.map((t) => ["output", t] as const)].map(([io, t]) => [
    io,
    h("span", { class: "mono" }, t.name),
    t.datatype,
    `[${t.shape.join(", ")}]`,
    t.feature_names?.join(", ") ?? t.role ?? "",
  ]);
  return table(["", "tensor", "datatype", "shape", "features / role"], rows, { class: "signature" });
}

export async function modelPage(ctx: Context, name: string): Promise<void> {
  const [versions, deployments] = await Promise.all([
    get<Version[]>(`/api/v1/models/${enc(name)}/versions`),
    get<{ name: string; policy: Policy }[]>("/api/v1/deployments"),
  ]);
  // The deployments a version pinned on answers with this model (through references, as the API follows them).
  const policies = new Map(deployments.map((d) => [d.name, d.policy]));
  const serving = deployments.filter((d) => firstModel(d.policy, (other) => policies.get(other)) === name).map((d) => d.name);
  const tryBox = h("section", { id: "try" });
  mount(
    ctx.main,
    h("p", {}, h("a", { href: "#/models" }, "← Models")),
    h("h1", {}, name),
    h(
      "div",
      { id: "versions" },
      [...versions]
        .sort((a, b) => b.version - a.version)
        .map((v) =>
          h(
            "article",
            { class: "version", "data-version": v.version },
            h("h2", {}, `version ${v.version}`, h("span", { class: "kind" }, v.runtime)),
            h(
              "p",
              { class: "muted" },
              `${bytes(v.size_bytes)} · sha256 ${v.sha256.slice(0, 12)} · pushed ${when(v.created_at)} by ${v.created_by}`,
              h("span", { class: "lineage" }, lineage(v)),
            ),
            v.optimization ? h("details", {}, h("summary", {}, "How it was made"), h("pre", {}, pretty(v.optimization))) : "",
            signature(v),
            h("button", { type: "button", class: "action", "data-try": v.version, onclick: () => tryIt(tryBox, v, serving) }, "Try it"),
          ),
        ),
    ),
    tryBox,
  );
}

function tryIt(box: HTMLElement, v: Version, serving: string[]): void {
  if (!serving.length) {
    mount(box, h("h2", {}, `Try version ${v.version}`), h("p", {}, `No deployment answers with ${v.model} first: create one (or pin one to this model) to try it.`));
    return;
  }
  const deployment = h("select", { name: "deployment", "aria-label": "deployment" }, serving.map((d) => h("option", { value: d }, d)));
  const fields: { tensor: Tensor; inputs: HTMLInputElement[] | HTMLTextAreaElement }[] = v.signature.inputs.map((t) => {
    if (t.feature_names?.length) {
      return { tensor: t, inputs: t.feature_names.map((f) => h("input", { type: "number", step: "any", required: true, name: f, "aria-label": f, value: "0" })) };
    }
    const size = rowSize(t.shape);
    return { tensor: t, inputs: h("textarea", { name: t.name, rows: 2, "aria-label": t.name, placeholder: `${size} comma-separated values` }, new Array(size).fill("0").join(", ")) };
  });
  const answer = h("pre", { id: "answer", class: "answer" });
  const form = h(
    "form",
    { class: "try", id: "try-form" },
    h("label", {}, "Deployment ", deployment, ` (version ${v.version} pinned)`),
    fields.map(({ tensor, inputs }) =>
      h(
        "fieldset",
        {},
        h("legend", {}, `${tensor.name} · ${tensor.datatype} [${tensor.shape.join(", ")}]`),
        Array.isArray(inputs) ? inputs.map((i) => h("label", {}, `${i.name} `, i)) : inputs,
      ),
    ),
    h("button", { type: "submit", class: "action" }, "Predict"),
    answer,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    // A tensor's values as typed (flat), with the shape of one row of them.
    const rowOf = (f: (typeof fields)[number]) => {
      const data = Array.isArray(f.inputs)
        ? f.inputs.map((i) => Number(i.value))
        : f.inputs.value
            .split(/[\s,]+/)
            .filter(Boolean)
            .map((x) => (f.tensor.datatype === "BYTES" ? x : Number(x)));
      return { data, shape: rowShape(f.tensor.name, f.tensor.shape, data.length) };
    };
    try {
      let result: unknown;
      if (fields.length === 1 && Array.isArray(fields[0].inputs)) {
        const features = Object.fromEntries(fields[0].inputs.map((i) => [i.name, Number(i.value)]));
        result = await call("POST", "/api/v1/predictions", { deployment: deployment.value, version: v.version, features });
      } else if (fields.length === 1) {
        const { data, shape } = rowOf(fields[0]);
        result = await call("POST", "/api/v1/predictions", { deployment: deployment.value, version: v.version, inputs: [nest(data, shape)] });
      } else {
        // Several input tensors: the Open Inference Protocol names each.
        result = await call("POST", `/v2/models/${enc(deployment.value)}/versions/${v.version}/infer`, {
          inputs: fields.map((f) => {
            const { data, shape } = rowOf(f);
            return { name: f.tensor.name, datatype: f.tensor.datatype, shape: [1, ...shape], data };
          }),
        });
      }
      answer.textContent = pretty(result);
      answer.classList.remove("error");
    } catch (error) {
      answer.classList.add("error");
      answer.textContent = error instanceof Error ? error.message : String(error);
      fail(error);
    }
  });
  mount(box, h("h2", {}, `Try ${v.model} version ${v.version}`), form);
}
