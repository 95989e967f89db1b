"""The runs page in a real browser (Playwright driving Debian's Chromium) against a
real ``flowcore serve`` on a real SQLite file holding 125 runs: paging to the
last page, finding a failed run by id prefix and by metadata, the counts by
status, the search kept in the address (shared, and the back button), and times
shown with their date in the viewer's zone with UTC on hover."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Final

import pytest
from playwright.sync_api import Browser, Page, expect

from .browser import NEEDS_CHROMIUM
from .serving import Served, start_serve

RUNS: Final = 125
FAILED: Final = ("bad-017", "bad-058", "bad-101")  # customer zeta; every other run acme

FLOW = """
flow: orders
metadata: {customer: string}
tools:
  check: {class: readonly}
steps:
  - {id: check, call_tool: {tool: check, input: "${input}"}, retry: {max_attempts: 1}}
output: "${steps.check.output}"
"""

TOOLS = """
from flowcore_handlers import HandlerError


def check(call):
    if call.input.get("fail"):
        raise HandlerError("refused", "the order is refused", retryable=False)
    return "ok"


TOOLS = {"check": check}
"""

pytestmark = NEEDS_CHROMIUM


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server whose database holds ``RUNS`` settled runs of ``orders``."""
    tmp_path = tmp_path_factory.mktemp("runs-page")
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "orders.yaml").write_text(FLOW)
    (tmp_path / "order_tools.py").write_text(TOOLS)
    with start_serve(tmp_path, "--flows", flows, "--tools", tmp_path / "order_tools.py") as s:
        with s.client() as api:
            for i in range(RUNS):
                run_id = f"bad-{i:03d}" if f"bad-{i:03d}" in FAILED else f"ord-{i:03d}"
                body = {
                    "flow": "orders",
                    "input": {"fail": run_id in FAILED},
                    "runId": run_id,
                    "metadata": {"customer": "zeta" if run_id in FAILED else "acme"},
                }
                reply = api.post("/api/runs", json=body)
                assert reply.status_code == 201, reply.text
            deadline = time.monotonic() + 60
            while api.get("/api/runs/counts").json()["counts"].get("running", 0):
                assert time.monotonic() < deadline, "the runs did not settle"
                time.sleep(0.1)
        yield s


def open_runs(browser: Browser, served: Served, query: str = "") -> Page:
    context = browser.new_context(
        viewport={"width": 1400, "height": 900}, timezone_id="Asia/Kolkata"
    )
    page = context.new_page()
    page.goto(f"{served.url}?token={served.token}")
    expect(page).to_have_url(served.url)
    if query:
        page.goto(f"{served.url}{query}")
    return page


def ids(page: Page) -> list[str]:
    found: list[str] = page.locator("#runs-body tr").evaluate_all(
        "rows => rows.map(r => r.dataset.runId)"
    )
    return found


def test_paging_to_the_last_page_and_back(browser: Browser, served: Served) -> None:
    page = open_runs(browser, served)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    rows = page.locator("#runs-body tr")
    expect(rows).to_have_count(50)
    expect(page.locator("#page-number")).to_have_text("page 1")
    assert ids(page)[0] == "ord-124"  # newest first
    expect(page.get_by_role("button", name="Newer")).to_be_disabled()
    page.get_by_role("button", name="Older").click()
    expect(page.locator("#page-number")).to_have_text("page 2")
    expect(rows.first).to_have_attribute("data-run-id", "ord-074")
    page.get_by_role("button", name="Older").click()
    expect(page.locator("#page-number")).to_have_text("page 3")
    expect(rows).to_have_count(RUNS - 100)
    expect(rows.last).to_have_attribute("data-run-id", "ord-000")
    expect(page.get_by_role("button", name="Older")).to_be_disabled()
    seen = set(ids(page))
    # Newer goes one page back; the browser's back button too.
    page.get_by_role("button", name="Newer").click()
    expect(page.locator("#page-number")).to_have_text("page 2")
    expect(rows).to_have_count(50)
    seen |= set(ids(page))
    page.go_back()
    expect(page.locator("#page-number")).to_have_text("page 3")
    expect(rows.last).to_have_attribute("data-run-id", "ord-000")
    page.get_by_role("button", name="First page").click()
    expect(page.locator("#page-number")).to_have_text("page 1")
    seen |= set(ids(page))
    assert len(seen) == RUNS  # every run on one page or another, none twice
    assert errors == []  # no script error, no refused request
    page.context.close()


def test_finding_a_failed_run_by_id_prefix_and_by_metadata(
    browser: Browser, served: Served
) -> None:
    page = open_runs(browser, served)
    expect(page.locator("#runs-body tr")).to_have_count(50)
    page.get_by_label("Run id starts with").fill("bad-05")
    page.get_by_label("Run id starts with").press("Enter")
    expect(page.locator("#runs-body tr")).to_have_count(1)
    row = page.locator('#runs-body tr[data-run-id="bad-058"]')
    expect(row.locator(".status")).to_have_text("failed")
    assert "idPrefix=bad-05" in page.url
    # The counts are those of the search.
    expect(page.locator("#counts")).to_have_text(re.compile(r"all 1\s*failed 1"))

    # The address is the search: opened elsewhere, it shows the same.
    shared = open_runs(browser, served, "?" + page.url.split("?", 1)[1])
    expect(shared.locator("#runs-body tr")).to_have_count(1)
    expect(shared.get_by_label("Run id starts with")).to_have_value("bad-05")
    shared.context.close()

    page.get_by_role("button", name="Clear").click()
    expect(page.locator("#runs-body tr")).to_have_count(50)
    page.get_by_label("Metadata").fill("customer=zeta")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#runs-body tr")).to_have_count(len(FAILED))
    assert sorted(ids(page)) == sorted(FAILED)
    # A metadata filter and a status together; the status chosen by its count.
    page.get_by_label("Metadata").fill("customer=acme")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#runs-body tr")).to_have_count(50)
    expect(page.locator("#counts")).not_to_contain_text("failed")
    page.get_by_role("button", name="Clear").click()
    page.get_by_role("button", name="failed: 3 runs").click()
    expect(page.locator("#runs-body tr")).to_have_count(len(FAILED))
    expect(page.get_by_label("Status", exact=True)).to_have_value("failed")
    page.go_back()
    expect(page.locator("#runs-body tr")).to_have_count(50)
    expect(page.get_by_label("Status", exact=True)).to_have_value("")
    page.context.close()


def test_the_counts_match_the_api_and_the_time_range_narrows(
    browser: Browser, served: Served
) -> None:
    with served.client() as api:
        counted = api.get("/api/runs/counts").json()
    assert counted == {"counts": {"completed": RUNS - len(FAILED), "failed": 3}, "total": RUNS}
    page = open_runs(browser, served)
    counts = page.locator("#counts")
    expect(counts.get_by_role("button", name=f"all: {RUNS} runs")).to_be_visible()
    expect(counts.get_by_role("button", name=f"completed: {RUNS - 3} runs")).to_be_visible()
    expect(counts.get_by_role("button", name="failed: 3 runs")).to_be_visible()

    page.get_by_label("Started from").fill("2100-01-01T00:00:00")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#runs-empty")).to_be_visible()
    expect(counts).to_have_text("all 0")
    assert "createdFrom=2099-12-31T18%3A30%3A00.000Z" in page.url  # 00:00 in Kolkata
    page.get_by_label("Started from").fill("")
    page.get_by_label("Started before").fill("2000-01-01T00:00:00")
    page.get_by_role("button", name="Search").click()
    expect(counts).to_have_text("all 0")
    page.get_by_label("Started before").fill("2100-01-01T00:00:00")
    page.get_by_role("button", name="Search").click()
    expect(counts.get_by_role("button", name=f"all: {RUNS} runs")).to_be_visible()
    page.context.close()


def test_times_have_their_date_in_the_viewers_zone_and_utc_on_hover(
    browser: Browser, served: Served
) -> None:
    with served.client() as api:
        created = api.get("/api/runs/ord-124").json()["run"]["createdAt"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", created), created
    page = open_runs(browser, served)
    cell = page.locator('#runs-body tr[data-run-id="ord-124"] time')
    expect(cell).to_have_attribute("title", f"{created} (UTC)")
    expect(cell).to_have_attribute("datetime", created)
    text = cell.text_content() or ""
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+05:30", text), text
    # The run page's timeline and start time: the same helper.
    page.goto(f"{served.url}runs/ord-124")
    started = page.locator("#started time")
    expect(started).to_have_attribute("title", f"{created} (UTC)")
    first = page.locator("#timeline-body tr").first.locator("time")
    expect(first).to_have_text(re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+05:30$"))
    expect(first).to_have_attribute("title", re.compile(r"Z \(UTC\)$"))
    page.context.close()
