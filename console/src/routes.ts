// Which page a location's hash names: `#/<page>[/<argument>]`, the argument percent-encoded
// (a deployment's or model's name). Pure: tested by `make console-test`.

export interface Route {
  page: string;
  arg: string | null;
}

/** The page and argument of a hash (`deployments` when it names none); null when its argument
 * is not valid percent-encoding (a hand-edited or cut link): no page has it. */
export function route(hash: string): Route | null {
  const [, page = "deployments", ...rest] = hash.replace(/^#/, "").split("/");
  try {
    return { page, arg: rest.length ? decodeURIComponent(rest.join("/")) : null };
  } catch {
    return null; // URIError
  }
}
