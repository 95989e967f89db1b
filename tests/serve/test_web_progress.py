"""The run page shows what a running step publishes, live, under that step: Debian's
Chromium driven by Playwright against a real ``flowcore serve`` subprocess whose
worker runs the handler. And a gap the run's cap dropped is shown as such."""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

from playwright.sync_api import BrowserContext, Page, Route, expect

from flowcore_local import LocalHost, ProgressCap

from .browser import NEEDS_CHROMIUM, WAIT_MS
from .serving import Served, start_serve
from .test_web import context, log_in

__all__ = ["context"]  # the fixture of the web tests (``browser``: conftest.py)

pytestmark = NEEDS_CHROMIUM

FLOW: Final = """
flow: drafting
tools: {draft: {class: idempotent}}
steps:
  - {id: write, call_tool: {tool: draft, input: "${input}"}}
output: "${steps.write.output}"
"""

# Publishes three text chunks and an event, then waits (at most a minute) for
# the file ``release``, then publishes one more chunk and a last event.
TOOLS: Final = """
import time
from pathlib import Path

from flowcore_handlers import publish


def draft(call):
    for chunk in ("Dear team, ", "the release ", "is ready."):
        publish(chunk)
    publish({"kind": "tool-call", "tool": "lookup", "args": {"city": "Paris"}})
    release = Path(call.input["release"])
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    publish(" Thanks.")
    publish({"words": 7})
    return "sent"


TOOLS = {"draft": draft}
"""


def files(folder: Path) -> tuple[Path, Path]:
    flows = folder / "flows"
    flows.mkdir()
    (flows / "drafting.yaml").write_text(FLOW)
    tools = folder / "drafting_tools.py"
    tools.write_text(TOOLS)
    return flows, tools


def watched(context: BrowserContext, served: Served, run_id: str) -> tuple[Page, list[str]]:
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    log_in(page, served)
    page.goto(f"{served.url}runs/{run_id}")
    return page, errors


def test_a_running_step_shows_what_it_publishes_as_it_comes(
    context: BrowserContext, tmp_path: Path
) -> None:
    flows, tools = files(tmp_path)
    release = tmp_path / "release"
    with start_serve(tmp_path, "--flows", flows, "--tools", tools) as served:
        with served.client() as api:
            body = {"flow": "drafting", "input": {"release": str(release)}, "runId": "d-1"}
            assert api.post("/api/runs", json=body).status_code == 201
            page, errors = watched(context, served, "d-1")
            block = page.locator('.progress[data-key="d-1/write#1"]')
            # While the step runs: its text joined, its event on a line of its own.
            expect(block.locator("h3")).to_contain_text("write", timeout=WAIT_MS)
            expect(block.locator("pre.progress-text")).to_have_text(
                "Dear team, the release is ready.", timeout=WAIT_MS
            )
            event = block.locator(".progress-event")
            expect(event).to_have_count(1)
            expect(event).to_have_attribute("data-kind", "tool-call")
            expect(event).to_contain_text('tool-call lookup {"args":{"city":"Paris"}}')
            expect(block).to_have_attribute("data-running", "yes", timeout=WAIT_MS)
            expect(page.locator("#status")).to_have_text("running")
            release.touch()
            # What it publishes next comes under it too; once done it is no longer running.
            expect(block.locator("pre.progress-text").nth(1)).to_have_text(
                " Thanks.", timeout=WAIT_MS
            )
            expect(block.locator(".progress-event").nth(1)).to_have_text(
                '{"words":7}', timeout=WAIT_MS
            )
            expect(page.locator("#status")).to_have_text("completed", timeout=WAIT_MS)
            expect(block).to_have_attribute("data-running", "no", timeout=WAIT_MS)
            expect(page.locator("#progress-dropped")).to_be_hidden()
            assert api.get("/api/runs/d-1").json()["run"]["status"] == "completed"
            assert errors == []


def test_items_the_run_dropped_are_shown_as_a_gap(context: BrowserContext, tmp_path: Path) -> None:
    flows, tools = files(tmp_path)
    release = tmp_path / "release"
    release.touch()
    db = tmp_path / "serve.db"

    async def run() -> None:
        # A run that kept only its newest 3 of 6 items (a cap this small for the test).
        async with LocalHost(db, str(tools)) as host:
            host.progress_cap = ProgressCap(items=3)
            run_id = await host.start(flows / "drafting.yaml", {"release": str(release)}, "d-2")
            await host.work(until_settled=run_id)

    # (in a thread of its own: Playwright's sync API holds this thread's event loop)
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, run()).result(timeout=120)
    with start_serve(tmp_path, "--db", db, "--flows", flows, "--tools", tools) as served:
        page, errors = watched(context, served, "d-2")
        expect(page.locator("#progress-dropped")).to_have_text(
            "3 earlier item(s) were dropped (indexes 0 to 2): the run keeps its newest.",
            timeout=WAIT_MS,
        )
        block = page.locator('.progress[data-key="d-2/write#1"]')
        expect(block.locator(".progress-body > *")).to_have_count(3, timeout=WAIT_MS)
        expect(block.locator("pre.progress-text")).to_have_text(" Thanks.")
        expect(block).to_have_attribute("data-running", "no")
        assert errors == []


def test_the_page_resumes_the_stream_after_a_disconnect_from_the_last_index(
    context: BrowserContext, tmp_path: Path
) -> None:
    flows, tools = files(tmp_path)
    release = tmp_path / "release"
    release.touch()
    with start_serve(tmp_path, "--flows", flows, "--tools", tools) as served:
        with served.client() as api:
            body = {"flow": "drafting", "input": {"release": str(release)}, "runId": "d-3"}
            assert api.post("/api/runs", json=body).status_code == 201
            deadline = time.monotonic() + WAIT_MS / 1000
            while api.get("/api/runs/d-3").json()["run"]["status"] == "running":
                assert time.monotonic() < deadline, "the run never settled"
                time.sleep(0.05)
            first_two = api.get("/api/runs/d-3/progress", params={"start": 0}).text.splitlines()[:2]
        asked: list[dict[str, str]] = []

        def cut_first(route: Route) -> None:
            asked.append({"url": route.request.url, **route.request.all_headers()})
            if len(asked) > 1:
                route.continue_()
                return
            # The first connection delivers items 0 and 1, then drops (no `end`).
            events = "".join(
                f"id: {json.loads(line)['index']}\nevent: progress\ndata: {line}\n\n"
                for line in first_two
            )
            route.fulfill(
                status=200,
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"},
                body=events,
            )

        page = context.new_page()
        page.route("**/api/runs/d-3/progress/stream*", cut_first)
        log_in(page, served)
        page.goto(f"{served.url}runs/d-3")
        block = page.locator('.progress[data-key="d-3/write#1"]')
        expect(block.locator("pre.progress-text").first).to_have_text(
            "Dear team, the release is ready.", timeout=WAIT_MS
        )
        expect(block.locator(".progress-body > *")).to_have_count(4, timeout=WAIT_MS)
        # The page connected again once, asking for what came after the last item it had.
        assert len(asked) == 2
        assert asked[0]["url"].endswith("/api/runs/d-3/progress/stream?start=0")
        assert asked[1]["url"].endswith("/api/runs/d-3/progress/stream?start=2")
