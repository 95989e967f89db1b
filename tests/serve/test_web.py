"""The web view in a real browser: Playwright driving Debian's Chromium against a
real ``flowcore serve`` subprocess (the release flow of ``flows/``)."""

from __future__ import annotations

import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from flowcore_cli._replay import figures_text

from .browser import NEEDS_CHROMIUM, WAIT_MS
from .serving import Served, start_serve

HERE: Final = Path(__file__).parent
ROOT: Final = HERE.parents[1]
FLOWS: Final = HERE / "flows"
TOOLS: Final = HERE / "release_tools.py"
COOKIE: Final = "flowcore_token"
ALICE: Final = "alice-token-0123456789"
BOB: Final = "bob-token-0123456789ab"

pytestmark = NEEDS_CHROMIUM


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    made = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with start_serve(tmp_path, "--flows", FLOWS, "--tools", TOOLS, "--max-body", "1024") as s:
        yield s


def start(client: httpx.Client, run_id: str, ref: str = "v1") -> dict[str, Any]:
    reply = client.post(
        "/api/runs", json={"flow": "release", "input": {"ref": ref}, "runId": run_id}
    )
    assert reply.status_code == 201, reply.text
    body: dict[str, Any] = reply.json()
    return body


def log_in(page: Page, served: Served, token: str | None = None) -> None:
    page.goto(f"{served.url}?token={token or served.token}")
    expect(page).to_have_url(served.url)  # the token left the address


def test_answering_on_the_run_page_settles_the_run(context: BrowserContext, served: Served) -> None:
    assert served.token is not None
    with served.client() as api:
        start(api, "rel-1")
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        log_in(page, served)
        cookie = next(c for c in context.cookies() if c["name"] == COOKIE)
        assert cookie.get("httpOnly") is True and cookie.get("sameSite") == "Strict"
        assert cookie.get("path") == "/"

        page.goto(f"{served.url}runs/rel-1")
        question = page.locator(".question")
        expect(question.locator(".text")).to_have_text("Ship app-v1.tar.gz?", timeout=WAIT_MS)
        expect(question).to_contain_text("default: hold")
        expect(question).to_contain_text("deadline:")
        diagram = page.locator("#diagram")
        expect(diagram.locator("svg")).to_be_visible(timeout=WAIT_MS)
        expect(diagram).to_have_attribute("data-current", "s_approve", timeout=WAIT_MS)
        expect(diagram).to_have_attribute("data-done", "flow_start s_build", timeout=WAIT_MS)
        # The diagram marks the current node with the classDef the page appended.
        expect(diagram.locator("svg g.node.current")).to_have_count(1, timeout=WAIT_MS)
        expect(page.locator("#budget")).to_contain_text("steps", timeout=WAIT_MS)
        # The run's figures, in the words flowcore show and flowcore replay print.
        figures = api.get("/api/runs/rel-1").json()["budget"]
        expect(page.locator("#usage")).to_have_text(figures_text(figures), timeout=WAIT_MS)
        timeline = page.locator("#timeline-body tr")
        expect(timeline.first).to_contain_text("run.started", timeout=WAIT_MS)
        expect(page.locator('#timeline-body tr[data-index="3"]')).to_contain_text(
            "ask-human", timeout=WAIT_MS
        )
        assert served.token not in page.content()

        question.get_by_role("button", name="ship", exact=True).click()
        note = page.locator('.question[data-step="note"]')
        expect(note.locator(".text")).to_have_text("Release note for v1?", timeout=WAIT_MS)
        expect(diagram).to_have_attribute("data-current", "s_note", timeout=WAIT_MS)
        note.locator("input.free").fill("first release")
        note.get_by_role("button", name="Answer").click()

        expect(page.locator("#status")).to_have_text("completed", timeout=WAIT_MS)
        expect(page.locator("#output")).to_contain_text('"first release"', timeout=WAIT_MS)
        expect(page.locator("#report")).to_contain_text("deploy.ship", timeout=WAIT_MS)
        expect(page.locator("#actions")).to_be_hidden(timeout=WAIT_MS)
        expect(page.locator('#timeline-body tr[data-type="run.settled"]')).to_contain_text(
            "completed", timeout=WAIT_MS
        )
        expect(page.locator("#questions")).to_have_text("None open.", timeout=WAIT_MS)
        view = api.get("/api/runs/rel-1").json()
        assert view["run"]["status"] == "completed"
        assert view["output"] == {
            "decision": "ship",
            "note": "first release",
            "shipped": {"shipped": "app-v1.tar.gz"},
        }
        # Every record of the log has its row, in order.
        rows = page.locator("#timeline-body tr").evaluate_all(
            "rows => rows.map(r => Number(r.dataset.index))"
        )
        assert rows == list(range(view["run"]["nextIndex"]))
        # No script error and no refusal (a Content-Security-Policy one included).
        assert errors == []


def test_signal_and_cancel_forms_and_a_refusal(context: BrowserContext, served: Served) -> None:
    with served.client() as api:
        start(api, "rel-2")
        start(api, "rel-3")
        page = context.new_page()
        log_in(page, served)
        page.goto(f"{served.url}runs/rel-2")
        page.get_by_role("button", name="hold", exact=True).click()
        expect(page.locator("#diagram")).to_have_attribute(
            "data-current", "s_hold", timeout=WAIT_MS
        )
        expect(page.locator("#waiting")).to_contain_text("signal “go”", timeout=WAIT_MS)

        # Refused by the server (the body is over --max-body): its detail is shown.
        page.locator("#signal-name").fill("go")
        page.locator("#signal-payload").fill('{"note": "%s"}' % ("x" * 2000))
        page.get_by_role("button", name="Send signal").click()
        expect(page.locator("#actions-error")).to_contain_text("over the limit", timeout=WAIT_MS)
        # Refused by the page itself: not JSON.
        page.locator("#signal-payload").fill("{not json")
        page.get_by_role("button", name="Send signal").click()
        expect(page.locator("#actions-error")).to_contain_text("not JSON", timeout=WAIT_MS)

        page.locator("#signal-payload").fill('{"by": "web"}')
        page.get_by_role("button", name="Send signal").click()
        expect(page.locator("#actions-error")).to_be_hidden(timeout=WAIT_MS)
        expect(page.locator('.question[data-step="note"]')).to_be_visible(timeout=WAIT_MS)
        expect(page.locator('#timeline-body [data-kind="signal-received"]')).to_contain_text(
            "go", timeout=WAIT_MS
        )

        page.goto(f"{served.url}runs/rel-3")
        expect(page.locator(".question .text")).to_be_visible(timeout=WAIT_MS)
        page.locator("#cancel-reason").fill("not today")
        page.get_by_role("button", name="Cancel run").click()
        page.get_by_role("dialog").get_by_role("button", name="Cancel run").click()
        expect(page.locator("#status")).to_have_text("cancelled", timeout=WAIT_MS)
        expect(page.locator("#error")).to_be_visible(timeout=WAIT_MS)
        assert api.get("/api/runs/rel-3").json()["run"]["status"] == "cancelled"
        assert api.get("/api/runs/rel-2").json()["run"]["status"] == "running"


def test_the_runs_list_updates_live_and_shows_only_the_principals_runs(
    context: BrowserContext, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        f"tokens:\n  - {{token: {ALICE}, principal: alice}}\n  - {{token: {BOB}, principal: bob}}\n"
    )
    served = start_serve(tmp_path, "--flows", FLOWS, "--tools", TOOLS, "--tokens", tokens)
    with served, served.client(ALICE) as alice, served.client(BOB) as bob:
        start(alice, "a-1")
        page = context.new_page()
        log_in(page, served, ALICE)
        row = page.locator('#runs-body tr[data-run-id="a-1"]')
        expect(row).to_contain_text("release", timeout=WAIT_MS)
        expect(row).to_contain_text("alice")
        expect(row.locator(".status")).to_have_text("running")
        expect(row.get_by_role("link", name="a-1")).to_have_attribute("href", "/runs/a-1")

        start(bob, "b-1")
        start(alice, "a-2")
        expect(page.locator('#runs-body tr[data-run-id="a-2"]')).to_be_visible(timeout=WAIT_MS)
        # The page that shows a-2 was read after b-1 started, and does not show it.
        assert page.locator("#runs-body tr").evaluate_all(
            "rows => rows.map(r => r.dataset.runId)"
        ) == ["a-2", "a-1"]

        reply = alice.post("/api/runs/a-1/cancel", json={"reason": "live"})
        assert reply.status_code == 202, reply.text
        expect(row.locator(".status")).to_have_text("cancelled", timeout=WAIT_MS)

        # The start form: a flow of --flows and its input; it opens the new run's page.
        page.locator("#start summary").click()
        expect(page.locator("#start-flow option")).to_have_text(
            ["approve v1", "handoff v1", "release v1"], timeout=WAIT_MS
        )
        page.locator("#start-flow").select_option(label="release v1")
        page.locator("#start-input").fill('{"ref": "v9"}')
        page.get_by_role("button", name="Start", exact=True).click()
        expect(page.locator(".question .text")).to_have_text("Ship app-v9.tar.gz?", timeout=WAIT_MS)
        started = page.url.rsplit("/", 1)[-1]
        assert alice.get(f"/api/runs/{started}").json()["run"]["principal"] == "alice"

        # bob's run: not alice's to see, and answered as a run that does not exist.
        missing = page.goto(f"{served.url}runs/b-1")
        assert missing is not None and missing.status == 404
        expect(page.locator("p.error")).to_have_text("There is no run 'b-1'.", timeout=WAIT_MS)


def test_logging_in(context: BrowserContext, served: Served) -> None:
    assert served.token is not None
    with served.client() as api:
        start(api, "rel-4")
    page = context.new_page()
    reply = page.goto(f"{served.url}runs/rel-4")
    assert reply is not None and reply.status == 401
    expect(page.locator("form[action='/login']")).to_be_visible()

    page.locator("input[name=token]").fill("not-the-token-at-all")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("#login-error")).to_contain_text("not one this server accepts")
    assert not [c for c in context.cookies() if c["name"] == COOKIE]

    page.locator("input[name=token]").fill(served.token)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{served.url}runs/rel-4", timeout=WAIT_MS)
    expect(page.locator("#flow-id")).to_have_text("release")
    assert served.token not in page.content()

    page.get_by_role("button", name="log out").click()
    expect(page.locator("form[action='/login']")).to_be_visible(timeout=WAIT_MS)
    assert not [c for c in context.cookies() if c["name"] == COOKIE]

    reply = page.goto(f"{served.url}?token=wrong-token-0123456789")
    assert reply is not None and reply.status == 401
    expect(page.locator("#login-error")).to_be_visible()


def test_pages_and_forms_outside_the_browser(served: Served) -> None:
    """What a browser does not show: headers, statuses and the Origin check."""
    assert served.token is not None
    with httpx.Client(base_url=served.url.rstrip("/"), timeout=30) as http:
        page = http.get("/")
        assert page.status_code == 401
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["cache-control"] == "no-store"

        moved = http.get("/", params={"token": served.token, "x": "1"})
        assert moved.status_code == 303
        assert moved.headers["location"] == "/?x=1"
        cookie = moved.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie

        # A login form posted from another site is refused; from this one it works.
        form = {"token": served.token, "next": "//evil.example/"}
        foreign = http.post("/login", data=form, headers={"Origin": "http://evil.example"})
        assert foreign.status_code == 403
        assert COOKIE not in foreign.headers.get("set-cookie", "")
        own = http.post("/login", data=form, headers={"Origin": served.url.rstrip("/")})
        assert own.status_code == 303
        assert own.headers["location"] == "/"  # never another site

        http.cookies.set(COOKIE, served.token)
        missing = http.get("/runs/no-such-run")
        assert missing.status_code == 404
        assert "no-such-run" in missing.text
        script = http.get("/static/vendor/mermaid.min.js")
        assert script.status_code == 200
        assert script.headers["content-type"].startswith(
            ("text/javascript", "application/javascript")
        )


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_the_screenshot_script_writes_a_picture_of_the_run_page(tmp_path: Path) -> None:
    out = tmp_path / "run-page.png"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "screenshot-run-page"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = out.read_bytes()
    width, height = png_size(data)
    assert width >= 1000 and height >= 800
    assert len(data) > 50_000  # a drawn page, not a blank one


def test_a_child_runs_page_works_with_its_slash_and_hash(
    context: BrowserContext, served: Served
) -> None:
    """A child run is named by its parent's key (``ho/approval#1``): its page, its
    API calls and its links to and from the parent all carry the id encoded."""
    with served.client() as api:
        reply = api.post(
            "/api/runs", json={"flow": "handoff", "input": {"change": "v3"}, "runId": "ho"}
        )
        assert reply.status_code == 201, reply.text
        page = context.new_page()
        log_in(page, served)
        page.goto(f"{served.url}runs/ho")
        child = page.locator("#children a", has_text="ho/approval#1")
        expect(child).to_be_visible(timeout=WAIT_MS)
        child.click()
        expect(page).to_have_url(f"{served.url}runs/ho%2Fapproval%231", timeout=WAIT_MS)
        question = page.locator(".question")
        expect(question.locator(".text")).to_have_text("Ship v3?", timeout=WAIT_MS)
        expect(page.locator("#diagram svg")).to_be_visible(timeout=WAIT_MS)
        question.get_by_role("button", name="ship", exact=True).click()
        expect(page.locator("#waiting")).to_contain_text("deployed", timeout=WAIT_MS)
        page.locator("#signal-name").fill("deployed")
        page.locator("#signal-payload").fill('{"commit": "c3"}')
        page.get_by_role("button", name="Send signal").click()
        expect(page.locator("#status")).to_have_text("completed", timeout=WAIT_MS)
        page.locator("#crumb-parent a").click()
        expect(page.locator("#status")).to_have_text("completed", timeout=WAIT_MS)
        assert api.get("/api/runs/ho").json()["output"] == {"decision": "ship", "commit": "c3"}
