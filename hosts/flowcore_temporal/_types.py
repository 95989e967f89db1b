"""The values that cross Temporal's wire: the workflow's argument, and names.

A plain dataclass of JSON-ready fields, so that Temporal's default data
converter carries them and any Temporal client (the ``temporal`` CLI, another
SDK) can start a flowcore run by hand. This module must stay importable inside
the workflow sandbox: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ACTIVITY_NAME",
    "ANSWER_UPDATE",
    "DEFAULT_ACTIVITY_TIMEOUT_MS",
    "DEFAULT_HEARTBEAT_TIMEOUT_MS",
    "DEFAULT_TASK_QUEUE",
    "LOG_QUERY",
    "QUESTIONS_QUERY",
    "STATUS_QUERY",
    "WORKFLOW_NAME",
    "RunArgs",
]

WORKFLOW_NAME = "flowcore"
"""The Temporal workflow type that runs every flowcore flow."""

ACTIVITY_NAME = "flowcore_work"
"""The one activity type, ``flowcore_work(effect, tools)``: a call-tool, run-agent or
run-team effect in wire form, and the tools module (``None``: the worker's)."""

ANSWER_UPDATE = "answer"
"""Update ``answer(key, answer)``: answers an ask-human question, validated first."""

QUESTIONS_QUERY = "pending_questions"
LOG_QUERY = "log"
STATUS_QUERY = "status"

DEFAULT_TASK_QUEUE = "flowcore"
DEFAULT_ACTIVITY_TIMEOUT_MS = 10 * 60 * 1000
"""start-to-close of one handler call; past it the outcome is unknown."""
DEFAULT_HEARTBEAT_TIMEOUT_MS = 30 * 1000
"""The activity heartbeats while its handler runs; a dead worker is noticed this fast."""


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
