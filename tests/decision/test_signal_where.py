"""``await_signal.where`` (language.md §4.6): a wait takes only the signals whose
payload it accepts; the others go to other waits, or are buffered for later."""

from __future__ import annotations

import flowcore
from tests.harness import Run

TWO = """
flow: f
tools: {t: {class: idempotent}}
steps:
  - id: both
    parallel:
      branches:
        a: [{id: wa, await_signal: {signal: paid, where: "payload.order == 'A'"}}]
        b: [{id: wb, await_signal: {signal: paid, where: "payload.order == input.mine"}}]
output: "${steps.both.output}"
"""


def test_each_wait_takes_the_signal_its_condition_accepts() -> None:
    run = Run(TWO, {"mine": "B"})
    run.signal("paid", {"order": "B", "n": 1})  # wa is older, but only wb takes it
    assert run.result("wb") == {"status": "succeeded", "output": {"order": "B", "n": 1}}
    assert run.result("wa") is None
    run.signal("paid", {"order": "A", "n": 2})
    settled = run.settled
    assert settled is not None and settled.output == {
        "a": {"order": "A", "n": 2},
        "b": {"order": "B", "n": 1},
    }


def test_a_signal_no_wait_takes_is_buffered_and_taken_by_a_later_wait() -> None:
    run = Run(
        """
flow: f
steps:
  - {id: first, await_signal: {signal: s, where: "payload > `10`"}}
  - {id: second, await_signal: {signal: s}}
output: "${[steps.first.output, steps.second.output]}"
"""
    )
    run.signal("s", 3)  # first does not take it: buffered
    run.signal("s", 42)  # first takes it; second then takes the buffered 3
    settled = run.settled
    assert settled is not None and settled.output == [42, 3]


def test_a_wait_takes_the_oldest_buffered_signal_it_accepts() -> None:
    run = Run(
        """
flow: f
steps:
  - {id: hold, await_signal: {signal: go}}
  - {id: pick, await_signal: {signal: s, where: "payload.ok"}}
output: "${steps.pick.output}"
"""
    )
    for payload in ({"ok": False, "n": 1}, {"ok": True, "n": 2}, {"ok": True, "n": 3}):
        run.signal("s", payload)
    run.signal("go")
    settled = run.settled
    assert settled is not None and settled.output == {"ok": True, "n": 2}
    assert run.state.waiting.signals.get("s") == ({"ok": False, "n": 1}, {"ok": True, "n": 3})


def test_a_payload_the_condition_cannot_read_is_not_taken() -> None:
    run = Run('flow: f\nsteps:\n  - {id: w, await_signal: {signal: s, where: "payload.n > `1`"}}\n')
    run.signal("s", "not a mapping")
    assert run.settled is None and run.result("w") is None
    run.signal("s", {"n": 2})
    settled = run.settled
    assert settled is not None and settled.status == "completed"


def test_replay_shows_which_wait_a_signal_went_to() -> None:
    flow = flowcore.parse_flow(TWO)
    recorder = flowcore.Recorder("r")
    d = flowcore.start(flow, {"mine": "B"}, run_id="r", now_ms=0)
    records = recorder.started(flow, {"mine": "B"}, 0, d)
    state = d.state
    for i, order in enumerate(("B", "A"), 1):
        event = flowcore.SignalReceived(signal="paid", payload={"order": order}, at_ms=i)
        d = flowcore.advance(state, event)
        state = d.state
        records.extend(recorder.applied(event, d))
    report = flowcore.replay(flowcore.encode_records(records), flow)
    delivered = [e for e in report.trajectory if e.kind == "signal-received"]
    assert [(e.key, e.status) for e in delivered] == [
        ("r/wb#1", "delivered"),
        ("r/wa#1", "delivered"),
    ]
