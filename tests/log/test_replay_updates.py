"""A log holding ``update-requested`` events replays, and its trajectory shows the updates."""

from __future__ import annotations

import flowcore
from flowcore import EffectSucceeded, HumanAnswered, SignalReceived, UpdateRequested
from flowcore.log.replay import replay
from tests.decision.test_updates import EXPENSE, INPUT
from tests.log.test_replay import Log, _diverge


def updated_log() -> Log:
    return Log(EXPENSE, INPUT).send(
        EffectSucceeded(idempotency_key="r-1/prepare#1", output={"ready": 1}, at_ms=1),
        UpdateRequested(update_id="u1", name="approve", input={"by": "al"}, at_ms=2),
        UpdateRequested(update_id="u1", name="approve", input={"by": "al"}, at_ms=3),  # taken
        UpdateRequested(update_id="u2", name="nothing", principal="ops", at_ms=4),
        SignalReceived(signal="go", at_ms=5),  # the run waits for u1
        HumanAnswered(idempotency_key="r-1/~update-1/decide#1", answer="yes", at_ms=6),
    )


def test_a_log_with_updates_replays_to_the_same_state() -> None:
    log = updated_log()
    kinds = [r.type for r in log.records]
    assert kinds.count("event.rejected") == 1
    report = replay(log.data(), log.flow)
    assert report.ok and report.status == "completed"
    assert report.state is not None
    assert flowcore.encode_state(report.state) == flowcore.encode_state(log.state)
    rows = {row.key: row for row in report.trajectory if row.kind == "update-requested"}
    assert (rows["u1"].target, rows["u1"].status, rows["u1"].ended_at) == (
        "approve",
        "completed",
        6,
    )
    assert rows["u1"].output == {"decision": "yes", "by": "al", "seen": {"ready": 1}}
    assert (rows["u2"].status, rows["u2"].output, rows["u2"].ended_at) == ("completed", None, 4)


def test_an_edited_update_diverges() -> None:
    log = updated_log()
    wire = log.wire()
    i = next(
        i
        for i, r in enumerate(wire)
        if r["type"] == "event.reported" and r["data"].get("updateId") == "u1"
    )
    wire[i]["data"]["input"] = {"by": "bob"}  # now refused by its validator
    div = _diverge(wire, log.flow)
    assert div.index == i and "rejected" in div.actual
