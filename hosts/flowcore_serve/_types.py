"""The bodies only the HTTP API writes, as msgspec Structs: a problem. The
operations' inputs and outputs (the registry folder's flows included) are the
catalogue's (``flowcore_ops``), and ``/openapi.json`` is built from the same types."""

from __future__ import annotations

from typing import Any

import msgspec

from flowcore_ops import Access, FlowList, FlowSummary

__all__ = ["Access", "FlowList", "FlowSummary", "Problem"]


class _Reply(msgspec.Struct, kw_only=True, rename="camel"):
    """A reply body."""


class Problem(_Reply, omit_defaults=True):
    """An error, as ``application/problem+json`` (RFC 9457)."""

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    options: list[str] | None = None  # an answer's allowed options, when it was not one
    open_questions: list[str] | None = None
    # An upgrade refused because the run's log diverges from the new version:
    # the index of the first record that differs, and what each side says there.
    index: int | None = None
    expected: Any = None
    actual: Any = None
    # A refused update's or a failed query's code (``validator``, ``bad-args``, ...).
    code: str | None = None
