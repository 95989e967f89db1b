"""Schedules: runs of a flow started on a cadence, as Temporal Schedules start them.

A schedule names a flow, an input and a cadence: a 5-field cron read in an
optional IANA time zone, and/or a fixed interval ``every`` with an
``offset`` (slots at epoch + offset + k * every); with both, the slots are
the union of the two. Each slot is one potential run; its run id is derived
from the schedule and the slot (``run_id_for``: ``nightly@2026-12-02T07:00:00Z``),
so a host that records the start of a slot in the same transaction as the
run itself can never start a slot twice.

This module is the pure part: checking a definition (``check_schedule``),
the slots after a time (``slots_after``), and the decision (``decide``):
given a schedule, what the host recorded of it (``Progress``), which of its
runs are still running and the time now, what to do: start a slot's run,
skip a slot (and why), buffer one, or cancel the runs still going. The host
applies the actions and stores the new progress in one transaction.

Policies, as Temporal names them:

- ``overlap``: what a slot does while a run the schedule started is still
  running. ``skip`` (the default): it is skipped. ``buffer_one``: it waits
  and starts when nothing runs any more; one slot at most waits, later ones
  are skipped. ``allow_all``: it starts anyway. ``cancel_other``: the running
  runs are cancelled and the slot waits (as ``buffer_one``, the newest slot
  replacing an older waiting one) until they have settled.
- ``catchup_window``: a slot whose due time (slot + jitter) is further than
  this in the past when the host looks (after downtime, say) is skipped with
  the reason ``outside catch-up window``. Default one minute: a host that was
  down for a night does not start the night's slots in a burst (Temporal's
  own default is a year; the Temporal host passes the value explicitly).
- ``jitter``: a slot is due at ``slot + d``, ``d`` in ``[0, jitter)``, derived
  from sha256 of the schedule's name and the slot (``jitter_ms``): the same in
  every process and on every replay (a pure function of both). Slots are still decided in
  order: a slot waits for the one before it.
- ``paused`` (with a ``note``): no slot is decided; on resume, the host
  starts again from the time of the resume (slots while paused are neither
  started nor recorded).
- ``limit``: how many more runs the cadence may start; at 0 it starts none.
  Triggered and backfilled runs do not count (as Temporal's remaining actions).

This module must never do I/O, read a clock, or draw random numbers: time is
always passed in.
"""

from __future__ import annotations

import datetime as _dt
import enum
import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias

import attrs

from .._data import DataError, check_data
from .._errors import FlowcoreError
from .expr import Template, TemplateError, compile_template
from .times import (
    DurationError,
    check_cron,
    check_zone,
    next_cron_ms,
    parse_duration,
)

__all__ = [
    "DEFAULT_CATCHUP_WINDOW_MS",
    "KEYS",
    "MAX_BACKFILL_SLOTS",
    "MAX_SLOTS_PER_DECISION",
    "Action",
    "Buffer",
    "CancelOther",
    "Decision",
    "Overlap",
    "Progress",
    "Schedule",
    "ScheduleError",
    "Skip",
    "Start",
    "backfill",
    "backfill_slots",
    "check_schedule",
    "decide",
    "due_ms",
    "input_for",
    "iso_ms",
    "jitter_ms",
    "next_due_ms",
    "parse_schedule",
    "run_id_for",
    "slot_input",
    "slots_after",
    "trigger",
    "trigger_run_id",
]

DEFAULT_CATCHUP_WINDOW_MS = 60_000
# One decision looks at this many slots at most; ``Decision.more`` says the
# host should ask again at once. Bounds the work of one transaction however
# fine the cadence and however long the host was away.
MAX_SLOTS_PER_DECISION = 100
# Slots outside the catch-up window recorded one by one before the rest is
# recorded as one skip covering a span (``Skip.through_ms``).
MAX_SKIPS_LISTED = 20
MAX_BACKFILL_SLOTS = 1000

KEYS = (
    "cron",
    "timezone",
    "every",
    "offset",
    "input",
    "overlap",
    "catchup_window",
    "jitter",
    "paused",
    "note",
    "limit",
)
MAX_NOTE_CHARS = 1000
MAX_LIMIT = 1_000_000_000
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}\Z")
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


class Overlap(enum.StrEnum):
    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    ALLOW_ALL = "allow_all"
    CANCEL_OTHER = "cancel_other"


class ScheduleError(FlowcoreError, ValueError):
    """A schedule definition is invalid; ``problems`` lists (path, message) pairs."""

    def __init__(self, name: str, problems: Sequence[tuple[tuple[str, ...], str]]) -> None:
        self.name = name
        self.problems = list(problems)
        lines = [f"{'.'.join((name, *p))}: {m}" for p, m in self.problems]
        super().__init__(f"schedule {name!r} is invalid: " + "; ".join(lines))


@attrs.frozen
class Schedule:
    """A checked schedule definition (``check_schedule`` builds it)."""

    name: str
    flow_id: str
    input: Template = attrs.field(factory=lambda: compile_template(None))
    cron: str | None = None
    timezone: str | None = None
    every_ms: int | None = None
    offset_ms: int = 0
    overlap: Overlap = Overlap.SKIP
    catchup_window_ms: int = DEFAULT_CATCHUP_WINDOW_MS
    jitter_ms: int = 0
    paused: bool = False
    note: str = ""
    limit: int | None = None

    def definition(self) -> dict[str, Any]:
        """The definition as a spec writes it (durations in milliseconds):
        ``check_schedule`` reads it back to an equal schedule."""
        out: dict[str, Any] = {}
        if self.cron is not None:
            out["cron"] = self.cron
            if self.timezone is not None:
                out["timezone"] = self.timezone
        if self.every_ms is not None:
            out["every"] = self.every_ms
            if self.offset_ms:
                out["offset"] = self.offset_ms
        if self.input.source is not None:
            out["input"] = self.input.source
        out["overlap"] = self.overlap.value
        out["catchup_window"] = self.catchup_window_ms
        if self.jitter_ms:
            out["jitter"] = self.jitter_ms
        if self.paused:
            out["paused"] = True
        if self.note:
            out["note"] = self.note
        if self.limit is not None:
            out["limit"] = self.limit
        return out


# --- checking a definition ---------------------------------------------------------


def _did_you_mean(word: str, pool: Iterable[str]) -> str:
    import difflib

    match = difflib.get_close_matches(word, list(pool), n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_cron(
    raw: Mapping[Any, Any], problems: list[tuple[tuple[str, ...], str]]
) -> tuple[str | None, str | None]:
    """A definition's ``cron`` and ``timezone``, each None when absent or bad (its
    problem added to ``problems``)."""
    cron = raw.get("cron")
    zone = raw.get("timezone")
    if zone is not None:
        if not isinstance(zone, str):
            problems.append((("timezone",), f"expected an IANA time zone name, got {_show(zone)}"))
            zone = None
        else:
            try:
                check_zone(zone)
            except DurationError as exc:
                problems.append((("timezone",), str(exc)))
                zone = None
            if cron is None:
                problems.append((("timezone",), "'timezone' applies to 'cron', and there is none"))
    if cron is not None:
        if not isinstance(cron, str):
            problems.append((("cron",), f"expected a 5-field cron string, got {_show(cron)}"))
            cron = None
        else:
            try:
                check_cron(cron, zone)
            except ValueError as exc:
                problems.append((("cron",), str(exc)))
                cron = None
    return cron, zone


def _check_input(raw: Mapping[Any, Any], problems: list[tuple[tuple[str, ...], str]]) -> Template:
    """A definition's ``input`` compiled (an empty template when absent or bad, its
    problem added to ``problems``)."""
    template = compile_template(None)
    if "input" in raw:
        try:
            check_data(raw["input"], "$", "input")
            template = compile_template(raw["input"])
        except (DataError, TemplateError) as exc:
            problems.append((("input",), str(exc)))
        else:
            if template.refs or template.wholesale:
                problems.append(
                    (("input",), "a schedule's input can read only 'schedule' (at, at_ms, name)")
                )
    return template


def check_schedule(
    name: Any, raw: Any, flow_id: str
) -> tuple[Schedule | None, list[tuple[tuple[str, ...], str]]]:
    """Check one definition (a mapping with the keys of ``KEYS``).

    Returns the schedule, or None and every problem found, each as (path
    inside the definition, message): unknown keys (with the closest known
    one), a bad cron, an unknown time zone, neither ``cron`` nor ``every``,
    a bad duration or policy name, an input that does not compile or reads
    step results.
    """
    problems: list[tuple[tuple[str, ...], str]] = []
    if not isinstance(name, str) or not _NAME.match(name):
        problems.append(
            (
                (),
                f"schedule name {_show(name)} is not valid: use letters, digits, '_', '.'"
                " and '-' (starting with a letter or digit), at most 100 characters",
            )
        )
    if not isinstance(raw, Mapping):
        problems.append(((), f"a schedule must be a mapping, got {type(raw).__name__}"))
        return None, problems
    for key in raw:
        if key not in KEYS:
            problems.append(
                ((str(key),), f"unknown key {_show(key)}{_did_you_mean(str(key), KEYS)}")
            )

    def duration(key: str, default: int | None, allow_zero: bool) -> int | None:
        if key not in raw:
            return default
        try:
            return parse_duration(raw[key], allow_zero=allow_zero)
        except DurationError as exc:
            problems.append(((key,), str(exc)))
            return default

    cron, zone = _check_cron(raw, problems)
    every = duration("every", None, False)
    offset = duration("offset", 0, True) or 0
    if "offset" in raw and "every" not in raw:
        problems.append((("offset",), "'offset' applies to 'every', and there is none"))
    if every is not None and offset >= every:
        problems.append((("offset",), f"the offset ({offset} ms) must be shorter than 'every'"))
    if "cron" not in raw and "every" not in raw:
        problems.append(((), "a schedule needs 'cron', 'every' or both"))
    overlap = Overlap.SKIP
    if "overlap" in raw:
        value = raw["overlap"]
        try:
            overlap = Overlap(value)
        except ValueError:
            names = [o.value for o in Overlap]
            hint = _did_you_mean(value, names) if isinstance(value, str) else ""
            problems.append(
                (("overlap",), f"overlap {_show(value)} is not one of {', '.join(names)}{hint}")
            )
    window = duration("catchup_window", DEFAULT_CATCHUP_WINDOW_MS, False)
    jitter = duration("jitter", 0, True) or 0
    paused = raw.get("paused", False)
    if not isinstance(paused, bool):
        problems.append((("paused",), f"expected true or false, got {_show(paused)}"))
        paused = False
    note = raw.get("note", "")
    if not isinstance(note, str) or len(note) > MAX_NOTE_CHARS:
        problems.append((("note",), f"expected text of at most {MAX_NOTE_CHARS} characters"))
        note = ""
    limit = raw.get("limit")
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= MAX_LIMIT
    ):
        problems.append((("limit",), f"expected a number of runs from 0 to {MAX_LIMIT:,}"))
        limit = None
    template = _check_input(raw, problems)
    if problems:
        return None, problems
    assert isinstance(name, str) and window is not None
    return (
        Schedule(
            name=name,
            flow_id=flow_id,
            input=template,
            cron=cron,
            timezone=zone if cron is not None else None,
            every_ms=every,
            offset_ms=offset,
            overlap=overlap,
            catchup_window_ms=window,
            jitter_ms=jitter,
            paused=paused,
            note=note,
            limit=limit,
        ),
        [],
    )


def parse_schedule(name: Any, raw: Any, flow_id: str) -> Schedule:
    """``check_schedule`` that raises ``ScheduleError`` with every problem."""
    schedule, problems = check_schedule(name, raw, flow_id)
    if schedule is None:
        raise ScheduleError(str(name), problems)
    return schedule


# --- slots -------------------------------------------------------------------------


def iso_ms(at_ms: int) -> str:
    """``at_ms`` as ISO-8601 UTC text: ``2026-12-02T07:00:00Z`` (milliseconds when not 0)."""
    moment = _EPOCH + _dt.timedelta(milliseconds=at_ms)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if at_ms % 1000:
        text += f".{at_ms % 1000:03d}"
    return text + "Z"


def run_id_for(name: str, slot_ms: int) -> str:
    """The run id of the slot: ``<schedule name>@<slot in ISO-8601 UTC>``."""
    return f"{name}@{iso_ms(slot_ms)}"


def trigger_run_id(name: str, number: int) -> str:
    """The run id of the ``number``-th run started by hand: ``<name>@trigger-<number>``."""
    return f"{name}@trigger-{number}"


def _next_slot(schedule: Schedule, after_ms: int) -> int:
    """The first slot strictly after ``after_ms``."""
    found: list[int] = []
    if schedule.cron is not None:
        found.append(next_cron_ms(schedule.cron, schedule.timezone, after_ms))
    if schedule.every_ms is not None:
        every, offset = schedule.every_ms, schedule.offset_ms
        found.append(offset + ((after_ms - offset) // every + 1) * every)
    return min(found)


def slots_after(schedule: Schedule, after_ms: int, count: int) -> list[int]:
    """The next ``count`` slots strictly after ``after_ms`` (epoch ms), increasing."""
    out: list[int] = []
    at = after_ms
    while len(out) < count:
        at = _next_slot(schedule, at)
        out.append(at)
    return out


def _slots_between(schedule: Schedule, after_ms: int, until_ms: int) -> Iterator[int]:
    at = after_ms
    while True:
        at = _next_slot(schedule, at)
        if at > until_ms:
            return
        yield at


def jitter_ms(schedule: Schedule, slot_ms: int) -> int:
    """The slot's delay in ``[0, jitter)``: sha256 of the name and the slot (a pure function)."""
    if schedule.jitter_ms <= 0:
        return 0
    digest = hashlib.sha256(f"{schedule.name}\n{slot_ms}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % schedule.jitter_ms


def due_ms(schedule: Schedule, slot_ms: int) -> int:
    """When the slot is due: the slot plus its jitter."""
    return slot_ms + jitter_ms(schedule, slot_ms)


class _Context:
    """What a schedule's input reads: ``schedule.at``, ``schedule.at_ms``, ``schedule.name``."""

    def __init__(self, name: str, at_ms: int) -> None:
        self._schedule = {"at": iso_ms(at_ms), "at_ms": at_ms, "name": name}

    def root(self, name: str) -> Any:
        if name == "schedule":
            return self._schedule
        if name == "$locals":
            return {"schedule": self._schedule}
        return None

    def step(self, step_id: str) -> Any:
        return None


def slot_input(schedule: Schedule, at_ms: int) -> Any:
    """The input of the run started for ``at_ms``. Raises ``TemplateError``."""
    return schedule.input.evaluate(_Context(schedule.name, at_ms))


def input_for(name: str, template: Any, at_ms: int) -> Any:
    """What the input ``template`` (as a spec writes it) of schedule ``name`` gives
    for the slot ``at_ms``: for a host that carries the template to where the run
    starts (a Temporal workflow). Raises ``TemplateError``."""
    return compile_template(template).evaluate(_Context(name, at_ms))


# --- the decision ------------------------------------------------------------------


@attrs.frozen
class Start:
    """Start the run ``run_id`` with ``input`` for ``slot_ms``."""

    slot_ms: int
    run_id: str
    input: Any


@attrs.frozen
class Skip:
    """The slot does not start; with ``through_ms``, neither does any slot after it
    up to that time (one skip standing for a span too long to list)."""

    slot_ms: int
    why: str
    through_ms: int | None = None


@attrs.frozen
class Buffer:
    """The slot waits until the schedule's runs have settled."""

    slot_ms: int


@attrs.frozen
class CancelOther:
    """Cancel ``run_ids`` (still running) for the slot, which waits for them to settle."""

    slot_ms: int
    run_ids: tuple[str, ...]


Action: TypeAlias = Start | Skip | Buffer | CancelOther


@attrs.frozen
class Progress:
    """What the host records of a schedule between decisions.

    ``considered_ms``: every slot at or before it has been decided (a time,
    not necessarily a slot: a new schedule starts from when it was added).
    ``buffered_ms``: the slot waiting for the running runs to settle.
    ``remaining``: how many more runs the cadence may start (None: no limit).
    """

    considered_ms: int
    buffered_ms: int | None = None
    remaining: int | None = None


@attrs.frozen
class Decision:
    actions: tuple[Action, ...]
    progress: Progress
    more: bool = False  # the slot budget of one decision ran out: decide again now


def _start(schedule: Schedule, slot_ms: int, run_id: str | None = None) -> Start | Skip:
    try:
        value = slot_input(schedule, slot_ms)
    except TemplateError as exc:
        return Skip(slot_ms, f"its input could not be evaluated: {exc}")
    return Start(slot_ms, run_id or run_id_for(schedule.name, slot_ms), value)


class _Placer:
    """Places slots one after the other under the overlap policy."""

    def __init__(self, schedule: Schedule, running: Sequence[str], buffered: int | None) -> None:
        self.schedule = schedule
        self.running = list(running)
        self.buffered = buffered
        self.started = 0
        self.actions: list[Action] = []

    def start(self, slot_ms: int) -> None:
        action = _start(self.schedule, slot_ms)
        self.actions.append(action)
        if isinstance(action, Start):
            self.running.append(action.run_id)
            self.started += 1

    def drain(self) -> None:
        """Start the buffered slot if nothing runs any more."""
        if self.buffered is not None and not self.running:
            slot, self.buffered = self.buffered, None
            self.start(slot)

    def place(self, slot_ms: int) -> None:
        overlap = self.schedule.overlap
        if not self.running or overlap is Overlap.ALLOW_ALL:
            self.start(slot_ms)
        elif overlap is Overlap.SKIP:
            self.actions.append(Skip(slot_ms, "the previous run is still running"))
        elif overlap is Overlap.BUFFER_ONE:
            if self.buffered is None:
                self.buffered = slot_ms
                self.actions.append(Buffer(slot_ms))
            else:
                self.actions.append(
                    Skip(slot_ms, "the previous run is still running and a slot already waits")
                )
        elif overlap is Overlap.CANCEL_OTHER:
            self.actions.append(CancelOther(slot_ms, tuple(self.running)))
            if self.buffered is not None:
                self.actions.append(Skip(self.buffered, "replaced by a newer slot"))
            self.buffered = slot_ms
            self.actions.append(Buffer(slot_ms))
        else:  # pragma: no cover - exhaustive
            raise AssertionError(overlap)


def decide(
    schedule: Schedule, progress: Progress, now_ms: int, running: Sequence[str] = ()
) -> Decision:
    """What to do now: the slots due since ``progress.considered_ms``, in order.

    ``running``: the ids of the runs this schedule started that are still
    running. A paused schedule, and one whose limit is used up, decides
    nothing (a buffered slot waits too).
    """
    if schedule.paused or progress.remaining == 0:
        return Decision((), progress)
    placer = _Placer(schedule, running, progress.buffered_ms)
    remaining = progress.remaining
    considered = progress.considered_ms
    placer.drain()
    if remaining is not None:
        remaining = max(0, remaining - placer.started)
    # Slots whose due time is surely outside the window are skipped without
    # looking at each one past the first few (a fine cadence after a long
    # downtime would be thousands).
    cutoff = now_ms - schedule.catchup_window_ms - schedule.jitter_ms - 1
    listed = 0
    for slot in _slots_between(schedule, considered, cutoff):
        if listed == MAX_SKIPS_LISTED:
            placer.actions.append(Skip(slot, "outside catch-up window", through_ms=cutoff))
            considered = cutoff
            break
        placer.actions.append(Skip(slot, "outside catch-up window"))
        considered = slot
        listed += 1
    looked = 0
    more = False
    while remaining != 0:
        if looked == MAX_SLOTS_PER_DECISION:
            more = True
            break
        slot = _next_slot(schedule, considered)
        due = due_ms(schedule, slot)
        if due > now_ms:
            break
        looked += 1
        considered = slot
        if now_ms - due > schedule.catchup_window_ms:
            placer.actions.append(Skip(slot, "outside catch-up window"))
            continue
        before = placer.started
        placer.place(slot)
        if remaining is not None:
            remaining -= placer.started - before
    return Decision(
        tuple(placer.actions),
        Progress(considered, placer.buffered, remaining),
        more,
    )


def next_due_ms(schedule: Schedule, progress: Progress) -> int | None:
    """When the next slot is due (None: paused, or the limit is used up)."""
    if schedule.paused or progress.remaining == 0:
        return None
    return due_ms(schedule, _next_slot(schedule, progress.considered_ms))


def trigger(schedule: Schedule, number: int, now_ms: int) -> Start | Skip:
    """Start a run now, outside the cadence (the ``number``-th by hand), whatever
    runs (as ``allow_all``); ``schedule.at`` is ``now_ms``. Not counted in ``limit``."""
    return _start(schedule, now_ms, trigger_run_id(schedule.name, number))


def backfill_slots(schedule: Schedule, start_ms: int, end_ms: int) -> list[int]:
    """The slots from ``start_ms`` through ``end_ms``, both included.

    Raises ``ValueError`` for a reversed range, a range without slots, or
    more than ``MAX_BACKFILL_SLOTS`` slots.
    """
    if end_ms < start_ms:
        raise ValueError(f"the range ends ({iso_ms(end_ms)}) before it starts ({iso_ms(start_ms)})")
    slots: list[int] = []
    for slot in _slots_between(schedule, start_ms - 1, end_ms):
        slots.append(slot)
        if len(slots) > MAX_BACKFILL_SLOTS:
            raise ValueError(
                f"the range holds more than {MAX_BACKFILL_SLOTS:,} slots: backfill it in parts"
            )
    if not slots:
        raise ValueError(
            f"no slot of schedule {schedule.name!r} lies from {iso_ms(start_ms)}"
            f" through {iso_ms(end_ms)}"
        )
    return slots


def backfill(
    schedule: Schedule,
    slots: Sequence[int],
    running: Sequence[str] = (),
    buffered_ms: int | None = None,
    done: Iterable[int] = (),
) -> tuple[tuple[Action, ...], int | None]:
    """Start ``slots`` (from ``backfill_slots``) as if each were due now, in order.

    The overlap policy applies between them as between any slots (a started
    run counts as running for the next slot: with ``skip``, one run starts;
    ``allow_all`` starts them all); the catch-up window and ``limit`` do not
    apply. Slots in ``done`` (their run exists already) are skipped. Returns
    the actions and the slot now buffered.
    """
    seen = set(done)
    placer = _Placer(schedule, running, buffered_ms)
    for slot in slots:
        if slot in seen:
            placer.actions.append(
                Skip(slot, f"run {run_id_for(schedule.name, slot)!r} exists already")
            )
            continue
        placer.place(slot)
    return tuple(placer.actions), placer.buffered
