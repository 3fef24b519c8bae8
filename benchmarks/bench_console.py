"""The web console's weight on the browser and on the API (reports, asserts nothing).

Against a local `sluice serve --demo` (one worker) in Debian's Chromium driven by Playwright:

- first paint, first contentful paint and the time until the deployment cards are drawn, of
  `/console/#/deployments` loaded afresh (signed in), the median of `--runs`;
- the payload of that load: every byte the page fetched (HTML, script, style, API answers),
  as sent and as gzip would make it;
- the requests per minute the console makes while a deployment's page is open (it polls the
  statistics route), over `--seconds` with the tab visible and as long again with it hidden.

    python -m benchmarks.bench_console [--runs 5] [--seconds 60] [--out FILE]
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import PYTHON, REPO, bench_env, figure, free_port, server

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"]
HIDE = """() => {
  Object.defineProperty(document, "visibilityState", { configurable: true, get: () => "hidden" });
  Object.defineProperty(document, "hidden", { configurable: true, get: () => true });
  document.dispatchEvent(new Event("visibilitychange"));
}"""


def measure(base: str, key: str, runs: int, seconds: float) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium", args=FLAGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.goto(f"{base}/console/")
        page.fill("#key", key)
        page.click("#signin button[type=submit]")
        page.wait_for_selector("#deployments")

        loads = []
        sizes: list[bytes] = []
        page.on("response", lambda r: sizes.append(r.body() if r.ok else b""))
        for _ in range(runs):
            sizes.clear()
            started = time.perf_counter()
            page.reload(wait_until="commit")
            page.wait_for_selector("#deployments svg.policy")
            drawn_ms = (time.perf_counter() - started) * 1000
            page.wait_for_load_state("networkidle")
            paints = page.evaluate("() => Object.fromEntries(performance.getEntriesByType('paint').map(e => [e.name, e.startTime]))")
            loads.append(
                {
                    "first_paint_ms": paints.get("first-paint"),
                    "first_contentful_paint_ms": paints.get("first-contentful-paint"),
                    "cards_drawn_ms": drawn_ms,
                    "requests": len(sizes),
                    "bytes": sum(len(b) for b in sizes),
                    "gzip_bytes": sum(len(gzip.compress(b)) for b in sizes),
                }
            )

        # Requests while a deployment's page stays open, visible then hidden.
        urls: list[tuple[float, str]] = []
        page.on("request", lambda r: urls.append((time.monotonic(), r.url)))
        page.goto(f"{base}/console/#/deployments/iris")
        page.wait_for_selector("#stats-table")
        settled = time.monotonic()
        page.wait_for_timeout(seconds * 1000)
        visible = [u for t, u in urls if t >= settled]
        page.evaluate(HIDE)
        hidden_from = time.monotonic()
        page.wait_for_timeout(seconds * 1000)
        hidden = [u for t, u in urls if t >= hidden_from]
        browser.close()

    def median(name: str) -> float | None:
        values = [x[name] for x in loads if x[name] is not None]
        return round(statistics.median(values), 1) if values else None

    return {
        "deployments_page": {
            "runs": runs,
            "first_paint_ms": median("first_paint_ms"),
            "first_contentful_paint_ms": median("first_contentful_paint_ms"),
            "cards_drawn_ms": median("cards_drawn_ms"),
            "requests": loads[-1]["requests"],
            "payload_bytes": loads[-1]["bytes"],
            "payload_gzip_bytes": loads[-1]["gzip_bytes"],
        },
        "polling": {
            "seconds": seconds,
            "requests_per_minute_visible": round(len(visible) * 60 / seconds, 1),
            "requests_per_minute_hidden": round(len(hidden) * 60 / seconds, 1),
            "paths": sorted({u.split("?")[0].replace(base, "") for u in visible}),
        },
    }


def served(runs: int, seconds: float) -> dict[str, Any]:
    """`measure` against a fresh `sluice serve --demo` (one worker) in a temporary home."""
    if not (REPO / "functions" / "sluice" / "console" / "static" / "index.html").exists():
        raise RuntimeError("the console is not built: run `make console`")
    with tempfile.TemporaryDirectory() as home:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        command = [PYTHON, "-m", "sluice.cli", "serve", "--demo", "--port", str(port), "--workers", "1"]
        with server(command, ready_url=f"{base}/healthz", log=Path(home) / "serve.log", env=bench_env(SLUICE_HOME=home), quiet_stdout=True):
            key = (Path(home) / "admin-key").read_text().strip()
            return measure(base, key, runs, seconds)


def run(quick: bool) -> dict[str, Any]:
    """The section `make bench` reports: what the console costs the browser and the API."""
    result = served(3 if quick else 5, 10.0 if quick else 20.0)
    page, polling = result["deployments_page"], result["polling"]
    figures = [
        figure("console.first_contentful_paint", "console, deployments page: first contentful paint", "ms", "sluice console", [page["first_contentful_paint_ms"] or 0.0]),
        figure("console.cards_drawn", "console, deployments page: until the policies are drawn", "ms", "sluice console", [page["cards_drawn_ms"] or 0.0]),
        figure("console.payload", "console, deployments page: bytes fetched (HTML, script, style, API answers)", "KiB", "sluice console", [page["payload_bytes"] / 1024], note=f"{page['payload_gzip_bytes'] / 1024:.0f} KiB as gzip would send it; {page['requests']} requests"),
        figure("console.polling.visible", "console, a deployment's page open and visible: requests per minute to the API", "req/min", "sluice console", [polling["requests_per_minute_visible"]]),
        figure("console.polling.hidden", "console, the same page in a hidden tab: requests per minute to the API", "req/min", "sluice console", [polling["requests_per_minute_hidden"]]),
    ]  # fmt: skip
    return {"title": "The web console", "figures": figures, "notes": [f"medians of {page['runs']} loads; polling counted over {polling['seconds']:g} s each"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    try:
        result = served(args.runs, args.seconds)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 2
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
