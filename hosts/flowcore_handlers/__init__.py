"""The handler contract shared by every flowcore host.

A *tools module* is an ordinary Python module with up to three mappings:

    TOOLS  = {"pagerduty.get_incident": get_incident, ...}   # call-tool
    AGENTS = {"triager": triage, ...}                        # run-agent
    TEAMS  = {"reviewers": review, ...}                      # run-team (undeclared teams)

Each handler is a plain callable, sync or ``async``, that receives the effect
(a ``flowcore.CallTool``, ``RunAgent`` or ``RunTeam``: input or prompt, the
idempotency key, the remaining budget) and returns its output, or a
``Result(output, usage)`` to report usage. Raising ``HandlerError(type,
message, retryable=..., details=...)`` fails the effect with that error type
(``details``: JSON data the flow reads as ``${error.details...}``, at most
``MAX_ERROR_DETAILS_BYTES``; bad ones raise ``DetailsError`` where the
``HandlerError`` is made); raising
``OutcomeUnknown`` says the handler cannot tell whether the work happened
(a connection lost mid-call), reported as ``effect-outcome-unknown`` so the
flow's execution class decides (re-issue with the same key, or fail with
``outcome-unknown``); any other exception fails it with the exception's
class name as the type.

The same module works on every host (local, Temporal).

**Cancellation.** When the run stops waiting for work that is still running
(its branch lost a race, its step timed out, the run was cancelled), the host
tells the handler: an ``async`` handler is cancelled (``asyncio.CancelledError``
at its next ``await``), and every handler can ask ``cancelled()`` (a sync one
in its thread, between two pieces of its work) or wait on ``cancellation()``
(a ``threading.Event``). What it still returns is a late result: recorded,
it changes nothing in the run.

**Heartbeats.** A step with ``heartbeat_timeout_ms`` asks its work to report
progress: the handler calls ``heartbeat(details)`` (from a sync handler's
thread or an ``async`` one) at least that often. An attempt that goes
quiet for longer is stopped by the host (told as on a cancel) and reported
as ``heartbeat-timeout`` with the last details heartbeated (JSON data, at
most ``MAX_HEARTBEAT_DETAILS_BYTES``; bad ones raise ``HeartbeatError`` in
the handler). The next attempt reads them with ``heartbeat_details()`` (also
the effect's ``heartbeat_details``) and resumes from there.

**Context.** ``context()`` inside a handler gives its ``HandlerContext``
(``_context``): the run id and root run id, the idempotency key, the step
and its attempt, the tool's execution class, the run's principal, the flow
id and version, the remaining budget and the step's deadline (``None``
where the host does not know one), ``heartbeat``/``cancelled``/
``cancellation`` as above, and what a handler asks of its run: ``schedule``
a call (its id; the same when the handler runs again with the same key, so
nothing is scheduled twice), ``cancel_scheduled``, ``scheduled``, ``signal``
a run (its own included), each with an ``async`` twin (``aschedule``, ...).
Outside a handler it raises ``NoHandlerContext``. The local host and
Temporal set it whole (specs/local.md §4.1, specs/temporal.md); the
simulator hands the same facts in ``Call.place``.

**Progress.** A handler calls ``publish(data)`` (a text chunk or JSON data, at
most ``MAX_PROGRESS_ITEM_BYTES``; bad ones, or a call outside a handler, raise
``ProgressError``) to add to its run's progress stream, which clients follow
from an index (specs/local.md, "Progress streams"). The decision function
never reads it. Run without a host's sink (``run_handler`` alone), items
are checked and dropped; ``publishes()`` tells a handler which it is.

**Authorization.** ``Authorize``, ``Unauthorized``, ``refusal`` and
``refused_event``: the hook a host asks before a handler runs, on every host
(``_authorize``).

``load_registry`` imports a module by dotted name or from a ``.py`` path
(``tools_module_name`` says which, and makes a path absolute so that it
resolves the same from any working directory); ``missing_handlers`` lists
the handlers a flow needs that a registry lacks, so a host can refuse a run
before its first dispatch; ``run_handler`` runs one handler and also hands
back the exception it raised, so a host can keep its traceback
(``format_traceback``) beside the run, off the wire.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

import flowcore
from flowcore import (
    CallTool,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    RunAgent,
    RunTeam,
    Usage,
)

from . import _progress
from ._authorize import Authorize, Unauthorized, refusal, refused_event
from ._checked import MAX_MESSAGE_CHARS, checked_json, safe_text
from ._context import (
    ContextError,
    ContextHost,
    ContextSource,
    HandlerContext,
    NoHandlerContext,
    context,
    context_var,
)
from ._host import (
    RUN_STATUSES,
    Deleted,
    Host,
    HostFailure,
    HostRefusal,
    NothingToCancel,
    NotPending,
    RunCommands,
    RunPage,
    RunQuery,
    RunReads,
    RunSettled,
    RunSummary,
    ScheduledCalls,
    ScheduledCallView,
    Schedules,
    UnknownRun,
    UnknownSchedule,
    UnknownUpdate,
    UpdateOutcome,
    status_problem,
)
from ._limits import LimitError, ToolLimit, parse_tool_limits
from ._progress import (
    MAX_PROGRESS_ITEM_BYTES,
    ProgressError,
    ProgressSink,
    publish,
    publishes,
    publishing,
)
from ._threads import HandlerThreads

__all__ = [
    "MAX_ERROR_DETAILS_BYTES",
    "Authorize",
    "Unauthorized",
    "refusal",
    "refused_event",
    "ContextError",
    "ContextHost",
    "ContextSource",
    "HandlerContext",
    "NoHandlerContext",
    "context",
    "MAX_TRACEBACK_BYTES",
    "Deleted",
    "DetailsError",
    "Handler",
    "HandlerError",
    "HandlerThreads",
    "HeartbeatError",
    "Host",
    "HostFailure",
    "HostRefusal",
    "Heartbeats",
    "MAX_HEARTBEAT_DETAILS_BYTES",
    "MAX_PROGRESS_ITEM_BYTES",
    "LimitError",
    "NotPending",
    "NothingToCancel",
    "OutcomeUnknown",
    "ProgressError",
    "ProgressSink",
    "RegistryError",
    "UNENCODABLE_OUTPUT",
    "Registry",
    "Result",
    "RunCommands",
    "RunPage",
    "RunQuery",
    "RunReads",
    "RunSettled",
    "RUN_STATUSES",
    "RunSummary",
    "ScheduledCallView",
    "ScheduledCalls",
    "Schedules",
    "ToolLimit",
    "UnknownRun",
    "UnknownSchedule",
    "UnknownUpdate",
    "UpdateOutcome",
    "call_handler",
    "cancellation",
    "cancelled",
    "cancelled_event",
    "format_traceback",
    "heartbeat",
    "heartbeat_details",
    "heartbeat_timeout_event",
    "load_registry",
    "load_module",
    "missing_handlers",
    "needed_handlers",
    "outcome_event",
    "parse_tool_limits",
    "publish",
    "publishes",
    "publishing",
    "registry_from_module",
    "run_handler",
    "safe_text",
    "status_problem",
    "waits_for_cancel",
    "tools_module_name",
]

Handler = Callable[[Any], Any]
WorkEffect = CallTool | RunAgent | RunTeam

# The cancel request of the work a handler runs (``run_handler``'s ``cancel``).
_CANCEL: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar(
    "flowcore_cancel", default=None
)
_NEVER = threading.Event()  # for a handler run without a cancel request


def cancellation() -> threading.Event:
    """Inside a handler: an event the host sets when the run no longer wants the
    work (a lost race, a timeout, a cancelled run). Outside one, or on a host
    that runs it without a cancel request, an event that is never set."""
    return _CANCEL.get() or _NEVER


def cancelled() -> bool:
    """Inside a handler: whether the host asked to stop the work (``cancellation``)."""
    return cancellation().is_set()


MAX_HEARTBEAT_DETAILS_BYTES = 64 * 1024
"""Heartbeat details are JSON data of at most this many bytes."""


class HeartbeatError(ValueError):
    """``heartbeat`` was given details flowcore cannot keep (not JSON data, too big)."""


class Heartbeats:
    """The heartbeats of one running attempt, as its host watches them.

    ``details``: the last details heartbeated, at first those the effect
    brought from an earlier attempt. ``on_beat`` is called at each heartbeat,
    in the handler's thread: a host passes something thread-safe.
    """

    def __init__(self, given: Any = None, on_beat: Callable[[], None] | None = None) -> None:
        self.given = given
        self.details = given
        self.beats = 0
        self._on_beat = on_beat
        self._lock = threading.Lock()

    def beat(self, details: Any = None) -> None:
        with self._lock:
            if details is not None:
                self.details = details
            self.beats += 1
        if self._on_beat is not None:
            self._on_beat()


_BEATS: contextvars.ContextVar[Heartbeats | None] = contextvars.ContextVar(
    "flowcore_heartbeats", default=None
)


def heartbeat(details: Any = None) -> None:
    """Inside a handler: say the work is alive, with ``details`` of its progress
    (JSON data; ``None`` keeps the last ones). Raises ``HeartbeatError`` for
    details flowcore cannot keep. Outside a handler, or for work without a
    heartbeat timeout, it only checks the details."""
    if details is not None:
        data = checked_json(
            details, "heartbeat details", MAX_HEARTBEAT_DETAILS_BYTES, HeartbeatError
        )
        details = msgspec.json.decode(data)  # as they are now: the handler may change its own
    beats = _BEATS.get()
    if beats is not None:
        beats.beat(details)


def heartbeat_details() -> Any:
    """Inside a handler: the last details an earlier attempt of this step
    heartbeated before it timed out (``None``: there are none)."""
    beats = _BEATS.get()
    return None if beats is None else beats.given


def cancelled_event(effect: WorkEffect, at_ms: int) -> EffectFailed:
    """What a host reports for a call of ``cancellation: wait_cancellation_completed``
    whose handler stopped when cancelled (an ``async`` one raised ``CancelledError``,
    or it never began): the end the run waits for (language.md §9.2)."""
    tag = effect.__struct_config__.tag
    message = f"{tag} {effect.idempotency_key} stopped when cancelled"
    error = ErrorInfo(type="cancelled", message=message)
    return EffectFailed(idempotency_key=effect.idempotency_key, error=error, at_ms=at_ms)


def waits_for_cancel(effect: WorkEffect) -> bool:
    """Whether the run waits for the end of this call once it cancels it
    (``cancellation: wait_cancellation_completed``): the host must then report it."""
    return effect.cancellation == "wait-cancellation-completed"


def heartbeat_timeout_event(effect: WorkEffect, details: Any, at_ms: int) -> EffectFailed:
    """What a host reports for an attempt it stopped for not heartbeating: the
    fact, ``heartbeat-timeout`` with the last details; the interpreter decides
    what it means for the step (language.md §6)."""
    ms = effect.heartbeat_timeout_ms
    error = ErrorInfo(
        type="heartbeat-timeout", message=f"no heartbeat within {ms} ms", details=details
    )
    return EffectFailed(idempotency_key=effect.idempotency_key, error=error, at_ms=at_ms)


@dataclass(frozen=True)
class Result:
    """A handler's output with the usage it incurred (steps, cost in minor units)."""

    output: Any = None
    usage: Usage | None = None


MAX_ERROR_DETAILS_BYTES = 64 * 1024
"""A ``HandlerError``'s details are JSON data of at most this many bytes."""


class DetailsError(ValueError):
    """A ``HandlerError`` was given details flowcore cannot keep (not JSON data, too big)."""


class HandlerError(Exception):
    """A failure a handler reports on purpose, with the type flows can catch.

    ``details``: JSON data the effect's error carries (``error.details`` to
    the flow's expressions, e.g. ``${error.details.status}`` in a catch),
    checked here: anything that is not flowcore data, or over
    ``MAX_ERROR_DETAILS_BYTES`` as JSON, raises ``DetailsError`` naming
    where. ``usage``: what the failed work still spent, charged to the run.
    """

    def __init__(
        self,
        type: str,
        message: str = "",
        retryable: bool = False,
        usage: Usage | None = None,
        details: Any = None,
    ) -> None:
        super().__init__(message or type)
        self.type = type
        self.message = message
        self.retryable = retryable
        self.usage = usage  # what the failed work still spent: charged to the run
        self.details = _error_details(type, details)


def _error_details(type: str, details: Any) -> Any:
    """``details`` as flowcore keeps them (a copy: the handler may change its own)."""
    if details is None:
        return None
    try:
        flowcore.check_data(details, "$", "details")
        data = msgspec.json.encode(details)
    except (flowcore.DataError, TypeError, ValueError) as exc:
        raise DetailsError(
            f"HandlerError {safe_text(type, 100)!r}: details cannot be stored: {safe_text(exc)}"
        ) from None
    if len(data) > MAX_ERROR_DETAILS_BYTES:
        raise DetailsError(
            f"HandlerError {safe_text(type, 100)!r}: details are {len(data):,} bytes as JSON;"
            f" at most {MAX_ERROR_DETAILS_BYTES:,} are kept"
        )
    return msgspec.json.decode(data)


class OutcomeUnknown(Exception):
    """The handler cannot tell whether its work happened (e.g. the connection broke mid-call).

    Reported as ``effect-outcome-unknown``: a ``readonly`` or ``idempotent``
    tool is then issued again with the same idempotency key, anything else
    fails its step with ``outcome-unknown``. Raise it only when the work may
    have happened; when it surely did not, raise ``HandlerError`` instead.
    """


class RegistryError(ValueError):
    """The tools module cannot be loaded or is not shaped like one.

    ``module`` is the tools module's name as given; ``detail`` the formatted
    traceback of the import that failed, when one did.
    """

    def __init__(self, message: str, module: str = "", detail: str | None = None) -> None:
        super().__init__(message)
        self.module = module
        self.detail = detail


@dataclass(frozen=True)
class Registry:
    tools: Mapping[str, Handler] = field(default_factory=dict)
    agents: Mapping[str, Handler] = field(default_factory=dict)
    teams: Mapping[str, Handler] = field(default_factory=dict)
    module: str = ""  # the tools module's name as loaded ("" when there is none)

    def handler_for(self, effect: WorkEffect) -> Handler | None:
        if isinstance(effect, CallTool):
            return self.tools.get(effect.tool)
        if isinstance(effect, RunAgent):
            return self.agents.get(effect.agent_id)
        return self.teams.get(effect.team_id)


def registry_from_module(module: Any, name: str | None = None) -> Registry:
    """The handlers of a tools module; ``name`` is how it was loaded (default ``__name__``)."""
    found: dict[str, dict[str, Handler]] = {}
    for attr in ("TOOLS", "AGENTS", "TEAMS"):
        table = getattr(module, attr, {})
        if not isinstance(table, Mapping) or not all(
            isinstance(k, str) and callable(v) for k, v in table.items()
        ):
            label = name or getattr(module, "__name__", module)
            raise RegistryError(
                f"tools module {label!r}: {attr} must map names to callables", str(label)
            )
        found[attr] = dict(table)
    label = name or getattr(module, "__name__", "")
    return Registry(found["TOOLS"], found["AGENTS"], found["TEAMS"], str(label))


def _is_path(name: str) -> bool:
    return name.endswith(".py") or "/" in name or os.sep in name


def tools_module_name(name: str | None) -> str | None:
    """A tools module's name as a run should store it.

    A ``.py`` path (anything ending in ``.py`` or holding a path separator)
    becomes absolute, so that a worker started in another directory loads
    the same file; a dotted module name stays as it is. ``None`` and ``""``
    give ``None`` (no tools module).
    """
    if not name:
        return None
    if _is_path(name):
        return str(Path(name).expanduser().resolve())
    return name


def load_registry(name: str | None) -> Registry:
    """Import a tools module by dotted name, or from a ``.py`` file path.

    ``None`` gives an empty registry (every effect then fails with no-handler).
    """
    if not name:
        return Registry()
    return registry_from_module(load_module(name, "tools module"), name)


def load_module(name: str, what: str = "module") -> Any:
    """Import a module by dotted name, or from a ``.py`` file path (``what`` names
    it in the ``RegistryError`` an import that fails raises)."""
    try:
        if _is_path(name):
            path = Path(name).expanduser().resolve()
            # One module per file: two tools files with the same name in
            # different directories must not share an entry in sys.modules.
            digest = hashlib.sha256(str(path).encode("utf-8", "surrogateescape")).hexdigest()
            module_name = f"flowcore_tools_{path.stem}_{digest[:12]}"
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
        why = safe_text(f"{type(exc).__name__}: {exc}", 1000)
        raise RegistryError(
            f"cannot import {what} {name!r}: {why}", name, format_traceback(exc)
        ) from None
    return module


MAX_TRACEBACK_BYTES = 64 * 1024
"""A stored traceback keeps at most its last this many bytes (UTF-8)."""


def format_traceback(exc: BaseException, limit: int = MAX_TRACEBACK_BYTES) -> str:
    """``exc``'s formatted traceback as storable text: its last ``limit`` bytes.

    The end is what is kept: the innermost frames and the exception's line.
    Lone surrogates are escaped, as in ``safe_text``.
    """
    try:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:  # a hostile __str__ may raise while formatting
        text = f"{type(exc).__name__}: <unprintable>\n"
    data = text.encode("utf-8", "backslashreplace")
    if len(data) <= limit:
        return data.decode("utf-8")
    cut = data[len(data) - limit :].decode("utf-8", "ignore")  # a character cut in two goes
    return f"… ({len(data):,} bytes; the last {limit:,} are kept)\n{cut}"


def needed_handlers(flow: flowcore.Flow) -> dict[str, set[str]]:
    """The handlers ``flow`` can call, by table: ``{"tools", "agents", "teams"}``.

    Tools of ``call_tool`` and ``schedule`` steps, agents of ``run_agent``
    steps and of the members of declared teams, and teams the flow does not
    declare (the host's ``TEAMS``). Subflows are not followed: they are
    flows of their own.
    """
    used = flowcore.flow_references(flow)
    needed: dict[str, set[str]] = {
        "tools": set(used.tools),
        "agents": set(used.agents),
        "teams": set(),
    }
    for name in used.teams:
        team = flow.teams.get(name)
        if team is None:
            needed["teams"].add(name)
        else:
            needed["agents"].update(member.agent for member in team.members)
    return needed


_SINGULAR = {"tools": "tool", "agents": "agent", "teams": "team"}


def missing_handlers(registry: Registry, flows: Iterable[flowcore.Flow]) -> list[str]:
    """What ``flows`` call that ``registry`` has no handler for, e.g. ``"tool 'lookup'"``.

    Each name once, in a fixed order (tools, agents, teams; by name), with
    the flow that needs it when several flows are checked.
    """
    flows = list(flows)
    found: dict[tuple[str, str], list[str]] = {}
    for flow in flows:
        for table, names in needed_handlers(flow).items():
            have: Mapping[str, Handler] = getattr(registry, table)
            for name in names:
                if name not in have:
                    found.setdefault((table, name), []).append(flow.id)
    order = {"tools": 0, "agents": 1, "teams": 2}
    out = []
    for (table, name), where in sorted(found.items(), key=lambda i: (order[i[0][0]], i[0][1])):
        label = f"{_SINGULAR[table]} {name!r}"
        if len(flows) > 1:
            label += f" (flow {', '.join(dict.fromkeys(where))})"
        out.append(label)
    return out


def _error_of(exc: BaseException) -> ErrorInfo:
    if isinstance(exc, HandlerError):
        try:  # checked when it was made, but the attribute may have changed since
            details = _error_details(exc.type, getattr(exc, "details", None))
        except DetailsError as bad:
            exc = bad
        else:
            return ErrorInfo(
                type=safe_text(exc.type, flowcore.MAX_NAME_CHARS) or "HandlerError",
                message=safe_text(exc.message, MAX_MESSAGE_CHARS),
                retryable=exc.retryable is True,
                details=details,
            )
    return ErrorInfo(
        type=type(exc).__name__,
        message=safe_text(exc, MAX_MESSAGE_CHARS),
        retryable=getattr(exc, "retryable", False) is True,
    )


UNENCODABLE_OUTPUT = flowcore.UNENCODABLE_OUTPUT
"""The error type of an effect whose handler returned something that is not flowcore data."""


Outcome = EffectSucceeded | EffectFailed | EffectOutcomeUnknown
"""The events that report how a handler went."""


def outcome_event(
    effect: WorkEffect, outcome: Any, error: BaseException | None, at_ms: int
) -> Outcome:
    """The event that reports a handler's return value or exception.

    ``OutcomeUnknown`` gives ``effect-outcome-unknown``; any other exception
    ``effect-failed``.

    A return value flowcore cannot store (not JSON data, an integer beyond
    64 bits, a lone surrogate, too large) fails this effect, once, with
    ``unencodable-output`` naming the path of the bad value: the handler is
    not run again, and no other run is touched.
    """
    key = effect.idempotency_key
    if isinstance(error, OutcomeUnknown):
        return EffectOutcomeUnknown(idempotency_key=key, at_ms=at_ms)
    if error is not None:
        usage = error.usage if isinstance(error, HandlerError) else None
        return EffectFailed(idempotency_key=key, error=_error_of(error), usage=usage, at_ms=at_ms)
    output, usage = outcome, None
    if isinstance(outcome, Result):
        output, usage = outcome.output, outcome.usage
    return flowcore.result_event(key, output, usage, at_ms=at_ms)


async def run_handler(
    registry: Registry,
    effect: WorkEffect,
    now_ms: Callable[[], int],
    executor: Executor | HandlerThreads | None = None,
    cancel: threading.Event | None = None,
    heartbeats: Heartbeats | None = None,
    context: ContextSource | None = None,
) -> tuple[Outcome, BaseException | None]:
    """Run the effect's handler: the event that reports it, and the exception it raised.

    The exception (None when the handler returned, or has no handler) is for
    the host's own records, its traceback with it (``format_traceback``); the
    event carries only its type and message. A sync handler runs in a thread
    of ``executor`` (a ``HandlerThreads`` costs the loop least; the loop's
    default executor when None, which holds only a few threads); an ``async``
    one on the loop. ``cancel``: the event the host sets to ask the handler to
    stop (``cancelled()`` inside it); a host that does also cancels the task
    awaiting this, which stops an ``async`` handler at its next ``await``.
    ``heartbeats``: where the handler's ``heartbeat`` calls go. ``context``:
    what ``context()`` gives inside the handler. A handler run without a
    progress sink (``publishing``) publishes into ``discard``.
    """
    if _progress.sink() is None:
        with publishing(_progress.discard):
            return await run_handler(
                registry, effect, now_ms, executor, cancel, heartbeats, context
            )
    if context is not None:
        context_token = context_var.set(context)
        try:
            return await run_handler(registry, effect, now_ms, executor, cancel, heartbeats)
        finally:
            context_var.reset(context_token)
    if heartbeats is not None:
        beats_token = _BEATS.set(heartbeats)
        try:
            return await run_handler(registry, effect, now_ms, executor, cancel)
        finally:
            _BEATS.reset(beats_token)
    if cancel is not None:
        token = _CANCEL.set(cancel)
        try:
            return await _run_handler(registry, effect, now_ms, executor)
        finally:
            _CANCEL.reset(token)
    return await _run_handler(registry, effect, now_ms, executor)


async def _run_handler(
    registry: Registry,
    effect: WorkEffect,
    now_ms: Callable[[], int],
    executor: Executor | HandlerThreads | None,
) -> tuple[Outcome, BaseException | None]:
    handler = registry.handler_for(effect)
    if handler is None:
        what = effect.__struct_config__.tag
        name = (
            getattr(effect, "tool", None)
            or getattr(effect, "agent_id", None)
            or getattr(effect, "team_id", "")
        )
        where = (
            f"in tools module {registry.module!r}" if registry.module else "(no tools module given)"
        )
        error = HandlerError("no-handler", f"no handler for {what} {name!r} {where}")
        return outcome_event(effect, None, error, now_ms()), None
    try:
        if inspect.iscoroutinefunction(handler):
            outcome = await handler(effect)
        else:
            call = functools.partial(contextvars.copy_context().run, handler, effect)
            if isinstance(executor, HandlerThreads):
                outcome = await executor.run(call)
            elif executor is None:
                outcome = await asyncio.to_thread(handler, effect)
            else:
                outcome = await asyncio.get_running_loop().run_in_executor(executor, call)
            if inspect.isawaitable(outcome):
                outcome = await outcome
    except Exception as exc:  # every handler failure becomes effect-failed (or -outcome-unknown)
        return _hinted(effect, outcome_event(effect, None, exc, now_ms())), exc
    return _hinted(effect, outcome_event(effect, outcome, None, now_ms())), None


_READ_AS = {CallTool: "its input is call.input", RunAgent: "its prompt is run.prompt"}


def _hinted(effect: WorkEffect, event: Outcome) -> Outcome:
    """A failure whose message is Python's words about the effect's own class (a handler
    that took the effect for its input: ``call["id"]``, or returned it), with what a
    handler receives said after it."""
    if not isinstance(event, EffectFailed):
        return event
    name = type(effect).__name__
    message = event.error.message
    if f"'{name}' object" not in message and f"a {name} is not JSON data" not in message:
        return event
    read = _READ_AS.get(type(effect), "its prompt is run.prompt")
    hint = f" (a handler receives the {name} effect itself, not its input: {read})"
    error = msgspec.structs.replace(event.error, message=safe_text(message + hint))
    return msgspec.structs.replace(event, error=error)


async def call_handler(
    registry: Registry,
    effect: WorkEffect,
    now_ms: Callable[[], int],
    executor: Executor | HandlerThreads | None = None,
    cancel: threading.Event | None = None,
    heartbeats: Heartbeats | None = None,
    context: ContextSource | None = None,
) -> Outcome:
    """Run the effect's handler and report how it went (``run_handler`` without the exception)."""
    event, _ = await run_handler(registry, effect, now_ms, executor, cancel, heartbeats, context)
    return event
