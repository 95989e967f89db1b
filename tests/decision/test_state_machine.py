"""Exhaustive (state, event kind) property, in the h2 manner: for generated
flows, every kind of event delivered in every reachable state either advances
the run or raises EventRejected — never any other exception. Along the way:
snapshots round-trip (``decode(encode(s)) == s``), ``advance`` never mutates
its input, ``settled`` is always alone and last, and a ``Batch`` (replay's
batch apply, which saves only the clock before an event) decides exactly as
``advance`` does and is left as it was by every event ``advance`` rejects."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import flowcore
from flowcore import EventRejected, Settled, persist
from flowcore.decision.interp import Batch
from flowcore.testing import EVENT_KINDS, apply, event_of_kind, events_for, flow_inputs, flows


def explore(spec: dict[str, Any], inp: dict[str, Any], data: st.DataObject, steps: int) -> None:
    flow = flowcore.parse_flow(spec, source_name="generated")
    decision = flowcore.start(flow, inp, run_id="r", now_ms=0)
    state = decision.state
    # What an incremental host stores: the hot snapshot plus growing rows.
    stored_results: dict[str, Any] = {}
    stored_rows: list[Any] = []
    stored_resolved: dict[str, persist.Resolution] = {}

    def store(s: flowcore.State) -> None:
        changes = persist.state_changes(s)
        stored_results.update(changes.results)
        stored_rows.extend(changes.report)
        stored_resolved.update(changes.resolved)

    store(state)
    batch = Batch(state)  # the same run, every event applied in one batch
    for _ in range(steps):
        # Snapshots round-trip exactly, and probing never mutates the state.
        data_before = flowcore.encode_state(state)
        assert flowcore.decode_state(data_before, flow) == state
        for kind in EVENT_KINDS:
            for choice in range(3):
                event = event_of_kind(kind, state, choice)
                try:
                    d = flowcore.advance(state, event)
                except EventRejected as exc:
                    try:
                        batch.advance(event)
                    except EventRejected as also:
                        assert also.reason == exc.reason
                    else:
                        raise AssertionError(f"the batch applies what advance rejects: {event}")
                    assert batch.state() == state, "a rejected event changed the batch"
                    continue
                settled = [i for i, e in enumerate(d.effects) if isinstance(e, Settled)]
                assert settled in ([], [len(d.effects) - 1]), "settled must come last"
                if settled:
                    assert len(d.effects) == 1, "a settling decision holds only settled"
        assert flowcore.encode_state(state) == data_before, "advance mutated its input"
        if state.settled is not None:
            break
        event = data.draw(events_for(state))
        moved = apply(state, event)
        restored = persist.restore_state(
            persist.encode_hot(state),
            stored_results.items(),
            flow,
            stored_resolved.items(),
            stored_rows,
        )
        again = apply(restored, event)
        assert (moved is None) == (again is None), "restored state accepts differently"
        # Restored without the report rows: the same decision through
        # persist.advance, which loads the rows only where they are read
        # (settling); flowcore.advance refuses the partial state.
        partial = persist.restore_state(
            persist.encode_hot(state), stored_results.items(), flow, stored_resolved.items(), None
        )
        loads: list[int] = []

        def load_report(loads: list[int] = loads) -> list[Any]:
            loads.append(1)
            return stored_rows

        try:
            third: flowcore.Decision | None = persist.advance(partial, event, load_report)
        except EventRejected:
            third = None
        assert (moved is None) == (third is None), "partly restored state accepts differently"
        if moved is not None and third is not None:
            assert moved.effects == third.effects, "partly restored state decides differently"
            ended = moved.state.settled is not None or moved.state.tree.continued is not None
            assert bool(loads) == ended, "report loaded needlessly"
            assert third.state.report_complete is ended
        if moved is not None:
            assert tuple(batch.advance(event)) == moved.effects, "the batch decides differently"
            assert batch.state() == moved.state, "the batch's state differs from advance's"
        if moved is not None and again is not None:
            assert moved.effects == again.effects, "restored state decides differently"
            state = moved.state
            store(state)


@given(spec=flows(), inp=flow_inputs(), data=st.data())
def test_every_event_kind_in_every_reachable_state(
    spec: dict[str, Any], inp: dict[str, Any], data: st.DataObject
) -> None:
    explore(spec, inp, data, steps=25)
