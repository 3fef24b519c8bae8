// What every page shares: the banner, the confirmation dialog, polite polling.
import { describe, Stale } from "./api";
import { h } from "./dom";

export function banner(message: string | null, kind: "error" | "ok" = "error"): void {
  const el = document.getElementById("banner")!;
  el.textContent = message ?? "";
  el.className = `banner ${kind}`;
  el.hidden = !message;
}

export function fail(error: unknown): void {
  if (!(error instanceof Stale)) banner(describe(error));
}

/** Asks before any action: resolves true only when the user confirms. */
export function confirmAction(title: string, text: string, detail?: string, ok = "Confirm"): Promise<boolean> {
  const dialog = document.getElementById("confirm") as HTMLDialogElement;
  document.getElementById("confirm-title")!.textContent = title;
  document.getElementById("confirm-text")!.textContent = text;
  const pre = document.getElementById("confirm-detail")!;
  pre.textContent = detail ?? "";
  pre.hidden = !detail;
  document.getElementById("confirm-ok")!.textContent = ok;
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
  });
}

/** Runs `tick` now and every `ms` while the tab is visible; paused while it is hidden; stopped
 * by the returned function (a page change stops its pollers). */
export function poll(tick: () => Promise<void> | void, ms: number): () => void {
  let timer: number | undefined;
  let stopped = false;
  const run = async () => {
    timer = undefined;
    if (stopped || document.visibilityState !== "visible") return;
    try {
      await tick();
    } catch (error) {
      fail(error);
    }
    if (!stopped && document.visibilityState === "visible") timer = window.setTimeout(run, ms);
  };
  const onVisibility = () => {
    if (document.visibilityState === "visible" && timer === undefined && !stopped) run();
    else if (document.visibilityState !== "visible" && timer !== undefined) {
      clearTimeout(timer);
      timer = undefined;
    }
  };
  document.addEventListener("visibilitychange", onVisibility);
  run();
  return () => {
    stopped = true;
    if (timer !== undefined) clearTimeout(timer);
    document.removeEventListener("visibilitychange", onVisibility);
  };
}

export function table(headers: string[], rows: (Node | string)[][], attrs: Record<string, string> = {}): HTMLTableElement {
  return h(
    "table",
    attrs,
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c) => h("td", {}, c))))),
  );
}

export function pretty(value: unknown): string {
  return JSON.stringify(value, null, 2);
}
