"""Several handler modules on one server (``flowcore serve --tools A --tools B``):
the flows list says which flows the server can run and with which modules, the
start form offers only those (a flow none can run is shown disabled with what
is missing) and lets the user pick a module where several can run it, a run
starts with the first module that can run it, and a failed run is resumed
through the API with another of the server's modules. Playwright driving
Debian's Chromium against a real ``flowcore serve`` on a real SQLite file."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, expect

from .browser import NEEDS_CHROMIUM
from .serving import Served, start_serve

ORDERS = """
flow: orders
tools: {check: {class: readonly}}
steps:
  - {id: check, call_tool: {tool: check, input: "${input}"}, retry: {max_attempts: 1}}
output: "${steps.check.output}"
"""
SHIP = """
flow: ship
tools: {ship: {class: idempotent}}
steps:
  - {id: ship, call_tool: {tool: ship, input: 1}}
output: "${steps.ship.output}"
"""
NOWHERE = """
flow: nowhere
tools: {beam: {class: readonly}}
steps:
  - {id: beam, call_tool: {tool: beam, input: 1}}
"""
TOOLS_A = """
from flowcore_handlers import HandlerError


def check(call):
    if call.input == "fail":
        raise HandlerError("down", "module a cannot check this", retryable=False)
    return "a"


TOOLS = {"check": check}
"""
TOOLS_B = """
TOOLS = {"check": lambda call: "b", "ship": lambda call: "shipped"}
"""

pytestmark = NEEDS_CHROMIUM


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, str, str]]:
    tmp_path = tmp_path_factory.mktemp("modules")
    flows = tmp_path / "flows"
    flows.mkdir()
    for name, text in (("orders", ORDERS), ("ship", SHIP), ("nowhere", NOWHERE)):
        (flows / f"{name}.yaml").write_text(text)
    a, b = tmp_path / "tools_a.py", tmp_path / "tools_b.py"
    a.write_text(TOOLS_A)
    b.write_text(TOOLS_B)
    with start_serve(tmp_path, "--flows", flows, "--tools", a, "--tools", b) as s:
        yield s, str(a.resolve()), str(b.resolve())


def settled(api: httpx.Client, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        view: dict[str, Any] = api.get(f"/api/runs/{run_id}").json()
        if view["run"]["status"] != "running":
            return view
        assert time.monotonic() < deadline, view
        time.sleep(0.05)


def test_the_flows_list_says_which_flows_run_and_with_which_modules(
    served: tuple[Served, str, str],
) -> None:
    server, a, b = served
    with server.client() as api:
        flows = {f["flowId"]: f for f in api.get("/api/flows").json()["flows"]}
        assert (flows["orders"]["runnable"], flows["orders"]["modules"]) == (True, [a, b])
        assert (flows["ship"]["runnable"], flows["ship"]["modules"]) == (True, [b])
        assert flows["nowhere"]["runnable"] is False
        assert (flows["nowhere"]["missing"], flows["nowhere"]["modules"]) == (["tool 'beam'"], [])
        # A flow no module can run is refused before anything is written.
        reply = api.post("/api/runs", json={"flow": "nowhere", "runId": "n-1"})
        assert reply.status_code == 422, reply.text
        assert "no handler for tool 'beam'" in reply.json()["detail"]
        assert api.get("/api/runs/n-1").status_code == 404
        # A module the server does not have is refused, naming the ones it has.
        reply = api.post("/api/runs", json={"flow": "orders", "tools": "elsewhere.py"})
        assert reply.status_code == 422 and b in reply.json()["detail"], reply.text


def test_a_failed_run_is_resumed_with_another_module_through_the_api(
    served: tuple[Served, str, str],
) -> None:
    server, _a, b = served
    with server.client() as api:
        # No module asked for: the first that runs the flow (a), which fails it.
        reply = api.post("/api/runs", json={"flow": "orders", "input": "fail", "runId": "o-1"})
        assert reply.status_code == 201, reply.text
        assert settled(api, "o-1")["run"]["status"] == "failed"
        reply = api.post("/api/runs/o-1/resume", json={"tools": "/elsewhere/tools.py"})
        assert reply.status_code == 422, reply.text
        assert reply.json()["type"] == "/problems/invalid-request"
        reply = api.post("/api/runs/o-1/resume", json={"tools": b})
        assert reply.status_code == 202, reply.text
        view = settled(api, "o-1")
        assert (view["run"]["status"], view["output"]) == ("completed", "b")


def test_the_start_form_offers_only_what_the_server_can_run(
    browser: Browser, served: tuple[Served, str, str]
) -> None:
    server, _a, b = served
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{server.url}?token={server.token}")
    page.locator("#start summary").click()
    flow = page.get_by_role("combobox", name="Flow", exact=True)
    nowhere = flow.locator('option[value="nowhere"]')
    expect(nowhere).to_be_disabled()
    expect(nowhere).to_contain_text("no handler for tool 'beam'")
    expect(page.locator("#start-missing")).to_contain_text("nowhere (no handler for tool 'beam')")
    # Two modules run orders: the user picks one.
    flow.select_option("orders")
    module = page.get_by_label("Handler module")
    expect(module).to_be_visible()
    expect(module.locator("option")).to_have_count(2)
    # One module runs ship: nothing to pick.
    flow.select_option("ship")
    expect(module).to_be_hidden()
    flow.select_option("orders")
    module.select_option(b)
    page.get_by_label("Input (JSON)").fill('"go"')
    page.get_by_role("button", name="Start").click()
    page.wait_for_url(f"{server.url}runs/**")
    run_id = page.url.rsplit("/", 1)[1]
    with server.client() as api:
        view = settled(api, run_id)
    assert (view["run"]["status"], view["output"]) == ("completed", "b")
    context.close()
