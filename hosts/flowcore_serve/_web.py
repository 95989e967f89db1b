"""The web view of ``flowcore serve``: a runs list, a page per run, and two runs
compared.

The pages are server-rendered shells (Jinja2, autoescaped) with a little
vanilla script that reads and acts through the JSON API with the browser's
cookie, so the view can show and do exactly what the API lets the principal
show and do. Mermaid (vendored under ``static/vendor/``) draws the diagram.

Authentication: ``?token=T`` on a page, or the login form, checks the token
and keeps it in the ``flowcore_token`` cookie (HttpOnly, SameSite=Strict),
then redirects to the same page without it, so the token leaves the address
bar and the history. The token is never written into a page or a script.
A state-changing request that relies on the cookie must carry this server's
Origin (the login and logout forms here; ``_http`` checks the API's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, unquote, urlencode

import anyio
import jinja2
from litestar import Request, Response, get, post
from litestar.handlers import HTTPRouteHandler
from litestar.response import Redirect
from litestar.router import Router
from litestar.static_files import create_static_files_router

import flowcore
from flowcore_handlers import HostFailure

from ._api import Api
from ._auth import Principal, Tokens
from ._http import COOKIE, Limits, same_origin

__all__ = ["web_routes"]

HERE: Final = Path(__file__).parent
LOGIN_BODY_LIMIT: Final = 8192  # a token and a path

# Mermaid writes <style> into the SVG it draws, so styles may be inline;
# scripts may only come from /static. Nothing may frame the pages.
_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline';"
        " img-src 'self' data:; connect-src 'self'; frame-ancestors 'none';"
        " base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make form posts send Origin: null
    "Cache-Control": "no-store",
}


def _next_path(text: str | None) -> str:
    """Where to go after logging in: a path on this server, never another site."""
    if not text or not text.startswith("/") or text.startswith("//") or "\\" in text:
        return "/"
    return text


AnyRequest = Request[Any, Any, Any]


class _Web:
    def __init__(self, api: Api, tokens: Tokens) -> None:
        self.api = api
        self.tokens = tokens
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )

    # --- responses ------------------------------------------------------------------

    def page(
        self, request: AnyRequest, name: str, status: int = 200, **context: object
    ) -> Response[Any]:
        text = self.templates.get_template(name).render(request=request, **context)
        return Response(text, status_code=status, headers=_HEADERS, media_type="text/html")

    def login_form(
        self, request: AnyRequest, error: str | None, status: int, next_path: str = "/"
    ) -> Response[Any]:
        response = self.page(
            request, "login.html", status, error=error, next_path=_next_path(next_path)
        )
        if status == 401:
            response.headers["WWW-Authenticate"] = 'Bearer realm="flowcore"'
        return response

    def with_cookie(self, request: AnyRequest, token: str, to: str) -> Response[Any]:
        response = Redirect(to, status_code=303)
        response.set_cookie(
            key=COOKIE,
            value=token,
            path="/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        response.headers["Cache-Control"] = "no-store"
        return response

    def principal(self, request: AnyRequest) -> Principal | Response[Any]:
        """The cookie's principal, or the response to send instead: the redirect
        that trades ``?token=`` for the cookie, or the login form."""
        here = request.url.path
        if "token" in request.query_params:
            token = request.query_params["token"]
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            to = here + ("?" + urlencode(rest) if rest else "")
            if self.tokens.lookup(token) is None:
                return self.login_form(
                    request, "That token is not one this server accepts.", 401, to
                )
            return self.with_cookie(request, token, to)
        cookie = request.cookies.get(COOKIE)
        if cookie:
            found = self.tokens.lookup(cookie)
            if found is not None:
                return found
            response = self.login_form(
                request, "The saved token is no longer accepted: log in again.", 401, here
            )
            response.delete_cookie(COOKIE, path="/")
            return response
        return self.login_form(request, None, 401, here)

    # --- pages ----------------------------------------------------------------------

    async def runs(self, request: AnyRequest) -> Response[Any]:
        who = self.principal(request)
        if isinstance(who, Response):
            return who
        return self.page(request, "runs.html", principal=who)

    async def schedules(self, request: AnyRequest) -> Response[Any]:
        who = self.principal(request)
        if isinstance(who, Response):
            return who
        return self.page(request, "schedules.html", principal=who)

    async def run(self, request: AnyRequest) -> Response[Any]:
        who = self.principal(request)
        if isinstance(who, Response):
            return who
        # The path as sent, decoded whole: a run id's slashes are its own.
        raw = request.scope.get("raw_path") or request.url.path.encode()
        run_id = unquote(raw.split(b"?", 1)[0].decode("latin-1")).removeprefix("/runs/")
        try:
            row = await self.api.host.summary(run_id)
        except (HostFailure, flowcore.RunIdError):
            row = None
        if row is None or not who.owns(row.principal):
            # Another principal's run reads as unknown: no one learns which ids exist.
            return self.page(
                request, "missing.html", 404, principal=who, detail=f"There is no run {run_id!r}."
            )
        return self.page(request, "run.html", principal=who, run=row)

    async def compare(self, request: AnyRequest) -> Response[Any]:
        who = self.principal(request)
        if isinstance(who, Response):
            return who
        # The runs are read (and refused) by the page's calls to the API.
        a = request.query_params.get("a") or ""
        b = request.query_params.get("b") or ""
        return self.page(request, "compare.html", principal=who, a=a, b=b)

    async def login(self, request: AnyRequest) -> Response[Any]:
        if not same_origin(request):
            return self.login_form(request, "Log in from this server's own page.", 403)
        data = b""
        limits: Limits = request.app.state["limits"]
        with anyio.move_on_after(limits.body_timeout_s) as waited:
            async for chunk in request.stream():
                data += chunk
                if len(data) > LOGIN_BODY_LIMIT:
                    return self.login_form(request, "The form is too large.", 413)
        if waited.cancelled_caught:
            response = self.login_form(request, "The form did not arrive in time.", 408)
            response.headers["Connection"] = "close"
            return response
        try:
            fields = parse_qs(data.decode("utf-8"), max_num_fields=4)
        except (UnicodeDecodeError, ValueError):
            fields = {}
        token = (fields.get("token") or [""])[0].strip()
        to = _next_path((fields.get("next") or ["/"])[0])
        if not token or self.tokens.lookup(token) is None:
            return self.login_form(request, "That token is not one this server accepts.", 401, to)
        return self.with_cookie(request, token, to)

    async def logout(self, request: AnyRequest) -> Response[Any]:
        if not same_origin(request):
            return self.login_form(request, "Log out from this server's own page.", 403)
        response = Redirect("/", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response


def web_routes(api: Api, tokens: Tokens) -> list[HTTPRouteHandler | Router]:
    web = _Web(api, tokens)
    # Pages, not operations: not in the API's document.
    page: dict[str, Any] = {"include_in_schema": False, "request_max_body_size": None}
    return [
        get("/", **page)(web.runs),
        get("/schedules", **page)(web.schedules),
        get("/compare", **page)(web.compare),
        # :path, since a child run's id holds a slash (parent/step#n)
        get("/runs/{run_id:path}", **page)(web.run),
        post("/login", status_code=200, **page)(web.login),
        post("/logout", status_code=200, **page)(web.logout),
        create_static_files_router("/static", [HERE / "static"], include_in_schema=False),
    ]
