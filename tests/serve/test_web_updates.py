"""The run page's updates and queries in a real browser: Playwright driving
Debian's Chromium against a real ``flowcore serve`` (a LocalHost on a SQLite
file) serving the worked approval example (``examples/approval``: an expense
whose ``approve`` update asks a person and replies with the decision, and whose
``decision`` query answers it). An update is sent from its form (by keyboard
too), is seen running, asks its question, and its reply is shown; a refused
input shows the refusal's code and reason and logs nothing; a query shows its
answer; a principal that may only read sees no update form but may query."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Locator, Page, expect

from .browser import NEEDS_CHROMIUM, WAIT_MS
from .serving import Served, start_serve

FLOWS: Final = Path(__file__).resolve().parents[2] / "examples" / "approval"
TOKENS: Final = {
    "alice": "updates-alice-token-01234",
    "reader": "updates-reader-token-0123",  # alice's runs, read only
}
TOKEN_FILE: Final = f"""
tokens:
  - {{token: {TOKENS["alice"]}, principal: alice, access: write}}
  - {{token: {TOKENS["reader"]}, principal: alice, access: read}}
"""

pytestmark = NEEDS_CHROMIUM


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("updates")
    (tmp / "tokens.yaml").write_text(TOKEN_FILE)
    server = start_serve(tmp, "--flows", FLOWS, "--tokens", tmp / "tokens.yaml")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    made = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield made
    finally:
        made.close()


def page_as(context: BrowserContext, served: Served, who: str, path: str) -> Page:
    """A page logged in with ``who``'s token, open at ``path``, that records script errors."""
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{served.url}{path.lstrip('/')}?token={TOKENS[who]}")
    expect(page).to_have_url(f"{served.url}{path.lstrip('/')}")
    page.set_default_timeout(WAIT_MS)
    page.errors = errors  # type: ignore[attr-defined]
    return page


def wait_for(
    client: httpx.Client, run_id: str, check: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The run's view once ``check`` holds (polling the API, as the page does)."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        view: dict[str, Any] = client.get(f"/api/runs/{run_id}").json()
        if check(view) or time.monotonic() > deadline:
            return view
        time.sleep(0.05)


def start_expense(client: httpx.Client, run_id: str) -> None:
    reply = client.post(
        "/api/runs",
        json={"flow": "expense", "input": {"amount": 120, "requester": "bob"}, "runId": run_id},
    )
    assert reply.status_code == 201, reply.text
    wait_for(client, run_id, lambda v: bool(v["waits"].get("signals")))


def logged_updates(client: httpx.Client, run_id: str) -> int:
    return client.get(f"/api/runs/{run_id}/events").text.count('"update-requested"')


def answer(page: Page, choice: str) -> None:
    """Answers the run's one open question on the page with ``choice``."""
    question = page.locator("#questions .question")
    expect(question).to_have_count(1)
    expect(question).to_contain_text("Approve 120 for bob?")
    question.get_by_role("button", name=choice, exact=True).click()


def listed(page: Page, update_id: str) -> Locator:
    return page.locator(f'#updates-table tr[data-update-id="{update_id}"]')


def test_an_update_from_its_form_runs_asks_and_replies(
    context: BrowserContext, served: Served
) -> None:
    with served.client(TOKENS["alice"]) as api:
        start_expense(api, "exp-1")
        page = page_as(context, served, "alice", "/runs/exp-1")
        form = page.get_by_role("form", name="approve")
        expect(form).to_contain_text("approve or reject the expense")
        # Its input schema, folded; opened by keyboard.
        schema = form.locator("details.schema")
        expect(schema.locator("pre")).to_be_hidden()
        form.get_by_text("Input schema").focus()
        page.keyboard.press("Enter")
        expect(schema.locator("pre")).to_contain_text('"required"')
        # Pre-filled with the flow's first example.
        expect(form.get_by_label("Input (JSON, empty for null)")).to_have_value(
            '{\n  "by": "alice"\n}'
        )

        # Accepted without waiting: running, with its id and a way to fetch it later.
        form.get_by_label("Update id").fill("u-1")
        form.get_by_label("Wait for the reply").uncheck()
        form.get_by_role("button", name="Send approve").click()
        outcome = form.get_by_role("status")
        expect(outcome).to_contain_text("u-1")
        expect(outcome).to_contain_text("running")
        expect(listed(page, "u-1")).to_contain_text("running")
        # The handler asks its question; answered on the page, the update replies.
        answer(page, "yes")
        expect(listed(page, "u-1")).to_contain_text("completed")
        expect(listed(page, "u-1")).to_contain_text('"decision": "yes"')
        page.get_by_role("button", name="Fetch the result").click()
        expect(outcome).to_contain_text("completed")
        expect(outcome.locator("pre.update-reply")).to_contain_text('"decision": "yes"')
        expect(outcome.locator("pre.update-reply")).to_contain_text('"by": "alice"')
        # The decision ends the run: the form stays with its reply, and sends no more.
        expect(page.locator("#status")).to_have_text("completed")
        expect(page.get_by_text("The run has settled: it accepts no new update.")).to_be_visible()
        expect(form.get_by_role("button", name="Send approve")).to_be_disabled()
        expect(outcome.locator("pre.update-reply")).to_contain_text('"decision": "yes"')
        # The timeline names the request: which update, its id, its input, who sent it.
        requested = page.locator('#timeline-body tr[data-type="event.reported"]').filter(
            has=page.locator('td[data-kind="update-requested"]')
        )
        expect(requested).to_have_count(1)
        expect(requested).to_contain_text("approve · id u-1")
        requested.locator("button.rec-toggle").click()
        details = requested.locator(".rec-payloads")
        expect(details.locator('[data-part="update-id"]')).to_have_text("Update id: u-1")
        expect(details.locator('[data-part="Input"] pre')).to_contain_text('"by": "alice"')
        expect(details.locator('[data-part="principal"]')).to_have_text("Requested by: alice")
        assert page.errors == []  # type: ignore[attr-defined]

        # The same id again: the first reply, and nothing runs again.
        again = api.post(
            "/api/runs/exp-1/updates",
            json={"name": "approve", "input": {"by": "alice"}, "updateId": "u-1"},
        )
        assert again.status_code == 200, again.text
        assert again.json()["output"] == {"decision": "yes", "by": "alice"}
        assert logged_updates(api, "exp-1") == 1


def test_an_update_sent_by_keyboard_waits_for_its_reply(
    context: BrowserContext, served: Served
) -> None:
    with served.client(TOKENS["alice"]) as api:
        start_expense(api, "exp-2")
        page = page_as(context, served, "alice", "/runs/exp-2")
        form = page.get_by_role("form", name="approve")
        expect(form.get_by_label("Wait for the reply")).to_be_checked()
        # No id typed: the page makes one, and names the update while it waits.
        form.get_by_role("button", name="Send approve").focus()
        page.keyboard.press("Enter")
        outcome = form.get_by_role("status")
        expect(outcome).to_contain_text("waiting for its reply")
        made = outcome.locator("code").inner_text()
        assert len(made) == 32, made
        expect(listed(page, made)).to_contain_text("running")
        answer(page, "no")
        expect(outcome.locator("pre.update-reply")).to_contain_text('"decision": "no"')
        expect(outcome).to_contain_text(made)
        expect(listed(page, made)).to_contain_text("completed")
        assert page.errors == []  # type: ignore[attr-defined]


def test_a_refused_update_shows_why_and_logs_nothing(
    context: BrowserContext, served: Served
) -> None:
    with served.client(TOKENS["alice"]) as api:
        start_expense(api, "exp-3")
        page = page_as(context, served, "alice", "/runs/exp-3")
        form = page.get_by_role("form", name="approve")
        field = form.get_by_label("Input (JSON, empty for null)")
        refusal = form.get_by_role("alert")
        send = form.get_by_role("button", name="Send approve")

        field.fill("{}")  # `by` is required
        send.click()
        expect(refusal).to_contain_text("update-refused (422, bad-input)")
        field.fill('{"by": "bob"}')  # the requester may not approve their own expense
        send.click()
        expect(refusal).to_contain_text("update-refused (422, validator)")
        field.fill("{by: bob")  # not JSON: refused by the page, nothing sent
        send.click()
        expect(refusal).to_contain_text("invalid-input: the input is not JSON")
        expect(form.get_by_role("status")).to_be_empty()
        assert logged_updates(api, "exp-3") == 0
        assert api.get("/api/runs/exp-3/updates").json() in ([], {"updates": []})
        assert page.errors == []  # type: ignore[attr-defined]


def test_a_query_answers_and_a_reader_may_query_but_not_update(
    context: BrowserContext, served: Served
) -> None:
    with served.client(TOKENS["alice"]) as api:
        start_expense(api, "exp-4")
        reply = api.post(
            "/api/runs/exp-4/updates",
            json={"name": "approve", "input": {"by": "carol"}, "updateId": "u-9", "wait": False},
        )
        assert reply.status_code in (200, 202), reply.text
        view = wait_for(api, "exp-4", lambda v: bool(v["waits"].get("questions")))
        key = view["waits"]["questions"][0]["key"]
        assert api.post("/api/runs/exp-4/answers", json={"key": key, "answer": "yes"}).is_success
        wait_for(api, "exp-4", lambda v: v["run"]["status"] == "completed")

    page = page_as(context, served, "reader", "/runs/exp-4")
    expect(listed(page, "u-9")).to_contain_text("completed")
    expect(listed(page, "u-9")).to_contain_text('"by": "carol"')
    # No update form for a reader: the server leaves it out of the page.
    expect(page.locator("#update-forms")).to_have_count(0)
    expect(page.get_by_role("form", name="approve")).to_have_count(0)
    expect(page.get_by_role("button", name="Send approve")).to_have_count(0)

    query = page.get_by_role("form", name="decision")
    expect(query).to_contain_text("What was decided")
    expect(query.get_by_label("Arguments (JSON, empty for none)")).to_be_visible()
    query.get_by_role("button", name="Run decision").click()
    shown = query.get_by_label("answer of decision")
    expect(shown).to_contain_text('"decision": "yes"')
    expect(shown).to_contain_text('"by": "carol"')
    expect(shown).to_contain_text('"status": "completed"')  # a settled run answers too
    assert page.errors == []  # type: ignore[attr-defined]

    with served.client(TOKENS["reader"]) as reader:
        sent = reader.post(
            "/api/runs/exp-4/updates", json={"name": "approve", "input": {"by": "dan"}}
        )
        assert sent.status_code == 403, sent.text
