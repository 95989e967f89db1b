"""The console's actions in a real browser: Playwright driving Debian's Chromium
against a real ``flowcore serve`` (a LocalHost on a SQLite file) serving
``console_flows/`` with ``console_tools.py``. Each action is clicked as a person
would, confirmed (or not) in its dialog, and checked through the API."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from flowcore_ops import ResumeInput

from .browser import NEEDS_CHROMIUM, WAIT_MS
from .serving import Served, start_serve

HERE: Final = Path(__file__).parent
FLOWS: Final = HERE / "console_flows"
TOOLS: Final = HERE / "console_tools.py"
MENDED: Final = HERE / "console_mended_tools.py"
TOKENS: Final = {
    "admin": "console-admin-token-01234",
    "alice": "console-alice-token-01234",
    "reader": "console-reader-token-0123",  # alice's runs, read only
}
TOKEN_FILE: Final = f"""
tokens:
  - {{token: {TOKENS["admin"]}, principal: ops, access: admin}}
  - {{token: {TOKENS["alice"]}, principal: alice, access: write}}
  - {{token: {TOKENS["reader"]}, principal: alice, access: read}}
"""

pytestmark = NEEDS_CHROMIUM


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("console")
    (tmp / "tokens.yaml").write_text(TOKEN_FILE)
    # A copy, so that a test can drop a new version of a flow in.
    flows = shutil.copytree(FLOWS, tmp / "flows")
    server = start_serve(tmp, "--flows", flows, "--tools", TOOLS, "--tokens", tmp / "tokens.yaml")
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
    import time

    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        view: dict[str, Any] = client.get(f"/api/runs/{run_id}").json()
        if check(view) or time.monotonic() > deadline:
            return view
        time.sleep(0.05)


def start(client: httpx.Client, flow: str, run_id: str, given: Any = None) -> None:
    reply = client.post("/api/runs", json={"flow": flow, "input": given, "runId": run_id})
    assert reply.status_code == 201, reply.text


def waiting(view: dict[str, Any]) -> bool:
    return bool(view["waits"].get("signals"))


def confirm(page: Page, verb: str) -> None:
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name=verb, exact=True).click()
    expect(dialog).to_have_count(0)


def test_a_cancel_happens_only_once_confirmed_in_the_dialog(
    context: BrowserContext, served: Served
) -> None:
    with served.client(TOKENS["alice"]) as api:
        start(api, "ops", "cancel-1")
        wait_for(api, "cancel-1", waiting)
        page = page_as(context, served, "alice", "/runs/cancel-1")
        page.get_by_label("Reason").fill("not today")
        # By keyboard: the button opens the dialog, which starts on "Go back".
        page.get_by_role("button", name="Cancel run").focus()
        page.keyboard.press("Enter")
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("settles as cancelled")
        expect(dialog.get_by_role("button", name="Go back")).to_be_focused()
        dialog.get_by_role("button", name="Go back").click()
        expect(dialog).to_have_count(0)
        # Dismissed: nothing was sent, the run still waits.
        page.get_by_role("button", name="Cancel run").click()
        page.keyboard.press("Escape")
        expect(page.get_by_role("dialog")).to_have_count(0)
        records = api.get("/api/runs/cancel-1/events").text
        assert "cancel-requested" not in records
        assert api.get("/api/runs/cancel-1").json()["run"]["status"] == "running"

        page.get_by_role("button", name="Cancel run").click()
        confirm(page, "Cancel run")
        expect(page.locator("#status")).to_have_text("cancelled")
        view = api.get("/api/runs/cancel-1").json()
        assert view["run"]["status"] == "cancelled"
        assert '"reason":"not today"' in api.get("/api/runs/cancel-1/events").text
        # Settled: cancel and signal are gone; fork stays.
        expect(page.locator("#act-cancel")).to_be_hidden()
        expect(page.locator("#act-signal")).to_be_hidden()
        expect(page.locator("#act-fork")).to_be_visible()
        expect(page.get_by_label("Cancel this run")).to_be_hidden()  # it has settled
        assert page.errors == []  # type: ignore[attr-defined]


def test_a_failed_run_is_resumed_and_completes(
    context: BrowserContext, served: Served, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    with served.client(TOKENS["alice"]) as api:
        start(api, "mend", "mend-1", {"marker": str(marker)})
        assert wait_for(api, "mend-1", lambda v: v["run"]["status"] != "running")["run"][
            "status"
        ] == ("failed")
        page = page_as(context, served, "alice", "/runs/mend-1")
        expect(page.locator("#status")).to_have_text("failed")
        resume = page.get_by_role("button", name="Resume run")
        expect(resume).to_be_visible()
        # alice writes but is no admin: no upgrade, no delete.
        expect(page.get_by_role("button", name="Delete run")).to_be_hidden()
        marker.write_text("fixed")
        resume.click()
        confirm(page, "Resume run")
        expect(page.locator("#status")).to_have_text("completed")
        assert api.get("/api/runs/mend-1").json()["output"] == {"mended": "fixed"}
        expect(resume).to_be_hidden()


def test_a_refused_resume_shows_the_problem_type_and_detail(
    context: BrowserContext, served: Served, tmp_path: Path
) -> None:
    with served.client(TOKENS["alice"]) as api:
        start(api, "mend", "mend-2", {"marker": str(tmp_path / "never")})
        wait_for(api, "mend-2", lambda v: v["run"]["status"] != "running")
        page = page_as(context, served, "alice", "/runs/mend-2")
        page.get_by_role("button", name="Resume run").click()
        # Meanwhile someone else resumed it, and it failed again: fine; but a
        # deleted run is refused, and the page says how.
        with served.client(TOKENS["admin"]) as admin:
            assert admin.delete("/api/runs/mend-2").status_code == 200
        confirm(page, "Resume run")
        alert = page.locator("#actions-error")
        expect(alert).to_be_visible()
        expect(alert).to_contain_text("unknown-run (404)")


def test_a_run_forked_from_a_step_links_to_its_fork(
    context: BrowserContext, served: Served
) -> None:
    with served.client(TOKENS["alice"]) as api:
        start(api, "ops", "fork-src")
        wait_for(api, "fork-src", waiting)
        page = page_as(context, served, "alice", "/runs/fork-src")
        picker = page.get_by_label("Fork from")
        expect(picker.locator('option[value="step:prepare"]')).to_have_count(1)
        expect(picker.locator('option[value="step:hold"]')).to_have_count(1)
        picker.select_option("step:hold")
        expect(page.get_by_label("Cancel this run")).not_to_be_checked()
        page.get_by_role("button", name="Fork run").click()
        confirm(page, "Fork run")
        link = page.locator("#actions-done a")
        expect(link).to_be_visible()
        fork_id = link.inner_text()
        assert fork_id != "fork-src"
        started = json.loads(api.get(f"/api/runs/{fork_id}/events").text.splitlines()[0])
        assert started["data"]["forkedFrom"]["runId"] == "fork-src"
        link.click()
        expect(page).to_have_url(f"{served.url}runs/{fork_id}")
        expect(page.locator("#status")).to_have_text("running")
        # The source is untouched.
        assert api.get("/api/runs/fork-src").json()["run"]["status"] == "running"


def test_a_scheduled_call_added_then_replayed(context: BrowserContext, served: Served) -> None:
    with served.client(TOKENS["alice"]) as api:
        start(api, "ops", "sched-1")
        wait_for(api, "sched-1", waiting)
        page = page_as(context, served, "alice", "/runs/sched-1")
        page.get_by_text("Schedule a call").click()
        expect(page.get_by_label("Tool")).to_have_value("tick")
        page.get_by_label("Input (JSON, empty for none)").fill('{"x": 1}')
        page.get_by_role("button", name="Schedule call").click()
        completed = page.locator('[data-group="completed"] tr[data-call]')
        expect(completed).to_have_count(1)
        call = completed.get_attribute("data-call")
        assert call is not None
        expect(completed).to_contain_text("tick")
        page.get_by_role("button", name=f"Replay {call}").click()
        confirm(page, "Replay call")
        # The replay is a second attempt, listed on the call's row once it ran.
        expect(completed).to_contain_text("(1 replayed)")
        expect(completed).to_have_attribute("data-status", "completed")
        (listed,) = api.get("/api/runs/sched-1/scheduled").json()["calls"]
        assert listed["replays"] == 1 and listed["status"] == "completed"
        records = api.get("/api/runs/sched-1/events").text
        assert records.count('"kind":"effect-succeeded"') == 3  # prepare, tick, its replay

        # A pending recurring call: its recurrence shown, then cancelled.
        page.get_by_label("In (seconds from now)").fill("3600")
        page.get_by_label("Every (seconds)").fill("60")
        page.get_by_label("At most (times)").fill("3")
        page.get_by_role("button", name="Schedule call").click()
        pending = page.locator('[data-group="pending"] tr[data-call]')
        expect(pending).to_contain_text("every 1 min 0 s, at most 3 time(s)")
        name = pending.get_attribute("data-call")
        page.get_by_role("button", name=f"Cancel {name}").click()
        confirm(page, "Cancel call")
        expect(page.locator('[data-group="cancelled"] tr[data-call]')).to_have_count(1)


def test_a_schedule_paused_then_triggered_starts_a_run(
    context: BrowserContext, served: Served
) -> None:
    with served.client(TOKENS["admin"]) as admin:
        added = admin.post("/api/schedules", json={"flow": "nightly"})
        assert added.status_code in (200, 201), added.text  # another test may have added it
        page = page_as(context, served, "admin", "/")
        page.get_by_role("navigation", name="pages").get_by_role("link", name="Schedules").click()
        row = page.locator('tr[data-schedule="nightly"]')
        expect(row).to_contain_text("active")
        expect(row.locator("time")).to_have_count(1)  # its next slot
        row.get_by_role("button", name="Pause nightly").click()
        expect(row).to_have_attribute("data-paused", "yes")
        expect(row).to_contain_text("(paused)")
        assert admin.get("/api/schedules/nightly").json()["paused"] is True

        before = admin.get("/api/runs", params={"flow": "nightly"}).json()["runs"]
        row.get_by_role("button", name="Trigger nightly").click()
        confirm(page, "Start a run")
        link = page.locator("#schedules-done a")
        expect(link).to_be_visible()
        after = admin.get("/api/runs", params={"flow": "nightly"}).json()["runs"]
        assert len(after) == len(before) + 1
        assert link.inner_text() in {r["runId"] for r in after}

        row.get_by_role("button", name="Resume nightly").click()
        expect(row).to_have_attribute("data-paused", "no")

        # Backfill: its own dialog, with the range; going back starts nothing.
        row.get_by_role("button", name="Backfill nightly").click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_role("button", name="Go back").click()
        expect(dialog).to_be_hidden()
        row.get_by_role("button", name="Backfill nightly").click()
        dialog.get_by_label("From").fill("2026-01-01T00:00:00")
        dialog.get_by_label("To").fill("2026-01-03T00:00:00")
        dialog.get_by_role("button", name="Start the runs").click()
        expect(page.locator("#schedules-done")).to_contain_text("Backfilled nightly")
        filled = admin.get("/api/runs", params={"flow": "nightly"}).json()["runs"]
        assert len(filled) == len(after) + 2  # the slots of Jan 1 and Jan 2


def test_a_read_only_principal_sees_no_actions_and_the_api_refuses_it(
    context: BrowserContext, served: Served
) -> None:
    with served.client(TOKENS["alice"]) as alice, served.client(TOKENS["admin"]) as admin:
        # The schedules page lists one (whichever test of this server runs first adds it).
        added = admin.post("/api/schedules", json={"flow": "nightly"})
        assert added.status_code in (200, 201), added.text
        start(alice, "ops", "read-1")
        wait_for(alice, "read-1", waiting)
        added = alice.post("/api/runs/read-1/scheduled", json={"tool": "tick", "delayMs": 3600000})
        assert added.status_code == 201, added.text
        page = page_as(context, served, "reader", "/runs/read-1")
        # The scheduled call is listed, without its buttons; no action at all.
        expect(page.locator('[data-group="pending"] tr[data-call]')).to_have_count(1)
        expect(page.locator("#timeline-body tr").first).to_be_visible()
        expect(page.locator("#run-actions")).to_be_hidden()
        expect(page.locator("#scheduled-add")).to_be_hidden()
        # Only what reads: the timeline's row toggles, fold and copy buttons.
        expect(page.locator("main button.rec-toggle").first).to_be_visible()
        reading = ":not(.rec-toggle):not(.copy):not(.show-all)"
        expect(page.locator(f"main button{reading}")).to_have_count(0)
        status = page.evaluate(
            """async () => (await fetch('/api/runs/read-1/cancel', {method: 'POST',
                 headers: {'Content-Type': 'application/json'}, body: '{}'})).status"""
        )
        assert status == 403
        assert alice.get("/api/runs/read-1").json()["run"]["status"] == "running"

        page.goto(f"{served.url}schedules")
        expect(page.locator("#schedules-body tr").first).to_be_visible()
        expect(page.locator("main button")).to_have_count(0)
        status = page.evaluate(
            """async () => (await fetch('/api/schedules/nightly/pause', {method: 'POST',
                 headers: {'Content-Type': 'application/json'}, body: '{}'})).status"""
        )
        assert status == 403


def test_an_upgrade_shows_the_replay_verdict_first_and_an_admin_deletes_a_run(
    context: BrowserContext, served: Served
) -> None:
    with served.client(TOKENS["admin"]) as admin:
        start(admin, "ops", "up-1")
        wait_for(admin, "up-1", waiting)
        folder = Path(served.db).parent / "flows"
        spec = (folder / "ops.yaml").read_text()
        (folder / "ops-v2.yaml").write_text(spec.replace("flow: ops\n", "flow: ops\nversion: 2\n"))
        page = page_as(context, served, "admin", "/runs/up-1")
        target = page.get_by_label("Upgrade to")
        expect(target.locator("option")).to_have_text(["ops v2 (ops-v2.yaml)"])
        go = page.get_by_role("button", name="Upgrade run")
        expect(go).to_be_disabled()  # not before the check
        page.get_by_role("button", name="Check replay").click()
        verdict = page.locator("#upgrade-verdict")
        expect(verdict).to_contain_text("The log replays against v2")
        expect(verdict).to_contain_text("from v1 to v2")
        dry = {"flow": "ops", "dryRun": True}
        assert admin.post("/api/runs/up-1/upgrade", json=dry).json()["changed"] is True  # not moved
        expect(go).to_be_enabled()
        go.click()
        confirm(page, "Upgrade run")
        expect(page.locator("#actions-done")).to_have_text("Upgraded to v2.")
        assert admin.post("/api/runs/up-1/upgrade", json=dry).json()["changed"] is False  # on v2

        # A version the log does not replay against: the verdict is the refusal.
        diverging = spec.replace("flow: ops\n", "flow: ops\nversion: 3\n").replace("n: 1", "n: 2")
        (folder / "ops-v3.yaml").write_text(diverging)
        page.reload()
        expect(target.locator("option")).to_have_text(["ops v3 (ops-v3.yaml)"])
        page.get_by_role("button", name="Check replay").click()
        expect(page.locator("#actions-error")).to_contain_text("diverged (409)")
        expect(page.locator("#actions-error")).to_contain_text("first difference at record #1")
        expect(verdict).to_contain_text("does not replay")
        expect(go).to_be_disabled()

        page.get_by_role("button", name="Delete run").click()
        expect(page.get_by_role("dialog")).to_contain_text("It is running: it is cancelled first.")
        confirm(page, "Delete run")
        expect(page).to_have_url(served.url)
        assert admin.get("/api/runs/up-1").status_code == 404


@pytest.mark.skipif(
    "tools" not in ResumeInput.__struct_fields__,
    reason="resume takes no handler module on this server",
)
def test_a_failed_run_is_resumed_with_another_handler_module(
    context: BrowserContext, tmp_path: Path
) -> None:
    (tmp_path / "tokens.yaml").write_text(TOKEN_FILE)
    with (
        start_serve(
            tmp_path,
            *("--flows", FLOWS, "--tools", TOOLS, "--tools", MENDED),
            *("--tokens", tmp_path / "tokens.yaml"),
        ) as served,
        served.client(TOKENS["alice"]) as api,
    ):
        start(api, "mend", "mend-m", {"marker": str(tmp_path / "never")})
        wait_for(api, "mend-m", lambda v: v["run"]["status"] != "running")
        page = page_as(context, served, "alice", "/runs/mend-m")
        expect(page.locator("#status")).to_have_text("failed")
        choice = page.get_by_label("Handler module")
        expect(choice.locator("option")).to_have_count(3)  # the run's own, and both
        mended = next(
            text
            for text in choice.locator("option").all_inner_texts()
            if "console_mended_tools" in text
        )
        choice.select_option(label=mended)
        page.get_by_role("button", name="Resume run").click()
        expect(page.get_by_role("dialog")).to_contain_text("with the handlers of")
        confirm(page, "Resume run")
        expect(page.locator("#status")).to_have_text("completed")
        assert api.get("/api/runs/mend-m").json()["output"] == {"mended": "by the other module"}
