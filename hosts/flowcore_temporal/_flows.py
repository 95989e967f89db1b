"""Parsed flows, kept per worker process (a passthrough module: outside the sandbox).

A workflow run gets its spec as text and parses it; parsing a 100-step YAML
spec takes tens of milliseconds, paid again by every run of the same spec and
by every replay. A ``Flow`` is an immutable value and ``parse_flow`` a pure
function, so a parsed flow can be shared by every workflow run in the process
without touching determinism. The sandbox re-imports modules that are not
passed through; this one is, so all runs share it. A workflow uses it only
when flowcore is passed through too (otherwise its ``Flow`` is another class).
"""

from __future__ import annotations

import threading
from types import ModuleType

import flowcore
from flowcore import Flow

__all__ = ["parse_cached", "serves"]

_LIMIT = 256
_cache: dict[tuple[str, str], Flow] = {}
_lock = threading.Lock()  # workflow activations run on several threads


def parse_cached(text: str, source_name: str) -> Flow:
    """``flowcore.parse_flow(text, source_name)``, once per process and spec."""
    key = (text, source_name)
    with _lock:
        flow = _cache.get(key)
    if flow is not None:
        return flow
    flow = flowcore.parse_flow(text, source_name=source_name)  # SpecError propagates
    with _lock:
        if len(_cache) >= _LIMIT:
            _cache.pop(next(iter(_cache)))
        _cache[key] = flow
    return flow


def serves(module: ModuleType) -> bool:
    """Whether the flows kept here are ``module``'s (the caller sees this flowcore)."""
    return module is flowcore
