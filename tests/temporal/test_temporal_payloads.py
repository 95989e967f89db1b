"""The workflow's shortcuts around the activity's payloads change nothing.

The workflow makes the activity's argument payloads itself (``work_args``)
and reads a JSON result straight into its event (``quick_event``); both must
give exactly what the long way gives: the bytes Temporal's default converter
writes (so histories stay as they were), and the event ``event_from_wire``
makes of the decoded result, or nothing when the long way would refuse it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("temporalio", reason="the Temporal host tests need temporalio (.[dev])")

from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.converter import DataConverter

import flowcore
from flowcore import (
    BudgetRemaining,
    CallTool,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    RunAgent,
)
from flowcore_temporal._activities import _result
from flowcore_temporal._payloads import quick_event, work_args
from tests.decision.test_wire import error_infos, json_values, usages

CONVERTER = DataConverter.default.payload_converter


@given(st.text(max_size=30), st.text(max_size=30), json_values())
def test_the_argument_payloads_are_those_of_temporals_converter(
    key: str, tool: str, value: Any
) -> None:
    for effect in (
        CallTool(idempotency_key=key, tool=tool, input=value),
        RunAgent(
            idempotency_key=key,
            agent_id=tool,
            prompt=key + tool,
            budget_remaining=BudgetRemaining(steps=7, cost_minor_units=None, wall_clock_ms=None),
            heartbeat_details=value,
        ),
    ):
        context = {"principal": tool, "step": key, "attempt": 2, "budgetRemaining": {"steps": 7}}
        made = [raw.payload for raw in work_args(effect, None, context)]
        wire = flowcore.effect_to_wire(effect)
        assert made == CONVERTER.to_payloads([wire, None, context])


def work_events() -> st.SearchStrategy[Any]:
    keys = st.text(max_size=30)
    at = st.integers(0, 2**63 - 1)
    return st.one_of(
        st.builds(
            EffectSucceeded,
            idempotency_key=keys,
            output=json_values(),
            usage=st.none() | usages(),
            at_ms=at,
        ),
        st.builds(EffectFailed, idempotency_key=keys, error=error_infos(), at_ms=at),
        st.builds(EffectOutcomeUnknown, idempotency_key=keys, at_ms=at),
    )


def long_way(payload: Payload) -> Any:
    """What ``_work_event`` makes of a result without the shortcut (None: refused)."""
    try:
        return flowcore.event_from_wire(CONVERTER.from_payload(payload))
    except (flowcore.WireError, flowcore.DataError, RuntimeError):
        return None


@given(work_events())
def test_a_result_is_read_into_the_event_the_long_way_makes(event: Any) -> None:
    # As the activity answers (a checked event): the shortcut takes it whole.
    payload = CONVERTER.to_payloads([_result(event)])[0]
    quick = quick_event(RawValue(payload))
    assert quick is not None and quick == long_way(payload)
    # As anyone could: the same event, or left to the long way.
    payload = CONVERTER.to_payloads([flowcore.event_to_wire(event)])[0]
    quick = quick_event(RawValue(payload))
    assert quick is None or quick == long_way(payload)


@pytest.mark.parametrize(
    "data",
    [
        b'{"kind":"effect-succeeded","idempotencyKey":"k","output":NaN,"atMs":1}',
        b'{"kind":"effect-succeeded","idempotencyKey":"k","output":"\\ud800","atMs":1}',
        b'{"kind":"effect-succeeded","idempotencyKey":"k","output":' + b"9" * 30 + b',"atMs":1}',
        b'{"kind":"effect-succeeded","idempotencyKey":"k","output":'
        + b"[" * 200
        + b"]" * 200
        + b',"atMs":1}',
        b'{"kind":"timer-fired","idempotencyKey":"k","atMs":1}',
        b'{"kind":"effect-succeeded","idempotencyKey":"k"}',
        b"[1, 2]",
        b"not json",
    ],
)
def test_a_result_the_shortcut_does_not_take_whole_goes_the_long_way(data: bytes) -> None:
    payload = Payload(metadata={"encoding": b"json/plain"}, data=data)
    assert quick_event(RawValue(payload)) is None


def test_a_result_in_another_encoding_goes_the_long_way() -> None:
    wire = {"kind": "effect-outcome-unknown", "idempotencyKey": "k", "atMs": 1}
    payload = Payload(metadata={"encoding": b"json/other"}, data=json.dumps(wire).encode())
    assert quick_event(RawValue(payload)) is None
    assert quick_event(wire) is None  # decoded already (not a RawValue)
