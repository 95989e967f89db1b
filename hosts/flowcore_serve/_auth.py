"""Bearer tokens and the principals they stand for.

A token file (``flowcore serve --tokens FILE``) or the ``FLOWCORE_TOKENS``
environment variable holds one YAML (or JSON) document::

    tokens:
      - token: 3f9c...   # at least 16 characters
        principal: alice
        access: write    # read | write (the default) | admin

``read`` may list and look at its principal's runs; ``write`` may also start,
cancel, answer and signal them; ``admin`` may do all of that on every run
(runs started outside the server, by the command line or a schedule without an
owner, have no principal and are the admins') and change schedules. With neither a file nor
the variable, the server makes one admin token for the session and prints the
address that carries it.

Tokens are kept only as SHA-256 digests; a request's token is looked up by its
digest, so the comparison never runs over the secret itself.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from typing import Any, Final

import attrs
import yaml

from flowcore_ops import Principal

from ._types import Access

__all__ = [
    "MIN_TOKEN_CHARS",
    "TOKENS_ENV",
    "Principal",
    "TokenError",
    "Tokens",
    "load_tokens",
]

TOKENS_ENV: Final = "FLOWCORE_TOKENS"
MIN_TOKEN_CHARS: Final = 16
ACCESS: Final[tuple[Access, ...]] = ("read", "write", "admin")


class TokenError(Exception):
    """The token file or variable is not a valid token list (the message says where)."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


@attrs.frozen
class Tokens:
    by_digest: dict[bytes, Principal]
    generated: str | None = None  # the token made for this session, if none was given

    def lookup(self, token: str) -> Principal | None:
        return self.by_digest.get(_digest(token))

    @classmethod
    def parse(cls, text: str, source: str) -> Tokens:
        try:
            doc: Any = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise TokenError(f"{source}: not YAML or JSON: {str(exc)[:200]}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("tokens"), list):
            raise TokenError(f"{source}: expected a mapping with a list under 'tokens'")
        found: dict[bytes, Principal] = {}
        for n, item in enumerate(doc["tokens"]):
            where = f"{source}: tokens[{n}]"
            if not isinstance(item, dict):
                raise TokenError(f"{where}: expected a mapping with token and principal")
            unknown = set(item) - {"token", "principal", "access"}
            if unknown:
                raise TokenError(f"{where}: unknown field {sorted(unknown)[0]!r}")
            token, name = item.get("token"), item.get("principal")
            access = item.get("access", "write")
            if not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS:
                raise TokenError(
                    f"{where}.token: a string of at least {MIN_TOKEN_CHARS} characters"
                )
            if token != token.strip() or not token.isprintable():
                raise TokenError(f"{where}.token: no spaces or control characters")
            if not isinstance(name, str) or not 0 < len(name) <= 200 or not name.isprintable():
                raise TokenError(f"{where}.principal: a printable name of 1 to 200 characters")
            if access not in ACCESS:
                raise TokenError(f"{where}.access: one of {', '.join(ACCESS)}, not {access!r}")
            digest = _digest(token)
            if digest in found:
                raise TokenError(f"{where}.token: the same token is given twice")
            found[digest] = Principal(name, access)
        if not found:
            raise TokenError(f"{source}: the token list is empty")
        return cls(found)

    @classmethod
    def session(cls) -> Tokens:
        """One admin token made for this server session."""
        token = secrets.token_urlsafe(24)
        return cls({_digest(token): Principal("operator", "admin")}, generated=token)


def load_tokens(path: str | None) -> Tokens:
    """The tokens of ``path``, else of ``FLOWCORE_TOKENS``, else one made for the session."""
    if path is not None:
        try:
            with open(path, encoding="utf-8") as file:
                text = file.read(1 << 20)
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenError(f"cannot read token file {path}: {exc}") from None
        return Tokens.parse(text, path)
    env = os.environ.get(TOKENS_ENV)
    if env:
        return Tokens.parse(env, f"${TOKENS_ENV}")
    return Tokens.session()
