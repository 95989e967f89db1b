"""The route builder on a table of declarations of its own (not ``Api``'s):
whatever the table declares is routed, typed, checked and documented the
same way. In-process, through httpx's ASGI transport."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, cast

import httpx
import msgspec
import pytest
from litestar import Response
from openapi_spec_validator import validate

from flowcore_serve import Tokens
from flowcore_serve._app import litestar_app
from flowcore_serve._http import Context, Limits, RawApiPaths, json_response
from flowcore_serve._routes import Operation, route_handlers

from .test_api import TOKEN_FILE, TOKENS


class NoteBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    note_text: Annotated[str, msgspec.Meta(min_length=1)]


class PageQuery(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    page_size: Annotated[int, msgspec.Meta(ge=1, le=10)] = 5
    tag: list[str] = []


class Echo(msgspec.Struct, kw_only=True, rename="camel"):
    who: str | None
    item: str
    note_text: str | None = None
    page_size: int | None = None
    tags: list[str] = []


async def add_note(ctx: Context) -> Response[Any]:
    body: NoteBody = ctx.body
    echo = Echo(who=ctx.principal.name, item=ctx.param("item"), note_text=body.note_text)
    return json_response(echo, 201)


async def list_notes(ctx: Context) -> Response[Any]:
    q: PageQuery = ctx.query
    echo = Echo(who=ctx.principal.name, item=ctx.param("item"), page_size=q.page_size, tags=q.tag)
    return json_response(echo)


TABLE = [
    Operation(
        "POST",
        "/api/items/{item}/notes",
        add_note,
        "Add a note",
        access="write",
        body=NoteBody,
        reply=Echo,
        status=201,
        errors=(404,),
        operation_id="addNote",
    ),
    Operation(
        "GET",
        "/api/items/{item}/notes",
        list_notes,
        "The notes",
        query=PageQuery,
        reply=Echo,
        operation_id="listNotes",
    ),
]


def app() -> RawApiPaths:
    tokens = Tokens.parse(TOKEN_FILE, "tokens")
    limits = Limits(body=200)
    return litestar_app(route_handlers(TABLE, tokens, limits), TABLE, limits, "1")


def call(who: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=cast(Any, app())),
            base_url="http://t",
            headers={"Authorization": f"Bearer {TOKENS[who]}"},
        ) as c:
            return await c.request(method, path, **kwargs)

    return asyncio.run(go())


def test_a_declared_operation_is_routed_typed_and_checked() -> None:
    r = call("alice", "POST", "/api/items/a%2Fb/notes", json={"noteText": "hi"})
    assert r.status_code == 201, r.text
    assert r.json() == {
        "who": "alice",
        "item": "a/b",
        "noteText": "hi",
        "pageSize": None,
        "tags": [],
    }
    r = call("alice", "GET", "/api/items/x/notes", params=[("pageSize", "3"), ("tag", "p")])
    assert r.json()["pageSize"] == 3 and r.json()["tags"] == ["p"]
    assert call("alice", "GET", "/api/items/x/notes").json()["pageSize"] == 5


@pytest.mark.parametrize(
    ("who", "method", "path", "kwargs", "status", "detail"),
    [
        ("reader", "POST", "/api/items/x/notes", {"json": {"noteText": "hi"}}, 403, "needs write"),
        ("alice", "POST", "/api/items/x/notes", {"json": {"noteText": ""}}, 422, "`$.noteText`"),
        ("alice", "POST", "/api/items/x/notes", {"json": {"note": "x"}}, 422, "`note`"),
        ("alice", "POST", "/api/items/x/notes", {"json": {"noteText": "x" * 300}}, 413, "200"),
        (
            "alice",
            "GET",
            "/api/items/x/notes?pageSize=11",
            {},
            422,
            "the query string: Expected `int` <= 10 - at `$.pageSize`",
        ),
        ("alice", "POST", "/api/items/x/notes", {}, 422, "missing required field `noteText`"),
        ("alice", "POST", "/api/items/x/notes", {"content": b"null"}, 422, "got `null`"),
        ("alice", "GET", "/api/items/x/notes?colour=red", {}, 422, "'colour'"),
        ("alice", "GET", "/api/items/x/notes?pageSize=1&pageSize=2", {}, 422, "twice"),
        ("alice", "DELETE", "/api/items/x/notes", {}, 405, "Method Not Allowed"),
    ],
)
def test_what_a_declaration_refuses(
    who: str, method: str, path: str, kwargs: dict[str, Any], status: int, detail: str
) -> None:
    r = call(who, method, path, **kwargs)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert detail in r.json()["detail"]


def test_the_document_comes_from_the_declarations() -> None:
    document = call("alice", "GET", "/openapi.json").json()
    validate(document)
    item = document["paths"]["/api/items/{item}/notes"]
    post, get = item["post"], item["get"]
    assert (post["operationId"], post["x-access"], post["summary"]) == (
        "addNote",
        "write",
        "Add a note",
    )
    assert set(post["responses"]) == {"201", "401", "403", "404", "408", "413", "415", "422"}
    assert post["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/NoteBody"
    }
    assert document["components"]["schemas"]["NoteBody"]["additionalProperties"] is False
    assert (get["operationId"], get["x-access"]) == ("listNotes", "read")
    query = {p["name"]: p["schema"] for p in get["parameters"] if p["in"] == "query"}
    assert query["pageSize"] == {"type": "integer", "minimum": 1, "maximum": 10, "default": 5}
    assert set(get["responses"]) == {"200", "401", "422"}


def test_options_and_405_list_the_methods_of_the_paths_operations() -> None:
    options = call("alice", "OPTIONS", "/api/items/x/notes")
    assert options.status_code == 204
    assert options.headers["allow"] == "GET, HEAD, POST"
    refused = call("alice", "PUT", "/api/items/x/notes")
    assert refused.status_code == 405
    assert refused.headers["allow"] == options.headers["allow"]
    assert call("alice", "HEAD", "/api/items/x/notes").status_code == 200
