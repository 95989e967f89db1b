"""The web view (placeholder until it lands)."""

from __future__ import annotations

from starlette.routing import BaseRoute

from ._api import Api
from ._auth import Tokens

__all__ = ["web_routes"]


def web_routes(api: Api, tokens: Tokens) -> list[BaseRoute]:
    return []
