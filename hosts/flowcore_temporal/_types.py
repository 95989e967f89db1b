"""The values that cross Temporal's wire: the workflow's argument, and names.

A plain dataclass of JSON-ready fields, so that Temporal's default data
converter carries them and any Temporal client (the ``temporal`` CLI, another
SDK) can start a flowcore run by hand. Because anyone can, the workflow checks
what it was sent (``run_args_from_wire``) rather than trusting Temporal's
converter to have built a sound ``RunArgs``. This module must stay importable
inside the workflow sandbox: no I/O, no clock.
"""

from __future__ import annotations

import base64
import math
import zlib
from dataclasses import dataclass, field, fields
from typing import Any, Final

import msgspec
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate

import flowcore
from flowcore_handlers import HostFailure

__all__ = [
    "TemporalHostError",
    "METADATA_PREFIX",
    "metadata_attribute",
    "metadata_updates",
    "pack_state",
    "unpack_state",
    "ACTIVITY_NAME",
    "RUN_STATUS_ACTIVITY",
    "SIGNAL_KEYS_ATTRIBUTE",
    "ANSWER_BY_UPDATE",
    "ANSWER_UPDATE",
    "DEFAULT_ACTIVITY_TIMEOUT_MS",
    "DEFAULT_HEARTBEAT_TIMEOUT_MS",
    "DEFAULT_CONTINUE_AFTER_EVENTS",
    "MIN_CONTINUE_AFTER_EVENTS",
    "DEFAULT_TASK_QUEUE",
    "LOG_QUERY",
    "PROGRESS_BYTES",
    "PROGRESS_ITEMS",
    "PROGRESS_QUERY",
    "PROGRESS_SIGNAL",
    "FLOW_NAME_PREFIX",
    "UPDATE_REFUSED_ERROR",
    "UPDATES_QUERY",
    "flow_name",
    "temporal_name",
    "MAX_TIMEOUT_MS",
    "QUESTIONS_QUERY",
    "SCHEDULED_QUERY",
    "SCHEDULED_UPDATE",
    "NOT_PENDING_ERROR",
    "SWITCHING_ERROR",
    "UPGRADE_UPDATE",
    "STATUS_QUERY",
    "WAITS_QUERY",
    "WORKFLOW_NAME",
    "RunArgs",
    "RunArgsError",
    "check_run_args",
    "clip",
    "run_args_from_wire",
    "tool_queue",
]

WORKFLOW_NAME = "flowcore"
"""The Temporal workflow type that runs every flowcore flow."""

ACTIVITY_NAME = "flowcore_work"
"""The one activity type, ``flowcore_work(effect, tools, context)``: a call-tool,
run-agent or run-team effect in wire form, the tools module (``None``: the
worker's), and what the run knows of the work for its handler's context
(``work_context``; absent from an activity an older workflow scheduled)."""

RUN_STATUS_ACTIVITY = "flowcore_run_status"
"""Activity ``flowcore_run_status(run_id)``: the Temporal status of that run's workflow
(``RUNNING``, ``COMPLETED``...), or ``None`` when there is none; read when a
``signal-run`` could not be delivered, to tell ``unknown-run`` from ``run-settled``."""

SIGNAL_KEYS_ATTRIBUTE = "FlowcoreSignalKeys"
# The memo key under which a settled run's workflow keeps how it settled (a
# ``RUN_STATUSES`` word): visibility lists memos, so a run that failed, was cancelled
# or ran out of budget (each completes its workflow) is listed as what it is.
STATUS_MEMO = "flowcoreStatus"
"""The KeywordList search attribute a run keeps while it waits with a key: one
``name:key`` per signal name and key it waits for (empty when none)."""

ANSWER_UPDATE = "answer"
# ``answer`` with a third argument: the principal who answers.
ANSWER_BY_UPDATE = "answer-by"
"""Update ``answer(key, answer)``: answers an ask-human question, validated first."""

SCHEDULED_UPDATE = "scheduled"
"""Update ``scheduled(event)``: a scheduled-call event from outside the run, as its wire
object without ``atMs`` (``{"kind": "scheduled-cancel-requested", "scheduleId": ...}``,
``scheduled-run-now-requested``, ``scheduled-add-requested``); returns ``{id, done}``."""

UPGRADE_UPDATE = "upgrade"
"""Update ``upgrade({spec, specHash, at, snapshot})``: move the run to another
version of its flow. ``TemporalHost.upgrade`` sends it once the run's log
replays against the new spec (``flowcore.upgrade``): the new spec's text (or
``""`` for a run pinned by hash: the worker's registry has it), its hash, the
log index the check reached, and the state the replay ended in (zlib, base64).
Refused (``upgrade-rejected``) unless the run is where the check left it."""

NOT_PENDING_ERROR = "not-pending"
"""The error type of a scheduled-call cancel or run-now refused by the update's
validator because the call is not pending: nothing is written to the history,
and the host answers ``False``."""

SWITCHING_ERROR = "run-switching"
"""The error type of an update refused because the run is going over to a new
Temporal run at that moment; sent again, it reaches the new one."""

SCHEDULED_QUERY = "scheduled_calls"
"""Query ``scheduled_calls()``: the run's scheduled calls, pending and finished
(``flowcore.scheduled_calls``, as wire objects)."""

QUESTIONS_QUERY = "pending_questions"
LOG_QUERY = "log"
STATUS_QUERY = "status"
WAITS_QUERY = "waits"
"""Query ``waits()``: what the run waits for now (``flowcore.waiting_for``, a wire object)."""

PROGRESS_SIGNAL = "flowcore.progress"
"""Signal ``flowcore.progress({key, step, items})`` the work activity sends its own
workflow: the progress items its handler published (``items``: ``[at, json]``
pairs, each item's JSON as text), kept by the workflow in a bounded buffer.
The name is reserved: a flow's own signal of this name is taken for it."""

PROGRESS_QUERY = "progress"
"""Query ``progress(start)``: the run's progress items from index ``start``, as
log envelopes (``progress``; a ``progress.dropped`` gap first when items from
``start`` were dropped)."""

UPDATES_QUERY = "updates"
"""Query ``updates(update_id=None)``: the flow updates the run's incarnation knows
(``flowcore.updates_of``; one, or none, with ``update_id``), as wire objects."""

UPDATE_REFUSED_ERROR = "update-refused"
"""The error type of a flow update the run refused (``flowcore.validate_update``):
its details are ``{"code", "update"}``; refused by the validator, it never
reaches the history."""

FLOW_NAME_PREFIX = "flowcore/"
"""A flow's own update or query goes to the workflow under its own name, or under
this prefix and its name when the workflow's own handlers take that name
(``answer``, ``status``, ...): flowcore names never hold ``/``."""

_OWN_UPDATES: Final = frozenset({ANSWER_UPDATE, ANSWER_BY_UPDATE, SCHEDULED_UPDATE, UPGRADE_UPDATE})
_OWN_QUERIES: Final = frozenset(
    {SCHEDULED_QUERY, QUESTIONS_QUERY, LOG_QUERY, STATUS_QUERY, WAITS_QUERY, PROGRESS_QUERY}
    | {UPDATES_QUERY}
)


def temporal_name(name: str, kind: str) -> str:
    """The Temporal name of a flow's update (``kind`` ``"update"``) or query
    (``"query"``) ``name``: the name itself, prefixed when the workflow's own
    handler (or Temporal's, ``__...``) takes it."""
    own = _OWN_UPDATES if kind == "update" else _OWN_QUERIES
    return FLOW_NAME_PREFIX + name if name in own or name.startswith("__") else name


def flow_name(name: str) -> str:
    """The flow's update or query name a Temporal name stands for."""
    return name.removeprefix(FLOW_NAME_PREFIX)


PROGRESS_ITEMS: Final = 1_000
"""A run on Temporal keeps at most this many progress items (its newest)."""
PROGRESS_BYTES: Final = 1024 * 1024
"""A run on Temporal keeps at most this many bytes of progress data (its newest items)."""

METADATA_PREFIX = "flowcore_"
"""A flow's metadata field ``customer`` is the search attribute ``flowcore_customer``."""

ATTRIBUTE_TYPES: Final = {
    "string": "Keyword",
    "integer": "Int",
    "number": "Double",
    "boolean": "Bool",
}
"""The search attribute type of each metadata type."""


def metadata_attribute(name: str, kind: str) -> SearchAttributeKey[Any]:
    """The typed search attribute of metadata field ``name`` of type ``kind``."""
    full = METADATA_PREFIX + name
    match kind:
        case "string":
            return SearchAttributeKey.for_keyword(full)
        case "integer":
            return SearchAttributeKey.for_int(full)
        case "number":
            return SearchAttributeKey.for_float(full)
        case _:
            return SearchAttributeKey.for_bool(full)


def metadata_updates(
    declared: dict[str, Any], before: dict[str, Any] | None, after: dict[str, Any] | None
) -> list[SearchAttributeUpdate[Any]]:
    """The search attribute updates that take a run's metadata from ``before`` to
    ``after`` (a cleared field is unset), in the order the flow declares its fields."""
    old, new = before or {}, after or {}
    out: list[SearchAttributeUpdate[Any]] = []
    for name, kind in declared.items():
        if name not in new:
            if name in old:
                out.append(metadata_attribute(name, kind).value_unset())
            continue
        value = new[name]
        if name in old and old[name] == value:
            continue
        if kind == "number":
            value = float(value)
        out.append(metadata_attribute(name, kind).value_set(value))
    return out


DEFAULT_TASK_QUEUE = "flowcore"
DEFAULT_ACTIVITY_TIMEOUT_MS = 10 * 60 * 1000
"""start-to-close of one handler call; past it the outcome is unknown."""
DEFAULT_HEARTBEAT_TIMEOUT_MS = 30 * 1000

DEFAULT_CONTINUE_AFTER_EVENTS = 10_000
"""The history length at which a run continues as new by itself (``RunArgs``):
a fifth of Temporal's default limit of 51,200 events, so that the work in
flight when it is reached can finish well before the limit."""
"""The activity heartbeats while its handler runs; a dead worker is noticed this fast."""


class TemporalHostError(HostFailure):
    """Something the user can fix; the message is one line."""


@dataclass
class RunArgs:
    """The input of one ``flowcore`` workflow: everything a run needs, by value.

    ``spec`` is the flow's spec *text*, so workers need no registry of specs;
    ``flows`` maps the flow ids that ``run_subflow`` may name to their spec
    text, and is handed down to every child. ``run_id`` is flowcore's run id
    (idempotency keys start with it); empty means the workflow id. ``budget``
    caps the spec's own budget (a child gets its parent's remainder) in wire
    form: ``{"steps", "costMinorUnits", "wallClockMs"}``.

    ``tools`` names the tools module the activities use (a dotted module or a
    ``.py`` path on the workers' machines); ``None`` means the worker's own
    ``--tools``. ``activity_timeout_ms`` bounds one handler call (start to
    close) and ``heartbeat_timeout_ms`` how long a silent worker may hold one;
    either running out reports ``effect-outcome-unknown``.

    ``clock_origin_ms`` and ``clock_scale`` exist for simulations and tests:
    flowcore's clock reads ``clock_origin_ms`` when the root run starts and
    runs ``clock_scale`` times as fast as the workflow clock, and durable
    timers are shortened to match. Left unset, flowcore's clock *is* the
    workflow clock (epoch milliseconds). ``clock_started_ms`` is filled in for
    child runs so that the whole tree shares one clock.
    """

    spec: str
    input: Any = None
    run_id: str = ""
    budget: dict[str, int] | None = None
    depth: int = 0
    flows: dict[str, str] = field(default_factory=dict)
    tools: str | None = None
    source_name: str = "<spec>"
    activity_timeout_ms: int = DEFAULT_ACTIVITY_TIMEOUT_MS
    heartbeat_timeout_ms: int | None = DEFAULT_HEARTBEAT_TIMEOUT_MS
    clock_origin_ms: int | None = None
    clock_scale: float = 1.0
    clock_started_ms: int | None = None
    metadata: dict[str, Any] | None = None
    """Initial values of the flow's metadata fields (``flowcore.start``'s ``metadata``)."""
    schedule: str | None = None
    """The flowcore schedule that starts this run (a Temporal Schedule's action):
    ``input`` is then the schedule's input template, evaluated when the run
    starts with ``schedule.at`` the run's ``TemporalScheduledStartTime``."""
    continued: dict[str, Any] | None = None
    """Set on the Temporal run that carries a flowcore run into its next
    incarnation (``continue_as_new``): the ``continue-as-new`` effect (wire
    form, its report left out), which ``flowcore.continue_run`` starts from."""
    log_index: int = 0
    """The index of the incarnation's ``run.started`` record: one index sequence
    per flowcore run, across the Temporal runs of its incarnations."""
    signals: list[dict[str, Any]] = field(default_factory=list)
    """Signals ``{signal, payload, key}`` (``key`` only for a keyed signal) the
    last incarnation received after it had ended: reported to the new one, in
    order, as soon as it starts."""
    previous: list[dict[str, Any]] = field(default_factory=list)
    """The log records of the incarnation that ended (wire envelopes), which
    the new Temporal run keeps before its own, as the local host keeps them:
    whoever follows the log sees how the last incarnation ended."""
    fork: dict[str, Any] | None = None
    """A fork (``TemporalHost.fork``): ``{"runId", "index", "records"}``, the
    source run, the fork point and the source's log records before it (wire
    envelopes). The run is then ``flowcore.fork`` of them rather than a
    ``start`` of ``input``: it begins with the source's history up to there."""
    tool_queues: dict[str, str] = field(default_factory=dict)
    """The task queue of each limited tool's activities (``tool_queue``), handed
    down to every child; a tool not here runs on the workflow's own queue."""
    continue_after_events: int | None = DEFAULT_CONTINUE_AFTER_EVENTS
    """The history length (Temporal events) at which the workflow carries the
    run into a new Temporal run of the same workflow id, by itself; it also
    does when Temporal suggests it. ``None``: only when Temporal suggests it."""
    snapshot: str | None = None
    """Set on a Temporal run that goes on with a run the workflow carried over
    (``continue_after_events``): the run's state, ``encode_state`` compressed
    with zlib, in base64.
    The run goes on from it, the same incarnation, its log from ``log_index``."""
    execution: int = 1
    """Which Temporal run of the flowcore run this is (1, then one more for each
    continue-as-new, of either kind)."""
    spec_hash: str | None = None
    """The run's pinned spec (``Flow.spec_hash``). With ``spec`` empty the
    worker takes the text from its registry of spec versions (``--specs``);
    with both, they must agree."""
    flow_id: str | None = None
    """The pinned spec's flow id, to name it when a worker lacks it."""
    principal: str | None = None
    """Who started the run (``TemporalHost.start``); its child runs inherit it."""
    root_run_id: str | None = None
    """The run at the top of this run's tree of child runs, set on a child run
    (a handler's ``context().root_run_id``); None on a root run (itself)."""
    progress_next: int = 0
    """The index the run's next progress item takes: a run carried into a new
    Temporal run goes on counting (``PROGRESS_SIGNAL``)."""


def pack_state(state: flowcore.State) -> str:
    """A run's state as it crosses Temporal's wire (``RunArgs.snapshot``, the
    ``upgrade`` update): ``encode_state``, compressed with zlib, in base64. A
    state holds every result it may still read (a loop's outputs) and its keys
    repeat: zlib makes it about ten times smaller."""
    return base64.b64encode(zlib.compress(flowcore.encode_state(state), 1)).decode("ascii")


def unpack_state(text: str, flow: flowcore.Flow) -> flowcore.State:
    """The state ``pack_state`` made, pinned to ``flow``: ``ValueError`` for text
    that is not one, ``SnapshotMismatch``/``WireError`` as ``decode_state`` says."""
    try:
        data = zlib.decompress(base64.b64decode(text, validate=True))
    except (ValueError, zlib.error) as exc:  # (binascii.Error is a ValueError)
        raise ValueError(f"the snapshot is not a compressed flowcore state: {exc}") from None
    return flowcore.decode_state(data, flow)


def tool_queue(task_queue: str, tool: str) -> str:
    """The task queue of a limited tool's activities: its own, polled by a worker
    that applies the tool's limits (``flowcore_temporal.tool_workers``)."""
    return f"{task_queue}/tool/{tool}"


MIN_CONTINUE_AFTER_EVENTS: Final = 50
"""The lowest ``continue_after_events``: a new Temporal run needs a few events of its own."""

MAX_TIMEOUT_MS: Final = 100 * 365 * 24 * 3600 * 1000
"""The longest activity or heartbeat timeout a run may ask for (about a century)."""

_MAX_INT: Final = 2**63 - 1  # what flowcore's counts (budgets, timeouts) hold
_MAX_CLOCK_MS: Final = 2**53  # far beyond any real date; int64-safe once scaled
_MAX_CLOCK_SCALE: Final = 1e6
_BUDGET_KEYS: Final = ("steps", "costMinorUnits", "wallClockMs")
_FIELDS: Final = tuple(f.name for f in fields(RunArgs))


class RunArgsError(ValueError):
    """The workflow's argument is not a sound ``RunArgs``; the message names every bad field."""


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters (saying how long it was), lone surrogates escaped.

    For text from outside (a cancel reason, a foreign error message) that
    goes into flowcore's events or into a Temporal failure: both must be
    valid Unicode, and neither should hold megabytes.
    """
    if len(text) > limit:
        text = f"{text[:limit]}… ({len(text):,} characters)"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _show(value: Any) -> str:
    """A short, printable picture of a value from outside (never the whole of it)."""
    if isinstance(value, str):
        return ascii(value[:60]) + ("…" if len(value) > 60 else "")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"an integer of {value.bit_length()} bits"  # str() of it may be refused
    if value is None or isinstance(value, int | float):
        return ascii(value)
    return f"a {type(value).__name__}"


def _text_problem(value: Any, optional: bool = False, limit: int | None = None) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        return f"expected a string{' or null' if optional else ''}, got {_show(value)}"
    try:
        flowcore.check_data(value)
    except flowcore.DataError as exc:
        return exc.problem
    if limit is not None and len(value) > limit:
        return f"longer than {limit:,} characters"
    return None


def _int_problem(value: Any, low: int, high: int, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        null = " or null" if optional else ""
        return f"expected an integer from {low:,} to {high:,}{null}, got {_show(value)}"
    return None


def _problems(args: RunArgs) -> list[str]:
    out: list[tuple[str, str | None]] = [
        ("spec", _text_problem(args.spec)),
        ("run_id", _text_problem(args.run_id, limit=flowcore.MAX_NAME_CHARS)),
        ("depth", _int_problem(args.depth, 0, _MAX_INT)),
        ("tools", _text_problem(args.tools, optional=True, limit=flowcore.MAX_NAME_CHARS)),
        ("source_name", _text_problem(args.source_name, limit=flowcore.MAX_NAME_CHARS)),
        ("schedule", _text_problem(args.schedule, optional=True, limit=flowcore.MAX_NAME_CHARS)),
        ("activity_timeout_ms", _int_problem(args.activity_timeout_ms, 1, MAX_TIMEOUT_MS)),
        (
            "heartbeat_timeout_ms",
            _int_problem(args.heartbeat_timeout_ms, 0, MAX_TIMEOUT_MS, optional=True),
        ),
        ("clock_origin_ms", _int_problem(args.clock_origin_ms, 0, _MAX_CLOCK_MS, optional=True)),
        (
            "clock_started_ms",
            _int_problem(args.clock_started_ms, 0, _MAX_CLOCK_MS, optional=True),
        ),
    ]
    out.append(("log_index", _int_problem(args.log_index, 0, _MAX_INT)))
    out.append(("execution", _int_problem(args.execution, 1, _MAX_INT)))
    out.append(
        (
            "continue_after_events",
            _int_problem(
                args.continue_after_events, MIN_CONTINUE_AFTER_EVENTS, _MAX_INT, optional=True
            ),
        )
    )
    out.append(("snapshot", _text_problem(args.snapshot, optional=True)))
    out.append(("spec_hash", _text_problem(args.spec_hash, optional=True, limit=128)))
    flow_id = _text_problem(args.flow_id, optional=True, limit=flowcore.MAX_NAME_CHARS)
    out.append(("flow_id", flow_id))
    principal = _text_problem(args.principal, optional=True, limit=flowcore.MAX_NAME_CHARS)
    out.append(("principal", principal))
    root = _text_problem(args.root_run_id, optional=True, limit=flowcore.MAX_NAME_CHARS)
    out.append(("root_run_id", root))
    out.append(("progress_next", _int_problem(args.progress_next, 0, _MAX_INT)))
    if args.spec == "" and args.spec_hash is None:
        out.append(("spec", "empty, and no spec_hash to find it by"))
    out.extend(_continued_problems(args))
    scale = args.clock_scale
    if (
        isinstance(scale, bool)
        or not isinstance(scale, int | float)
        or not math.isfinite(scale)
        or not 0 < scale <= _MAX_CLOCK_SCALE
    ):
        out.append(
            ("clock_scale", f"expected a number in (0, {_MAX_CLOCK_SCALE:g}], got {_show(scale)}")
        )
    if args.metadata is not None and not isinstance(args.metadata, dict):
        out.append(("metadata", f"expected an object or null, got {_show(args.metadata)}"))
    fork = args.fork
    if fork is not None:
        if not isinstance(fork, dict) or set(fork) != {"runId", "index", "records"}:
            out.append(("fork", "expected an object of runId, index and records, or null"))
        else:
            out.append(("fork.runId", _text_problem(fork["runId"], limit=flowcore.MAX_NAME_CHARS)))
            out.append(("fork.index", _int_problem(fork["index"], 1, _MAX_INT)))
            if not isinstance(fork["records"], list):
                out.append(("fork.records", f"expected a list, got {_show(fork['records'])}"))
    budget = args.budget
    if budget is not None:
        if not isinstance(budget, dict):
            out.append(("budget", f"expected an object or null, got {_show(budget)}"))
        else:
            for key, amount in budget.items():
                if key not in _BUDGET_KEYS:
                    out.append(
                        ("budget", f"unknown key {_show(key)} (known: {', '.join(_BUDGET_KEYS)})")
                    )
                else:
                    out.append((f"budget.{key}", _int_problem(amount, 0, _MAX_INT)))
    flows = args.flows
    if not isinstance(flows, dict):
        out.append(("flows", f"expected an object of spec texts, got {_show(flows)}"))
    else:
        for flow_id, text in flows.items():
            problem = _text_problem(flow_id, limit=flowcore.MAX_NAME_CHARS)
            if problem is None:
                out.append((f"flows[{_show(flow_id)}]", _text_problem(text)))
            else:
                out.append(("flows", f"flow id {problem}"))
    queues = args.tool_queues
    if not isinstance(queues, dict):
        out.append(("tool_queues", f"expected an object of task queues, got {_show(queues)}"))
    else:
        for tool, queue in queues.items():
            problem = _text_problem(tool, limit=flowcore.MAX_NAME_CHARS)
            if problem is None:
                problem = _text_problem(queue, limit=1000)
                out.append((f"tool_queues[{_show(tool)}]", problem))
            else:
                out.append(("tool_queues", f"tool {problem}"))
    return [f"{name}: {problem}" for name, problem in out if problem is not None]


def _continued_problems(args: RunArgs) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    if args.continued is not None:
        problem = None
        try:
            effect = flowcore.effect_from_wire(args.continued)
            if not isinstance(effect, flowcore.ContinueAsNew):
                problem = f"expected a continue-as-new effect, got {_show(effect)}"
        except (flowcore.WireError, flowcore.DataError) as exc:
            problem = str(exc)
        out.append(("continued", problem))
    previous = args.previous
    if not isinstance(previous, list):
        out.append(("previous", f"expected a list of log records, got {_show(previous)}"))
    else:
        for i, item in enumerate(previous):
            problem = None
            try:
                flowcore.check_data(item)
                msgspec.convert(item, flowcore.Record)
            except (flowcore.DataError, msgspec.ValidationError) as exc:
                problem = f"not a log record: {clip(str(exc), 200)}"
            out.append((f"previous[{i}]", problem))
            if problem is not None:
                break
    signals = args.signals
    if not isinstance(signals, list):
        out.append(("signals", f"expected a list, got {_show(signals)}"))
        return out
    for i, item in enumerate(signals):
        if not isinstance(item, dict) or set(item) - {"signal", "payload", "key"}:
            out.append((f"signals[{i}]", "expected an object {signal, payload, key}"))
            continue
        problem = _text_problem(item.get("signal"), limit=flowcore.MAX_NAME_CHARS)
        if problem is None and "key" in item:
            problem = _text_problem(item["key"], optional=True, limit=flowcore.MAX_NAME_CHARS)
        if problem is None:
            try:
                flowcore.check_data(item.get("payload"))
            except flowcore.DataError as exc:
                problem = exc.problem
        out.append((f"signals[{i}]", problem))
    return out


def check_run_args(args: RunArgs) -> RunArgs:
    """``args`` if every field has the type and range the workflow needs; else ``RunArgsError``.

    ``input`` is left to ``flowcore.start``, which refuses what is not
    flowcore data with ``InputError``, as on every host.
    """
    problems = _problems(args)
    if problems:
        raise RunArgsError("bad RunArgs: " + "; ".join(problems))
    return args


def run_args_from_wire(data: Any) -> RunArgs:
    """The ``RunArgs`` a client sent as JSON (decoded), checked; else ``RunArgsError``.

    Strict where Temporal's own converter is lenient, so that nothing is
    rewritten on the way in: an unknown field is refused (a typo, or a newer
    client this worker cannot serve), and a number is never truncated to an
    integer.
    """
    if not isinstance(data, dict):
        raise RunArgsError(f"bad RunArgs: expected a JSON object, got {_show(data)}")
    problems = []
    unknown = sorted(_show(k) for k in data if k not in _FIELDS)
    if unknown:
        problems.append(f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
    if "spec" not in data:
        problems.append("spec: missing (the flow's spec text)")
    if problems:
        raise RunArgsError("bad RunArgs: " + "; ".join(problems))
    return check_run_args(RunArgs(**data))
