// The console: sign in with an API key, then pages over the /api/v1 routes of that key's tenant.
import "uplot/dist/uPlot.min.css";
import "./style.css";
import { abandon, ApiError, call, describe, key, type Session, setKey, shown, Stale, whenUnauthenticated } from "./api";
import { h, mount } from "./dom";
import { batchPage } from "./pages/batch";
import { deploymentPage, deploymentsPage } from "./pages/deployments";
import { modelPage, modelsPage } from "./pages/models";
import { route } from "./routes";
import { banner } from "./ui";

export interface Context {
  session: Session;
  admin: boolean;
  main: HTMLElement;
  /** Called when the page is left: pollers stop (at once, if it was left already). */
  onLeave(fn: () => void): void;
}

const main = document.getElementById("main")!;
let session: Session | null = null;
let leaving: (() => void)[] = [];

function leave(): void {
  abandon(); // what the page still awaits is dropped (Stale), whoever shows next
  for (const fn of leaving) fn();
  leaving = [];
}

function signOut(message?: string): void {
  setKey(null);
  session = null;
  leave();
  banner(message ?? null);
  render();
}

whenUnauthenticated(() => signOut("Your key was rejected (wrong, revoked or expired): sign in again."));

function signIn(): void {
  const input = h("input", { type: "password", id: "key", name: "key", autocomplete: "off", required: true, placeholder: "sk_…", spellcheck: "false" });
  const form = h(
    "form",
    { class: "signin", id: "signin" },
    h("h1", {}, "Sign in"),
    h("p", {}, "Paste an API key. It is kept in this tab only (session storage) and sent to this service alone."),
    h("label", { for: "key" }, "API key"),
    input,
    h("button", { type: "submit" }, "Sign in"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const value = input.value.trim();
    try {
      const who = await call<Session>("GET", "/api/v1/session", undefined, value);
      setKey(value);
      session = who;
      banner(null);
      if (!location.hash || location.hash === "#/") location.hash = "#/deployments";
      else render();
    } catch (error) {
      banner(error instanceof ApiError && error.status === 401 ? "That key was not accepted." : describe(error));
    }
  });
  mount(main, form);
  input.focus();
}

async function render(): Promise<void> {
  leave();
  const nav = document.getElementById("nav")!;
  const who = document.getElementById("who")!;
  const out = document.getElementById("signout")!;
  if (!key()) {
    nav.hidden = true;
    out.hidden = true;
    who.textContent = "";
    signIn();
    return;
  }
  if (!session) {
    try {
      session = await call<Session>("GET", "/api/v1/session");
    } catch (error) {
      if (!(error instanceof Stale || (error instanceof ApiError && error.status === 401))) banner(describe(error));
      return;
    }
  }
  nav.hidden = false;
  out.hidden = false;
  who.textContent = `tenant ${session.tenant} · ${session.scopes.join(", ")}`;
  const { page, arg } = route(location.hash) ?? { page: "", arg: null }; // an undecodable link names no page
  for (const link of nav.querySelectorAll("a")) link.classList.toggle("active", link.dataset.page === page);
  const drawn = shown();
  const context: Context = {
    session,
    admin: session.scopes.includes("admin"),
    main,
    onLeave: (fn) => (drawn.aborted ? fn() : leaving.push(fn)),
  };
  mount(main, h("p", { class: "muted" }, "Loading…"));
  try {
    if (page === "deployments" && arg) await deploymentPage(context, arg);
    else if (page === "deployments") await deploymentsPage(context);
    else if (page === "batch") await batchPage(context);
    else if (page === "models" && arg) await modelPage(context, arg);
    else if (page === "models") await modelsPage(context);
    else mount(main, h("p", {}, "No such page."));
  } catch (error) {
    if (!(error instanceof Stale)) mount(main, h("p", { class: "error", id: "page-error" }, describe(error)));
  }
}

document.getElementById("signout")!.addEventListener("click", () => signOut());
window.addEventListener("hashchange", () => {
  banner(null);
  render();
});
render();
