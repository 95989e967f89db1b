"""Idempotency keys and frame ids: how they are spelled, and how they are read back.

Keys are a contract (DESIGN §5): deterministic, human-readable, the same on
every replay. This module is the only place that spells them; hosts and tools
read them with ``parse_key`` instead of cutting strings.

The grammar, for a run ``r-1``::

    key    = run "/" path "#" attempt            a step's effect (or a schedule's id)
           | run "/" path "#" attempt "/timeout" a question's or signal wait's timeout
           | run "/" path "#" attempt "/backoff" the pause before the next attempt
           | run "/" path "#" attempt "/approval" the question before a call needing approval
           | run "/" path "/" member "#" attempt a declared team member's run-agent
           | run "/" path "/timeout"             a step's timeout timer
           | run "/" scope "tick"                a repeat's tick timer
           | run "/$deadline"                    the wall-clock deadline
           | run "/$deadline-reserve"            the deadline of the reserve's steps
           | run "/~scheduled-" n                a call scheduled from outside the run
           | run "/~update-" n "/" key-rest      a step of update n's handler (any form above)
           | run "/~scheduled-r" hex20           one scheduled under a request (its SHA-256)
           | schedule "/delay" | schedule "/call"   a scheduled call's timer and call
           | schedule "/delay-" n | schedule "/call-" n   firing n (from 2) of a recurring call
           | schedule "/replay-" n                a finished call's n-th replay
    run    = run-id | run-id "/@" n              n: the incarnation, from 2 (continue_as_new)
    path   = { scope } step
    scope  = step "[" index "]/"                 one loop iteration or fire
           | step "#" attempt "/"                an attempt of a retried composite

where ``schedule`` is the key of the schedule step itself, or the id of a
call scheduled from outside (numbered from 1 by the run's state). Step ids, branch
and member names are identifiers (``[A-Za-z_][A-Za-z0-9_]*``), so ``/``,
``#``, ``[`` and ``$`` only ever separate. A run id may hold any of them (a
child run is named by its parent's key): ``parse_key`` takes the run id when
the caller knows it, and otherwise reads it as the text before the first ``/``.

Frame ids name the frames of the run's tree (see ``transitions``): a step's
frame is ``path`` without the attempt; the lists a composite step owns add a
suffix to the step's frame id (``:c0`` a switch case, ``:try``, ``:k0`` a
catch clause, ``:b:name`` a parallel branch, ``[3]:`` an iteration or fire,
``!comp:`` a compensation). Frame ids are never parsed back: frames carry
their owner and list as typed fields.
"""

from __future__ import annotations

import hashlib
import re
from enum import StrEnum

import msgspec

from .._errors import RunIdError

__all__ = [
    "DEADLINE",
    "KeyInfo",
    "KeyRole",
    "approval_key",
    "backoff_key",
    "branch_list",
    "call_key",
    "case_list",
    "catch_env",
    "catch_list",
    "check_run_id",
    "RESERVED_RUN_ID_CHARS",
    "child_prefix",
    "compensation_list",
    "deadline_key",
    "incarnation_base",
    "reserve_deadline_key",
    "FINAL_LIST",
    "RESERVE_DEADLINE",
    "delay_key",
    "iteration_list",
    "loop_output",
    "loop_scope",
    "member_key",
    "outside_schedule_id",
    "parse_key",
    "replay_key",
    "step_key",
    "step_timeout_key",
    "tick_key",
    "try_list",
    "update_list",
    "update_scope",
    "wait_timeout_key",
]

DEADLINE = "$deadline"
RESERVE_DEADLINE = "$deadline-reserve"  # the wall clock of on_budget_exhausted's steps


# --- run ids ----------------------------------------------------------------------

# A child run is named by its parent's key (``r-1/child#1``), so an id holding
# one of these is a child's: a run started from outside may not take one, or it
# could take the name of another run's child before that child starts.
RESERVED_RUN_ID_CHARS = "/#"


def check_run_id(run_id: object) -> str:
    """``run_id`` if it may name a run started from outside (a root run), else ``RunIdError``.

    Every host checks the id a caller chooses with this before it writes
    anything; the ids hosts make themselves for child runs are keys and do
    hold the reserved characters.
    """
    if not isinstance(run_id, str) or not run_id:
        raise RunIdError(run_id, f"a run id must be a non-empty string, not {run_id!r:.80}")
    found = sorted({c for c in run_id if c in RESERVED_RUN_ID_CHARS})
    if found:
        listed = " and ".join(repr(c) for c in found)
        raise RunIdError(
            run_id,
            f"run id {run_id[:200]!r} holds {listed}: the characters"
            f" {' and '.join(repr(c) for c in RESERVED_RUN_ID_CHARS)} are reserved for the ids"
            " of child runs (a parent's key, such as 'r-1/child#1'); choose an id without them",
        )
    return run_id


# --- keys -------------------------------------------------------------------------

INCARNATION = "@"


def incarnation_base(run_id: str, incarnation: int) -> str:
    """What the keys of one incarnation begin with: the run id for the first,
    ``r-1/@2`` for the second (keys never collide between incarnations, and the
    first incarnation's keys are those of a run that never continues)."""
    return run_id if incarnation == 1 else f"{run_id}/{INCARNATION}{incarnation}"


def step_key(run_id: str, frame_id: str, attempt: int) -> str:
    """The key of a step's effect: ``r-1/per[2]/triage#1``."""
    return f"{run_id}/{frame_id}#{attempt}"


def member_key(run_id: str, frame_id: str, member: str, attempt: int) -> str:
    """A declared team member's run-agent: ``r-1/review/critic#1``."""
    return f"{run_id}/{frame_id}/{member}#{attempt}"


def step_timeout_key(run_id: str, frame_id: str) -> str:
    """A step's ``timeout_ms`` timer (one for all attempts): ``r-1/fetch/timeout``."""
    return f"{run_id}/{frame_id}/timeout"


def wait_timeout_key(key: str) -> str:
    """The timeout of a question or a signal wait: ``r-1/approve#1/timeout``."""
    return f"{key}/timeout"


def attempt_timeout_key(key: str) -> str:
    """The ``attempt_timeout_ms`` timer of the attempt ``key``: ``r-1/fetch#2/attempt-timeout``."""
    return f"{key}/attempt-timeout"


def backoff_key(key: str) -> str:
    """The retry backoff timer after the attempt ``key``: ``r-1/fetch#1/backoff``."""
    return f"{key}/backoff"


def approval_key(key: str) -> str:
    """The question asked before the call ``key`` of a tool that needs approval:
    ``r-1/refund#1/approval``."""
    return f"{key}/approval"


def tick_key(run_id: str, scope: str) -> str:
    """A repeat's timer for the fire whose scope is ``scope``: ``r-1/poll[3]/tick``."""
    return f"{run_id}/{scope}tick"


def deadline_key(run_id: str) -> str:
    """The wall-clock budget's deadline timer: ``r-1/$deadline``."""
    return f"{run_id}/{DEADLINE}"


def reserve_deadline_key(run_id: str) -> str:
    """The deadline of the steps run within the reserve: ``r-1/$deadline-reserve``."""
    return f"{run_id}/{RESERVE_DEADLINE}"


FINAL_LIST = "!exhausted:"
"""The frame id of the list of ``on_budget_exhausted`` steps."""


def delay_key(schedule: str, firing: int = 1) -> str:
    """A scheduled call's delay timer; a recurring call's ``firing`` from 2 gets its own."""
    return f"{schedule}/delay" if firing <= 1 else f"{schedule}/delay-{firing}"


OUTSIDE_SCHEDULE = "~scheduled-"


def outside_schedule_id(run_id: str, n: int) -> str:
    """The id of the ``n``-th call scheduled from outside the run (``~`` is never in a step id)."""
    return f"{run_id}/{OUTSIDE_SCHEDULE}{n}"


def requested_schedule_id(run_id: str, request: str) -> str:
    """The id of the call scheduled from outside under the asker's ``request``
    (``ScheduledAddRequested.request``): the same request always names the same
    call, so asking again adds nothing (SHA-256 of the request, never ``hash``)."""
    digest = hashlib.sha256(request.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{run_id}/{OUTSIDE_SCHEDULE}r{digest[:20]}"


def call_key(schedule: str, firing: int = 1) -> str:
    """A scheduled call's call-tool effect; a recurring call's ``firing`` from 2 gets its own."""
    return f"{schedule}/call" if firing <= 1 else f"{schedule}/call-{firing}"


def replay_key(schedule: str, replay: int) -> str:
    """The call-tool of the ``replay``-th replay of a finished scheduled call."""
    return f"{schedule}/replay-{replay}"


# --- frame ids and scopes -----------------------------------------------------------


def child_prefix(prefix: str, step: str, attempt: int) -> str:
    """The prefix of the frames inside a composite: an attempt after the first gets its own."""
    return prefix if attempt == 1 else f"{prefix}{step}#{attempt}/"


def loop_scope(prefix: str, step: str, index: int) -> str:
    """The scope (and frame prefix) of one iteration or fire: ``per[2]/``."""
    return f"{prefix}{step}[{index}]/"


def loop_output(scope: str) -> str:
    """Where a for_each iteration's output is kept until the loop ends."""
    return f"{scope}$output"


def case_list(frame_id: str, index: int) -> str:
    return f"{frame_id}:c{index}"


def try_list(frame_id: str) -> str:
    return f"{frame_id}:try"


def catch_list(frame_id: str, index: int) -> str:
    return f"{frame_id}:k{index}"


def catch_env(frame_id: str) -> str:
    return f"{frame_id}!catch"


def branch_list(frame_id: str, name: str) -> str:
    return f"{frame_id}:b:{name}"


def iteration_list(frame_id: str, index: int) -> str:
    return f"{frame_id}[{index}]:"


def compensation_list(prefix: str, step: str) -> str:
    return f"!comp:{prefix}{step}"


UPDATE_SCOPE = "~update-"


def update_scope(seq: int) -> str:
    """The scope (and frame prefix) of the handler of update ``seq``: ``~update-1/``."""
    return f"{UPDATE_SCOPE}{seq}/"


def update_list(seq: int) -> str:
    """The frame id of the handler's list of steps: ``~update-1``."""
    return f"{UPDATE_SCOPE}{seq}"


# --- reading keys back ----------------------------------------------------------------


class KeyRole(StrEnum):
    """What a key names."""

    EFFECT = "effect"  # a step's effect (work, question, sleep, signal wait), or a schedule id
    MEMBER = "member"  # a declared team member's run-agent
    STEP_TIMEOUT = "step-timeout"
    ATTEMPT_TIMEOUT = "attempt-timeout"  # one attempt's attempt_timeout_ms
    WAIT_TIMEOUT = "wait-timeout"  # a question's or a signal wait's timeout
    BACKOFF = "backoff"
    APPROVAL = "approval"  # the question before a call of a tool that needs approval
    TICK = "tick"
    DEADLINE = "deadline"
    SCHEDULE_DELAY = "schedule-delay"
    SCHEDULE_CALL = "schedule-call"
    SCHEDULE_REPLAY = "schedule-replay"  # a finished scheduled call's replay
    OUTSIDE_SCHEDULE = "outside-schedule"  # the id of a call scheduled from outside


class KeyInfo(msgspec.Struct, frozen=True, kw_only=True):
    """An idempotency key, read back (``parse_key``)."""

    run_id: str
    role: KeyRole
    step: str | None  # the step the key belongs to; None for the deadline and outside calls
    path: str  # the step's path in the run: loop indices and composite attempts
    loops: tuple[int, ...]  # the loop indices along the path, outermost first
    attempt: int | None  # the attempt; None for a step timeout, a tick, the deadline
    member: str | None = None
    incarnation: int = 1  # the run's incarnation the key belongs to (``continue_as_new``)
    firing: int | None = None  # a recurring call's firing (from 2), or a replay's number
    update: int | None = None  # the update (its seq) whose handler the step is in


_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_SCOPE = rf"{_NAME}(?:\[\d+\]|#\d+)/"
_KEY = re.compile(
    rf"(?P<path>(?:{_SCOPE})*(?P<step>{_NAME}))"
    rf"(?:#(?P<attempt>\d+)(?P<suffix>/timeout|/attempt-timeout|/backoff|/approval|/delay|/call"
    rf"|/replay)?(?:-(?P<firing>[1-9][0-9]*))?"
    rf"|/(?P<member>{_NAME})#(?P<mattempt>\d+)"
    rf"|/(?P<timeout>timeout)"
    rf"|\[(?P<fire>\d+)\]/(?P<tick>tick))\Z"
)
_INCARNATION = re.compile(r"@(?P<n>[2-9]|[1-9][0-9]+)/")
_UPDATE = re.compile(r"~update-(?P<n>[1-9][0-9]*)/")
_LOOP = re.compile(r"\[(\d+)\]")
_OUTSIDE = re.compile(
    r"~scheduled-(?P<n>[1-9][0-9]*|r[0-9a-f]{20})"
    r"(?P<suffix>/delay|/call|/replay)?(?:-(?P<firing>[1-9][0-9]*))?\Z"
)
_SUFFIX_ROLE = {
    None: KeyRole.EFFECT,
    "/timeout": KeyRole.WAIT_TIMEOUT,
    "/attempt-timeout": KeyRole.ATTEMPT_TIMEOUT,
    "/backoff": KeyRole.BACKOFF,
    "/approval": KeyRole.APPROVAL,
    "/delay": KeyRole.SCHEDULE_DELAY,
    "/call": KeyRole.SCHEDULE_CALL,
    "/replay": KeyRole.SCHEDULE_REPLAY,
}


def parse_key(key: str, run_id: str | None = None) -> KeyInfo:
    """Read an idempotency key back: its run, step, path, loop indices, attempt and role.

    ``run_id``: the run the key belongs to, when known (a child run's id holds
    ``/``); without it the run id is the text before the first ``/``. Raises
    ``ValueError`` naming the key if it is not one flowcore spells.
    """
    if run_id is None:
        run_id, sep, rest = key.partition("/")
        if not sep:
            raise ValueError(f"not a flowcore key: {key[:200]!r} has no '/'")
    elif key.startswith(run_id + "/"):
        rest = key[len(run_id) + 1 :]
    else:
        raise ValueError(f"key {key[:200]!r} does not belong to run {run_id[:200]!r}")
    incarnation = 1
    later = _INCARNATION.match(rest)
    if later is not None:
        incarnation = int(later["n"])
        rest = rest[later.end() :]
    if rest == DEADLINE or rest == RESERVE_DEADLINE:
        return KeyInfo(
            run_id=run_id,
            role=KeyRole.DEADLINE,
            step=None,
            path="",
            loops=(),
            attempt=None,
            incarnation=incarnation,
        )
    outside = _OUTSIDE.match(rest)
    if outside is not None:
        suffix = outside["suffix"]
        firing = _firing(key, suffix, outside["firing"])
        return KeyInfo(
            run_id=run_id,
            role=KeyRole.OUTSIDE_SCHEDULE if suffix is None else _SUFFIX_ROLE[suffix],
            step=None,
            path=rest[: outside.start("suffix")] if suffix is not None else rest,
            loops=(),
            attempt=None,
            incarnation=incarnation,
            firing=firing,
        )
    update = None
    handler = _UPDATE.match(rest)
    if handler is not None:
        update = int(handler["n"])
        prefix, rest = rest[: handler.end()], rest[handler.end() :]
    m = _KEY.match(rest)
    if m is None:
        raise ValueError(f"not a flowcore key: {key[:200]!r}")
    firing = _firing(key, m["suffix"], m["firing"])
    path = m["path"] if handler is None else prefix + m["path"]
    loops = tuple(int(i) for i in _LOOP.findall(path))
    if m["member"] is not None:
        role, attempt, member = KeyRole.MEMBER, int(m["mattempt"]), m["member"]
    elif m["timeout"] is not None:
        role, attempt, member = KeyRole.STEP_TIMEOUT, None, None
    elif m["tick"] is not None:
        role, attempt, member = KeyRole.TICK, None, None
        loops = (*loops, int(m["fire"]))
    else:
        role, attempt, member = _SUFFIX_ROLE[m["suffix"]], int(m["attempt"]), None
    return KeyInfo(
        run_id=run_id,
        role=role,
        step=m["step"],
        path=path,
        loops=loops,
        attempt=attempt,
        member=member,
        incarnation=incarnation,
        firing=firing,
        update=update,
    )


def _firing(key: str, suffix: str | None, number: str | None) -> int | None:
    """The firing of a scheduled call's delay or call (from 2) or a replay's number (from 1)."""
    if suffix == "/replay":
        if number is None:
            raise ValueError(f"not a flowcore key: {key[:200]!r} names a replay without its number")
        return int(number)
    if number is None:
        return None
    if suffix not in ("/delay", "/call") or int(number) < 2:
        raise ValueError(f"not a flowcore key: {key[:200]!r}")
    return int(number)
