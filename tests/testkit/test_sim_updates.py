"""Updates and queries in the simulator and the testing kit: ``Update`` requests
sent at virtual times, their replies (``Trajectory.replies``, ``reply``), the
refused ones (``Refusal``), queries at any time (``Trajectory.query``),
``check_updates`` on a broken history, and the strategies sending updates."""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowcore import QueryError, UpdateReply, UpdateRequested, parse_flow
from flowcore.testing import (
    MOVES,
    UPDATE_EXAMPLES,
    UPDATE_NAMES,
    FlowMachine,
    Refusal,
    Simulator,
    Trajectory,
    Update,
    check_run,
    check_trajectory,
    check_updates,
    drive,
    events_from_moves,
    faults,
    flow_inputs,
    flows,
    generated_world,
    moves,
    pending_events,
    simulate,
)

UPDATE_OP = sum(share for _, share in itertools.takewhile(lambda m: m[0] != "update", MOVES))
"""The op (``MOVES``) that requests an update."""
_CHOICE = st.integers(0, 2**16)

APPROVAL = """
flow: expense
input_schema: {type: object, properties: {amount: {type: number}}}
tools:
  book: {class: idempotent}
metadata: {decision: string}
updates:
  approve:
    description: Approve or reject the expense
    input_schema: {type: object, properties: {by: {type: string}}, required: [by]}
    validator: "update.input.by != 'mallory'"
    examples: [{by: alice}]
    steps:
      - id: decide
        ask_human: {question: "Approve ${input.amount}?", options: ["yes", "no"]}
      - id: note
        set_metadata: {decision: "${steps.decide.answer}"}
    reply: "${ {decision: steps.decide.answer, by: update.input.by} }"
queries:
  decision:
    value: "${ {decision: metadata.decision, status: status} }"
steps:
  - {id: wait, sleep: {for_ms: 100}}
  - {id: book, call_tool: {tool: book, input: {amount: "${input.amount}"}}}
"""


def run(*updates: Update, **world: Any) -> Trajectory:
    sim = Simulator(tools={"book": "ok"}, humans={"decide": "yes"}, updates=updates, **world)
    t = sim.run(APPROVAL, {"amount": 12})
    check_trajectory(t)
    return t


def test_an_update_is_sent_and_its_reply_read() -> None:
    t = run(Update("approve", {"by": "bob"}, "req-1", at_ms=5))
    assert t.status == "completed"
    reply = t.reply("req-1")
    assert reply == UpdateReply(
        update_id="req-1",
        name="approve",
        status="completed",
        output={"decision": "yes", "by": "bob"},
    )
    assert t.replies == (reply,)
    assert [e.update_id for e in t.events() if isinstance(e, UpdateRequested)] == ["req-1"]
    assert 'reply req-1 (approve) completed: {"decision":"yes","by":"bob"}' in t.describe()
    logged = [r for r in t.log_of() if r.type == "event.reported"]
    assert sum(1 for r in logged if r.data["kind"] == "update-requested") == 1


def test_ids_default_to_their_place_in_the_list() -> None:
    t = run(Update("approve", {"by": "bob"}, at_ms=5), Update("approve", {"by": "ann"}, at_ms=6))
    assert [r.update_id for r in t.replies] == ["u1", "u2"]


def test_a_repeated_id_runs_nothing_again() -> None:
    t = run(
        Update("approve", {"by": "bob"}, "req-1", at_ms=5),
        Update("approve", {"by": "ann"}, "req-1", at_ms=50),
    )
    assert [e for e in t.events() if isinstance(e, UpdateRequested)] == [
        UpdateRequested(update_id="req-1", name="approve", input={"by": "bob"}, at_ms=5)
    ]
    assert len(t.effects("ask-human")) == 1
    assert t.reply("req-1").output == {"decision": "yes", "by": "bob"}  # type: ignore[union-attr]
    assert not t.refused


@pytest.mark.parametrize(
    ("update", "code"),
    [
        (Update("approve", {"by": "mallory"}, "m", at_ms=5), "validator"),
        (Update("approve", {"who": "x"}, "m", at_ms=5), "bad-input"),
        (Update("reject", None, "m", at_ms=5), "unknown-update"),
        (Update("approve", {"by": "late"}, "m", at_ms=10_000), "ending"),
    ],
)
def test_a_refused_request_leaves_only_its_refusal(update: Update, code: str) -> None:
    t = run(update)
    (refusal,) = t.refused
    assert isinstance(refusal, Refusal)
    assert (refusal.update_id, refusal.name, refusal.code) == ("m", update.name, code)
    assert refusal.reason and refusal.run_id == "run"
    assert t.reply("m") is None and not t.replies
    assert not [e for e in t.events() if isinstance(e, UpdateRequested)]
    assert not t.events(rejected=True)  # nothing logged, as on a host
    assert f"refused m ({update.name}) at t={refusal.at_ms}: {code}: " in t.describe()


def test_a_query_reads_the_run_at_any_time() -> None:
    t = run(Update("approve", {"by": "bob"}, "req-1", at_ms=5))
    assert t.query("decision") == {"decision": "yes", "status": "completed"}
    assert t.query("decision", at_ms=0) == {"decision": None, "status": "running"}
    with pytest.raises(QueryError) as info:
        t.query("nope")
    assert info.value.code == "unknown-query"


def test_simulate_takes_updates_too() -> None:
    t = simulate(
        APPROVAL,
        {"amount": 1},
        tools={"book": "ok"},
        humans="no",
        updates=[Update("approve", {"by": "x"})],
    )
    assert t.reply("u1").output == {"decision": "no", "by": "x"}  # type: ignore[union-attr]


def test_the_simulator_refuses_what_is_not_an_update() -> None:
    with pytest.raises(TypeError, match="Update values"):
        Simulator(updates=[("approve", {})])  # type: ignore[list-item]


# --- check_updates -----------------------------------------------------------------------------


def test_check_updates_holds_on_a_real_run() -> None:
    t = run(Update("approve", {"by": "bob"}, at_ms=5))
    check_updates(t.histories["run"])


def test_check_updates_finds_a_reply_that_went_missing() -> None:
    t = run(Update("approve", {"by": "bob"}, at_ms=5))
    h = t.histories["run"]
    i = next(i for i, turn in enumerate(h.turns) if turn.replies)
    h.turns[i] = msgspec.structs.replace(h.turns[i], replies=())
    with pytest.raises(AssertionError, match="update 'u1' ended \\(completed\\) without a reply"):
        check_updates(h)


def test_check_updates_finds_a_reply_for_nothing_and_a_second_reply() -> None:
    t = run(Update("approve", {"by": "bob"}, at_ms=5))
    h = t.histories["run"]
    i = next(i for i, turn in enumerate(h.turns) if turn.replies)
    (reply,) = h.turns[i].replies
    h.turns[i] = msgspec.structs.replace(h.turns[i], replies=(reply, reply))
    with pytest.raises(AssertionError, match="a second reply for update 'u1'"):
        check_updates(h)
    ghost = msgspec.structs.replace(reply, update_id="zz")
    h.turns[i] = msgspec.structs.replace(h.turns[i], replies=(reply, ghost))
    with pytest.raises(AssertionError, match="'zz', which the run never accepted"):
        check_updates(h)


# --- strategies --------------------------------------------------------------------------------


def test_the_event_vocabulary_requests_declared_updates() -> None:
    h = drive(APPROVAL, {"amount": 1})
    requests = [e for e in pending_events(h.state) if isinstance(e, UpdateRequested)]
    assert [(e.name, e.input) for e in requests] == [("approve", {"by": "alice"})]


def test_streams_send_updates_with_fresh_and_repeated_ids() -> None:
    flow = parse_flow(APPROVAL)
    ids: list[str] = []
    for choice in range(200):
        events = events_from_moves(
            flow, {"amount": 1}, [(UPDATE_OP, choice), (UPDATE_OP, choice + 4)]
        )
        ids += [e.update_id for e in events if isinstance(e, UpdateRequested)]
        check_run(flow, {"amount": 1}, events)
    assert "u1" in ids and "u2" in ids
    assert len(ids) > len(set(ids)) or ids.count("u1") > 1  # some repeated


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_generated_flows_with_updates_keep_every_invariant(data: st.DataObject) -> None:
    spec = data.draw(flows(max_depth=1, max_steps=3, updates=True))
    value = data.draw(flow_inputs())
    ms = data.draw(moves(25))
    # Update requests at drawn places, beside what the stream sends itself.
    for at, choice in data.draw(st.lists(st.tuples(st.integers(0, 25), _CHOICE), max_size=4)):
        ms.insert(at, (UPDATE_OP, choice))
    check_run(spec, value, events_from_moves(spec, value, ms))


class ApprovalMachine(FlowMachine):
    flow = APPROVAL
    input: ClassVar[Any] = {"amount": 5}


TestApprovalMachine = ApprovalMachine.TestCase
TestApprovalMachine.settings = settings(
    max_examples=15, stateful_step_count=15, deadline=None, database=None
)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_generated_flows_take_updates_in_the_simulator(data: st.DataObject) -> None:
    spec = data.draw(flows(max_depth=1, max_steps=3, updates=True))
    value = data.draw(flow_inputs())
    update = st.builds(
        Update,
        st.sampled_from(UPDATE_NAMES),
        st.sampled_from(UPDATE_EXAMPLES),
        st.one_of(st.none(), st.sampled_from(["a", "b"])),  # fresh, or an id used twice
        st.integers(0, 3_000),
    )
    world = generated_world(
        faults=data.draw(faults()),
        updates=data.draw(st.lists(update, max_size=4)),
        cancel_at_ms=data.draw(st.one_of(st.none(), st.integers(0, 3_000))),
    )
    t = world.run(spec, value)
    check_trajectory(t)
    for refusal in t.refused:
        assert refusal.code in ("unknown-update", "bad-input", "validator", "limit", "ending")
