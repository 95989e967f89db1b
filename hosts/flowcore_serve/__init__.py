"""``flowcore serve``: an HTTP API and a web view on a host: a local-host
database (with its worker in the same process) or a Temporal namespace.

    async with LocalHost("flowcore.db", tools="myapp.tools") as host:
        app = create_app(host, load_tokens(None), flows="flows/")
        # any ASGI server; ``serve`` runs uvicorn and the worker in one process

Needs the ``serve`` extra (Litestar, uvicorn, Jinja2).
"""

from ._app import DEFAULT_BODY_LIMIT, DEFAULT_BODY_TIMEOUT_S, DEFAULT_MAX_STREAMS, create_app
from ._auth import TOKENS_ENV, Principal, TokenError, Tokens, load_tokens
from ._server import WorkerStopped, serve, serve_host

__all__ = [
    "DEFAULT_BODY_LIMIT",
    "DEFAULT_BODY_TIMEOUT_S",
    "DEFAULT_MAX_STREAMS",
    "TOKENS_ENV",
    "Principal",
    "TokenError",
    "Tokens",
    "WorkerStopped",
    "create_app",
    "load_tokens",
    "serve",
    "serve_host",
]
