// Every call the console makes: the /api/v1 routes, with the signed-in key. The key lives in
// this tab's sessionStorage only: never in a URL, a cookie or a log.
const STORE = "sluice.key";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly field?: string,
  ) {
    super(message);
  }
}

export interface Session {
  tenant: string;
  key_id: string;
  scopes: string[];
}

export function key(): string | null {
  return sessionStorage.getItem(STORE);
}

export function setKey(value: string | null): void {
  if (value) sessionStorage.setItem(STORE, value);
  else sessionStorage.removeItem(STORE);
}

/** What a call answers once its page was left (signed out, another page or key drawn) while it was
 * under way: the answer is for a page no longer shown, and is never drawn or acted on. */
export class Stale extends Error {
  constructor() {
    super("the page this answer was for was left");
    this.name = "Stale";
  }
}

// Every call belongs to the page shown when it was made; `abandon` (a page left) ends them all:
// a read under way is cancelled, and any call's `await` then throws `Stale`, so nothing that
// follows it in the page (drawing, a poller started) runs for a page no longer shown.
let page = new AbortController();

export function abandon(): void {
  page.abort();
  page = new AbortController();
}

/** The signal of the page now shown: aborted when it is left. */
export function shown(): AbortSignal {
  return page.signal;
}

let onUnauthenticated: (() => void) | null = null;
export function whenUnauthenticated(fn: () => void): void {
  onUnauthenticated = fn;
}

// The API's root: where /console/ is served from (an API Gateway stage adds a prefix).
const ROOT = location.pathname.replace(/\/console(\/.*)?$/, "");

export async function call<T = unknown>(method: string, path: string, body?: unknown, presented?: string): Promise<T> {
  const secret = presented ?? key();
  const headers: Record<string, string> = { accept: "application/json" };
  if (secret) headers.authorization = `Bearer ${secret}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const signal = page.signal;
  let response: Response;
  let text: string;
  try {
    response = await fetch(ROOT + path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
      referrerPolicy: "no-referrer",
      // A read is cancelled with its page; a change, once sent, is left to finish (the server
      // may have made it): only its answer is dropped.
      signal: method === "GET" ? signal : undefined,
    });
    text = await response.text();
  } catch (error) {
    if (signal.aborted) throw new Stale();
    throw error;
  }
  if (signal.aborted) throw new Stale();
  let data: any = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { error: text };
  }
  if (!response.ok) {
    const error = new ApiError(response.status, data?.code ?? "error", data?.error ?? response.statusText, data?.field);
    if (response.status === 401 && presented === undefined && onUnauthenticated) onUnauthenticated();
    throw error;
  }
  return data as T;
}

export const get = <T = unknown>(path: string) => call<T>("GET", path);
export const post = <T = unknown>(path: string, body?: unknown) => call<T>("POST", path, body ?? {});
export const put = <T = unknown>(path: string, body: unknown) => call<T>("PUT", path, body);

export function describe(error: unknown): string {
  if (error instanceof ApiError) {
    if (error.status === 403) return `Not allowed (403): ${error.message}. Reading deployments and models, and changing anything, needs a key with the admin scope.`;
    if (error.status === 401) return "Your key was rejected (wrong, revoked or expired): sign in again.";
    return `${error.message} (${error.status} ${error.code}${error.field ? `, ${error.field}` : ""})`;
  }
  return error instanceof Error ? error.message : String(error);
}

export const enc = encodeURIComponent;
