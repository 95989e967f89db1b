"""The lines of a run's progress: one log record as one line
(``progress_line``, ``describe``, ``scheduled_changed``, ``error_line``), and
the consoles the commands print to (``out``, ``err``, ``print_lines``).

``_progress`` prints them while it follows a run tree; ``_history`` prints
them for ``flowcore events``. The line is a ``rich`` ``Text``: names,
questions and messages from the run are shown as they are, never read as
markup.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

from rich.console import Console
from rich.text import Text

import flowcore
from flowcore import (
    AskHuman,
    AwaitSignal,
    CallTool,
    CancelRequested,
    ContinueAsNew,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    HumanAnswered,
    Record,
    RunAgent,
    RunSubflow,
    RunTeam,
    ScheduledAddRequested,
    ScheduledCancelRequested,
    ScheduledReplayRequested,
    ScheduledRunNowRequested,
    Settled,
    SignalReceived,
    SignalRun,
    SubflowSettled,
    TimerFired,
    UpdateRequested,
)

from ._common import duration, iso, short_json

__all__ = [
    "REDISPATCHED",
    "SCHEDULED_CHANGED",
    "Item",
    "Printer",
    "describe",
    "err",
    "error_line",
    "out",
    "print_lines",
    "progress_item",
    "progress_line",
    "scheduled_changed",
]

Item: TypeAlias = flowcore.Effect | flowcore.Event


class Printer(Console):
    """A rich console whose reader may go away (``flowcore events RUN | head -1``):
    the broken pipe ends the command quietly (``_errors.invoke``), where rich
    would exit 1 on its own."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


# Where the commands print: rich markup only where the command writes it,
# no highlighting of numbers and strings, no wrapping of long lines.
out = Printer(highlight=False, soft_wrap=True)
err = Printer(stderr=True, highlight=False, soft_wrap=True)


def print_lines(lines: list[Text]) -> None:
    """Print lines to ``out`` in one write: a worker prints one per record.

    Without colours (a pipe, a file) the lines are written as plain text;
    rich's rendering of each line would cost more than the record's step.
    """
    if not lines:
        return
    if out.color_system is None and not out.is_terminal:
        out.file.write("".join(f"{line.plain}\n" for line in lines))
        out.file.flush()
    else:
        out.print(Text("\n").join(lines))


REDISPATCHED = "effect.redispatched"
"""The record a host writes when it runs an effect again after a recovery: its
data holds the effect's ``idempotencyKey`` and the count of recoveries of that
key (``recovery``, 1 for the first). Compared as a string, and its data read
leniently: a flowcore that does not define the type still shows it."""


# --- one record, one line ----------------------------------------------------------------


def error_line(error: Mapping[str, object]) -> str:
    """An error as one line: ``type: message``, then each cause in its chain
    (``<- type: message``) and how many attempts a retried step made. Read
    leniently, as a record's data: any field may be missing or odd."""
    parts: list[str] = []
    current: object = error
    while isinstance(current, Mapping) and len(parts) < 8:
        parts.append(f"{current.get('type', '')}: {current.get('message', '')}")
        current = current.get("cause")
    text = " <- ".join(parts)
    attempts = error.get("attempts")
    if isinstance(attempts, list) and attempts:
        text += f" (after {len(attempts)} attempts)"
    return text


def progress_item(record: Record) -> Item | None:
    """The effect (``effect.emitted``) or event (``event.reported``) ``record`` carries.

    ``None`` for every other record, and for data that is not a valid effect
    or event: progress never stops a run from being followed.
    """
    try:
        if record.type == "effect.emitted":
            return flowcore.effect_from_wire(record.data)
        if record.type == "event.reported":
            return flowcore.event_from_wire(record.data)
    except flowcore.WireError:
        return None
    return None


SCHEDULED_CHANGED = "scheduled.changed"
"""The record of a change to a scheduled call: its id, tool, status (pending,
running, completed, failed, cancelled, uncertain), attempts, due time and
error; never its input. Read leniently, like ``effect.redispatched``."""

_SCHEDULED_STYLE = {
    "completed": "green",
    "failed": "red",
    "uncertain": "red",
    "cancelled": "yellow",
    "running": "cyan",
}


def scheduled_changed(record: Record) -> Text:
    """``◷ KEY TOOL STATUS``, with the due time, attempts or error where they say something."""
    data = record.data if isinstance(record.data, dict) else {}
    sid, tool, status = (str(data.get(name, "?")) for name in ("id", "tool", "status"))
    line = Text.assemble(
        ("◷", _SCHEDULED_STYLE.get(status, "dim")),
        f" scheduled {sid} {tool} ",
        (status, _SCHEDULED_STYLE.get(status, "")),
    )
    due, attempts, error = data.get("dueMs"), data.get("attempts"), data.get("error")
    if status == "pending" and isinstance(due, int) and not isinstance(due, bool):
        line.append(f" due {iso(due)}", "dim")
    if isinstance(attempts, int) and not isinstance(attempts, bool) and attempts > 1:
        line.append(f" (attempt {attempts})", "dim")
    if isinstance(error, dict):
        line.append(f" {error.get('type', '')}: {error.get('message', '')}")
    return line


def progress_line(record: Record) -> Text | None:
    """The progress line of ``record``, or ``None`` if it is not shown."""
    if record.type == REDISPATCHED:
        return _redispatched(record)
    if record.type == SCHEDULED_CHANGED:
        return scheduled_changed(record)
    item = progress_item(record)
    return None if item is None else describe(item, record.run_id)


def _redispatched(record: Record) -> Text:
    """``↻ KEY re-dispatched after recovery``: the host runs the effect again."""
    data = record.data if isinstance(record.data, dict) else {}
    key = data.get("idempotencyKey")
    count = data.get("recovery", data.get("recoveries"))
    line = Text.assemble(
        ("↻", "yellow"), f" {key if isinstance(key, str) else '?'} re-dispatched after recovery"
    )
    if isinstance(count, int) and not isinstance(count, bool):
        line.append(f" ({count})", "dim")
    return line


def describe(item: Item, run_id: str) -> Text | None:
    """The progress line of an effect or event of run ``run_id`` (``None``: not shown)."""
    line = Text.assemble
    match item:
        # --- effects: what the run asks for
        case CallTool(tool=tool, idempotency_key=key):
            return line(("→ call-tool", "cyan"), f" {tool} {key}")
        case RunAgent(agent_id=agent, member=member, idempotency_key=key):
            budget = item.budget_remaining
            cost = "" if budget.cost_minor_units is None else f", {budget.cost_minor_units} cost"
            return line(
                ("→ run-agent", "cyan"),
                f" {agent}{f' ({member})' if member else ''} {key}  ",
                (f"budget left: {budget.steps} steps{cost}", "dim"),
            )
        case RunTeam(team_id=team, idempotency_key=key):
            return line(("→ run-team", "cyan"), f" {team} {key}")
        case AskHuman(question=question, options=options, idempotency_key=key):
            return line((f"? {question}", "magenta"), f" {list(options) if options else ''} {key}")
        case AwaitSignal(signal=signal, idempotency_key=key):
            return line(("… waiting for signal", "yellow"), f" {signal} {key}")
        case RunSubflow(flow_id=flow, idempotency_key=key):
            return line(("→ run-subflow", "cyan"), f" {flow} {key}")
        case SignalRun(run_id=target, signal=signal, key=sent_key, idempotency_key=key):
            with_key = "" if sent_key is None else f" (key {sent_key})"
            return line(("→ signal-run", "cyan"), f" {signal}{with_key} to {target} {key}")
        case Settled(status=status):
            return line((f"■ {run_id} settled {status}", "bold"))
        case ContinueAsNew(incarnation=n, signals=signals, scheduled=scheduled):
            carried = f"  (carried: {len(signals)} signal(s), {len(scheduled)} scheduled call(s))"
            return line(
                (f"↻ {run_id} continues as new: incarnation {n}", "bold"),
                (carried if signals or scheduled else "", "dim"),
            )
        # --- events: what happened
        case EffectSucceeded(idempotency_key=key):
            return line(("✓", "green"), f" {key}")
        case EffectFailed(idempotency_key=key, error=error):
            return line(("✗", "red"), f" {key} {error.type}: {error.message}")
        case EffectOutcomeUnknown(idempotency_key=key):
            return line(("?", "red"), f" {key} outcome unknown")
        case HumanAnswered(idempotency_key=key, answer=answer):
            return line(("!", "magenta"), f" {key} answered {answer!r}")
        case SignalReceived(signal=signal, key=sent_key):
            with_key = "" if sent_key is None else f" (key {sent_key})"
            return line(("!", "yellow"), f" signal {signal}{with_key} received")
        case SubflowSettled(idempotency_key=key, status=status):
            return line(("✓", "green"), f" {key} subflow {status}")
        case CancelRequested(reason=reason):
            return line(("■", "red"), f" cancel requested: {reason}")
        case ScheduledCancelRequested(schedule_id=sid):
            return line(("◷", "yellow"), f" cancel of scheduled {sid} requested")
        case ScheduledRunNowRequested(schedule_id=sid):
            return line(("◷", "cyan"), f" run-now of scheduled {sid} requested")
        case ScheduledAddRequested(tool=tool, delay_ms=delay):
            return line(("◷", "cyan"), f" scheduled call to {tool} requested, in {duration(delay)}")
        case ScheduledReplayRequested(schedule_id=sid):
            return line(("◷", "cyan"), f" replay of scheduled {sid} requested")
        case UpdateRequested(update_id=uid, name=name, input=given):
            shown = "" if given is None else f" input {short_json(given)}"
            return line(("⇢ update", "cyan"), f" {name} {uid} requested{shown}")
        case TimerFired(idempotency_key=key) if not key.endswith("$deadline"):
            return line((f"⏲ {key}", "dim"))
    return None  # a sleep, a deadline's timer
