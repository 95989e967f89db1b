"""The run page shows everything, in a real browser (Playwright driving Debian's
Chromium) against a real ``flowcore serve`` on a SQLite file: each timeline row
opens to its payloads (a handler's traceback, an agent's prompt, output and
usage, a question's answer and who gave it, a signal's payload), large values
are folded and copyable, the diagram is coloured by outcome and readable, usage
is split by child run, and a child run and its parent link to each other."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from playwright.sync_api import Browser, BrowserContext, Locator, Page, expect

from .browser import NEEDS_CHROMIUM
from .run_page_tools import BOOM
from .serving import Served, start_serve

HERE: Final = Path(__file__).parent
FLOWS: Final = HERE / "run_page_flows"
TOOLS: Final = HERE / "run_page_tools.py"
FAILED_FILL: Final = "rgb(255, 201, 201)"  # diagram.js OUTCOMES.failed
DONE_FILL: Final = "rgb(211, 249, 216)"
WAITING_FILL: Final = "rgb(255, 232, 163)"
CANCELLED_FILL: Final = "rgb(255, 243, 191)"

pytestmark = NEEDS_CHROMIUM


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    made = browser.new_context(
        viewport={"width": 1280, "height": 900},
        permissions=["clipboard-read", "clipboard-write"],
    )
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server with run ``con`` settled failed: its question answered, a signal
    sent before its wait (buffered), an agent, a large output, a switch, a
    parallel, a child run, then a tool that raised."""
    folder = tmp_path_factory.mktemp("run-page")
    with start_serve(folder, "--flows", FLOWS, "--tools", TOOLS) as served:
        with served.client() as api:
            reply = api.post(
                "/api/runs", json={"flow": "console", "input": {"ref": "v1"}, "runId": "con"}
            )
            assert reply.status_code == 201, reply.text
            wait_for(api, lambda v: bool(v["waits"]["questions"]))
            reply = api.post(
                "/api/runs", json={"flow": "console", "input": {"ref": "v2"}, "runId": "con-2"}
            )
            assert reply.status_code == 201, reply.text
            sent = api.post("/api/runs/con/signals", json={"name": "go", "payload": {"by": "ops"}})
            assert sent.status_code == 202, sent.text
            answered = api.post("/api/runs/con/answers", json={"key": "con/ask#1", "answer": "go"})
            assert answered.status_code == 200, answered.text
            view = wait_for(api, lambda v: v["run"]["status"] != "running")
            assert view["run"]["status"] == "failed", view
        yield served


def wait_for(api: Any, done: Any, run_id: str = "con") -> dict[str, Any]:
    for _ in range(400):
        view: dict[str, Any] = api.get(f"/api/runs/{run_id}").json()
        if done(view):
            return view
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} did not get there")


def open_page(
    context: BrowserContext, served: Served, run_id: str = "con", status: str = "failed"
) -> Page:
    page = context.new_page()
    page.goto(f"{served.url}?token={served.token}")
    expect(page).to_have_url(served.url)
    page.goto(f"{served.url}runs/{run_id}")
    expect(page.locator("#status")).to_have_text(status)
    return page


def row(page: Page, type_: str, kind: str, key: str | None = None) -> Locator:
    rows = page.locator(f'#timeline-body tr[data-type="{type_}"]').filter(
        has=page.locator(f'td[data-kind="{kind}"]')
    )
    return rows.filter(has_text=key) if key else rows


def opened(found: Locator) -> Locator:
    toggle = found.locator("button.rec-toggle")
    expect(toggle).to_have_attribute("aria-expanded", "false")
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    panel = found.locator(".rec-payloads")
    expect(panel).to_be_visible()
    return panel


def test_the_failed_steps_row_shows_the_whole_error_and_the_handlers_traceback(
    context: BrowserContext, failed_run: Served
) -> None:
    page = open_page(context, failed_run)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    failed = row(page, "event.reported", "effect-failed")
    expect(failed).to_have_count(1)
    panel = opened(failed)
    expect(panel.locator('[data-part="error"] pre')).to_have_text(f"RuntimeError: {BOOM}")
    traceback = panel.locator('[data-part="traceback"] pre')
    expect(traceback).to_contain_text("Traceback (most recent call last)")
    expect(traceback).to_contain_text("raise RuntimeError(BOOM)")
    expect(traceback).to_contain_text(f"RuntimeError: {BOOM}")
    # The settled run's error in full, too.
    settled = opened(page.locator('#timeline-body tr[data-type="run.settled"]'))
    expect(settled.locator('[data-part="error"] pre')).to_have_text(f"RuntimeError: {BOOM}")
    assert errors == []


def test_an_agent_row_shows_its_prompt_output_and_usage_and_a_question_who_answered(
    context: BrowserContext, failed_run: Served
) -> None:
    page = open_page(context, failed_run)
    asked = opened(row(page, "effect.emitted", "run-agent", "draft#1"))
    expect(asked.locator('[data-part="Prompt"] pre')).to_have_text("Write a note about v1")
    expect(asked.locator('[data-part="agent"]')).to_have_text("Agent: writer")
    member = opened(row(page, "effect.emitted", "run-agent", "review/checker#1"))
    expect(member.locator('[data-part="agent"]')).to_have_text("Agent: writer (member checker)")
    expect(member.locator('[data-part="Instructions"] pre')).to_have_text("Check it")
    expect(member.locator('[data-part="Prompt"] pre')).to_have_text("Review v1")
    answer = opened(row(page, "event.reported", "effect-succeeded", "draft#1"))
    expect(answer.locator('[data-part="Output"] pre')).to_contain_text(
        '"note": "written for: Write a note about v1"'
    )
    expect(answer.locator('[data-part="usage"]')).to_have_text(
        "Usage: 1500 tokens (1200 in, 300 out) · cost 12 · 2 turns · 1 tool calls"
    )
    human = opened(row(page, "event.reported", "human-answered"))
    expect(human.locator('[data-part="Question"] pre')).to_have_text("Go on with v1?")
    expect(human.locator('[data-part="options"]')).to_have_text("Options: go / stop")
    expect(human.locator('[data-part="Answer"] pre')).to_have_text("go")
    expect(human.locator('[data-part="principal"]')).to_have_text("Answered by: operator")
    signal = opened(row(page, "event.reported", "signal-received"))
    expect(signal.locator('[data-part="Payload"] pre')).to_have_text('{\n  "by": "ops"\n}')


def test_a_large_output_is_folded_shown_in_full_on_demand_and_copied(
    context: BrowserContext, failed_run: Served
) -> None:
    page = open_page(context, failed_run)
    panel = opened(row(page, "event.reported", "effect-succeeded", "dump#1"))
    output = panel.locator('[data-part="Output"]')
    pre = output.locator("pre")
    expect(pre).to_have_attribute("data-folded", "yes")
    expect(pre).to_contain_text("line 000 of the dump")
    expect(pre).not_to_contain_text("line 119 of the dump")
    full = {"lines": [f"line {n:03d} of the dump" for n in range(120)]}
    output.get_by_role("button", name="Copy Output").click()
    expect(output.locator(".copied")).to_have_text("Copied.")
    assert json.loads(page.evaluate("navigator.clipboard.readText()")) == full
    show_all = output.get_by_role("button", name="Show all of Output")
    show_all.click()
    expect(show_all).to_have_attribute("aria-expanded", "true")
    expect(pre).to_contain_text("line 119 of the dump")
    assert json.loads(pre.inner_text()) == full


def test_the_keyboard_reaches_a_rows_toggle_and_opens_it(
    context: BrowserContext, failed_run: Served
) -> None:
    page = open_page(context, failed_run)
    first = page.locator('#timeline-body tr[data-index="0"] button.rec-toggle')
    first.focus()
    page.keyboard.press("Tab")
    toggle = page.locator('#timeline-body tr[data-index="1"] button.rec-toggle')
    expect(toggle).to_be_focused()
    expect(toggle).to_have_attribute("aria-expanded", "false")
    page.keyboard.press("Enter")
    expect(toggle).to_have_attribute("aria-expanded", "true")
    panel = page.locator('#timeline-body tr[data-index="1"] .rec-payloads')
    expect(panel.locator('[data-part="Question"] pre')).to_have_text("Go on with v1?")
    page.keyboard.press("Enter")
    expect(panel).to_be_hidden()


def node(page: Page, node_id: str) -> Locator:
    # Mermaid names a node's group <diagram>-flowchart-<id>-<n>.
    return page.locator(f'#diagram svg g.node[id*="-flowchart-{node_id}-"]')


def fill_of(found: Locator) -> str:
    fill: str = found.evaluate(
        "g => getComputedStyle(g.querySelector('rect, polygon, path, circle')).fill"
    )
    return fill


def test_the_diagram_is_coloured_by_outcome_and_readable_at_its_default_size(
    context: BrowserContext, failed_run: Served
) -> None:
    page = open_page(context, failed_run)
    expect(page.locator("#diagram svg")).to_be_visible()
    boom = node(page, "s_boom")
    expect(boom).to_have_class(has_class("failed"))
    assert fill_of(boom) == FAILED_FILL
    # A switch, a parallel (and its join) and a wait met by a buffered signal.
    for done in ("s_route", "s_fan", "j_fan", "s_hold", "s_kid", "s_draft", "s_review"):
        expect(node(page, done)).to_have_class(has_class("done"))
        assert fill_of(node(page, done)) == DONE_FILL, done
    expect(node(page, "s_nope")).to_have_class(has_class("skipped"))
    expect(node(page, "flow_end")).to_have_class(has_class("failed"))
    legend = page.get_by_role("list", name="diagram legend")
    expect(legend.locator("li")).to_have_text(
        ["running", "waiting", "done", "failed", "cancelled", "skipped"]
    )
    # Not shrunk past three quarters of Mermaid's size: the box scrolls instead.
    scale = page.locator("#diagram svg").evaluate(
        "s => s.getBoundingClientRect().width / s.viewBox.baseVal.width"
    )
    assert scale >= 0.74, scale
    box = page.locator("#diagram")
    assert box.evaluate("b => b.scrollHeight > b.clientHeight")
    # The diagram's zoom is a keyboard control too.
    box.focus()
    page.keyboard.press("Enter")
    expect(box).to_have_attribute("aria-pressed", "true")


def has_class(name: str) -> re.Pattern[str]:
    return re.compile(rf"(^|\s)(?:{name})(\s|$)")


def test_usage_by_child_run_and_the_child_and_parent_linked(
    context: BrowserContext, failed_run: Served
) -> None:
    page = open_page(context, failed_run)
    table = page.locator("#usage-table")
    child = table.locator('tr[data-kind="child"][data-name="con/kid#1"]')
    expect(child.locator("td")).to_have_text(["1500", "1200", "300", "0", "12", "2", "1", "1"])
    for member in ("drafter", "checker"):
        expect(table.locator(f'tr[data-kind="member"][data-name="{member}"] td')).to_have_text(
            ["1500", "1200", "300", "0", "12", "2", "1", "0"]
        )
    this_run = table.locator('tr[data-kind="run"]')
    expect(this_run.locator("td").first).to_have_text("6000")
    # The child run's row in the timeline links to it, and it back to its parent.
    started = opened(row(page, "effect.emitted", "run-subflow"))
    started.get_by_role("link", name="con/kid#1").click()
    expect(page).to_have_url(f"{failed_run.url}runs/con%2Fkid%231")
    expect(page.locator("#status")).to_have_text("completed")
    parent = page.locator("#parent a")
    expect(parent).to_have_text("con")
    parent.click()
    expect(page).to_have_url(f"{failed_run.url}runs/con")
    page.locator("#usage-table").get_by_role("link", name="con/kid#1").click()
    expect(page).to_have_url(f"{failed_run.url}runs/con%2Fkid%231")


def test_a_waiting_step_then_a_cancelled_one_and_the_steps_never_reached(
    context: BrowserContext, failed_run: Served
) -> None:
    page = open_page(context, failed_run, "con-2", "running")
    ask = node(page, "s_ask")
    expect(ask).to_have_class(has_class("waiting"))
    expect(ask).to_have_class(has_class("current"))
    assert fill_of(ask) == WAITING_FILL
    expect(node(page, "s_draft")).not_to_have_class(has_class("done|skipped|failed"))
    with failed_run.client() as api:
        reply = api.post("/api/runs/con-2/cancel", json={"reason": "not now"})
        assert reply.status_code == 202, reply.text
    expect(page.locator("#status")).to_have_text("cancelled")
    expect(ask).to_have_class(has_class("cancelled"))
    assert fill_of(ask) == CANCELLED_FILL
    for never in ("s_draft", "s_route", "s_fan", "s_boom"):
        expect(node(page, never)).to_have_class(has_class("skipped"))
    expect(node(page, "flow_end")).to_have_class(has_class("cancelled"))
