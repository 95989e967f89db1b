"""``flowcore decide --stdio``: the decision function as JSON lines, for hosts in any language.

Theory of operation
-------------------

A host that is not written in Python (the reference one is ``hosts/ts/``)
spawns ``flowcore decide --stdio`` and writes one request per line on its
stdin; the process answers each with one reply line on stdout, in order,
flushed at once. The operations: ``start`` (a spec, an input, a run id, the
host's clock) and ``advance`` (a state string and one event in wire form),
whose replies carry the run's next *state string* and the effects, exactly as
``flowcore.effect_to_wire`` writes them (and the updates the decision ended,
``replies``); ``query`` (a state string, a query's name and args: its value)
and ``check-update`` (whether the run would take an update, writing nothing).
The protocol is specs/protocol.md §13; its JSON Schemas are
specs/schema/decide-requests.json and decide-replies.json.

The state string is self-contained, so that any ``decide`` process (a
restarted one, another one behind a pool) continues a run from it: base64 of
a MessagePack map ``{format, spec, state}`` holding the envelope's format
number (``STATE_FORMAT``), the spec's canonical JSON (what ``spec_hash``
hashes) and ``flowcore.encode_state``'s bytes, which pin that hash. Parsed
flows are kept in a small cache keyed by the SHA-256 of the spec bytes, as a
speed-up only: a miss parses the spec from the string.

Bad input never ends the process: every request that cannot be served gets a
typed error reply (``ERROR_TYPES``), bounded in length, and the next line is
read. Only end of input ends it (exit 0). This module never reads a clock:
time is what the host says (``nowMs``, the events' ``atMs``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import sys
from collections import OrderedDict
from typing import Annotated, Any, BinaryIO, Final, Literal, TypeAlias

import click
import msgspec

import flowcore
from flowcore import Effect, Flow, SpecError

from ._errors import _cut, _printable, shown_argument

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "ERROR_TYPES",
    "STATE_FORMAT",
    "AdvanceRequest",
    "CheckUpdateRequest",
    "Checked",
    "Decided",
    "Decider",
    "Failed",
    "Queried",
    "QueryRequest",
    "StartRequest",
    "decide",
    "serve",
]

STATE_FORMAT: Final = 1
"""The format of the state string's envelope; a string of another format is refused."""

DEFAULT_MAX_LINE_BYTES: Final = 64 * 1024 * 1024
"""The longest request line read by default (the state string grows with a run's history)."""

MAX_MESSAGE_CHARS: Final = 1000
MAX_PROBLEMS: Final = 20
CACHE_SIZE: Final = 64

ErrorType: TypeAlias = Literal[
    "not-json",
    "not-object",
    "too-large",
    "unknown-op",
    "bad-request",
    "bad-spec",
    "bad-input",
    "bad-event",
    "event-rejected",
    "update-refused",
    "query-failed",
    "bad-state",
    "state-mismatch",
    "internal",
]
ERROR_TYPES: Final[tuple[str, ...]] = ErrorType.__args__  # type: ignore[attr-defined]
OPS: Final = ("start", "advance", "query", "check-update")

Int64 = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
Scalar: TypeAlias = str | int | float | bool | None
RunStatus: TypeAlias = Literal["running", "completed", "failed", "cancelled", "budget-exhausted"]
ExecClass: TypeAlias = Literal["readonly", "idempotent", "uncertain"]


# --- requests ----------------------------------------------------------------------------------


class BudgetCaps(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    """Caps below the spec's own budget: a child's share is its ``run-subflow``'s
    ``budgetRemaining``. An absent limit is not capped."""

    steps: Int64 | None = None
    cost_minor_units: Int64 | None = None
    wall_clock_ms: Int64 | None = None
    tokens: Int64 | None = None
    tool_calls: Int64 | None = None
    turns: Int64 | None = None


class StartRequest(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag_field="op", tag="start"
):
    """Begin a run: ``flowcore.start(parse_flow(spec), input, runId, nowMs, budget, depth,
    metadata)``.

    ``continued``: the ``continue-as-new`` effect the run's last incarnation
    ended with; the reply is then its next incarnation
    (``flowcore.continue_run``), and ``input`` and ``budget`` are the effect's.
    """

    id: Scalar = None
    spec: str | dict[str, Any]
    input: Any = None
    run_id: Annotated[str, msgspec.Meta(min_length=1, max_length=flowcore.MAX_NAME_CHARS)]
    now_ms: Int64
    budget: BudgetCaps | None = None
    depth: Int64 = 0
    metadata: dict[str, Any] | None = None
    continued: dict[str, Any] | None = None
    log_index: Int64 | None = None  # given: the reply carries the decision's log records


class AdvanceRequest(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag_field="op", tag="advance"
):
    """Report one event to the run whose state string is ``state``."""

    id: Scalar = None
    state: str
    event: dict[str, Any]
    log_index: Int64 | None = None  # given: the reply carries the decision's log records


class QueryRequest(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag_field="op", tag="query"
):
    """Ask the run whose state string is ``state`` its flow's query ``name``
    (``flowcore.query``)."""

    id: Scalar = None
    state: str
    name: str
    args: Any = None


class CheckUpdateRequest(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag_field="op", tag="check-update"
):
    """Whether the run would take the update ``name`` with ``input`` now (writing
    nothing): ``updateId`` already taken answers ``known`` with that update."""

    id: Scalar = None
    state: str
    name: str
    input: Any = None
    update_id: str | None = None


Request: TypeAlias = StartRequest | AdvanceRequest | QueryRequest | CheckUpdateRequest


# --- replies -----------------------------------------------------------------------------------


class Decided(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """The decision: the next state string and the effects to perform, in order.

    ``status`` is ``running`` until the run settles. ``usage`` is set once it
    has: the totals a parent's ``subflow-settled`` reports. ``scheduled``
    answers a scheduled-call event from outside (``Decision.scheduled``).
    ``metadata``: the run's metadata fields now, when any is set (what a host
    indexes to list runs by). ``records``: when the request gave ``logIndex``,
    the records the decision adds to the run's log from that index on, as
    ``flowcore.Recorder`` makes them (specs/log.md §11), for a host to append.
    ``toolClasses``: in a ``start`` reply only, the execution class of every
    tool the flow declares (its ``tools:``), by name: what a host consults to
    decide whether lost work may run again (an undeclared tool is ``uncertain``).
    """

    id: Scalar
    ok: Literal[True]
    state: str
    effects: tuple[Effect, ...]
    status: RunStatus
    usage: flowcore.Usage | None = None  # what a parent's subflow-settled reports
    scheduled: flowcore.ScheduledAnswer | None = None
    metadata: dict[str, Any] | None = None
    replies: tuple[flowcore.UpdateReply, ...] = ()  # the updates this decision ended
    records: tuple[flowcore.Record, ...] = ()  # the decision's log records (given logIndex)
    tool_classes: dict[str, ExecClass] | None = None  # start replies: the flow's tools' classes


class Queried(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A query's value."""

    id: Scalar
    ok: Literal[True]
    value: Any


class Checked(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """``accept``: the run would take the update now; ``known``: its id is taken
    (``update`` says by which update, and how it stands)."""

    id: Scalar
    ok: Literal[True]
    verdict: Literal["accept", "known"]
    update: flowcore.UpdateView | None = None


Reply: TypeAlias = Decided | Queried | Checked


class ErrorBody(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """Why a request was not served. ``where`` names the field or the spec location;
    ``key`` is a rejected event's idempotency key; ``problems`` every spec problem."""

    type: ErrorType
    message: str
    where: str | None = None
    key: str | None = None
    problems: list[str] | None = None
    code: str | None = None  # an update refusal's or a failed query's code


class Failed(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A request that was not served; the run (if any) is unchanged."""

    id: Scalar
    ok: Literal[False]
    error: ErrorBody


class _Envelope(msgspec.Struct, frozen=True, kw_only=True):
    format: int
    spec: bytes  # canonical JSON of the spec
    state: bytes  # flowcore.encode_state


class _Head(msgspec.Struct, frozen=True, kw_only=True):
    format: int


_REQUEST_TYPES: Final[dict[str, type[Request]]] = {
    "start": StartRequest,
    "advance": AdvanceRequest,
    "query": QueryRequest,
    "check-update": CheckUpdateRequest,
}
_encode = msgspec.json.Encoder().encode
_pack = msgspec.msgpack.Encoder().encode
_head = msgspec.msgpack.Decoder(_Head).decode
_envelope = msgspec.msgpack.Decoder(_Envelope).decode


class Refusal(Exception):
    """A request that cannot be served: becomes an ``ErrorBody``."""

    def __init__(
        self,
        type: ErrorType,
        message: str,
        where: str | None = None,
        key: str | None = None,
        problems: list[str] | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.body = ErrorBody(
            type=type,
            message=_bounded(message),
            where=None if where is None else _bounded(where, 200),
            key=None if key is None else _bounded(key, 200),
            problems=None if problems is None else _listed(problems),
            code=code,
        )


def _listed(problems: list[str]) -> list[str]:
    """At most ``MAX_PROBLEMS`` problems, each bounded, and how many more there were."""
    shown = [_bounded(p, 300) for p in problems[:MAX_PROBLEMS]]
    if len(problems) > MAX_PROBLEMS:
        shown.append(f"… and {len(problems) - MAX_PROBLEMS:,} more")
    return shown


def _bounded(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` printable and at most about ``limit`` characters (encodable as UTF-8)."""
    return _cut(_printable(text), limit)


def _path_of(exc: msgspec.ValidationError) -> tuple[str, str]:
    """(where, what) from msgspec's "... - at `$.x`" text; a missing or unknown field is
    named too."""
    text = str(exc)
    where = "$"
    head, sep, tail = text.rpartition(" - at `")
    if sep:
        where, text = tail.rstrip("`"), head
    for prefix in ("Object missing required field `", "Object contains unknown field `"):
        name = text.removeprefix(prefix)
        if name != text:
            where = f"{where}.{name.rstrip('`')}"
    return where, text


class Decider:
    """Serves request lines; holds nothing a reply depends on but a cache of parsed flows."""

    def __init__(self, cache_size: int = CACHE_SIZE) -> None:
        self.cache_size = cache_size
        # SHA-256 of spec bytes (as given, or canonical) -> (flow, canonical JSON)
        self._flows: OrderedDict[str, tuple[Flow, bytes]] = OrderedDict()

    # -- the line level --

    def reply(self, line: bytes) -> bytes:
        """The reply line (without its newline) to one request line."""
        request_id: Scalar = None
        try:
            try:
                # The rules of every JSON a client hands over: no NaN, no lone
                # surrogates, no key twice, nothing deeper than flowcore data.
                obj = flowcore.decode_json_text(line, "the line", limit=len(line) + 1)
            except flowcore.JsonTextError as exc:
                raise Refusal("not-json", str(exc)) from None
            if not isinstance(obj, dict):
                raise Refusal("not-object", f"a request is a JSON object, not {type(obj).__name__}")
            request_id = _request_id(obj)
            reply = self.serve(_request(obj))
        except Refusal as problem:
            return _encode(Failed(id=request_id, ok=False, error=problem.body))
        except Exception as exc:  # the last line of defence: the process goes on
            body = ErrorBody(type="internal", message=_bounded(f"{type(exc).__name__}: {exc}"))
            return _encode(Failed(id=request_id, ok=False, error=body))
        return _encode(reply)

    def too_large(self, size: int, limit: int) -> bytes:
        message = (
            f"the line is {size:,} bytes, over the limit of {limit:,} bytes"
            " (--max-line-bytes); it was read to its end and discarded"
        )
        return _encode(Failed(id=None, ok=False, error=Refusal("too-large", message).body))

    # -- operations --

    def serve(self, request: Request) -> Reply:
        if isinstance(request, StartRequest):
            return self.start(request)
        if isinstance(request, QueryRequest):
            return self.query(request)
        if isinstance(request, CheckUpdateRequest):
            return self.check_update(request)
        return self.advance(request)

    def start(self, request: StartRequest) -> Decided:
        flow, canonical = self._flow_of(request.spec)
        budget = flowcore.budget_from_wire(msgspec.to_builtins(request.budget))
        if request.continued is not None:
            return self._continue(request, flow, canonical)
        try:
            decision = flowcore.start(
                flow,
                request.input,
                run_id=request.run_id,
                now_ms=request.now_ms,
                budget=budget,
                depth=request.depth,
                metadata=request.metadata,
            )
        except flowcore.InputError as exc:
            where = "$.metadata" if isinstance(exc, flowcore.MetadataError) else "$.input"
            raise Refusal("bad-input", str(exc), where=where, problems=list(exc.problems)) from None
        records: tuple[flowcore.Record, ...] = ()
        if request.log_index is not None:
            recorder = flowcore.Recorder(request.run_id, request.log_index)
            records = tuple(
                recorder.started(
                    flow,
                    request.input,
                    request.now_ms,
                    decision,
                    budget,
                    request.depth,
                    request.metadata,
                )
            )
        return _decided(request.id, decision, canonical, records, flow)

    def _continue(self, request: StartRequest, flow: Flow, canonical: bytes) -> Decided:
        try:
            effect = flowcore.effect_from_wire(request.continued)
        except flowcore.WireError as exc:
            where = "$.continued" + exc.path.removeprefix("$")
            raise Refusal("bad-request", str(exc), where=where) from None
        if not isinstance(effect, flowcore.ContinueAsNew):
            message = f"continued must be a continue-as-new effect, not {effect_kind(effect)}"
            raise Refusal("bad-request", message, where="$.continued.kind")
        try:
            decision = flowcore.continue_run(
                flow, effect, request.run_id, request.now_ms, request.depth
            )
        except flowcore.InputError as exc:
            raise Refusal(
                "bad-input", str(exc), where="$.continued", problems=list(exc.problems)
            ) from None
        except ValueError as exc:
            raise Refusal("bad-request", str(exc), where="$.continued") from None
        records: tuple[flowcore.Record, ...] = ()
        if request.log_index is not None:
            recorder = flowcore.Recorder(request.run_id, request.log_index)
            records = tuple(
                recorder.started(
                    flow,
                    effect.input,
                    request.now_ms,
                    decision,
                    depth=request.depth,
                    continued=effect,
                )
            )
        return _decided(request.id, decision, canonical, records, flow)

    def advance(self, request: AdvanceRequest) -> Decided:
        state, canonical = self._state_of(request.state)
        try:
            event = flowcore.event_from_wire(request.event)
        except flowcore.WireError as exc:
            where = "$.event" + exc.path.removeprefix("$")
            raise Refusal("bad-event", str(exc), where=where) from None
        try:
            decision = flowcore.advance(state, event)
        except flowcore.UpdateRefused as exc:
            raise Refusal("update-refused", exc.reason, where="$.event", code=exc.code) from None
        except flowcore.EventRejected as exc:
            raise Refusal("event-rejected", exc.reason, where="$.event", key=exc.key) from None
        records: tuple[flowcore.Record, ...] = ()
        if request.log_index is not None:
            recorder = flowcore.Recorder(state.run.run_id, request.log_index)
            records = tuple(recorder.applied(event, decision))
        return _decided(request.id, decision, canonical, records)

    def query(self, request: QueryRequest) -> Queried:
        state, _ = self._state_of(request.state)
        try:
            value = flowcore.query(state, request.name, request.args)
        except flowcore.QueryError as exc:
            where = "$.args" if exc.code == "bad-args" else "$.name"
            raise Refusal("query-failed", exc.message, where=where, code=exc.code) from None
        return Queried(id=request.id, ok=True, value=value)

    def check_update(self, request: CheckUpdateRequest) -> Checked:
        state, _ = self._state_of(request.state)
        if request.update_id is not None:
            known = flowcore.update_of(state, request.update_id)
            if known is not None:
                return Checked(id=request.id, ok=True, verdict="known", update=known)
        try:
            flowcore.validate_update(state, request.name, request.input)
        except flowcore.UpdateRefused as exc:
            raise Refusal("update-refused", exc.reason, where="$.name", code=exc.code) from None
        return Checked(id=request.id, ok=True, verdict="accept")

    # -- specs and states --

    def _cached(self, digest: str) -> tuple[Flow, bytes] | None:
        found = self._flows.get(digest)
        if found is not None:
            self._flows.move_to_end(digest)
        return found

    def _remember(self, digest: str, entry: tuple[Flow, bytes]) -> None:
        self._flows[digest] = entry
        while len(self._flows) > self.cache_size:
            self._flows.popitem(last=False)

    def _flow_of(self, spec: str | dict[str, Any]) -> tuple[Flow, bytes]:
        """The flow of a start request's spec and its canonical JSON."""
        if isinstance(spec, str):
            text = spec.encode("utf-8", "surrogatepass")
            digest = "text:" + hashlib.sha256(text).hexdigest()
        else:
            data = msgspec.json.encode(spec, order="sorted")
            digest = "json:" + hashlib.sha256(data).hexdigest()
        found = self._cached(digest)
        if found is not None:
            return found
        try:
            flow = flowcore.parse_flow(spec, source_name="spec")
        except SpecError as exc:
            first = exc.problems[0]
            lines = [str(p) for p in exc.problems]
            message = f"the spec has {len(exc.problems)} problem(s); the first: {first}"
            raise Refusal("bad-spec", message, where=first.location, problems=lines) from None
        entry = (flow, _canonical(spec, flow))
        self._remember(digest, entry)
        # The same spec comes back from a state string under its canonical hash.
        self._remember("json:" + flow.spec_hash, entry)
        return entry

    def _state_of(self, text: str) -> tuple[flowcore.State, bytes]:
        """The run a state string holds, and its spec's canonical JSON."""
        try:
            raw = base64.b64decode(text.encode("ascii"), validate=True)
            format = _head(raw).format
        except (UnicodeEncodeError, binascii.Error, msgspec.DecodeError) as exc:
            raise Refusal(
                "bad-state", f"not a state string of decide: {exc}", where="$.state"
            ) from None
        if format != STATE_FORMAT:
            raise Refusal(
                "state-mismatch",
                f"a state string of format {format}; this flowcore reads format {STATE_FORMAT}",
                where="$.state",
            )
        try:
            envelope = _envelope(raw)
        except msgspec.DecodeError as exc:
            raise Refusal("bad-state", f"not a state string of decide: {exc}", "$.state") from None
        digest = hashlib.sha256(envelope.spec).hexdigest()
        found = self._cached("json:" + digest)
        if found is None:
            try:
                spec = msgspec.json.decode(envelope.spec)
                flow = flowcore.parse_flow(spec, source_name="state")
            except (msgspec.DecodeError, SpecError) as exc:
                raise Refusal(
                    "bad-state", f"the state string's spec does not parse: {exc}", "$.state"
                ) from None
            if flow.spec_hash != digest:
                raise Refusal(
                    "bad-state", "the state string's spec is not in canonical form", "$.state"
                )
            found = (flow, envelope.spec)
            self._remember("json:" + digest, found)
        flow, canonical = found
        try:
            state = flowcore.decode_state(envelope.state, flow)
        except flowcore.SnapshotMismatch as exc:
            raise Refusal("state-mismatch", str(exc), where="$.state") from None
        except flowcore.WireError as exc:
            raise Refusal("bad-state", str(exc), where="$.state") from None
        return state, canonical


def _canonical(spec: str | dict[str, Any], flow: Flow) -> bytes:
    """The spec's canonical JSON: exactly the bytes ``flow.spec_hash`` is the SHA-256 of."""
    canonical = flowcore.canonical_spec(spec)
    if hashlib.sha256(canonical).hexdigest() != flow.spec_hash:  # pragma: no cover
        raise RuntimeError(f"the canonical form of flow {flow.id!r} does not give its hash")
    return canonical


def _request_id(obj: dict[str, Any]) -> Scalar:
    """The request's id if it can be echoed (a JSON scalar that is flowcore data), else None."""
    value = obj.get("id")
    if isinstance(value, dict | list):
        return None
    try:
        flowcore.check_data(value)
    except flowcore.DataError:
        return None
    result: Scalar = value
    return result


def _request(obj: dict[str, Any]) -> Request:
    """The request an object holds, checked field by field."""
    if "op" not in obj:
        raise Refusal("bad-request", f"the request has no op ({', '.join(OPS)})", where="$.op")
    op = obj["op"]
    if not isinstance(op, str) or op not in _REQUEST_TYPES:
        shown = op if isinstance(op, str) else msgspec.json.encode(op).decode()
        raise Refusal(
            "unknown-op", f"unknown op {shown_argument(shown)}; one of: {', '.join(OPS)}", "$.op"
        )
    if "id" in obj and _request_id(obj) is None and obj["id"] is not None:
        raise Refusal(
            "bad-request", "id must be a JSON scalar (string, number, boolean or null)", "$.id"
        )
    try:
        return msgspec.convert(obj, _REQUEST_TYPES[op], strict=True)
    except msgspec.ValidationError as exc:
        where, text = _path_of(exc)
        raise Refusal("bad-request", f"invalid {op} request at {where}: {text}", where) from None


def effect_kind(effect: flowcore.Effect) -> str:
    return str(effect.__struct_config__.tag)


def _decided(
    request_id: Scalar,
    decision: flowcore.Decision,
    canonical: bytes,
    records: tuple[flowcore.Record, ...] = (),
    flow: Flow | None = None,
) -> Decided:
    state = decision.state
    envelope = _Envelope(format=STATE_FORMAT, spec=canonical, state=flowcore.encode_state(state))
    usage = None
    status: RunStatus = "running"
    if state.settled is not None:
        status = state.settled.status
        used = flowcore.waiting_for(state)
        usage = used.usage()
    return Decided(
        id=request_id,
        ok=True,
        state=base64.b64encode(_pack(envelope)).decode("ascii"),
        effects=decision.effects,
        status=status,
        usage=usage,
        scheduled=decision.scheduled,
        metadata=state.metadata or None,
        replies=decision.replies,
        records=records,
        tool_classes=None
        if flow is None
        else {name: decl.exec_class for name, decl in flow.tools.items()},
    )


def _read_line(stdin: BinaryIO, limit: int) -> tuple[bytes | None, int]:
    """The next line (None at end of input), or (None, its size) when it is over ``limit``
    bytes: then the rest of it has been read and discarded."""
    line = stdin.readline(limit + 1)
    if len(line) <= limit or line.endswith(b"\n"):
        return (line if line else None), 0
    size = len(line)
    while True:
        chunk = stdin.readline(1 << 16)
        size += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return None, size - chunk.endswith(b"\n")


def serve(stdin: BinaryIO, stdout: BinaryIO, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> int:
    """Answer every request line of ``stdin`` on ``stdout`` until end of input; return 0."""
    decider = Decider()
    while True:
        line, over = _read_line(stdin, max_line_bytes)
        if over:
            reply = decider.too_large(over, max_line_bytes)
        elif line is None:
            return 0
        else:
            reply = decider.reply(line)
        try:
            stdout.write(reply + b"\n")
            stdout.flush()
        except BrokenPipeError:  # the host has gone: nothing left to answer
            return 0


@click.command()
@click.option(
    "--stdio",
    is_flag=True,
    help="Read requests from stdin and write replies to stdout (required).",
)
@click.option(
    "--max-line-bytes",
    type=click.IntRange(min=1024),
    default=DEFAULT_MAX_LINE_BYTES,
    show_default=True,
    help="Refuse a request line longer than this (it is read and discarded).",
)
def decide(stdio: bool, max_line_bytes: int) -> int:
    """Serve start and advance as JSON lines on stdin and stdout, for hosts in any language.

    One request per line, one reply per line, in order, each flushed at once
    (specs/protocol.md §13); a run's queries and update checks too (ops
    query and check-update). Bad requests get typed error replies; the
    process ends, with exit 0, only at end of input.
    """
    if not stdio:
        raise click.UsageError(
            "decide speaks only over standard input and output: run `flowcore decide --stdio`"
        )
    return serve(sys.stdin.buffer, sys.stdout.buffer, max_line_bytes)
