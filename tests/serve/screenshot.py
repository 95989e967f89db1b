"""A screenshot of the run page: the incident-response example flow
(``specs/examples/``) stopped at its human question, as ``scripts/screenshot-run-page``
writes it to ``specs/img/run-page.png``."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Final

from playwright.sync_api import expect, sync_playwright

from .browser import launch
from .serving import start_serve

__all__ = ["ROOT", "screenshot_run_page"]

ROOT: Final = Path(__file__).resolve().parents[2]
EXAMPLES: Final = ROOT / "specs" / "examples"
WAIT_S: Final = 60.0


def screenshot_run_page(out: Path) -> None:
    """Serve the examples on a fresh database, start an incident run, wait for its
    question, and write a PNG of its run page (with the diagram drawn) to ``out``."""
    with tempfile.TemporaryDirectory(prefix="flowcore-screenshot-") as work:
        served = start_serve(Path(work), "--flows", EXAMPLES, "--tools", EXAMPLES / "demo_tools.py")
        with served, served.client() as api:
            reply = api.post(
                "/api/runs",
                json={
                    "flow": "incident-response",
                    "input": {"incident_id": "INC-7"},
                    "runId": "inc-7",
                },
            )
            reply.raise_for_status()
            deadline = time.monotonic() + WAIT_S
            while not api.get("/api/runs/inc-7").json()["waits"]["questions"]:
                if time.monotonic() > deadline:
                    raise TimeoutError("the incident run did not reach its question")
                time.sleep(0.1)
            with sync_playwright() as playwright:
                browser = launch(playwright)
                try:
                    page = browser.new_page(viewport={"width": 1440, "height": 1100})
                    page.goto(f"{served.url}?token={served.token}")
                    page.goto(f"{served.url}runs/inc-7")
                    timeout = WAIT_S * 1000
                    expect(page.locator("#diagram svg")).to_be_visible(timeout=timeout)
                    expect(page.locator("#diagram")).to_have_attribute(
                        "data-current", "s_decide", timeout=timeout
                    )
                    expect(page.locator(".question button.option")).to_have_count(
                        2, timeout=timeout
                    )
                    expect(page.locator("#timeline-body tr").last).to_have_attribute(
                        "data-index", "20", timeout=timeout
                    )
                    out.parent.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(out), full_page=True)
                finally:
                    browser.close()
