"""Leaf steps: call_tool, run_agent, ask_human, sleep, await_signal.

A leaf step emits one effect under the key of its attempt and waits for the
answer (``transitions`` routes it here or, for work, to ``work_done``).
Questions and signal waits may carry a timeout timer of their own; a sleep
is itself a timer.
"""

from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING, Any

import msgspec

from ..._data import MAX_NAME_CHARS, short
from ..._errors import EventRejected
from ...language.expr import TemplateError
from ...language.spec import (
    AskHumanStep,
    AwaitSignalStep,
    CallToolStep,
    RunAgentStep,
    SignalRunStep,
    SleepStep,
    duration_text,
)
from ...language.validate import value_problem
from .. import keys
from ..outcome import NO_BUDGET, Failed, Ok, err
from ..state import ApprovalProgress, Pending, PendingKind, SignalsProgress, StepFrame
from ..wire import AskHuman, AwaitSignal, CallTool, ErrorInfo, RunAgent, SignalRun

if TYPE_CHECKING:
    from ...language.expr import Template
    from ..outcome import Outcome
    from ..txn import Resolver, Txn

__all__ = [
    "APPROVAL_OPTIONS",
    "answered",
    "approval_answered",
    "approval_question",
    "as_text",
    "begin_ask_human",
    "begin_await_signal",
    "begin_call_tool",
    "begin_run_agent",
    "begin_signal_run",
    "begin_sleep",
    "check_answer",
    "run_agent",
    "question_timed_out",
    "signal_slot",
    "signal_timed_out",
    "signalled",
    "slept",
    "takes",
    "tool_input_error",
    "tool_output_error",
]


def begin_call_tool(t: Txn, frame: StepFrame, body: CallToolStep) -> Outcome | None:
    key = t.key(frame)
    frame = t.set_frame(frame, key=key)
    template = body.input
    value = (
        template.source
        if template.constant
        else template.evaluate(t.resolver(frame.env, frame.attempt))
    )
    invalid = tool_input_error(t, body.tool, value)
    if invalid is not None:
        return Failed(invalid)  # the tool is never called with it
    if _needs_approval(t, frame, body.tool, value):
        ask = keys.approval_key(key)
        t.set_frame(frame, key=ask, progress=ApprovalProgress(input=value))
        question = AskHuman(
            question=approval_question(body.tool, value),
            options=APPROVAL_OPTIONS,
            idempotency_key=ask,
        )
        t.wait_for(ask, PendingKind.QUESTION, frame.id, question)
        return None
    _issue_call(t, frame, body.tool, value, key)
    return None


def _issue_call(t: Txn, frame: StepFrame, tool: str, value: Any, key: str) -> None:
    effect = CallTool(tool=tool, input=value, idempotency_key=key)
    t.emit_work(frame.id, effect, tool, tag="call-tool")


APPROVAL_OPTIONS = ("approve", "deny")
"""The answers to the question asked before a call of a tool that needs approval."""


def approval_question(tool: str, value: Any) -> str:
    """The question asked before a call of ``tool`` with ``value``: it shows the input."""
    return f"approve the call of tool {tool!r} with input {as_text(value)}?"


def _needs_approval(t: Txn, frame: StepFrame, tool: str, value: Any) -> bool:
    """Whether the call of ``tool`` with ``value`` waits for a person's approval
    first: as declared, or as its condition over the input (``input``) says."""
    decl = t.flow.tools.get(tool)
    needs = False if decl is None else decl.needs_approval
    if isinstance(needs, bool):
        return needs
    try:
        return needs.test(t.resolver(frame.env, frame.attempt, {"input": value}))
    except TemplateError as exc:
        raise TemplateError(f"needs_approval of tool {tool!r}: {exc}") from None


def approval_answered(
    t: Txn, frame: StepFrame, body: CallToolStep, answer: Any, principal: str | None = None
) -> None:
    """A person answered the approval asked before the call of ``body``: approved,
    the call is issued under the step's own key; denied, the step fails with
    ``approval-denied`` (the tool is never called), its details naming the
    ``principal`` who answered when the host said who it was."""
    progress = frame.progress
    assert isinstance(progress, ApprovalProgress)
    value = progress.input  # what the person was shown
    if answer == "approve":
        key = t.key(frame)
        _issue_call(t, t.set_frame(frame, key=key, progress=None), body.tool, value, key)
        return
    error = err("approval-denied", f"the call of tool {body.tool!r} was not approved")
    details = {"tool": body.tool, "input": value, "answer": answer}
    if principal is not None:
        details["principal"] = principal
    error = msgspec.structs.replace(error, details=details)
    t.step_ended(frame.id, Failed(error), t.set_frame(frame, key=None, progress=None))


def tool_input_error(t: Txn, tool: str, value: Any) -> ErrorInfo | None:
    """``invalid-input`` when ``value`` does not meet the tool's declared input_schema."""
    decl = t.flow.tools.get(tool)
    if decl is None or decl.input_schema is None:
        return None
    return _schema_error(decl.input_schema, tool, value, "input")


def tool_output_error(t: Txn, tool: str, value: Any) -> ErrorInfo | None:
    """``invalid-output`` when a tool's reported output does not meet its output_schema."""
    decl = t.flow.tools.get(tool)
    if decl is None or decl.output_schema is None:
        return None
    return _schema_error(decl.output_schema, tool, value, "output")


def _schema_error(schema: dict[str, Any], tool: str, value: Any, which: str) -> ErrorInfo | None:
    why = value_problem(schema, value, f"{which} of tool {tool!r}")
    return None if why is None else err(f"invalid-{which}", why)


def begin_run_agent(t: Txn, frame: StepFrame, body: RunAgentStep) -> Outcome | None:
    r = t.resolver(frame.env, frame.attempt)
    key = t.key(frame)
    t.set_frame(frame, key=key)
    effect = run_agent(r, body.agent, body.prompt, body.instructions, body.member, key)
    t.emit_work(frame.id, effect, body.agent)
    return None


def run_agent(
    r: Resolver,
    agent: str,
    prompt: Template,
    instructions: Template | None,
    member: str | None,
    key: str,
) -> RunAgent:
    """A run-agent effect, its texts evaluated (its budget is filled in when issued)."""
    return RunAgent(
        agent_id=agent,
        prompt=as_text(prompt.evaluate(r)),
        instructions=None if instructions is None else as_text(instructions.evaluate(r)),
        member=member,
        idempotency_key=key,
        budget_remaining=NO_BUDGET,
    )


def begin_ask_human(t: Txn, frame: StepFrame, body: AskHumanStep) -> Outcome | None:
    timeout = None
    if body.timeout_ms is not None:
        timeout = t.duration(frame, body.timeout_ms, "ask_human.timeout_ms", zero=True)
    r = t.resolver(frame.env, frame.attempt)
    key = t.key(frame)
    t.set_frame(frame, key=key)
    question = AskHuman(
        question=as_text(body.question.evaluate(r)), options=body.options, idempotency_key=key
    )
    t.wait_for(key, PendingKind.QUESTION, frame.id, question)
    if timeout is not None:
        t.timer(
            keys.wait_timeout_key(key), t.now_ms + timeout, PendingKind.QUESTION_TIMEOUT, frame.id
        )
    return None


def begin_sleep(t: Txn, frame: StepFrame, body: SleepStep) -> Outcome | None:
    if body.for_ms is not None:
        until = t.now_ms + t.duration(frame, body.for_ms, "sleep.for_ms", zero=True)
    else:
        assert body.until is not None
        until = _instant(body.until.evaluate(t.resolver(frame.env, frame.attempt)))
    if until <= t.now_ms:
        return Ok(None)
    key = t.key(frame)
    t.set_frame(frame, key=key)
    t.timer(key, until, PendingKind.SLEEP, frame.id)
    return None


def begin_await_signal(t: Txn, frame: StepFrame, body: AwaitSignalStep) -> Outcome | None:
    timeout = None
    if body.timeout_ms is not None:
        timeout = t.duration(frame, body.timeout_ms, "await_signal.timeout_ms", zero=True)
    wanted = None
    if body.key is not None:
        wanted = as_text(body.key.evaluate(t.resolver(frame.env, frame.attempt)))
        if not wanted or len(wanted) > MAX_NAME_CHARS:
            why = f"await_signal.key must be 1 to {MAX_NAME_CHARS} characters, got {short(wanted)}"
            return Failed(err("invalid-signal-key", why))
    names = body.names
    received: tuple[Any, ...] = ()
    while (found := _buffered(t, frame, body, wanted)) is not None:  # taken at once, no effect
        name, payload = found
        if not body.collects:
            return Ok(payload if body.signals is None else _taken(name, payload))
        received = (*received, _taken(name, payload))
        if _complete(t, frame, body, received):
            return Ok(list(received))
    key = t.key(frame)
    progress = SignalsProgress(received=received) if body.collects else None
    t.set_frame(frame, key=key, progress=progress)
    many = names if body.signals is not None else ()
    t.wait_for(
        key,
        PendingKind.SIGNAL,
        frame.id,
        AwaitSignal(signal=names[0], signals=many, key=wanted, idempotency_key=key),
    )
    w = t.waiting
    field = "waiters" if wanted is None else "keyed_waiters"
    waiters = getattr(w, field)
    for name in names:
        slot = signal_slot(name, wanted)
        waiters = waiters.set(slot, (*waiters.get(slot, ()), key))
    t.waiting = msgspec.structs.replace(w, **{field: waiters})
    if timeout is not None:
        t.timer(
            keys.wait_timeout_key(key), t.now_ms + timeout, PendingKind.SIGNAL_TIMEOUT, frame.id
        )
    return None


def signal_slot(name: str, key: str | None) -> str:
    """Where signals of ``name`` sent with ``key`` wait and are waited for: the
    name itself without a key (``signals``, ``waiters``), else ``[name, key]`` as
    JSON text (``keyed_signals``, ``keyed_waiters``)."""
    return name if key is None else msgspec.json.encode([name, key]).decode()


def _taken(name: str, payload: Any) -> dict[str, Any]:
    return {"signal": name, "payload": payload}


def _buffered(
    t: Txn, frame: StepFrame, body: AwaitSignalStep, wanted: str | None
) -> tuple[str, Any] | None:
    """Take the buffered signal the wait takes first: by its names in the order
    written, the oldest it accepts of each (with the wait's key, ``wanted``);
    None when there is none."""
    field = "signals" if wanted is None else "keyed_signals"
    for name in body.names:
        w = t.waiting
        buffers = getattr(w, field)
        slot = signal_slot(name, wanted)
        buffered = buffers.get(slot, ())
        for i, payload in enumerate(buffered):
            if takes(t, frame, body, payload):
                rest = (*buffered[:i], *buffered[i + 1 :])
                buffers = buffers.set(slot, rest) if rest else buffers.delete(slot)
                t.waiting = msgspec.structs.replace(w, **{field: buffers})
                return name, payload
    return None


def _complete(t: Txn, frame: StepFrame, body: AwaitSignalStep, received: tuple[Any, ...]) -> bool:
    """Whether a collecting wait has what it waits for: ``count`` signals, or
    ``until`` holds over ``received`` (a condition that cannot be evaluated does
    not hold: signals from outside must not fail the step)."""
    if body.count is not None and len(received) >= body.count:
        return True
    if body.until is None:
        return False
    try:
        return body.until.test(t.resolver(frame.env, frame.attempt, {"received": list(received)}))
    except TemplateError:
        return False


# --- answers and timers ---------------------------------------------------------------


def check_answer(t: Txn, key: str, step_id: str, answer: Any) -> None:
    body = t.flow.by_id[step_id].body
    if isinstance(body, CallToolStep):  # the approval before the call
        options: tuple[str, ...] | None = APPROVAL_OPTIONS
    else:
        assert isinstance(body, AskHumanStep)
        options = body.options
    if options is not None and (not isinstance(answer, str) or answer not in options):
        raise EventRejected(f"answer {short(answer)} is not one of {list(options)} for {key}", key)


def answered(t: Txn, key: str, entry: Pending, answer: Any, principal: str | None = None) -> None:
    """A human (``principal``, when the host knows who) answered the question ``key``."""
    frame = t.frame(entry.frame)
    body = t.step_of(frame).body
    check_answer(t, key, frame.step, answer)
    t.check_clock()
    if t.halt is not None:
        return
    # Answered, signalled and fired keys are not remembered: a repeat is
    # rejected as "no such effect is pending". Only keys whose late answer
    # must still be accepted (abandoned) are kept, so the state does not
    # grow with every timer of a long-running run.
    t.stop_waiting(key)
    if isinstance(body, CallToolStep):
        approval_answered(t, frame, body, answer, principal)
        return
    assert isinstance(body, AskHumanStep)
    if body.timeout_ms is not None:
        t.drop_key(keys.wait_timeout_key(key))
    t.step_ended(frame.id, Ok(answer), t.set_frame(frame, key=None))


def takes(t: Txn, frame: StepFrame, body: AwaitSignalStep, payload: Any) -> bool:
    """Whether the wait takes a signal with ``payload``: always without ``where``;
    with it, when it holds (``payload`` bound to the payload). A ``where`` that
    cannot be evaluated on a payload does not take it: a signal from outside
    must not fail the run's step."""
    if body.where is None:
        return True
    try:
        return body.where.test(t.resolver(frame.env, frame.attempt, {"payload": payload}))
    except TemplateError:
        return False


def signalled(t: Txn, signal: str, payload: Any, sent_key: str | None = None) -> bool:
    """A signal arrived (sent with ``sent_key``, or none): the oldest wait for it
    (with that key) that takes it gets it. False when no wait takes it (the
    caller buffers it)."""
    waiters = t.waiting.waiters if sent_key is None else t.waiting.keyed_waiters
    for key in waiters[signal_slot(signal, sent_key)]:
        frame = t.frame(t.pending[key].frame)
        body = t.step_of(frame).body
        assert isinstance(body, AwaitSignalStep)
        if takes(t, frame, body, payload):
            break
    else:
        return False
    t.signal_taker = key
    output: Any = payload if body.signals is None else _taken(signal, payload)
    if body.collects:
        progress = frame.progress
        assert isinstance(progress, SignalsProgress)
        received = (*progress.received, _taken(signal, payload))
        if not _complete(t, frame, body, received):  # it waits on for more
            t.set_frame(frame, progress=SignalsProgress(received=received))
            return True
        output = list(received)
    t.pending = t.pending.delete(key)
    t.unwait(key)
    if body.timeout_ms is not None:
        t.drop_key(keys.wait_timeout_key(key))
    t.step_ended(frame.id, Ok(output), t.set_frame(frame, key=None, progress=None))
    return True


def begin_signal_run(t: Txn, frame: StepFrame, body: SignalRunStep) -> Outcome | None:
    """Send a signal to another run: one ``signal-run`` work effect."""
    r = t.resolver(frame.env, frame.attempt)
    run_id = as_text(body.run.evaluate(r))
    sent_key = None if body.key is None else as_text(body.key.evaluate(r))
    # Level 3 evaluates the name as a template; before, it was sent as written.
    raw = body.signal.evaluate(r) if t.semantics >= 3 else body.signal.source
    signal = as_text(raw)
    for what, text in (("run", run_id), ("key", sent_key)):
        if text is not None and not (0 < len(text) <= MAX_NAME_CHARS):
            why = f"signal_run.{what} must be 1 to {MAX_NAME_CHARS} characters, got {short(text)}"
            return Failed(err(f"invalid-signal-{what}", why))
    if not signal.strip() or len(signal) > MAX_NAME_CHARS:
        why = f"signal_run.signal must be 1 to {MAX_NAME_CHARS} characters, got {short(signal)}"
        return Failed(err("invalid-signal-name", why))
    key = t.key(frame)
    t.set_frame(frame, key=key)
    effect = SignalRun(
        run_id=run_id,
        signal=signal,
        payload=body.payload.evaluate(r),
        key=sent_key,
        idempotency_key=key,
    )
    t.emit_work(frame.id, effect, signal)
    return None


def slept(t: Txn, frame: StepFrame) -> None:
    t.step_ended(frame.id, Ok(None), t.set_frame(frame, key=None))


def question_timed_out(t: Txn, frame: StepFrame) -> None:
    body = t.step_of(frame).body
    assert isinstance(body, AskHumanStep) and frame.key is not None
    t.drop_key(frame.key)
    current = t.set_frame(frame, key=None)
    if body.default is not None:
        t.step_ended(frame.id, Ok(body.default), current)
    else:
        assert body.timeout_ms is not None
        error = err("timeout", f"no answer to {frame.key} within {duration_text(body.timeout_ms)}")
        t.step_ended(frame.id, Failed(error), current)


def signal_timed_out(t: Txn, frame: StepFrame) -> None:
    body = t.step_of(frame).body
    assert isinstance(body, AwaitSignalStep) and frame.key is not None
    t.drop_key(frame.key)
    current = t.set_frame(frame, key=None)
    assert body.timeout_ms is not None
    within = duration_text(body.timeout_ms)
    names = " or ".join(repr(name) for name in body.names)
    error = err("timeout", f"signal {names} not received within {within}")
    if body.collects:  # what it took before the time ran out
        progress = frame.progress
        taken = list(progress.received) if isinstance(progress, SignalsProgress) else []
        error = msgspec.structs.replace(
            error,
            message=f"{body.count or 'enough'} signal(s) {names} not received within {within}",
            details={"received": taken},
        )
    t.step_ended(frame.id, Failed(error), current)


# --- values -------------------------------------------------------------------------


def as_text(value: Any) -> str:
    # Same text as interpolation gives (_expr._text): compact, keys sorted.
    if isinstance(value, str):
        return value
    return msgspec.json.encode(value, order="sorted").decode()


def _dt_to_ms(value: _dt.datetime) -> int:
    delta = value - _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
    return delta // _dt.timedelta(milliseconds=1)


def _instant(value: Any) -> int:
    if isinstance(value, bool):
        raise TemplateError(
            f"sleep until: expected epoch milliseconds or ISO 8601, got {short(value)}"
        )
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        try:
            moment = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise TemplateError(f"sleep until: {short(value)} is not an ISO 8601 instant") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=_dt.UTC)
        return _dt_to_ms(moment)
    raise TemplateError(f"sleep until: expected epoch milliseconds or ISO 8601, got {short(value)}")
