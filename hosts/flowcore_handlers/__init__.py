"""The handler contract shared by every flowcore host.

A *tools module* is an ordinary Python module with up to three mappings:

    TOOLS  = {"pagerduty.get_incident": get_incident, ...}   # call-tool
    AGENTS = {"triager": triage, ...}                        # run-agent
    TEAMS  = {"reviewers": review, ...}                      # run-team (undeclared teams)

Each handler is a plain callable, sync or ``async``, that receives the effect
(a ``flowcore.CallTool``, ``RunAgent`` or ``RunTeam``: input or prompt, the
idempotency key, the remaining budget) and returns its output, or a
``Result(output, usage)`` to report usage. Raising ``HandlerError(type,
message, retryable=...)`` fails the effect with that error type; any other
exception fails it with the exception's class name as the type.

The same module works on every host (local, Temporal).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import flowcore
from flowcore import (
    CallTool,
    EffectFailed,
    EffectSucceeded,
    ErrorInfo,
    RunAgent,
    RunTeam,
    Usage,
)

__all__ = [
    "Handler",
    "HandlerError",
    "RegistryError",
    "UNENCODABLE_OUTPUT",
    "Registry",
    "Result",
    "call_handler",
    "load_registry",
    "outcome_event",
    "registry_from_module",
    "safe_text",
]

Handler = Callable[[Any], Any]
WorkEffect = CallTool | RunAgent | RunTeam


@dataclass(frozen=True)
class Result:
    """A handler's output with the usage it incurred (steps, cost in minor units)."""

    output: Any = None
    usage: Usage | None = None


class HandlerError(Exception):
    """A failure a handler reports on purpose, with the type flows can catch."""

    def __init__(self, type: str, message: str = "", retryable: bool = False) -> None:
        super().__init__(message or type)
        self.type = type
        self.message = message
        self.retryable = retryable


class RegistryError(ValueError):
    """The tools module cannot be loaded or is not shaped like one."""


@dataclass(frozen=True)
class Registry:
    tools: Mapping[str, Handler] = field(default_factory=dict)
    agents: Mapping[str, Handler] = field(default_factory=dict)
    teams: Mapping[str, Handler] = field(default_factory=dict)
    module: str = ""

    def handler_for(self, effect: WorkEffect) -> Handler | None:
        if isinstance(effect, CallTool):
            return self.tools.get(effect.tool)
        if isinstance(effect, RunAgent):
            return self.agents.get(effect.agent_id)
        return self.teams.get(effect.team_id)


def registry_from_module(module: Any) -> Registry:
    found: dict[str, dict[str, Handler]] = {}
    for attr in ("TOOLS", "AGENTS", "TEAMS"):
        table = getattr(module, attr, {})
        if not isinstance(table, Mapping) or not all(
            isinstance(k, str) and callable(v) for k, v in table.items()
        ):
            raise RegistryError(
                f"{getattr(module, '__name__', module)}.{attr} must map names to callables"
            )
        found[attr] = dict(table)
    return Registry(
        found["TOOLS"], found["AGENTS"], found["TEAMS"], getattr(module, "__name__", "")
    )


def load_registry(name: str | None) -> Registry:
    """Import a tools module by dotted name, or from a ``.py`` file path.

    ``None`` gives an empty registry (every effect then fails with no-handler).
    """
    if not name:
        return Registry()
    try:
        if name.endswith(".py") or "/" in name:
            path = Path(name).resolve()
            module_name = f"flowcore_tools_{path.stem}"
            spec = importlib.util.spec_from_file_location(module_name, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"no Python module at {path}")
            module = sys.modules.get(module_name)
            if module is None:
                module = importlib.util.module_from_spec(spec)
                sys.modules[module_name] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    del sys.modules[module_name]  # as import does: no half-run module stays
                    raise
        else:
            if "" not in sys.path and os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(name)
    except Exception as exc:  # an import can fail in any way; say which module
        raise RegistryError(f"cannot import tools module {name!r}: {exc}") from None
    return registry_from_module(module)


MAX_MESSAGE_CHARS = 4096
"""An error message from a handler is cut to this many characters."""


def safe_text(value: Any, limit: int = MAX_MESSAGE_CHARS) -> str:
    """Any object's text as flowcore data: cut to ``limit`` characters, surrogates escaped."""
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception:  # an exception's __str__ may itself raise
        text = f"<unprintable {type(value).__name__}>"
    if len(text) > limit:
        text = f"{text[:limit]}… ({len(text):,} characters)"
    # A lone surrogate cannot be stored; keep it visible as an escape.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _error_of(exc: BaseException) -> ErrorInfo:
    if isinstance(exc, HandlerError):
        return ErrorInfo(
            type=safe_text(exc.type, flowcore.MAX_NAME_CHARS) or "HandlerError",
            message=safe_text(exc.message, MAX_MESSAGE_CHARS),
            retryable=exc.retryable is True,
        )
    return ErrorInfo(
        type=type(exc).__name__,
        message=safe_text(exc, MAX_MESSAGE_CHARS),
        retryable=getattr(exc, "retryable", False) is True,
    )


UNENCODABLE_OUTPUT = flowcore.UNENCODABLE_OUTPUT
"""The error type of an effect whose handler returned something that is not flowcore data."""


def outcome_event(
    effect: WorkEffect, outcome: Any, error: BaseException | None, at_ms: int
) -> EffectSucceeded | EffectFailed:
    """The event that reports a handler's return value or exception.

    A return value flowcore cannot store (not JSON data, an integer beyond
    64 bits, a lone surrogate, too large) fails this effect, once, with
    ``unencodable-output`` naming the path of the bad value: the handler is
    not run again, and no other run is touched.
    """
    key = effect.idempotency_key
    if error is not None:
        return EffectFailed(idempotency_key=key, error=_error_of(error), at_ms=at_ms)
    output, usage = outcome, None
    if isinstance(outcome, Result):
        output, usage = outcome.output, outcome.usage
    return flowcore.result_event(key, output, usage, at_ms=at_ms)


async def call_handler(
    registry: Registry,
    effect: WorkEffect,
    now_ms: Callable[[], int],
    executor: Executor | None = None,
) -> EffectSucceeded | EffectFailed:
    """Run the effect's handler and report how it went.

    A sync handler runs in a thread of ``executor`` (the loop's default one
    when None, which holds only a few threads); an async one on the loop.
    """
    handler = registry.handler_for(effect)
    if handler is None:
        what = effect.__struct_config__.tag
        name = (
            getattr(effect, "tool", None)
            or getattr(effect, "agent_id", None)
            or getattr(effect, "team_id", "")
        )
        error = HandlerError("no-handler", f"no handler for {what} {name!r} in the tools module")
        return outcome_event(effect, None, error, now_ms())
    try:
        if inspect.iscoroutinefunction(handler):
            outcome = await handler(effect)
        else:
            if executor is None:
                outcome = await asyncio.to_thread(handler, effect)
            else:
                call = functools.partial(contextvars.copy_context().run, handler, effect)
                outcome = await asyncio.get_running_loop().run_in_executor(executor, call)
            if inspect.isawaitable(outcome):
                outcome = await outcome
    except Exception as exc:  # every handler failure becomes effect-failed
        return outcome_event(effect, None, exc, now_ms())
    return outcome_event(effect, outcome, None, now_ms())
