"""h11's rule for flowcore: garbage is applied or rejected with flowcore's own error.

Hostile wire dicts (lone surrogates anywhere, integers beyond 64 bits, NaN and
infinities, deep nesting, wrong types, oversize values) go through
``event_from_wire`` and ``advance`` against real waiting states. Every one
must either apply or raise a ``FlowcoreError``, and every state ``advance``
returns must encode and decode again.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import flowcore
from flowcore import (
    EffectFailed,
    EffectSucceeded,
    ErrorInfo,
    EventRejected,
    HumanAnswered,
    SignalReceived,
    Usage,
)
from flowcore.testing import EVENT_KINDS

FLOW = flowcore.parse_flow(
    """
flow: hostile
tools: {t: {class: idempotent}, u: {}}
steps:
  - id: all
    parallel:
      branches:
        work: [{id: w, call_tool: {tool: t, input: 1}, retry: {max_attempts: 2}}]
        ask: [{id: q, ask_human: {question: "ok?", options: ["yes", "no"]}}]
        wait: [{id: s, await_signal: {signal: go, timeout_ms: 5000}}]
        nap: [{id: z, sleep: {for_ms: 1000}}]
        free: [{id: f, ask_human: {question: "anything?"}}]
        child: [{id: c, run_subflow: {flow: kid}}]
  - {id: after, call_tool: {tool: u, input: "${steps.s.output}"}}
output: "${steps.f.output}"
"""
)
START = flowcore.start(FLOW, {"x": 1}, run_id="r", now_ms=0).state
KEYS = sorted(START.waiting.pending.keys())

SURROGATE = json.loads('"\\ud800"')
DEEP = json.loads("[" * 70 + "]" * 70)
VERY_DEEP = json.loads("[" * 300 + "]" * 300)

hostile_text = st.one_of(
    st.sampled_from(["", "go", "yes", "no", SURROGATE, "\ud83b", "a\udcff", "x" * 5000]),
    st.text(max_size=8),
    st.sampled_from(KEYS),
    st.sampled_from([f"{k}{SURROGATE}" for k in KEYS]),
)
hostile_number = st.one_of(
    st.sampled_from([10**20, -(2**63) - 1, 2**63, 2**64, float("nan"), float("inf"), -0.0]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
)
hostile_leaf = st.one_of(st.none(), st.booleans(), hostile_number, hostile_text)
hostile_value = st.recursive(
    hostile_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(hostile_text, inner, max_size=3),
    ),
    max_leaves=8,
) | st.sampled_from([DEEP, VERY_DEEP, "y" * (1 << 20), {"big": ["z" * 1000] * 1100}])

KINDS = list(EVENT_KINDS)
FIELDS = [
    "idempotencyKey",
    "atMs",
    "output",
    "answer",
    "signal",
    "payload",
    "error",
    "status",
    "usage",
    "reason",
]
good_field = {
    "atMs": st.integers(min_value=0, max_value=10_000),
    "idempotencyKey": st.sampled_from(KEYS),
    "signal": st.just("go"),
    "answer": st.sampled_from(["yes", "no"]),
    "status": st.sampled_from(["completed", "failed", "cancelled", "budget-exhausted"]),
    "error": st.fixed_dictionaries(
        {"type": st.sampled_from(["boom", SURROGATE])},
        optional={"message": hostile_text, "retryable": st.booleans()},
    ),
    "usage": st.fixed_dictionaries(
        {}, optional={"steps": hostile_number, "costMinorUnits": hostile_number}
    ),
}


@st.composite
def wire_events(draw: st.DrawFn) -> dict[Any, Any]:
    kind = draw(st.sampled_from(KINDS) | hostile_text)
    event: dict[Any, Any] = {"kind": kind}
    for name in draw(st.lists(st.sampled_from(FIELDS), unique=True, max_size=5)):
        good = good_field.get(name)
        if good is not None and draw(st.booleans()):
            event[name] = draw(good)
        else:
            event[name] = draw(hostile_value)
    if draw(st.integers(0, 9)) == 0:
        event[draw(hostile_text)] = draw(hostile_value)  # an unknown field, or a bad key
    return event


def check_encodable(state: flowcore.State) -> None:
    data = flowcore.encode_state(state)
    assert flowcore.encode_state(flowcore.decode_state(data, FLOW)) == data


def apply_all(events: list[dict[Any, Any]]) -> None:
    state = START
    for wire in events:
        try:
            event = flowcore.event_from_wire(wire)
        except flowcore.FlowcoreError:
            continue
        try:
            decision = flowcore.advance(state, event)
        except flowcore.FlowcoreError:
            continue
        check_encodable(decision.state)
        for effect in decision.effects:
            flowcore.encode_effect(effect, "msgpack")
            flowcore.encode_effect(effect, "json")
        state = decision.state


@settings(max_examples=2000)
@given(st.lists(wire_events(), min_size=1, max_size=4))
@example([{"kind": SURROGATE}])
@example([{"kind": "timer-fired", "atMs": "\ud83b"}])
@example([{"kind": "subflow-settled", "idempotencyKey": KEYS[0], "status": SURROGATE}])
@example([{"kind": "effect-succeeded", "idempotencyKey": KEYS[0], "usage": {"steps": SURROGATE}}])
@example([{"kind": "signal-received", "signal": "go", "payload": SURROGATE, "atMs": 1}])
@example([{"kind": "signal-received", "signal": "later", "payload": [SURROGATE], "atMs": 1}])
@example([{"kind": "effect-succeeded", "idempotencyKey": KEYS[0], "output": 10**20, "atMs": 1}])
@example(
    [{"kind": "effect-failed", "idempotencyKey": KEYS[0], "atMs": 1, "error": {"type": SURROGATE}}]
)
@example([{"kind": "human-answered", "idempotencyKey": KEYS[0], "answer": float("nan"), "atMs": 1}])
@example([{"kind": "signal-received", "signal": "go", "payload": VERY_DEEP, "atMs": 1}])
def test_hostile_wire_events_apply_or_raise_flowcore_errors(events: list[dict[Any, Any]]) -> None:
    apply_all(events)


HAND_BUILT = [
    EffectSucceeded(idempotency_key=KEYS[0], output={"n": 10**20}, at_ms=1),
    EffectSucceeded(idempotency_key=KEYS[0], output={SURROGATE: 1}, at_ms=1),
    EffectSucceeded(idempotency_key=KEYS[0], output={1: "int key"}, at_ms=1),
    EffectSucceeded(idempotency_key=KEYS[0], output=float("inf"), at_ms=1),
    EffectSucceeded(idempotency_key=KEYS[0], output={"s": {1, 2}}, at_ms=1),
    EffectSucceeded(idempotency_key=KEYS[0], output=object(), at_ms=1),
    EffectSucceeded(idempotency_key=KEYS[0], output=DEEP, at_ms=1),
    EffectSucceeded(idempotency_key=KEYS[0], usage={"steps": 1}, at_ms=1),  # type: ignore[arg-type]
    EffectSucceeded(idempotency_key=KEYS[0], usage=Usage(steps=-1), at_ms=1),
    EffectSucceeded(idempotency_key=KEYS[0], at_ms="1"),  # type: ignore[arg-type]
    EffectSucceeded(idempotency_key=KEYS[0], at_ms=True),
    EffectSucceeded(idempotency_key=5, at_ms=1),  # type: ignore[arg-type]
    EffectFailed(idempotency_key=KEYS[0], error={"type": "x"}, at_ms=1),  # type: ignore[arg-type]
    EffectFailed(idempotency_key=KEYS[0], error=ErrorInfo(type=SURROGATE), at_ms=1),
    HumanAnswered(idempotency_key=KEYS[0], answer="y" * (2 << 20), at_ms=1),
    SignalReceived(signal=SURROGATE, at_ms=1),
    SignalReceived(signal="go", payload=[float("nan")], at_ms=1),
]


@pytest.mark.parametrize("event", HAND_BUILT, ids=lambda e: type(e).__name__)
def test_hand_built_bad_events_are_rejected_naming_the_field(event: Any) -> None:
    with pytest.raises(EventRejected) as info:
        flowcore.advance(START, event)
    assert str(info.value).startswith("invalid event at $")
    assert len(str(info.value)) < 400
    str(info.value).encode("utf-8")  # the message itself can always be printed


def test_a_wire_dict_passed_to_advance_says_what_to_call() -> None:
    with pytest.raises(EventRejected, match=r"pass flowcore\.event_from_wire"):
        flowcore.advance(START, {"kind": "timer-fired"})  # type: ignore[arg-type]


def test_an_expression_that_makes_a_number_json_cannot_hold_fails_its_step() -> None:
    flow = flowcore.parse_flow(
        """
flow: overflow
tools: {t: {}}
steps:
  - {id: a, call_tool: {tool: t, input: "${to_number('1e999')}"}}
"""
    )
    settled = flowcore.start(flow, None, run_id="r").effects[-1]
    assert isinstance(settled, flowcore.Settled) and settled.error is not None
    assert settled.error.type == "expression-error"
    assert "not a JSON number" in settled.error.message


@pytest.mark.parametrize("op", [">", ">=", "<", "<="])
def test_ordering_a_string_and_a_number_fails_its_step_and_a_catch_takes_it(op: str) -> None:
    """jmespath orders a string and a number with Python's ``<``, which raises;
    the step fails ``expression-error`` (a ``catch`` takes it), the core never raises.
    (Other values that are not numbers order to null, as the JMESPath spec says.)"""
    spec = """
flow: order
tools: {t: {}}
steps:
  - id: guard
    try:
      - id: pick
        switch:
          - if: "input.x OP `1`"
            steps: [{id: big, call_tool: {tool: t}}]
    catch:
      - errors: [expression-error]
        steps: [{id: told, call_tool: {tool: t, input: "${error.message}"}}]
"""
    flow = flowcore.parse_flow(spec.replace("OP", op))
    [call] = flowcore.start(flow, {"x": "abc"}, run_id="r").effects
    assert isinstance(call, flowcore.CallTool) and call.idempotency_key == "r/told#1"
    assert f"input.x {op} `1`" in call.input and "not supported between" in call.input


def test_an_output_over_the_event_limit_fails_the_run_not_its_parent() -> None:
    flow = flowcore.parse_flow(
        """
flow: big
tools: {t: {class: readonly}}
steps:
  - {id: a, call_tool: {tool: t}}
  - {id: b, call_tool: {tool: t}}
output: "${ [steps.a.output, steps.b.output] }"
"""
    )
    d = flowcore.start(flow, None, run_id="r")
    half = "y" * (600 * 1024)
    d = flowcore.advance(d.state, EffectSucceeded(idempotency_key="r/a#1", output=half, at_ms=1))
    d = flowcore.advance(d.state, EffectSucceeded(idempotency_key="r/b#1", output=half, at_ms=2))
    settled = d.effects[-1]
    assert isinstance(settled, flowcore.Settled) and settled.error is not None
    assert (settled.status, settled.error.type) == ("failed", "output-too-large")


def test_start_refuses_input_that_is_not_data() -> None:
    for bad in ({"n": 10**20}, [SURROGATE], float("nan"), DEEP):
        with pytest.raises(flowcore.InputError, match=r"input at \$"):
            flowcore.start(FLOW, bad, run_id="r")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (".nan", "nan is not a JSON number"),
        ("-.inf", "-inf is not a JSON number"),
        ("100000000000000000000", "outside the 64-bit range"),
    ],
)
def test_spec_constants_must_be_data_and_the_problem_has_its_location(
    value: str, problem: str
) -> None:
    text = (
        "flow: f\ntools: {t: {}}\nsteps:\n  - id: a\n"
        f"    call_tool: {{tool: t, input: {{x: {value}}}}}\n"
    )
    with pytest.raises(flowcore.SpecError) as info:
        flowcore.parse_flow(text, source_name="f.yaml")
    (found,) = info.value.problems
    assert (found.path, found.line) == ("steps[0].call_tool.input.x", 5)
    assert problem in found.message
    mapping = {
        "flow": "f",
        "tools": {"t": {}},
        "steps": [{"id": "a", "call_tool": {"tool": "t", "input": SURROGATE}}],
    }
    with pytest.raises(flowcore.SpecError, match="lone surrogate"):
        flowcore.parse_flow(mapping)


def test_spec_text_holding_a_lone_surrogate_is_a_spec_error_with_its_position() -> None:
    text = "flow: f\nsteps:\n  - {id: a, sleep: {for_ms: 1}}\ndescription: 'a" + SURROGATE + "'\n"
    with pytest.raises(flowcore.SpecError) as info:
        flowcore.parse_flow(text)
    (found,) = info.value.problems
    assert (found.line, found.column) == (4, 16)
    assert "lone surrogate" in found.message


@settings(max_examples=1000)
@given(hostile_value | st.tuples(hostile_leaf, hostile_leaf) | st.sets(st.integers(), max_size=3))
@example(2**64 - 1)
@example(-(2**63) - 1)
@example({1: "one", "1": "one"})
@example([[[["deep"]]]] * 20)
@example({"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["})
def test_the_quick_check_never_passes_what_the_walk_refuses(value: Any) -> None:
    """``check_data`` trusts msgspec's round trip first (flowcore/_data.py); the walk
    that names problems must agree with everything that round trip lets through."""
    from flowcore._data import problems, quick_json

    if quick_json(value) is not None:
        assert next(problems(value), None) is None, value
