"""The web console in a real browser (Debian's Chromium, its headless shell where installed,
driven by Playwright) against a real
`sluice serve --demo`: sign in, see the deployments, watch a canary's statistics appear,
promote a shadow, try a model, follow a batch job, pause a batch schedule, see a drifted
feature flagged, and another tenant sees none of it.

One browser for the whole module. With SLUICE_SCREENSHOTS=1 the stories take the pictures
of docs/console.md, into docs/img/; otherwise they take none."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from tests.conftest import MODELS
from tests.e2e.conftest import running_sluice
from tests.models import grid_model, score_model

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]
BUILT = ROOT / "functions" / "sluice" / "console" / "static" / "index.html"
# Chromium's old headless shell (Debian's chromium-headless-shell, which `make chromium`
# installs beside it) where there is one: the browser's own headless mode runs the whole browser
# without a window, and costs more CPU for the same pages.
CHROMIUM = next(filter(None, map(shutil.which, ("chromium-headless-shell", "chromium"))), "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"]
POLICIES = ROOT / "examples" / "policies"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

if importlib.util.find_spec("playwright") is None:  # imported where the browser starts, not at collection
    pytest.skip("the playwright package is not installed (pip install -e '.[dev]')", allow_module_level=True)
if not Path(CHROMIUM).exists():
    pytest.skip("Chromium is not installed (make test installs it with apt-get when it runs as root)", allow_module_level=True)
if not BUILT.exists():
    pytest.skip("the console is not built: run `make console`", allow_module_level=True)


class Service:
    def __init__(self, base: str, home: Path, admin: str) -> None:
        self.base, self.home, self.admin = base, home, admin
        self.http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {admin}"}, timeout=30)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        r = self.http.request(method, path, **kwargs)
        assert r.is_success, r.text
        return r.json() if r.content else None

    def predict(self, deployment: str, n: int) -> None:
        for i in range(n):
            self.call("POST", "/api/v1/predictions", json={"deployment": deployment, "inputs": [[5.9, 3.0, 5.1, 1.8]]}, headers={"x-user-id": f"user-{i}"})


def _operator_key(home: Path, tenant: str, scopes: str) -> str:
    """A key made on the server's machine (as `sluice keys create` makes it), in its registry."""
    from sluice.settings import Settings
    from sluice.wiring import Container

    _, plain = Container.from_settings(Settings(mode="local", home=home)).keys.create(tenant, scopes.split(","), name="console-test")
    return plain


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    home = tmp_path_factory.mktemp("console-home")
    env = {**os.environ, "SLUICE_BATCH_INBOX_POLL_S": "0.5", "SLUICE_MONITOR_FLUSH_S": "1"}  # each worker's profiles written within a second
    with running_sluice(home, env, "--demo", "--workers", "1") as (port, admin):
        s = Service(f"http://127.0.0.1:{port}", home, admin)
        # A canary on iris and a shadow beside it, as the rollout guide makes them.
        s.call("POST", "/api/v1/models/iris/versions", content=(MODELS / "iris_forest.onnx").read_bytes(), headers={"content-type": "application/octet-stream"})
        s.call("PUT", "/api/v1/deployments/iris", json={"policy": json.loads((POLICIES / "canary.json").read_text())})
        s.call("POST", "/api/v1/deployments", json={"name": "iris-shadow", "policy": json.loads((POLICIES / "shadow.json").read_text())})
        s.call("POST", "/api/v1/deployments", json={"name": "iris-ensemble", "policy": json.loads((POLICIES / "ensemble.json").read_text())})
        yield s


@pytest.fixture(scope="module")
def browser(service: Service) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def shots() -> Path | None:
    """Where the pictures go: docs/img/ with SLUICE_SCREENSHOTS=1, else nowhere (a full page
    rendered and encoded as PNG for no reader costs Chromium more than most stories' steps)."""
    return ROOT / "docs" / "img" if os.environ.get("SLUICE_SCREENSHOTS") == "1" else None


class Tab:
    """One browser context (its own sessionStorage), watching every request and message."""

    def __init__(self, browser: Any, base: str, key: str | None = None) -> None:
        self.key = key  # signed in with before the first page a story goes to, if need be
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        # The page's clock runs as time does; a test moves it on where it would wait out a
        # polling interval (`later`), so the page polls at once.
        self.context.clock.install()
        self.page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        self.base = base
        self.urls: list[str] = []
        self.messages: list[str] = []
        self.page.on("request", lambda r: self.urls.append(r.url))
        self.page.on("console", lambda m: self.messages.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.messages.append(f"pageerror: {e}"))

    def sign_in(self, key: str) -> None:
        self.page.goto(f"{self.base}/console")
        self.page.fill("#key", key)
        self.page.click("#signin button[type=submit]")
        self.page.wait_for_selector("#who:has-text('tenant')")

    def go(self, hash: str, selector: str) -> None:
        if self.key is not None and not self.page.url.startswith(self.base):  # a story run alone
            self.sign_in(self.key)
        self.page.goto(f"{self.base}/console/#{hash}")
        self.page.wait_for_selector(selector)

    def later(self, ms: int, *, then_s: float = 0.5) -> None:
        """`ms` of the page's time passed at once (its timers due by then fire), then `then_s`
        of real time for what they started (a request, a redraw) to be seen here."""
        self.page.clock.run_for(ms)
        self.page.wait_for_timeout(then_s * 1000)

    def polled(self, path: str, ms: int) -> None:
        """The page's next read of `path` (a poller of interval `ms`), brought on and answered."""
        with self.page.expect_response(lambda r: r.url.split("?")[0].endswith(path)):
            self.page.clock.run_for(ms)

    def shot(self, folder: Path | None, name: str, full_page: bool = True, *, of: str | None = None, **options: Any) -> None:
        """docs/img/console-NAME.png (`shots`): the page, or the element `of`."""
        if folder is None:
            return
        path = str(folder / f"console-{name}.png")
        if of is None:
            self.page.screenshot(path=path, full_page=full_page, **options)
        else:
            self.page.locator(of).screenshot(path=path)


@pytest.fixture(scope="module")
def admin_tab(browser: Any, service: Service) -> Iterator[Tab]:
    tab = Tab(browser, service.base, service.admin)
    yield tab
    tab.context.close()


def test_sign_in_shows_the_demo_deployments_as_pictures(admin_tab: Tab, service: Service, shots: Path | None) -> None:
    tab = admin_tab
    tab.sign_in(service.admin)
    tab.page.wait_for_selector("#deployments")
    names = tab.page.eval_on_selector_all("[data-deployment]", "els => els.map(e => e.dataset.deployment)")
    assert set(names) == {"iris", "diabetes", "iris-shadow", "iris-ensemble"}
    assert tab.page.locator("[data-deployment=iris] svg.policy text", has_text="canary · 10%").count() == 1
    assert tab.page.locator("[data-deployment=iris-shadow] svg.policy text", has_text="mirror candidate · 100% sampled").count() == 1
    assert tab.page.locator("[data-deployment=iris-ensemble] svg.policy text", has_text="soft_vote · min 1").count() == 1
    assert tab.page.locator("[data-deployment=iris-ensemble] svg.policy text", has_text="forest · w 1 · 200 ms").count() == 1
    assert tab.page.inner_text("#who") == "tenant default · admin, predict"
    # The key is in this tab's sessionStorage: never in a URL, a cookie or localStorage.
    assert tab.page.evaluate("sessionStorage.getItem('sluice.key')") == service.admin
    assert tab.page.evaluate("localStorage.length") == 0 and tab.context.cookies() == []
    assert "#deployments" in tab.page.url or tab.page.url.endswith("#/deployments")
    tab.shot(shots, "deployments")


def test_a_canarys_statistics_appear_while_predictions_come(admin_tab: Tab, service: Service, shots: Path | None) -> None:
    tab = admin_tab
    tab.go("/deployments/iris", "#stats-table")
    deadline = time.monotonic() + 60
    while True:
        service.predict("iris", 40)
        row = tab.page.locator("#stats-table tr", has_text="canary")
        if row.count() and int(row.locator("td").nth(2).inner_text()) > 0:
            break
        assert time.monotonic() < deadline, tab.page.inner_text("#stats")
        tab.later(5000, then_s=1.0)  # the counters merged (every 2 s), the page's next read
    # A rate needs two samples: the chart draws a line once the page has polled twice more.
    service.predict("iris", 40)
    for _ in range(2):
        tab.polled("/deployments/iris/stats", 5000)
    tab.page.locator("#charts .u-legend", has_text="variant canary").first.wait_for()
    assert tab.page.locator("#charts figure.chart").count() == 3
    assert tab.page.locator("#charts .u-legend", has_text="variant canary").count() >= 1
    assert tab.page.locator("#history-table tr", has_text="revision 2").count() == 1
    assert tab.page.locator("#diff .add", has_text='"name": "canary"').count() == 1
    tab.shot(shots, "deployment")


def test_a_caching_deployments_hits_are_shown_beside_its_requests(admin_tab: Tab, service: Service) -> None:
    """The same input asked three times of a deployment with the prediction cache on: one miss,
    two hits, all three among its requests."""
    tab = admin_tab
    service.call("POST", "/api/v1/deployments", json={"name": "iris-cached", "policy": {"kind": "single", "model": "iris", "version": 1},
                                                       "cache": {"ttl_s": 600, "max_entries": 100}})  # fmt: skip
    service.predict("iris-cached", 3)
    tab.go("/deployments/iris-cached", "#cache-stats")
    text = tab.page.inner_text("#cache-stats")
    assert "2 hits, 1 misses (hit rate 66.7%)" in text, text
    assert tab.page.locator("#stats-table tr", has_text="all").first.locator("td").nth(2).inner_text() == "3"


HIDE = """() => {
  Object.defineProperty(document, "visibilityState", { configurable: true, get: () => "hidden" });
  document.dispatchEvent(new Event("visibilitychange"));
}"""
SHOW = """() => {
  Object.defineProperty(document, "visibilityState", { configurable: true, get: () => "visible" });
  document.dispatchEvent(new Event("visibilitychange"));
}"""


def test_polling_pauses_while_the_tab_is_hidden(admin_tab: Tab) -> None:
    tab = admin_tab
    tab.go("/deployments/iris", "#stats-table")
    stats = lambda: sum("/stats" in u for u in tab.urls)  # noqa: E731
    tab.page.evaluate(HIDE)
    before = stats()
    tab.later(6000)  # more than one polling interval
    assert stats() == before
    tab.page.evaluate(SHOW)  # polls again at once
    tab.page.wait_for_timeout(500)
    assert stats() == before + 1


def test_promote_a_shadow_after_confirming(admin_tab: Tab, service: Service, shots: Path | None) -> None:
    tab = admin_tab
    tab.go("/deployments/iris-shadow", "#stats-table")
    # The mirror's verdict shows beside the traffic before anyone promotes it.
    deadline = time.monotonic() + 60
    while not tab.page.locator("#stats-table tr", has_text="candidate").count():
        assert time.monotonic() < deadline, tab.page.inner_text("#stats")
        service.predict("iris-shadow", 20)
        tab.later(5000, then_s=1.0)
    assert tab.page.locator("#stats-table tr", has_text="candidate").locator("td").nth(9).inner_text().startswith("1.000")
    tab.page.click("[data-action=promote-candidate]")
    tab.page.wait_for_selector("dialog#confirm[open]")
    assert "Promote mirror candidate?" in tab.page.inner_text("#confirm-title")
    tab.shot(shots, "confirm", full_page=False)
    # Cancelling changes nothing.
    tab.page.click("dialog#confirm button[value=cancel]")
    assert service.call("GET", "/api/v1/deployments/iris-shadow")["revision"] == 1
    tab.page.click("[data-action=promote-candidate]")
    tab.page.click("#confirm-ok")
    tab.page.wait_for_selector("#banner.ok:has-text('revision 2')")
    assert service.call("GET", "/api/v1/deployments/iris-shadow")["policy"] == {"kind": "single", "model": "iris", "version": 2}
    assert tab.page.locator("#policy svg text", has_text="version 2").count() == 1


def test_shift_weights_after_confirming(admin_tab: Tab, service: Service) -> None:
    tab = admin_tab
    tab.go("/deployments/iris", "#weights")
    tab.page.fill("#weights input[name=stable]", "50")
    tab.page.fill("#weights input[name=canary]", "50")
    tab.page.click("#weights button[type=submit]")
    tab.page.click("#confirm-ok")
    tab.page.wait_for_selector("#banner.ok:has-text('revision 3')")
    weights = [v["weight"] for v in service.call("GET", "/api/v1/deployments/iris")["policy"]["variants"]]
    assert weights == [50, 50]


# A switch by region whose default is a sequence: a transform, then a model.
IRIS_FEATURES = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
GRAPH = {
    "kind": "switch",
    "cases": [{"name": "europe", "when": {"field": "headers.x-region", "op": "in", "value": ["eu", "uk"]}, "target": {"kind": "single", "model": "iris", "version": 1}}],
    "default": {"kind": "sequence", "steps": [
        {"name": "clip", "target": {"kind": "transform", "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 4], "feature_names": IRIS_FEATURES}], "ops": [{"op": "clip", "input": "input", "min": 0}]}},
        {"name": "forest", "target": {"kind": "single", "model": "iris", "version": 2}},
    ]},
}  # fmt: skip


def test_a_graphs_steps_and_cases_are_drawn_with_their_figures(admin_tab: Tab, service: Service, shots: Path | None) -> None:
    tab = admin_tab
    service.call("POST", "/api/v1/deployments", json={"name": "iris-graph", "policy": GRAPH})
    for region in ("eu", "us", "us"):
        service.call("POST", "/api/v1/predictions", json={"deployment": "iris-graph", "inputs": [[5.9, 3.0, 5.1, 1.8]]}, headers={"x-region": region})
    deadline = time.monotonic() + 60  # counters from every worker, merged
    while service.call("GET", "/api/v1/deployments/iris-graph/stats").get("steps", {}).get("default/forest", {}).get("requests") != 2:  # a step under its path
        assert time.monotonic() < deadline
        time.sleep(0.5)
    tab.go("/deployments/iris-graph", "#policy svg text.node-stat")
    svg = tab.page.locator("#policy svg")
    assert svg.locator("text.edge-label", has_text='europe: header x-region in ["eu", "uk"]').count() == 1
    assert svg.locator("text.edge-note").all_text_contents() == ["1 req · 1 row · 0 err", "2 req · 2 rows · 0 err"]
    for name, what in (("clip", "transform · 1 op"), ("forest", "iris · version 2")):
        assert svg.locator("text.node-title", has_text=name).count() == 1
        assert svg.locator("text.node-sub", has_text=what).count() == 1
    assert svg.locator("text.node-op", has_text="clip input").count() == 1
    assert [t.startswith("2 req · p50 ") and t.endswith(" ms · 0 err") for t in svg.locator("text.node-stat").all_text_contents()] == [True, True]
    assert tab.page.locator("#stats-table tr", has_text="default (2 rows)").count() == 1
    assert tab.page.locator("#stats-table tr", has_text="forest").count() == 1
    tab.shot(shots, "graph", full_page=False)


def test_models_show_signatures_and_try_it_predicts(admin_tab: Tab, service: Service, shots: Path | None) -> None:
    tab = admin_tab
    tab.go("/models", "#models-table")
    tab.page.click("[data-model=iris]")
    tab.page.wait_for_selector("#versions [data-version='2']")
    assert tab.page.locator("[data-version='1'] .signature", has_text="sepal_length, sepal_width").count() == 1
    tab.page.click("[data-try='1']")
    for name, value in {"sepal_length": 6.7, "sepal_width": 3.0, "petal_length": 5.2, "petal_width": 2.3}.items():
        tab.page.fill(f"#try-form input[name={name}]", str(value))
    tab.page.click("#try-form button[type=submit]")
    tab.page.wait_for_selector("#answer:has-text('prediction')")
    answer = json.loads(tab.page.inner_text("#answer"))
    assert answer["prediction"] == "virginica" and answer["version"] == 1 and set(answer["probabilities"]) == {"setosa", "versicolor", "virginica"}
    tab.shot(shots, "models")


def test_try_it_pins_the_model_a_deployment_answers_with_and_sends_a_row_of_its_shape(admin_tab: Tab, service: Service) -> None:
    """A sequence whose first step is a reference answers a pinned version with the referenced
    deployment's model: Try it offers it on that model's page, not on the next step's; and a
    rank-3 input's values, typed flat, go as one row of its shape."""
    for model, onnx in (("grid", grid_model()), ("grid-score", score_model("sum", 1))):
        service.call("POST", f"/api/v1/models/{model}/versions", content=onnx, headers={"content-type": "application/octet-stream"})
    service.call("POST", "/api/v1/deployments", json={"name": "grid-d", "model": "grid"})
    service.call("POST", "/api/v1/deployments", json={"name": "grid-chain", "policy": {"kind": "sequence", "steps": [
        {"name": "sum", "target": {"kind": "ref", "deployment": "grid-d"}},
        {"name": "score", "target": {"kind": "single", "model": "grid-score", "version": 1}},
    ]}})  # fmt: skip
    tab = admin_tab
    tab.go("/models/grid-score", "[data-try='1']")
    tab.page.click("[data-try='1']")
    tab.page.wait_for_selector("#try h2")
    assert "No deployment answers with grid-score first" in tab.page.inner_text("#try")
    tab.go("/models/grid", "[data-try='1']")
    tab.page.click("[data-try='1']")
    tab.page.wait_for_selector("#try-form")
    assert sorted(tab.page.eval_on_selector_all("#try-form select option", "os => os.map(o => o.value)")) == ["grid-chain", "grid-d"]
    tab.page.select_option("#try-form select", "grid-chain")
    tab.page.fill("#try-form textarea[name=grid]", "1, 2, 3, 4")
    tab.page.click("#try-form button[type=submit]")
    tab.page.wait_for_selector("#answer:has-text('prediction')")
    answer = json.loads(tab.page.inner_text("#answer"))
    assert (answer["model"], answer["version"], answer["prediction"]) == ("grid", 1, 10.0)


def test_a_link_that_cannot_be_read_says_no_such_page(admin_tab: Tab) -> None:
    admin_tab.go("/deployments", "#deployments")
    admin_tab.go("/deployments/%E0%A4%A", "main:has-text('No such page.')")  # not the last page left standing
    assert not [m for m in admin_tab.messages if "URIError" in m]


def test_a_batch_job_is_followed_to_succeeded(admin_tab: Tab, service: Service, shots: Path | None) -> None:
    tab = admin_tab
    tab.go("/batch", "#no-jobs, #jobs-table")
    inbox = service.home / "inbox" / "diabetes"
    inbox.mkdir(parents=True, exist_ok=True)
    columns = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]
    rows = "\n".join(",".join(f"{0.01 * ((i + j) % 7):.2f}" for j in range(10)) for i in range(500))
    staged = service.home / "patients.csv"  # written whole, then moved in: the watcher sees a complete file
    staged.write_text(",".join(columns) + "\n" + rows + "\n")
    staged.rename(inbox / "patients.csv")
    deadline = time.monotonic() + 90  # the inbox's next look, the job, the page's next read
    while not tab.page.locator("[data-status=SUCCEEDED]").count():
        assert time.monotonic() < deadline, tab.page.inner_text("#jobs")
        tab.later(5000, then_s=1.0)
    row = tab.page.locator("#jobs-table tr", has_text="diabetes")
    assert re.search(r"500 in\s+500 out\s+0 failed", row.inner_text())
    assert row.locator("progress").get_attribute("value") == row.locator("progress").get_attribute("max")
    tab.shot(shots, "batch")


def test_a_batch_jobs_first_error_rows_are_shown(admin_tab: Tab, service: Service, shots: Path | None) -> None:
    tab = admin_tab
    tab.go("/batch", "#no-jobs, #jobs-table")  # run alone, no job came before
    inbox = service.home / "inbox" / "diabetes"
    inbox.mkdir(parents=True, exist_ok=True)
    columns = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]
    lines = [",".join(f"{0.01 * ((i + j) % 7):.2f}" for j in range(10)) for i in range(300)]
    for i in (4, 150, 299):
        lines[i] = "oops," + lines[i].split(",", 1)[1]  # age is not a number
    staged = service.home / "bad-patients.csv"
    staged.write_text(",".join(columns) + "\n" + "\n".join(lines) + "\n")
    staged.rename(inbox / "bad-patients.csv")
    deadline = time.monotonic() + 90
    while True:
        jobs = [j for j in service.call("GET", "/api/v1/batch-jobs") if j["input_uri"].endswith("bad-patients.csv")]
        if jobs and jobs[0]["status"] == "SUCCEEDED":
            break
        assert time.monotonic() < deadline, jobs
        time.sleep(0.5)
    job = jobs[0]
    assert job["counts"]["rows_failed"] == 3
    tab.page.click(f"[data-errors='{job['id']}']")
    tab.page.wait_for_selector(f"#error-rows[data-job='{job['id']}']")
    rows = tab.page.locator("#error-rows tbody tr")
    assert rows.count() == 3
    assert [rows.nth(i).locator("td").first.inner_text() for i in range(3)] == ["4", "150", "299"]
    assert "'age' is not a number: 'oops'" in rows.nth(0).inner_text()
    assert "3 of 3 failed rows" in tab.page.inner_text("#errors")
    assert str(service.home) not in tab.page.inner_text("main")  # URIs are shortened, not the server's paths
    tab.page.evaluate("document.querySelector('#jobs .scroll').scrollLeft = 0")  # the click scrolled the table
    tab.shot(shots, "batch-errors")


def test_a_schedule_is_listed_paused_and_resumed_and_its_runs_lead_to_their_jobs(admin_tab: Tab, service: Service, shots: Path | None) -> None:
    tab = admin_tab
    inbox = service.home / "batch" / "inbox" / "default" / "diabetes"
    for day in {datetime.now(ZoneInfo("Europe/Paris")).date() + timedelta(days=d) for d in (0, 1)}:  # a run just before midnight
        (inbox / f"dt={day}").mkdir(parents=True, exist_ok=True)
        columns = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]
        rows = "\n".join(",".join(f"{0.01 * ((i + j) % 5):.2f}" for j in range(10)) for i in range(40))
        (inbox / f"dt={day}" / "patients.csv").write_text(",".join(columns) + "\n" + rows + "\n")
    service.call("POST", "/api/v1/batch-schedules", json={
        "name": "every-minute", "deployment": "diabetes", "input_uri": inbox.as_uri() + "/dt={date}/patients.csv",
        "expression": "cron(* * * * *)", "timezone": "Europe/Paris", "overlap": "skip",
    })  # fmt: skip
    tab.go("/batch", "[data-schedule-row=every-minute]")
    row = tab.page.locator("#schedules-table tr", has=tab.page.locator("[data-schedule-row=every-minute]"))
    text = row.inner_text()
    assert "diabetes" in text and "cron(* * * * *)" in text and "Europe/Paris" in text and "skip" in text
    assert "dt={date}/patients.csv" in text  # the template, as written
    assert row.locator("[data-schedule-state=ENABLED]").inner_text() == "active"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:00Z", row.locator("[data-next-run=every-minute]").inner_text())
    # Pause: cancelling the dialog changes nothing; confirming pauses it.
    tab.page.click("[data-action=schedule-pause][data-schedule=every-minute]")
    tab.page.wait_for_selector("dialog#confirm[open]")
    assert "Pause the schedule every-minute?" in tab.page.inner_text("#confirm-title")
    tab.page.click("dialog#confirm button[value=cancel]")
    assert service.call("GET", "/api/v1/batch-schedules/every-minute")["state"] == "ENABLED"
    tab.page.click("[data-action=schedule-pause][data-schedule=every-minute]")
    tab.page.click("#confirm-ok")
    tab.page.wait_for_selector("[data-schedule-state=PAUSED]")
    assert service.call("GET", "/api/v1/batch-schedules/every-minute")["state"] == "PAUSED"
    assert "paused" in row.locator("[data-next-run=every-minute]").inner_text()
    # Resume, and its next run shows up under it (the section is read every 15 s), its job id
    # leading to the job's row.
    tab.page.click("[data-action=schedule-resume][data-schedule=every-minute]")
    assert "Resume the schedule every-minute?" in tab.page.inner_text("#confirm-title")
    tab.page.click("#confirm-ok")
    tab.page.wait_for_selector("[data-schedule-state=ENABLED]")
    # The server runs it at the next minute: waited for here, without the page (moving its
    # clock on polls every section, over and over, for up to a minute), then its next read.
    detail = service.call("GET", "/api/v1/batch-schedules/every-minute")
    time.sleep(max(0.0, detail["next_run_at"] - time.time()))
    deadline = time.monotonic() + 60
    while not any(r["status"] == "SUCCEEDED" for r in service.call("GET", "/api/v1/batch-schedules/every-minute")["runs"]):
        assert time.monotonic() < deadline, service.call("GET", "/api/v1/batch-schedules/every-minute")
        time.sleep(0.5)
    run = tab.page.locator("[data-runs=every-minute] li", has_text="SUCCEEDED").first
    deadline = time.monotonic() + 60  # the section's next read
    while not run.count():
        assert time.monotonic() < deadline, tab.page.inner_text("#schedules")
        tab.later(15_000, then_s=1.0)
    assert "40 in, 40 out, 0 failed" in run.inner_text()
    job = run.locator("[data-job-link]").get_attribute("data-job-link")
    tab.page.wait_for_selector(f"#jobs-table [data-job-row='{job}']")
    run.locator("[data-job-link]").click()
    tab.page.wait_for_selector(f"#jobs-table tr.highlight [data-job-row='{job}']")
    service.call("POST", "/api/v1/batch-schedules/every-minute/pause")  # no further runs during the other tests
    tab.page.locator("#schedules").scroll_into_view_if_needed()
    tab.shot(shots, "batch-schedules")


def test_a_rollout_shows_its_steps_and_gates_and_is_paused_and_resumed(admin_tab: Tab, service: Service, shots: Path | None) -> None:
    tab = admin_tab
    service.call("POST", "/api/v1/deployments", json={"name": "iris-rollout", "policy": {"kind": "single", "model": "iris", "version": 1}})
    service.call("POST", "/api/v1/deployments/iris-rollout/rollout", json={"to": "iris:2", "steps": [10, 50, 100], "every": "1h", "gate": "error_rate<=0.01,p99_ratio<=100", "min_requests": 20})
    # (a latency gate no busy test machine fails: a rollback here would end the story early)
    service.predict("iris-rollout", 60)
    tab.go("/deployments/iris-rollout", "#rollout-steps")
    assert tab.page.locator("#rollout-steps li").all_inner_texts() == ["10%", "50%", "100%"]
    assert tab.page.locator("#rollout-steps li.current").inner_text() == "10%"
    assert tab.page.locator("[data-state=running]").count() == 1
    gates = tab.page.locator("#rollout-gates tbody tr")
    assert gates.count() == 2
    assert gates.nth(0).locator("td").nth(0).inner_text() == "error_rate" and gates.nth(0).locator("td").nth(1).inner_text() == "<= 0.01"
    assert gates.nth(1).locator("td").nth(1).inner_text() == "<= 100"
    assert "Next decision" in tab.page.inner_text("#rollout-next")
    assert tab.page.locator("#rollout-decisions tr", has_text="start").count() == 1
    # The gates get values as the step's traffic comes (the section is read every 10 s).
    deadline = time.monotonic() + 60
    while tab.page.locator("[data-gate=error_rate].pass").count() == 0:
        assert time.monotonic() < deadline, tab.page.inner_text("#rollout")
        service.predict("iris-rollout", 40)
        tab.later(10_000, then_s=1.0)
    assert gates.nth(0).locator("td").nth(2).inner_text() == "0"
    tab.shot(shots, "rollout", clip={"x": 0, "y": 0, "width": 1280, "height": 1020})
    # Pause: cancelling the dialog changes nothing; confirming pauses it.
    tab.page.click("[data-action=rollout-pause]")
    tab.page.wait_for_selector("dialog#confirm[open]")
    assert "Pause the rollout of iris-rollout?" in tab.page.inner_text("#confirm-title")
    tab.page.click("dialog#confirm button[value=cancel]")
    assert service.call("GET", "/api/v1/deployments/iris-rollout/rollout")["rollout"]["state"] == "running"
    tab.page.click("[data-action=rollout-pause]")
    tab.page.click("#confirm-ok")
    tab.page.wait_for_selector("[data-state=paused]")
    assert service.call("GET", "/api/v1/deployments/iris-rollout/rollout")["rollout"]["state"] == "paused"
    assert "Paused" in tab.page.inner_text("#rollout-next")
    assert tab.page.locator("#rollout-decisions tr", has_text="paused").count() == 1
    tab.page.click("[data-action=rollout-resume]")
    tab.page.wait_for_selector("dialog#confirm[open]")
    tab.page.click("#confirm-ok")
    tab.page.wait_for_selector("[data-state=running]")
    assert service.call("GET", "/api/v1/deployments/iris-rollout/rollout")["rollout"]["state"] == "running"
    assert tab.page.locator("#rollout-decisions tr", has_text="resumed").count() == 1
    # The page follows the revisions the rollout made.
    assert tab.page.locator("#history-table tr", has_text="revision 4").count() == 1
    # A running rollout is read every 10 s while the tab is visible, never while it is hidden.
    looks = lambda: sum(u.endswith("/iris-rollout/rollout") for u in tab.urls)  # noqa: E731
    before = looks()
    tab.polled("/iris-rollout/rollout", 10_500)
    assert looks() >= before + 1
    tab.page.evaluate(HIDE)
    before = looks()
    tab.later(11_000)
    assert looks() == before
    tab.page.evaluate(SHOW)
    tab.page.wait_for_timeout(500)
    assert looks() == before + 1


def test_a_drifted_feature_is_flagged_first_in_the_monitoring_section(admin_tab: Tab, service: Service, shots: Path | None) -> None:
    import numpy as np

    tab = admin_tab
    service.call("POST", "/api/v1/deployments", json={"name": "iris-watch", "policy": {"kind": "single", "model": "iris", "version": 1}})
    tab.go("/deployments/iris-watch", "#no-baseline")
    assert "sluice monitor baseline iris-watch --data" in tab.page.inner_text("#no-baseline")
    # A baseline through the API, then traffic whose petal_length moved by four standard deviations.
    def rows(n: int, seed: int, shift: float) -> list[list[float]]:
        return (np.random.default_rng(seed).normal(scale=0.5, size=(n, 4)) + np.array([5.8, 3.0, 3.7 + shift, 1.2])).round(3).tolist()

    service.call("PUT", "/api/v1/deployments/iris-watch/baseline", json={"inputs": rows(2000, 0, 0.0), "source": "train.csv"})
    for start in range(0, 1000, 100):
        service.call("POST", "/api/v1/predictions", json={"deployment": "iris-watch", "inputs": rows(100, 1 + start, 2.0)})
    deadline = time.monotonic() + 60  # every worker's profiles written (each flushes every second)
    while (status := service.call("GET", "/api/v1/deployments/iris-watch/monitor"))["windows"][:1] == [] or status["windows"][0]["rows"] < 1000:
        assert time.monotonic() < deadline, status
        time.sleep(0.5)
    assert status["verdict"] == "alert"
    tab.go("/deployments/iris-watch", "#monitor-features")
    assert tab.page.locator("#monitor-verdict").get_attribute("data-verdict") == "alert"
    rows_shown = tab.page.locator("#monitor-features tbody tr")
    first = rows_shown.first
    assert first.locator("[data-feature]").inner_text() == "petal_length"  # the worst first
    assert first.locator("[data-verdict]").get_attribute("data-verdict") in ("drift", "out_of_range")
    assert first.locator("svg.spark circle.over").count() == 1 and first.locator("svg.spark line.threshold").count() == 1
    sepal = tab.page.locator("#monitor-features tr", has=tab.page.locator("[data-feature=sepal_width]"))
    assert sepal.locator("[data-verdict]").get_attribute("data-verdict") == "ok"
    assert sepal.locator("svg.spark circle.under").count() == 1
    assert "train.csv" in tab.page.inner_text("#monitor-summary")
    assert "sluice monitor labels iris-watch" in tab.page.inner_text("#no-labels")
    tab.shot(shots, "monitoring", of="#monitor")

    # Its history: the windows before this one closed as `sluice serve` closes them, read back
    # a span at a time. Oldest first: drifted as now, quiet (the baseline's own rows), nothing
    # recorded, no traffic, and this window.
    window_s, hour = status["window_s"], status["windows"][0]["window_start"]
    _keep_windows(service, "iris-watch", status["revision"], now=hour, window_s=window_s, drifted=[hour - 4 * window_s], quiet=[hour - 3 * window_s], idle=[hour - window_s])
    tab.page.reload()  # read anew (the page read the history when it opened, before these closed)
    tab.page.wait_for_selector("#history-features")
    cells = tab.page.locator("#history-verdicts rect")
    assert [cells.nth(i).get_attribute("data-verdict") for i in range(cells.count())] == ["alert", "ok", "not_recorded", "no_traffic", "alert"]
    assert cells.first.get_attribute("data-window") == str(hour - 4 * window_s)
    assert "4 windows kept" in tab.page.inner_text("#history-summary")  # four documents on five windows
    first = tab.page.locator("#history-features tbody tr").first
    assert first.locator("[data-feature]").inner_text() == "petal_length"  # the worst first: alerting in two windows
    assert first.locator("td").nth(2).inner_text() == "2"
    assert first.locator("svg.spark circle.over").count() == 2 and first.locator("svg.spark circle.under").count() == 1
    assert first.locator("svg.spark polyline").count() == 2  # broken where no window was checked
    sepal = tab.page.locator("#history-features tr", has=tab.page.locator("[data-feature=sepal_width]"))
    assert sepal.locator("td").nth(2).inner_text() == "0" and sepal.locator("svg.spark circle.over").count() == 0
    assert tab.page.locator("#history-no-labels").count() == 1
    with tab.page.expect_response(lambda r: "/monitor/history?" in r.url and "since=7d" in r.url):
        tab.page.select_option("#history-span", "7d")
    tab.page.wait_for_selector("#history-verdicts rect[data-verdict=not_recorded]")
    tab.shot(shots, "monitoring-history", of="#monitor-history")


def _keep_windows(service: Service, name: str, revision: int, *, now: int, window_s: int, drifted: list[int], quiet: list[int], idle: list[int]) -> None:
    """Closed windows of `name` kept as the server keeps them (MonitorResults, in its batch
    folder), on the server's registry: the window `now` as its traffic made it; `drifted`
    windows profiled as that traffic was, `quiet` ones as the baseline's own rows, `idle` ones
    without traffic."""
    from sluice.monitor.sketches import Profile
    from sluice.services.monitor_results import MonitorResults
    from sluice.settings import Settings
    from sluice.wiring import Container

    tenant = service.call("GET", "/api/v1/session")["tenant"]
    c = Container.from_settings(Settings(mode="local", home=service.home))
    traffic = [(variant, profile) for variant, begun, profile in c.registry.read_profiles(tenant, name, revision, since=now) if begun == now]
    baseline = c.registry.get_baseline(tenant, name)
    assert traffic and baseline is not None
    for start in drifted:
        for variant, profile in traffic:
            c.registry.add_profile(tenant, name, revision, variant, start, profile)
    for start in quiet:
        c.registry.add_profile(tenant, name, revision, traffic[0][0], start, Profile.from_dict(baseline).to_dict())
    results = MonitorResults(c.monitor, c.batch_files(), c.batch_paths.root)
    for start in sorted([now, *drifted, *quiet, *idle]):
        closed = c.monitor.closed(tenant, name, at=start + window_s + 300)
        assert closed is not None and closed["window_start"] == start and (closed["check"] is None) == (start in idle)
        results.write(tenant, closed)


def test_a_predict_only_key_is_told_what_it_may_not_do(browser: Any, service: Service) -> None:
    key = service.call("POST", "/api/v1/keys", json={"scopes": ["predict"], "name": "console-predict"})["key"]
    tab = Tab(browser, service.base)
    try:
        tab.sign_in(key)
        tab.page.wait_for_selector("#page-error")
        assert "needs a key with the admin scope" in tab.page.inner_text("#page-error")
        # A rollout's page, and its actions, answer this key with the same message (the API's 403).
        tab.go("/deployments/iris-rollout", "#page-error")
        assert "Not allowed (403)" in tab.page.inner_text("#page-error")
        tab.go("/batch", "#jobs-table")  # batch jobs need only predict
    finally:
        tab.context.close()


def test_another_tenants_key_sees_none_of_it(browser: Any, service: Service) -> None:
    key = _operator_key(service.home, "globex", "admin,predict")
    tab = Tab(browser, service.base)
    try:
        tab.sign_in(key)
        tab.page.wait_for_selector("#empty")
        assert tab.page.inner_text("#who") == "tenant globex · admin, predict"
        assert tab.page.locator("[data-deployment]").count() == 0
        tab.go("/batch", "#no-jobs")
        tab.page.wait_for_selector("#no-schedules")  # nor the default tenant's schedules
        assert httpx.get(f"{service.base}/api/v1/batch-schedules", headers={"Authorization": f"Bearer {key}"}).json() == []
        tab.go("/models", "main h1")
        assert tab.page.locator("#models-table").count() == 0
        tab.go("/deployments/iris", "#page-error")
        assert "not found" in tab.page.inner_text("#page-error").lower()
        tab.go("/deployments/iris-rollout", "#page-error")  # nor acme's rollout
        assert "not found" in tab.page.inner_text("#page-error").lower()
        assert httpx.get(f"{service.base}/api/v1/deployments/iris-rollout/rollout", headers={"Authorization": f"Bearer {key}"}).status_code == 404
        # Signing out forgets the key.
        tab.page.click("#signout")
        tab.page.wait_for_selector("#signin")
        assert tab.page.evaluate("sessionStorage.length") == 0
    finally:
        tab.context.close()


def test_an_answer_that_arrives_after_sign_out_is_never_drawn(browser: Any, service: Service) -> None:
    """A slow answer (a cold function, a slow link) for a page left meanwhile: signed out, or
    signed in again with another tenant's key. It was drawn when it came: the first tenant's
    deployments over the sign-in form, or under the second tenant's name."""
    other = _operator_key(service.home, "globex", "admin,predict")
    tab = Tab(browser, service.base)
    held: list[Any] = []

    def hold_the_first_tenants(route: Any) -> None:  # its list of deployments, until released
        if route.request.headers.get("authorization") == f"Bearer {service.admin}":
            held.append(route)
        else:
            route.continue_()

    def release() -> None:
        for route in held:
            with contextlib.suppress(Exception):  # the page cancelled the read: nothing is left to answer
                route.continue_()
        held.clear()
        tab.page.wait_for_timeout(500)

    try:
        tab.page.route(re.compile(r".*/api/v1/deployments$"), hold_the_first_tenants)
        for then in ("signed out", "another tenant"):
            tab.sign_in(service.admin)
            tab.go("/models", "#models-table")
            tab.page.evaluate("location.hash = '#/deployments'")
            tab.page.wait_for_function("document.querySelector('main p.muted')?.textContent === 'Loading…'")
            while not held:
                tab.page.wait_for_timeout(50)
            tab.page.click("#signout")
            tab.page.wait_for_selector("#signin")
            if then == "another tenant":
                tab.page.fill("#key", other)
                tab.page.click("#signin button[type=submit]")
                tab.page.wait_for_selector("#empty")
            release()
            assert tab.page.locator("[data-deployment]").count() == 0, then
            if then == "signed out":
                assert tab.page.locator("#signin").count() == 1 and tab.page.inner_text("#who") == ""
                assert tab.page.inner_text("#banner") == ""
            else:
                assert tab.page.inner_text("#who") == "tenant globex · admin, predict"
                assert tab.page.locator("#empty").count() == 1
                tab.page.click("#signout")
                tab.page.wait_for_selector("#signin")
    finally:
        tab.context.close()


def test_no_key_in_any_url_and_no_policy_violation(admin_tab: Tab, service: Service) -> None:
    """Over every page the stories above opened, and these (all there is when run alone)."""
    for hash, selector in (("/deployments", "#deployments"), ("/models", "#models-table"), ("/batch", "#no-jobs, #jobs-table")):
        admin_tab.go(hash, selector)
    assert admin_tab.urls and all(service.admin not in u for u in admin_tab.urls)
    assert all(u.startswith(service.base) for u in admin_tab.urls if u.startswith("http")), "the console calls only its own origin"
    problems = [m for m in admin_tab.messages if "Content Security Policy" in m or m.startswith("pageerror")]
    assert problems == []
