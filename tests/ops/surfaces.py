"""The surfaces a parity scenario is played on: the operation called directly,
and HTTP (the app ``flowcore serve`` serves, in process). Each plays an
operation's input (wire spelling) and gives back the output, decoded as the
operation's output type, or raises ``Refused`` with the failure's problem type
and status."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import httpx
import msgspec

import flowcore
from flowcore_handlers import Host
from flowcore_ops import BY_NAME, NDJSON, Context, OperationError, Principal
from flowcore_serve import Tokens, create_app

TOKENS = """
tokens:
  - {token: admin-token-0123456789, principal: admin, access: admin}
  - {token: write-token-0123456789, principal: admin, access: write}
  - {token: read-token-01234567890, principal: admin, access: read}
"""
TOKEN = {
    "admin": "admin-token-0123456789",
    "write": "write-token-0123456789",
    "read": "read-token-01234567890",
}


class Refused(Exception):
    def __init__(self, type: str, status: int, detail: str) -> None:
        super().__init__(f"{status} {type}: {detail}")
        self.type = type
        self.status = status
        self.detail = detail


async def direct(ctx: Context, name: str, given: dict[str, Any]) -> Any:
    """The operation called as a library calls it."""
    op = BY_NAME[name]
    try:
        out = await op.call(ctx, msgspec.convert(given, op.input))
    except OperationError as exc:
        raise Refused(exc.type, exc.failure.status, exc.detail) from None
    if name in ("follow", "progress-follow"):
        return [record async for record in out]
    return out


def request_of(name: str, given: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """The HTTP request of an operation's first route for ``given`` (wire names)."""
    op = BY_NAME[name]
    route = op.http[0]
    encode = {f.name: f.encode_name for f in msgspec.structs.fields(op.input)}
    rest = dict(given)

    def fill(found: re.Match[str]) -> str:
        return quote(str(rest.pop(encode[found.group(1)])), safe="")

    path = re.sub(r"{(\w+)}", fill, route.path)
    if route.method in ("GET", "DELETE"):
        return route.method, path, {"params": rest}
    return route.method, path, {"json": rest}


@asynccontextmanager
async def http_client(host: Host, flows: Any = None) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(host, Tokens.parse(TOKENS, "tokens"), flows)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://flowcore") as client:
        yield client


async def over_http(
    client: httpx.AsyncClient, name: str, given: dict[str, Any], access: str = "admin"
) -> Any:
    """The operation's request sent with a token of ``access``; its reply decoded."""
    op = BY_NAME[name]
    method, path, parts = request_of(name, given)
    headers = {"Authorization": f"Bearer {TOKEN[access]}"}
    reply = await client.request(method, path, headers=headers, **parts)
    route = op.http[0]
    if reply.status_code != route.status:
        problem = reply.json()
        raise Refused(
            problem["type"].removeprefix("/problems/"), reply.status_code, problem["detail"]
        )
    if route.status == 204:
        return None
    if route.media_type == NDJSON:
        if op.output is bytes:
            return reply.content
        return [r for r in flowcore.iter_records(reply.content) if isinstance(r, flowcore.Record)]
    return msgspec.json.decode(reply.content, type=op.output)


def operator(host: Host, flows: Any) -> Context:
    return Context(host, Principal.operator(), flows=flows)


# --- the command line ------------------------------------------------------------------


# How each command spells its input (wire names) on the command line, where it is
# not ``--field-name VALUE`` / positional arguments in order: what a person types.
def _spelled(name: str, given: dict[str, Any]) -> list[str]:
    import json

    g = dict(given)
    text = json.dumps
    if name == "signal":
        argv = [g["runId"], g["name"], "--data", text(g.get("payload"))]
        return argv + (["--key", g["key"]] if g.get("key") else [])
    if name == "signal-key":
        return [g["name"], g["key"], "--data", text(g.get("payload"))]
    if name == "answer":
        return [g["runId"], g["key"], "--data", text(g["answer"])]
    if name == "upgrade":
        return [g["runId"], "--to", g["flow"]] + (["--dry-run"] if g.get("dryRun") else [])
    if name == "scheduled.add":
        argv = [g["runId"], g["tool"], "--input", text(g.get("input"))]
        return [*argv, "--delay", f"{g.get('delayMs', 0)}ms"]
    if name == "prune":
        argv = ["--settled-before", g["settledBefore"]]
        return argv + (["--dry-run"] if g.get("dryRun") else [])
    if name == "fork":
        argv = [g["runId"], "--run-id", g["newRunId"]]
        return argv + (
            ["--from-step", g["fromStep"]] if "fromStep" in g else ["--at", str(g["at"])]
        )
    if name == "follow":
        return [g["runId"], "--follow", "--start-index", str(g.get("start", 0))]
    if name == "events":
        return [g["runId"], "--start-index", str(g.get("start", 0))]
    if name == "progress":
        return [g["runId"], "--from", str(g.get("start", 0))]
    if name == "progress-follow":
        return [g["runId"], "--follow", "--from", str(g.get("start", 0))]
    if name == "scheduled.list":
        return [g["runId"]]
    if name == "schedule.add":
        return ["--spec", g["flow"]]
    if name == "update":
        return [g["runId"], g["name"], "--input", text(g.get("input")), "--id", g["updateId"]]
    if name == "update-result":
        return [g["runId"], g["updateId"]]
    if name == "update-with-start":
        argv = [g["flow"], g["name"], "--run-id", g["runId"], "--input", text(g.get("input"))]
        return [*argv, "--update-input", text(g.get("updateInput")), "--id", g["updateId"]]
    op = BY_NAME[name]
    fields = {f.encode_name: f.name for f in msgspec.structs.fields(op.input)}
    argv = [str(g.pop(encode)) for encode, field in fields.items() if field in op.arguments]
    for encode, value in g.items():
        option = "--" + fields[encode].replace("_", "-")
        if value is True:
            argv.append(option)
        elif value not in (None, False):
            argv += [option, value if isinstance(value, str) else text(value)]
    return argv


def command_line(name: str, given: dict[str, Any]) -> list[str]:
    """The command of an operation's scenario, with ``--json`` (host options apart)."""
    op = BY_NAME[name]
    # follow: events --follow; progress-follow: progress --follow
    words = list(op.command) if op.command is not None else [name.removesuffix("-follow")]
    if name == "follow":
        words = ["events"]
    if name == "run-counts":  # runs --counts
        return ["runs", *_spelled(name, given), "--counts", "--json"]
    return [*words, *_spelled(name, given), "--json"]
