"""The determinism check of ``explore`` (``flowcore/explore/determinism.py``).

A state's snapshot is decoded once for every transition out of it
(``DecodedOnce``), not once per transition (``DecodeEachTime``, the plain
path). The check still catches a snapshot that loses what a decision reads, a
decision that differs after a round trip, and a core that changes the decoded
state it is given; and on generated flows both paths agree on everything an
exploration finds: the same states, in the same order, and the same findings,
with a sound core and with one whose snapshots lose the run's results.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings

import flowcore
import flowcore.explore.determinism as determinism
import flowcore.explore.search as search
from flowcore.decision.results import ResultStore
from flowcore.decision.snapshot import canonical_snapshot, decode_state
from flowcore.testing import (
    SIGNALS,
    Exploration,
    Fail,
    Ok,
    Point,
    Signal,
    World,
    explore,
    flow_inputs,
    flows,
)

SIMPLE = """
flow: simple
tools: {t: {class: idempotent}}
steps:
  - {id: a, call_tool: {tool: t}}
  - {id: b, call_tool: {tool: t, input: {got: "${steps.a.output}"}}}
"""

GENERATED = World(
    default=[Ok({"k": 1}), Fail("boom", retryable=True)],
    subflows={"child": [Ok({"k": 1}), Fail("child-failed")]},
    signals=[Signal(SIGNALS[0], {"n": 1}), Signal(SIGNALS[1], {"n": 2}, key="k")],
    cancel_at_ms=0,
)

Decode = Callable[[bytes, flowcore.Flow], Any]


@contextmanager
def patched(
    decoder: type[determinism.DecodeEachTime], decode: Decode | None = None
) -> Iterator[None]:
    """Explore with ``decoder``, and with ``decode`` in place of ``decode_state``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search, "DecodedOnce", decoder)
        if decode is not None:
            mp.setattr(determinism, "decode_state", decode)
        yield


def losing_results(data: bytes, flow: flowcore.Flow) -> Any:
    """A snapshot that loses the run's results: the decoded state has none."""
    return msgspec.structs.replace(decode_state(data, flow), results=ResultStore())


def one_step_more(data: bytes, flow: flowcore.Flow) -> Any:
    """A round trip after which the run decides differently: one step more used."""
    state = decode_state(data, flow)
    ledger = msgspec.structs.replace(state.ledger, used_steps=state.ledger.used_steps + 1)
    return msgspec.structs.replace(state, ledger=ledger)


# --- planted non-determinism ----------------------------------------------------------------


def test_a_snapshot_that_loses_what_a_decision_reads_is_a_violation() -> None:
    with patched(determinism.DecodedOnce, losing_results):
        (v,) = explore(SIMPLE, None, World()).violations
    assert v.invariant == "determinism"
    assert "differ" in v.message and "resumed from the snapshot" in v.message
    assert explore(SIMPLE, None, World()).ok


def test_a_decision_that_differs_after_a_round_trip_is_a_violation() -> None:
    with patched(determinism.DecodedOnce, one_step_more):
        (v,) = explore(SIMPLE, None, World()).violations
    assert (v.invariant, v.message) == (
        "determinism",
        "the state differs when resumed from the snapshot",
    )
    assert len(v.events) == 1  # the first transition out of the start


def test_a_core_that_changes_the_decoded_state_it_is_given_is_a_violation() -> None:
    """Only a decoded state holds its results in a plain dict (``ResultStore.of``):
    a core that scribbles on it after deciding is caught, with the decoded state
    shared by the transitions out of a state as with a fresh one each time."""
    real = search.advance  # type: ignore[attr-defined]

    def scribbling(state: Any, event: Any) -> Any:
        d = real(state, event)
        for segment in state.results.segments:
            for name in segment:
                segment[name] = "scribbled"
        return d

    world = World(default=[Ok({"x": 1}), Fail("boom")])  # two transitions out of each state
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search, "advance", scribbling)
        for decoder in (determinism.DecodedOnce, determinism.DecodeEachTime):
            with patched(decoder):
                (v,) = explore(SIMPLE, None, world).violations
            assert v.invariant == "determinism", decoder


def test_the_decoded_state_is_checked_unchanged_once_it_served_two_transitions() -> None:
    flow = flowcore.parse_flow(SIMPLE)
    d = flowcore.start(flow, None)
    (call,) = d.effects
    assert isinstance(call, flowcore.CallTool)
    done = flowcore.EffectSucceeded(idempotency_key=call.idempotency_key, output={"x": 1}, at_ms=0)
    d = flowcore.advance(d.state, done)
    data = canonical_snapshot(d.state)
    once = determinism.DecodedOnce(flow)
    state = once(data)
    assert once(data) is state  # the same bytes: the same decoded state
    assert not once.changed(data)
    (segment,) = state.results.segments
    segment[next(iter(segment))] = "scribbled"
    assert once.changed(data)
    assert not once.changed(canonical_snapshot(flowcore.start(flow, None).state))
    fresh = once(bytes(data))  # equal bytes, not the same object: still the same state
    assert fresh is state
    other = once(canonical_snapshot(flowcore.start(flow, None).state))
    assert other is not state and not once.changed(data)
    # Served one transition only, a decoded state is the plain path's: not re-encoded.
    single = determinism.DecodedOnce(flow)
    (segment,) = single(data).results.segments
    segment[next(iter(segment))] = "scribbled"
    assert not single.changed(data)
    assert not determinism.DecodeEachTime(flow).changed(data)


# --- lockstep: the plain path and the speed-up find the same ----------------------------------


def exploring(spec: Any, inp: Any, decode: Decode | None) -> tuple[list[bytes], list[Exploration]]:
    """The snapshot of every state every transition reached, in order, and the
    exploration, with each decoder."""
    out: list[bytes] = []
    found: list[Exploration] = []
    for decoder in (determinism.DecodeEachTime, determinism.DecodedOnce):
        seen: list[bytes] = []

        def collect(point: Point, seen: list[bytes] = seen) -> None:
            seen.append(canonical_snapshot(point.state))

        with patched(decoder, decode):
            found.append(
                explore(spec, inp, GENERATED, invariants=[collect], max_states=200, max_depth=20)
            )
        if out:
            assert seen == out
        out = seen
    return out, found


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(flows(max_steps=3), flow_inputs())
@example(  # a snapshot without results makes a finished for_each miss its outputs
    {
        "flow": "generated",
        "tools": {"poke": {}},
        "steps": [
            {
                "id": "s3",
                "for_each": {
                    "items": "${input.items}",
                    "as": "it",
                    "steps": [{"id": "s4", "call_tool": {"tool": "poke", "input": {"v": 1}}}],
                },
            },
        ],
    },
    {"flag": False, "items": [0, 0], "n": 0},
)
def test_decoding_once_finds_what_decoding_each_time_finds(
    spec: dict[str, Any], inp: dict[str, Any]
) -> None:
    try:
        flowcore.parse_flow(spec)
        _, (plain, once) = exploring(spec, inp, None)
    except flowcore.InputError:
        return
    assert once == plain
    assert once.ok, once.violations[0].describe()
    _, (plain, once) = exploring(spec, inp, losing_results)
    assert once == plain


def test_each_state_expanded_is_decoded_once_for_every_transition_out_of_it() -> None:
    calls: list[bytes] = []

    def counting(data: bytes, flow: flowcore.Flow) -> Any:
        calls.append(data)
        return decode_state(data, flow)

    world = World(default=[Ok({"x": 1}), Fail("boom")])
    with patched(determinism.DecodedOnce, counting):
        x = explore(SIMPLE, None, world)
    assert x.ok and x.transitions == 4 and x.states == 5
    # The start and the state waiting for b, two transitions out of each.
    assert len(calls) == len(set(calls)) == 2
    calls.clear()
    with patched(determinism.DecodeEachTime, counting):
        assert explore(SIMPLE, None, world) == x
    assert len(calls) == x.transitions
