"""Schedules that start runs: the public face of ``flowcore.language.schedules``.

A spec's top-level ``schedules:`` checked, the slots after a time, and
``decide`` (progress + now -> start, skip, buffer, cancel-other). Hosts
store and apply; the module never reads a clock.
"""

from .language.schedules import (
    DEFAULT_CATCHUP_WINDOW_MS,
    KEYS,
    MAX_BACKFILL_SLOTS,
    MAX_SLOTS_PER_DECISION,
    Action,
    Buffer,
    CancelOther,
    Decision,
    Overlap,
    Progress,
    Schedule,
    ScheduleError,
    Skip,
    Start,
    backfill,
    backfill_slots,
    check_schedule,
    decide,
    due_ms,
    input_for,
    iso_ms,
    jitter_ms,
    next_due_ms,
    parse_schedule,
    run_id_for,
    slot_input,
    slots_after,
    trigger,
    trigger_run_id,
)
from .language.schedules import (
    MAX_LIMIT as MAX_LIMIT,
)
from .language.schedules import (
    MAX_NOTE_CHARS as MAX_NOTE_CHARS,
)
from .language.schedules import (
    MAX_SKIPS_LISTED as MAX_SKIPS_LISTED,
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
