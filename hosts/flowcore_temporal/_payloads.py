"""The work activity's payloads, made and read without the converter's detours.

A speed-up, in its one place (``specs/architecture.md`` §5). Every step sends
the ``flowcore_work`` activity an effect and reads back an event; Temporal's
default converter would try each of its encodings in turn on the way out and
build a dict on the way in, which flowcore then checks and converts again.

- ``work_args``: the activity's arguments (the effect's wire dict, the tools
  module, the work's context) as the payloads the default converter makes of them, byte for byte
  (``tests/temporal/test_temporal_payloads.py`` compares them).
- ``quick_event``: a ``json/plain`` result read straight into its event by
  flowcore's decoder and checked; None for anything else or anything wrong,
  which the workflow then reads the long way, saying what is wrong.

Runs inside the workflow sandbox (passed through): no I/O, no clock.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue

import flowcore
from flowcore import (
    CallTool,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    Event,
    RunAgent,
    RunTeam,
)

__all__ = ["quick_event", "work_args"]

_WORK_EVENTS = (EffectSucceeded, EffectFailed, EffectOutcomeUnknown)


def work_args(
    effect: CallTool | RunAgent | RunTeam, tools: str | None, context: dict[str, Any]
) -> list[RawValue]:
    """The activity's arguments as the payloads Temporal's default converter
    makes of them, made here at once: the effect, the tools module, and what
    the run knows of the work for its handler's context (``work_context``)."""
    wire = RawValue(_json_payload(flowcore.effect_to_wire(effect)))
    facts = RawValue(_json_payload(context))
    if tools is None:
        return [wire, RawValue(Payload(metadata={"encoding": b"binary/null"})), facts]
    return [wire, RawValue(workflow.payload_converter().to_payload(tools)), facts]


def _json_payload(data: dict[str, Any]) -> Payload:
    text = json.dumps(data, separators=(",", ":"), sort_keys=True)
    return Payload(metadata={"encoding": b"json/plain"}, data=text.encode())


def quick_event(raw: Any) -> Event | None:
    """The work event in a ``json/plain`` result, decoded and checked; None when
    it is anything else or anything is wrong with it."""
    if not isinstance(raw, RawValue) or raw.payload.metadata.get("encoding") != b"json/plain":
        return None
    try:
        event = flowcore.check_event(flowcore.decode_event(raw.payload.data))
    except (flowcore.WireError, flowcore.DataError):
        return None
    return event if isinstance(event, _WORK_EVENTS) else None
