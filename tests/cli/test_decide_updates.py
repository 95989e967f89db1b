"""Updates and queries over ``flowcore decide --stdio`` (specs/protocol.md §13): an
update-requested event, its replies, refusals, the ``query`` and ``check-update`` ops."""

from __future__ import annotations

from typing import Any

import flowcore
from tests.cli.test_decide_stdio import (
    REQUESTS,
    Decide,
    advance_request,
    decide,
    error_of,
    start_request,
)
from tests.decision.test_updates import EXPENSE, INPUT

__all__ = ["decide"]  # the fixture, used by name


def update(uid: str, name: str, input: Any = None, at: int = 2) -> dict[str, Any]:
    event = {"kind": "update-requested", "updateId": uid, "name": name, "atMs": at}
    if input is not None:
        event["input"] = input
    return event


def ask(decide: Decide, request: dict[str, Any]) -> dict[str, Any]:
    assert [e.message for e in REQUESTS.iter_errors(request)] == []
    return decide.ask(request)


def test_an_update_over_the_wire(decide: Decide) -> None:
    started = ask(decide, start_request(EXPENSE, INPUT))
    prepared = ask(
        decide,
        advance_request(
            started["state"],
            {"kind": "effect-succeeded", "idempotencyKey": "r-1/prepare#1", "atMs": 1},
        ),
    )
    state = prepared["state"]
    assert "replies" not in prepared
    # check-update: would it take it?
    checked = ask(decide, {"id": 3, "op": "check-update", "state": state, "name": "approve",
                           "input": {"by": "alice"}, "updateId": "u1"})  # fmt: skip
    assert checked == {"id": 3, "ok": True, "verdict": "accept"}
    refused = ask(decide, {"op": "check-update", "state": state, "name": "approve",
                           "input": {"by": "bob"}})  # fmt: skip
    assert error_of(refused, "update-refused")["code"] == "validator"
    asked = ask(decide, advance_request(state, update("u1", "approve", {"by": "alice"})))
    assert asked["ok"] and "replies" not in asked
    assert asked["effects"][0]["idempotencyKey"] == "r-1/~update-1/decide#1"
    known = ask(decide, {"op": "check-update", "state": asked["state"], "name": "approve",
                         "updateId": "u1"})  # fmt: skip
    assert known["verdict"] == "known"
    assert known["update"] == {"updateId": "u1", "name": "approve", "seq": 1, "status": "running"}
    # a refusal names its code; a taken id is a plain rejection
    error = error_of(
        ask(decide, advance_request(asked["state"], update("u2", "nope"))), "update-refused"
    )
    assert error["code"] == "unknown-update" and "approve" in error["message"]
    taken = ask(decide, advance_request(asked["state"], update("u1", "approve", {"by": "x"})))
    assert error_of(taken, "event-rejected")["message"].startswith(
        "update id 'u1' was already taken"
    )
    answered = ask(
        decide,
        advance_request(
            asked["state"],
            {"kind": "human-answered", "idempotencyKey": "r-1/~update-1/decide#1",
             "answer": "yes", "atMs": 3},
        ),
    )  # fmt: skip
    assert answered["replies"] == [
        {
            "updateId": "u1",
            "name": "approve",
            "status": "completed",
            "output": {"decision": "yes", "by": "alice", "seen": None},
        }
    ]
    queried = ask(decide, {"id": 9, "op": "query", "state": answered["state"], "name": "decision"})
    assert queried == {
        "id": 9,
        "ok": True,
        "value": {"decision": "yes", "status": "running", "waiting": []},
    }
    failed = ask(decide, {"op": "query", "state": answered["state"], "name": "echo", "args": {}})
    assert error_of(failed, "query-failed")["code"] == "bad-args"
    missing = ask(decide, {"op": "query", "state": answered["state"], "name": "nope"})
    assert error_of(missing, "query-failed")["code"] == "unknown-query"


def test_the_replies_match_the_decision_in_process(decide: Decide) -> None:
    flow = flowcore.parse_flow(EXPENSE)
    d = flowcore.start(flow, INPUT, run_id="r-1")
    started = ask(decide, start_request(EXPENSE, INPUT))
    state = started["state"]
    for event in (update("u1", "nothing", at=1), update("u2", "pay_now", at=2)):
        reply = ask(decide, advance_request(state, event))
        d = flowcore.advance(d.state, flowcore.event_from_wire(event))
        assert reply.get("replies", []) == [flowcore.update_reply_to_wire(r) for r in d.replies]
        state = reply["state"]
