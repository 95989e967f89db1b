#!/usr/bin/env python3
"""Regenerate the web view's screenshots in specs/images/ from a seeded database.

    scripts/gen_screenshots.py [--out DIR] [--only PAGE ...] [--check]

Seeds a fresh SQLite database (in a temporary folder) with a fixed set of runs
of the flows in scripts/screenshots/flows/ (handlers: scripts/screenshots/shot_tools.py)
on a fixed clock: a completed order, an order failed with its handler's
traceback, a refund waiting on its question, a batch with a child run, an
operations run with scheduled calls, an expense of examples/approval/ whose
update waits on its question, and a schedule. It then serves that
database in this process with no worker (so nothing moves while the pictures
are taken), and has Debian's Chromium (driven by Playwright) write one PNG per
page into DIR (default specs/images/): PAGES below. ``--check`` regenerates
into a temporary folder and checks that every page gives a PNG of the
viewport's width (nothing is compared pixel by pixel: fonts differ between
machines). Run it from the project's
virtual environment:  .venv/bin/python scripts/gen_screenshots.py
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
for _path in (ROOT / "hosts", ROOT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from playwright.sync_api import Page, expect, sync_playwright  # noqa: E402

from flowcore_local import LocalHost  # noqa: E402
from flowcore_serve import Tokens, WorkerStopped, serve_host  # noqa: E402

__all__ = [
    "HEIGHT",
    "PAGES",
    "WIDTH",
    "capture",
    "png_size",
    "seed",
    "serving",
]

HERE: Final = ROOT / "scripts" / "screenshots"
FLOWS: Final = HERE / "flows"
TOOLS: Final = HERE / "shot_tools.py"
APPROVAL: Final = ROOT / "examples" / "approval" / "approval.yaml"  # the worked example
OUT: Final = ROOT / "specs" / "images"
WIDTH: Final = 1280
HEIGHT: Final = 860
WAIT_MS: Final = 30_000
T0: Final = int(datetime(2026, 3, 2, 9, 0, tzinfo=UTC).timestamp() * 1000)
MINUTE: Final = 60_000
SHOWN_AT: Final = datetime.fromtimestamp((T0 + 45 * MINUTE) / 1000, UTC)  # the browser's now
PAGES: Final = ("runs", "run", "actions", "scheduled", "schedules", "compare", "updates")


class Clock:
    """The seeding host's clock: it stands still until ``at`` moves it."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms

    def at(self, minutes: float) -> None:
        self.ms = T0 + int(minutes * MINUTE)


async def _settle(host: LocalHost) -> None:
    """Run the worker until no run can go on without an answer, a signal or a timer."""
    stop = asyncio.Event()
    worker = asyncio.create_task(host.work(stop))
    try:
        for _ in range(600):
            await asyncio.sleep(0.05)
            if worker.done() or await host.idle(horizon_ms=1):
                break
        else:
            raise TimeoutError("the seeded runs did not settle in 30 s")
    finally:
        stop.set()
        await worker


async def _seed(db: Path) -> None:
    clock = Clock(T0)
    flows = [FLOWS]
    async with LocalHost(db, str(TOOLS), clock=clock) as host:
        starts = [
            ("orders", {"order": "A-1001"}, "order-a1001", {"customer": "acme"}),
            ("orders", {"order": "A-1002"}, "order-a1002", {"customer": "zeta"}),
            ("refund", {"order": "A-0990"}, "refund-a0990", None),
            ("batch", {"order": "B-2001"}, "batch-b2001", None),
            ("ops", {"release": "v2.4.0"}, "release-v240", None),
        ]
        for minute, (flow, body, run_id, metadata) in enumerate(starts):
            clock.at(minute * 7)
            await host.start(
                FLOWS / f"{flow}.yaml",
                body,
                run_id,
                flows=flows,
                principal="operator",
                metadata=metadata,
            )
            clock.at(minute * 7 + 0.02)
            await _settle(host)
        # An expense whose `approve` update waits on the question it asks.
        clock.at(35)
        await host.start(
            APPROVAL,
            {"amount": 120, "requester": "bob"},
            "expense-e310",
            flows=flows,
            principal="operator",
        )
        clock.at(35.02)
        await _settle(host)
        clock.at(36)
        await host.update(
            "expense-e310", "approve", {"by": "alice"}, "approve-1", wait=False, principal="ops"
        )
        await _settle(host)
        clock.at(40)
        await host.add_scheduled("release-v240", "notify", {"channel": "#releases"}, 0)
        await _settle(host)  # (issued and completed)
        clock.at(41)
        await host.add_scheduled(
            "release-v240", "notify", {"channel": "#ops"}, 2 * 60 * MINUTE
        )  # (pending)
        spare = await host.add_scheduled("release-v240", "notify", {"channel": "#all"}, MINUTE)
        clock.at(42)
        await host.cancel_scheduled("release-v240", spare)
        await host.add_schedules(FLOWS / "nightly.yaml")
        clock.at(43)
        await host.trigger_schedule("nightly-report")
        await _settle(host)
        clock.at(45)


def seed(db: Path) -> None:
    """Write the seeded runs, scheduled calls and schedule into the new database ``db``."""
    if db.exists():
        raise FileExistsError(f"{db}: the seeded database must be a new file")
    asyncio.run(_seed(db))


@contextmanager
def serving(db: Path) -> Iterator[tuple[str, str]]:
    """Serve ``db`` in a thread of this process, with no worker and the seeding's
    last time as the host's clock; yields the address and the session token."""
    tokens = Tokens.session()
    assert tokens.generated is not None
    ready = threading.Event()
    done = threading.Event()
    found: list[str] = []
    failed: list[BaseException] = []

    async def frozen(stop: asyncio.Event) -> None:  # (stands in for the worker: none runs)
        while not stop.is_set() and not done.is_set():
            await asyncio.sleep(0.05)

    async def main() -> None:
        async with LocalHost(db, str(TOOLS), clock=Clock(T0 + 45 * MINUTE)) as host:

            def on_ready(bound: str, port: int) -> None:
                found.append(f"http://{bound}:{port}/")
                ready.set()

            try:
                await serve_host(host, tokens, port=0, flows=FLOWS, on_ready=on_ready, work=frozen)
            except WorkerStopped:
                if not done.is_set():
                    raise

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # (reported by the caller's thread)
            failed.append(exc)
        finally:
            ready.set()

    thread = threading.Thread(target=run, name="gen-screenshots-serve", daemon=True)
    thread.start()
    ready.wait(60)
    try:
        if failed or not found:
            raise RuntimeError(f"the server did not start: {failed[0] if failed else 'timeout'}")
        yield found[0], tokens.generated
    finally:
        done.set()
        thread.join(60)
    if failed:
        raise RuntimeError(f"the server stopped on an error: {failed[0]!r}") from failed[0]


def _runs(page: Page) -> None:
    expect(page.locator("#runs-body tr")).to_have_count(8)
    expect(page.locator("#counts")).to_contain_text("failed")


def _run(page: Page) -> None:
    page.goto(page.url + "runs/order-a1002")
    expect(page.locator("#diagram svg")).to_be_visible()
    failed = page.locator('#timeline-body tr[data-type="event.reported"]').filter(
        has=page.locator('td[data-kind="effect-failed"]')
    )
    failed.locator("button.rec-toggle").click()
    expect(failed.locator('.rec-payloads [data-part="traceback"] pre')).to_be_visible()
    failed.scroll_into_view_if_needed()


def _actions(page: Page) -> None:
    page.goto(page.url + "runs/refund-a0990")
    expect(page.locator("#diagram svg")).to_be_visible()
    page.get_by_label("Reason").fill("duplicate refund request")
    page.get_by_role("button", name="Cancel run").click()
    expect(page.get_by_role("dialog")).to_be_visible()


def _scheduled(page: Page) -> None:
    page.goto(page.url + "runs/release-v240")
    expect(page.locator("#diagram svg")).to_be_visible()
    section = page.locator("#scheduled-section")
    expect(section).to_be_visible()
    expect(section).to_contain_text("cancelled")
    section.scroll_into_view_if_needed()


def _schedules(page: Page) -> None:
    page.goto(page.url + "schedules")
    expect(page.get_by_text("nightly-report").first).to_be_visible()


def _compare(page: Page) -> None:
    # Two orders of one flow: the first record where they differ is marked.
    page.goto(page.url + "compare?a=order-a1001&b=order-a1002")
    expect(page.locator(".diff-mark").first).to_be_visible()


def _updates(page: Page) -> None:
    # The expense's update form, its running update, and a query's answer.
    page.goto(page.url + "runs/expense-e310")
    expect(page.locator("#diagram svg")).to_be_visible()
    expect(page.locator('#updates-table tr[data-update-id="approve-1"]')).to_contain_text("running")
    query = page.get_by_role("form", name="decision")
    query.get_by_role("button", name="Run decision").click()
    expect(query.get_by_label("answer of decision")).to_contain_text('"status": "running"')
    page.locator("#updates-section").scroll_into_view_if_needed()


SHOTS: Final[dict[str, Callable[[Page], None]]] = {
    "runs": _runs,
    "run": _run,
    "actions": _actions,
    "scheduled": _scheduled,
    "schedules": _schedules,
    "compare": _compare,
    "updates": _updates,
}


def _errors(page: Page) -> list[str]:
    """The script errors ``page`` will raise, as they come."""
    found: list[str] = []
    page.on("pageerror", lambda e: found.append(str(e)))
    return found


def capture(url: str, token: str, out: Path, pages: Sequence[str] = PAGES) -> list[Path]:
    """Write ``<page>.png`` (WIDTH x HEIGHT) into ``out`` for each of ``pages`` of the
    server at ``url``. Returns the files
    written. A script error on a page fails it."""
    from tests.serve.browser import launch

    unknown = sorted(set(pages) - set(SHOTS))
    if unknown:
        raise ValueError(f"no such page to capture: {', '.join(unknown)} (one of {PAGES})")
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            for name in pages:
                context = browser.new_context(
                    viewport={"width": WIDTH, "height": HEIGHT},
                    timezone_id="UTC",
                    locale="en-GB",
                    reduced_motion="reduce",
                )
                try:
                    page = context.new_page()
                    errors = _errors(page)
                    page.clock.set_fixed_time(
                        datetime.fromtimestamp((T0 + 45 * MINUTE) / 1000, UTC)
                    )
                    page.goto(f"{url}?token={token}")
                    expect(page).to_have_url(url)
                    SHOTS[name](page)
                    page.wait_for_load_state("networkidle")
                    if errors:
                        raise RuntimeError(f"the {name} page raised: {errors}")
                    path = out / f"{name}.png"
                    page.screenshot(path=str(path), animations="disabled", caret="hide")
                    written.append(path)
                finally:
                    context.close()
        finally:
            browser.close()
    return written


def png_size(path: Path) -> tuple[int, int]:
    """The width and height of the PNG ``path``; ValueError if it is no PNG."""
    head = path.read_bytes()[:24]
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise ValueError(f"{path}: not a PNG image")
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def generate(out: Path, pages: Sequence[str] = PAGES) -> list[Path]:
    """Seed a fresh database, serve it, and capture ``pages`` into ``out``."""
    with tempfile.TemporaryDirectory(prefix="flowcore-screenshots-") as work:
        db = Path(work) / "screenshots.db"
        seed(db)
        with serving(db) as (url, token):
            return capture(url, token, out, pages)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="where to write the PNGs")
    parser.add_argument("--only", nargs="+", choices=PAGES, help="capture these pages alone")
    parser.add_argument(
        "--check", action="store_true", help="regenerate into a temporary folder and check"
    )
    args = parser.parse_args()
    pages = args.only or PAGES
    if args.check:
        with tempfile.TemporaryDirectory(prefix="flowcore-screenshots-check-") as tmp:
            written = generate(Path(tmp), pages)
            for path in written:
                if png_size(path) != (WIDTH, HEIGHT):
                    print(f"{path.name}: {png_size(path)}, not {(WIDTH, HEIGHT)}", file=sys.stderr)
                    return 1
            print(f"ok: {', '.join(p.name for p in written)}")
        return 0
    for path in generate(args.out, pages):
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
