"""The console against a Temporal namespace: Playwright driving Debian's Chromium
against a real ``flowcore serve --temporal`` subprocess, the real dev server and
a worker in this process (so the browser is driven with Playwright's async API,
in the worker's loop). One server, a few pages: the runs page lists and searches
by id prefix and says that the counts are refused; a run's page shows its
timeline rows with their payloads and the diagram coloured; a question answered,
a scheduled call added and cancelled, a signal sent and a run cancelled through
the forms; a resume and a delete, which Temporal refuses, show the typed
refusal. No page
raises a script error, and the only errors the browser logs are the refused
requests' own (501) that the page then shows."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Final

import httpx
from playwright.async_api import ConsoleMessage, Page, Response, async_playwright, expect

from ..serve.browser import CHROMIUM, CHROMIUM_ARGS, NEEDS_CHROMIUM
from ..serve.serving import start_serve
from .support import running_host, unique

WAIT_MS: Final = 30_000
TOKEN: Final = "console-ops-token-0123456789"
TOKENS: Final = f"""
tokens:
  - {{token: {TOKEN}, principal: ops, access: admin}}
"""
FLOW: Final = """
flow: {flow}
tools:
  echo: {{class: idempotent, schedulable: true}}
steps:
  - id: prep
    call_tool: {{tool: echo, input: {{value: "prepared-{flow}"}}}}
  - id: decide
    ask_human: {{question: "Ship it?", options: ["yes", "no"]}}
  - id: hold
    await_signal: {{signal: done}}
output: "${{steps.hold.output}}"
"""
FAILING: Final = """
flow: {flow}_bad
tools:
  fail: {{class: idempotent}}
steps:
  - id: boom
    call_tool: {{tool: fail, input: {{type: declined}}}}
    retry: {{max_attempts: 1}}
"""
# What Chromium logs for a response it was refused: the page shows the refusal itself.
REFUSED_LOAD: Final = "the server responded with a status of 501"

pytestmark = NEEDS_CHROMIUM


async def until(api: httpx.AsyncClient, run_id: str, check: Any, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        reply = await api.get(f"/api/runs/{run_id}")
        if reply.status_code == 200 and check(reply.json()):
            found: dict[str, Any] = reply.json()
            return found
        assert time.monotonic() < deadline, f"{run_id}: {what}: {reply.text}"
        await asyncio.sleep(0.1)


async def confirm(page: Page, verb: str) -> None:
    dialog = page.get_by_role("dialog")
    await expect(dialog).to_be_visible()
    await dialog.get_by_role("button", name=verb, exact=True).click()
    await expect(dialog).to_have_count(0)


def test_the_console_drives_a_temporal_namespace(temporal_address: str, tmp_path: Path) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    flow = unique("console").replace("-", "_")
    (flows / "ship.yaml").write_text(FLOW.format(flow=flow))
    (flows / "bad.yaml").write_text(FAILING.format(flow=flow))
    (tmp_path / "tokens.yaml").write_text(TOKENS)
    prefix = unique("con")
    shipped, dropped, broken = f"{prefix}-ship", f"{prefix}-drop", f"{prefix}-bad"

    async def main() -> None:
        async with running_host(temporal_address) as host:
            server = start_serve(
                tmp_path,
                "--temporal",
                "--address",
                temporal_address,
                "--task-queue",
                host.task_queue,
                "--flows",
                flows,
                "--tokens",
                tmp_path / "tokens.yaml",
            )
            try:
                await drive(server.url)
            finally:
                server.stop()
            assert server.proc.returncode == 0, server.output()

    async def drive(url: str) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, timeout=30) as api:
            for run_id, flow_id in ((shipped, flow), (dropped, flow), (broken, f"{flow}_bad")):
                started = await api.post("/api/runs", json={"flow": flow_id, "runId": run_id})
                assert started.status_code == 201, started.text
            for run_id in (shipped, dropped):
                await until(api, run_id, lambda v: v["waits"]["questions"], "no question")
            await until(api, broken, lambda v: v["run"]["status"] == "failed", "not failed")
            expect.set_options(timeout=WAIT_MS)
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(
                    executable_path=str(CHROMIUM), args=CHROMIUM_ARGS
                )
                try:
                    context = await browser.new_context(viewport={"width": 1280, "height": 900})
                    page = await context.new_page()
                    errors: list[str] = []  # script errors
                    logged: list[str] = []  # errors the browser logs
                    refusals: list[str] = []  # the answers >= 400, to say which

                    def console(message: ConsoleMessage) -> None:
                        if message.type == "error":
                            logged.append(message.text)

                    async def answered(response: Response) -> None:
                        if response.status >= 400:
                            refusals.append(f"{response.url}: {await response.text()}")

                    page.on("pageerror", lambda e: errors.append(str(e)))
                    page.on("console", console)
                    page.on("response", answered)
                    await page.goto(f"{url}?token={TOKEN}")
                    await expect(page).to_have_url(url)
                    await runs_page(page)
                    await run_page(page, api)
                    await cancelled(page, api)
                    await refused(page)
                    assert errors == []  # no script error on any page
                    # The refused requests (the counts, once; resume, delete) are the only ones.
                    assert len(refusals) == 3, refusals
                    assert logged and all(REFUSED_LOAD in text for text in logged), (
                        logged,
                        refusals,
                    )
                finally:
                    await browser.close()

    async def runs_page(page: Page) -> None:
        await page.get_by_label("Run id starts with").fill(prefix)
        await page.get_by_label("Run id starts with").press("Enter")
        rows = page.locator("#runs-body tr")
        await expect(rows).to_have_count(3)
        assert sorted(await rows.evaluate_all("rs => rs.map(r => r.dataset.runId)")) == sorted(
            (shipped, dropped, broken)
        )
        await expect(page.locator(f'#runs-body tr[data-run-id="{broken}"] .status')).to_have_text(
            "failed"
        )
        # Temporal counts no runs by flowcore status: the page says so, once, and lists on.
        await expect(page.locator("#counts")).to_contain_text("No counts by status here")
        await expect(page.locator("#counts")).to_contain_text("Temporal")
        await page.get_by_label("Run id starts with").fill(f"{prefix}-s")
        await page.get_by_role("button", name="Search").click()
        await expect(rows).to_have_count(1)
        await expect(rows.first).to_have_attribute("data-run-id", shipped)
        await rows.first.get_by_role("link", name=shipped).click()
        await expect(page).to_have_url(f"{page.url.split('/runs/')[0]}/runs/{shipped}")

    async def run_page(page: Page, api: httpx.AsyncClient) -> None:
        await expect(page.locator("#status")).to_have_text("running")
        # The tool call's row opens to its input and output.
        succeeded = page.locator('#timeline-body tr[data-type="event.reported"]').filter(
            has=page.locator('td[data-kind="effect-succeeded"]')
        )
        await expect(succeeded).to_have_count(1)
        toggle = succeeded.locator("button.rec-toggle")
        await toggle.click()
        await expect(toggle).to_have_attribute("aria-expanded", "true")
        await expect(succeeded.locator(".rec-payloads")).to_contain_text(f"prepared-{flow}")
        emitted = page.locator('#timeline-body tr[data-type="effect.emitted"]').first
        await emitted.locator("button.rec-toggle").click()
        await expect(emitted.locator(".rec-payloads")).to_contain_text(f"prepared-{flow}")
        # The diagram: the tool's step done, the question waiting.
        diagram = page.locator("#diagram")
        await expect(diagram.locator("svg")).to_be_visible()
        await expect(diagram).to_have_attribute(
            "data-outcomes", "flow_start:done s_decide:waiting s_prep:done"
        )
        # Answered by its button: the run waits for the signal.
        await page.locator(".question").get_by_role("button", name="yes").click()
        await expect(diagram).to_have_attribute(
            "data-outcomes", "flow_start:done s_decide:done s_hold:waiting s_prep:done"
        )
        # A scheduled call added, then cancelled.
        await page.get_by_text("Schedule a call").click()
        await expect(page.get_by_label("Tool")).to_have_value("echo")
        await page.get_by_label("In (seconds from now)").fill("3600")
        await page.get_by_role("button", name="Schedule call").click()
        pending = page.locator('[data-group="pending"] tr[data-call]')
        await expect(pending).to_have_count(1)
        call = await pending.get_attribute("data-call")
        await page.get_by_role("button", name=f"Cancel {call}").click()
        await confirm(page, "Cancel call")
        await expect(page.locator('[data-group="cancelled"] tr[data-call]')).to_have_count(1)
        listed = (await api.get(f"/api/runs/{shipped}/scheduled")).json()["calls"]
        assert [c["status"] for c in listed] == ["cancelled"]
        # The signal it waits for, sent through the form: it completes.
        await page.get_by_label("Name").fill("done")
        await page.get_by_label("Payload (JSON, empty for none)").fill('{"ok": true}')
        await page.get_by_role("button", name="Send signal").click()
        await expect(page.locator("#status")).to_have_text("completed")
        await expect(diagram).to_have_attribute(
            "data-outcomes", "flow_end:done flow_start:done s_decide:done s_hold:done s_prep:done"
        )
        view = (await api.get(f"/api/runs/{shipped}")).json()
        assert view["output"] == {"ok": True}

    async def cancelled(page: Page, api: httpx.AsyncClient) -> None:
        await page.goto(page.url.replace(shipped, dropped))
        await expect(page.locator("#status")).to_have_text("running")
        await page.get_by_label("Reason").fill("not this week")
        await page.get_by_role("button", name="Cancel run").click()
        await confirm(page, "Cancel run")
        await expect(page.locator("#status")).to_have_text("cancelled")
        assert (await api.get(f"/api/runs/{dropped}")).json()["run"]["status"] == "cancelled"

    async def refused(page: Page) -> None:
        await page.goto(page.url.replace(dropped, broken))
        await expect(page.locator("#status")).to_have_text("failed")
        await expect(page.locator("#diagram")).to_have_attribute(
            "data-outcomes", "flow_end:failed flow_start:done s_boom:failed"
        )
        await page.get_by_role("button", name="Resume run").click()
        await confirm(page, "Resume run")
        alert = page.locator("#actions-error")
        await expect(alert).to_be_visible()
        await expect(alert).to_contain_text("host-refuses (501)")
        await expect(alert).to_contain_text("fork it to go on")
        await expect(page.locator("#status")).to_have_text("failed")
        # Delete too: the namespace's retention period removes closed runs.
        await page.get_by_role("button", name="Delete run").click()
        await confirm(page, "Delete run")
        await expect(alert).to_contain_text("Temporal host cannot delete")
        await expect(alert).to_contain_text("host-refuses (501)")
        await expect(page.locator("#status")).to_have_text("failed")

    asyncio.run(main())


def test_a_runs_history_replayed_several_times_at_once_gives_each_its_log(
    temporal_address: str,
) -> None:
    """The run page reads a run several ways at once (the run, its graph, its
    records): each read replays its history, and no replay takes another's."""
    import flowcore_temporal as ft

    async def main() -> None:
        async with running_host(temporal_address) as host:
            spec = "flow: replayed\nsteps:\n  - {id: wait, await_signal: {signal: done}}\n"
            rid = await host.start(spec, None, unique("replayed"))
            deadline = time.monotonic() + 30
            while not (history := await host.history(rid)).events or len(history.events) < 3:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            logs = await asyncio.gather(*(ft.history_to_log(history) for _ in range(8)))
            assert all(log == logs[0] for log in logs) and logs[0]
            await host.cancel(rid)

    asyncio.run(main())


def test_a_failed_run_is_listed_as_failed_though_its_workflow_completed(
    temporal_address: str,
) -> None:
    """A run that fails completes its workflow; the workflow's memo says how the run
    settled, and ``find_runs`` (the runs page's list) lists it with that status."""
    from flowcore_handlers import RunQuery

    async def main() -> None:
        async with running_host(temporal_address) as host:
            rid = await host.start(FAILING.format(flow="listed"), None, unique("listed"))

            async def listed() -> str | None:
                page = await host.find_runs(RunQuery(id_prefix=rid))
                found = [r.status for r in page.runs if r.run_id == rid and r.status != "running"]
                return found[0] if found else None

            deadline = time.monotonic() + 30
            while (status := await listed()) is None:
                assert time.monotonic() < deadline, f"{rid} was not listed as settled"
                await asyncio.sleep(0.1)
            assert status == "failed"
            assert (await host.summary(rid)).status == "failed"

    asyncio.run(main())
