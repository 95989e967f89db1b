"""The web view of ``flowcore serve``: a runs list and a page per run.

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
from typing import Final
from urllib.parse import parse_qs, urlencode

import anyio
import jinja2
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from flowcore_local import HostError

from ._api import Api
from ._auth import Principal, Tokens
from ._http import COOKIE, same_origin

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


class _Web:
    def __init__(self, api: Api, tokens: Tokens, body_timeout: float) -> None:
        self.api = api
        self.tokens = tokens
        self.body_timeout = body_timeout
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.templates = Jinja2Templates(env=env)

    # --- responses ------------------------------------------------------------------

    def page(self, request: Request, name: str, status: int = 200, **context: object) -> Response:
        response = self.templates.TemplateResponse(request, name, dict(context), status)
        response.headers.update(_HEADERS)
        return response

    def login_form(
        self, request: Request, error: str | None, status: int, next_path: str = "/"
    ) -> Response:
        response = self.page(
            request, "login.html", status, error=error, next_path=_next_path(next_path)
        )
        if status == 401:
            response.headers["WWW-Authenticate"] = 'Bearer realm="flowcore"'
        return response

    def with_cookie(self, request: Request, token: str, to: str) -> Response:
        response = RedirectResponse(to, 303)
        response.set_cookie(
            COOKIE,
            token,
            path="/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        response.headers["Cache-Control"] = "no-store"
        return response

    def principal(self, request: Request) -> Principal | Response:
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

    async def runs(self, request: Request) -> Response:
        who = self.principal(request)
        if isinstance(who, Response):
            return who
        return self.page(request, "runs.html", principal=who)

    async def run(self, request: Request) -> Response:
        who = self.principal(request)
        if isinstance(who, Response):
            return who
        run_id = request.path_params["run_id"]
        try:
            row = await self.api.host.run(run_id)
        except HostError:
            row = None
        if row is None or not who.owns(row.principal):
            # Another principal's run reads as unknown: no one learns which ids exist.
            return self.page(
                request, "missing.html", 404, principal=who, detail=f"There is no run {run_id!r}."
            )
        return self.page(request, "run.html", principal=who, run=row)

    async def login(self, request: Request) -> Response:
        if not same_origin(request):
            return self.login_form(request, "Log in from this server's own page.", 403)
        data = b""
        with anyio.move_on_after(self.body_timeout) as waited:
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

    async def logout(self, request: Request) -> Response:
        if not same_origin(request):
            return self.login_form(request, "Log out from this server's own page.", 403)
        response = RedirectResponse("/", 303)
        response.delete_cookie(COOKIE, path="/")
        return response


def web_routes(api: Api, tokens: Tokens, body_timeout: float) -> list[BaseRoute]:
    web = _Web(api, tokens, body_timeout)
    return [
        Route("/", web.runs, methods=["GET"]),
        # :path, since a child run's id holds a slash (parent/step#n)
        Route("/runs/{run_id:path}", web.run, methods=["GET"]),
        Route("/login", web.login, methods=["POST"]),
        Route("/logout", web.logout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
