"""The operator's journey, as a person would make it: Playwright driving
Debian's Chromium against a real ``flowcore serve`` subprocess on a real SQLite
file with two handler modules.

A failed run is found by search on the runs page (by keyboard: id prefix and
metadata typed, Enter, Tab to the run, Enter), opened, its failed row opened
by keyboard and the handler's traceback read; it is resumed with the other
handler module, chosen in the resume form and confirmed in the dialog, and
completes. Then a run is forked from a step, the fork answered otherwise, and
the fork and its source compared on the compare page, reached from the fork's
"Compare with its source" link: the first differing record is marked, focused,
and what differs in it shown."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from .browser import NEEDS_CHROMIUM, WAIT_MS
from .serving import Served, start_serve

CLAIMS = """
flow: claims
metadata: {customer: string}
tools: {assess: {class: idempotent}}
steps:
  - {id: assess, call_tool: {tool: assess, input: "${input}"}, retry: {max_attempts: 1}}
  - id: approve
    ask_human: {question: "Pay the claim?", options: ["pay", "refuse"]}
output: "${steps.approve.answer}"
"""
# Module a: its assessor is offline for claims it cannot read.
TOOLS_A = """
def assess(call):
    if call.input == "smudged":
        raise ValueError("assessor offline: claim unreadable")
    return {"assessed": call.input, "by": "a"}


TOOLS = {"assess": assess}
"""
TOOLS_B = """
def assess(call):
    return {"assessed": call.input, "by": "b"}


TOOLS = {"assess": assess}
"""

pytestmark = NEEDS_CHROMIUM


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, str]]:
    tmp_path = tmp_path_factory.mktemp("journey")
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "claims.yaml").write_text(CLAIMS)
    a, b = tmp_path / "tools_a.py", tmp_path / "tools_b.py"
    a.write_text(TOOLS_A)
    b.write_text(TOOLS_B)
    with start_serve(tmp_path, "--flows", flows, "--tools", a, "--tools", b) as s:
        yield s, str(b.resolve())


def view_when(api: httpx.Client, run_id: str, check: Any) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        view: dict[str, Any] = api.get(f"/api/runs/{run_id}").json()
        if check(view):
            return view
        assert time.monotonic() < deadline, view
        time.sleep(0.05)


def start(api: httpx.Client, run_id: str, claim: str, customer: str) -> None:
    reply = api.post(
        "/api/runs",
        json={
            "flow": "claims",
            "input": claim,
            "runId": run_id,
            "metadata": {"customer": customer},
        },
    )
    assert reply.status_code == 201, reply.text


def asks(view: dict[str, Any]) -> bool:
    return bool(view["waits"].get("questions"))


def tab_to(page: Page, target: Locator, most: int = 200) -> None:
    """Press Tab until ``target`` has the focus, as a keyboard user reaches it."""
    for _ in range(most):
        if target.evaluate("node => node === document.activeElement"):
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"Tab never reached {target}")


def confirm(page: Page, verb: str) -> None:
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name=verb, exact=True).click()
    expect(dialog).to_have_count(0)


def test_an_operator_finds_reads_resumes_forks_and_compares(
    browser: Browser, served: tuple[Served, str]
) -> None:
    server, module_b = served
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_default_timeout(WAIT_MS)
    with server.client() as api:
        # Runs of other customers and of other ids, and the one that fails.
        start(api, "claim-7-ok", "clear", "acme")
        start(api, "claim-8-ok", "clear", "globex")
        start(api, "claim-8-bad", "smudged", "acme")
        view_when(api, "claim-8-bad", lambda v: v["run"]["status"] == "failed")
        for run_id in ("claim-7-ok", "claim-8-ok"):
            view_when(api, run_id, asks)

        # --- found by search, by keyboard ------------------------------------------
        page.goto(f"{server.url}?token={server.token}")
        expect(page).to_have_url(server.url)
        expect(page.locator("#runs-body tr")).to_have_count(3)
        search_id = page.get_by_label("Run id starts with")
        search_id.focus()
        page.keyboard.type("claim-8")
        tab_to(page, page.get_by_label("Metadata"))
        page.keyboard.type("customer=acme")
        page.keyboard.press("Enter")
        rows = page.locator("#runs-body tr")
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text("failed")
        link = page.get_by_role("link", name="claim-8-bad", exact=True)
        tab_to(page, link)
        page.keyboard.press("Enter")
        expect(page).to_have_url(f"{server.url}runs/claim-8-bad")
        expect(page.locator("#status")).to_have_text("failed")

        # --- the failed row opened by keyboard: the handler's traceback -------------
        failed = page.locator('tr.rec:has(td[data-kind="effect-failed"]) button.rec-toggle')
        expect(failed).to_have_count(1)
        tab_to(page, failed)
        page.keyboard.press("Enter")
        expect(failed).to_have_attribute("aria-expanded", "true")
        panel = page.locator('tr.rec:has(td[data-kind="effect-failed"]) .rec-payloads')
        error = panel.locator('[data-part="error"]')
        expect(error).to_contain_text("ValueError: assessor offline: claim unreadable")
        traceback = panel.locator('[data-part="traceback"]')
        expect(traceback).to_contain_text("Traceback (most recent call last)")
        expect(traceback).to_contain_text('raise ValueError("assessor offline: claim unreadable")')

        # --- resumed with the other module, confirmed; it completes ------------------
        modules = page.get_by_label("Handler module")
        expect(modules).to_be_visible()
        modules.select_option(module_b)
        page.get_by_role("button", name="Resume run").click()
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text(module_b)
        confirm(page, "Resume run")
        pay = page.locator('#questions button[data-answer="pay"]')
        expect(pay).to_be_visible()
        pay.click()
        expect(page.locator("#status")).to_have_text("completed")
        done = api.get("/api/runs/claim-8-bad").json()
        assert done["output"] == "pay"
        assert '"by":"b"' in api.get("/api/runs/claim-8-bad/events").text

        # --- a run forked from a step, answered otherwise ----------------------------
        page.goto(f"{server.url}runs/claim-7-ok")
        page.locator('#questions button[data-answer="pay"]').click()
        expect(page.locator("#status")).to_have_text("completed")
        page.get_by_label("Fork from").select_option("step:approve")
        page.get_by_role("button", name="Fork run").click()
        confirm(page, "Fork run")
        fork_link = page.locator("#actions-done a")
        expect(fork_link).to_be_visible()
        fork_id = fork_link.inner_text()
        fork_link.click()
        expect(page).to_have_url(f"{server.url}runs/{fork_id}")
        refuse = page.locator('#questions button[data-answer="refuse"]')
        expect(refuse).to_be_visible()
        refuse.click()
        expect(page.locator("#status")).to_have_text("completed")

        # --- the fork and its source compared -----------------------------------------
        source_link = page.get_by_role("link", name="Compare with its source, claim-7-ok")
        source_link.click()
        expect(page).to_have_url(f"{server.url}compare?a={fork_id}&b=claim-7-ok")
        expect(page.locator("body")).to_have_attribute("data-compared", "yes")
        found = api.get("/api/compare", params={"a": fork_id, "b": "claim-7-ok"}).json()
        at = found["firstDifference"]
        assert found["fields"] == ["answer"], found
        verdict = page.locator("#compare-verdict")
        expect(verdict).to_contain_text(f"The same up to index {at}")
        expect(verdict).to_contain_text("(answer)")
        marked = page.locator("tr.first-difference")
        expect(marked).to_have_count(1)
        expect(marked).to_have_attribute("data-index", str(at))
        expect(marked).to_be_focused()
        expect(marked).to_be_in_viewport()
        expect(marked.locator('td[data-side="a"]')).to_contain_text("human-answered")
        expect(marked.locator('td[data-side="a"]')).to_contain_text('answer "refuse"')
        expect(marked.locator('td[data-side="b"]')).to_contain_text('answer "pay"')
        # The rows before are the same; both timelines are whole, side by side.
        expect(page.locator("tr.cmp.same")).to_have_count(at)
        longest = max(found["aCount"], found["bCount"])
        expect(page.locator("#compare-body tr")).to_have_count(longest)
        what = page.locator('#compare-diff .diff-field[data-field="answer"]')
        expect(what.locator('[data-part="a"] pre')).to_have_text("refuse")
        expect(what.locator('[data-part="b"] pre')).to_have_text("pay")
        # A row opens by keyboard to its payloads, as on the run page.
        toggle = marked.locator('td[data-side="b"] button.rec-toggle')
        toggle.focus()
        page.keyboard.press("Enter")
        expect(toggle).to_have_attribute("aria-expanded", "true")
        expect(marked.locator('td[data-side="b"] [data-part="principal"]')).to_be_visible()
    assert errors == []
    context.close()


def test_the_compare_page_asks_for_b_and_says_when_a_run_is_unknown(
    browser: Browser, served: tuple[Served, str]
) -> None:
    server, _b = served
    with server.client() as api:
        start(api, "cmp-1", "clear", "initech")
        start(api, "cmp-2", "clear", "initech")
        for run_id in ("cmp-1", "cmp-2"):
            view_when(api, run_id, asks)
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server.url}runs/cmp-1?token={server.token}")
    # A run that is no fork: "Compare with…" asks for the other run, offering
    # the runs of the same flow.
    page.get_by_role("link", name="Compare with…").click()
    expect(page).to_have_url(f"{server.url}compare?a=cmp-1")
    b = page.get_by_label("Run B")
    expect(b).to_be_focused()
    expect(page.locator('#compare-runs option[value="cmp-2"]')).to_have_count(1)
    expect(page.locator('#compare-runs option[value="cmp-1"]')).to_have_count(0)
    page.keyboard.type("cmp-2")
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{server.url}compare?a=cmp-1&b=cmp-2")
    expect(page.locator("#compare-verdict")).to_contain_text("the same, record by record")
    expect(page.locator("tr.first-difference")).to_have_count(0)
    expect(page.locator("#compare-diff")).to_be_hidden()
    # An unknown run: the API's refusal, said on the page.
    page.goto(f"{server.url}compare?a=cmp-1&b=nope")
    expect(page.locator("#notice")).to_have_text("no run 'nope'")
    expect(page.locator("#compare-timelines")).to_be_hidden()
    assert errors == []
    context.close()
