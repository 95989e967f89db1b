"""``explore`` with updates: the world may request each declared update with each
of its examples (``World(updates=N)``, ids ``u1``, ``u2``, …); a refused request
is no move; the ``updates`` invariant (every accepted update gets exactly one
reply, none for an id never accepted, none running once settled) fires on a
core that breaks it; a handler that waits for ever is found by liveness.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings

import flowcore.explore.search as explore_module
from flowcore import UpdateReply, UpdateRequested
from flowcore.testing import Fail, Hang, Ok, Point, World, explore, flow_inputs, flows

EXPENSE = """
flow: expense
tools:
  book: {class: idempotent}
updates:
  approve:
    input_schema: {type: object, properties: {by: {type: string}}, required: [by]}
    validator: "update.input.by != 'mallory'"
    examples: [{by: alice}, {by: mallory}]
    steps:
      - {id: note, call_tool: {tool: book, input: {by: "${update.input.by}"}}}
    reply: "${ {by: update.input.by, booked: steps.note.output} }"
steps:
  - {id: work, call_tool: {tool: book, input: {}}}
"""

FOREVER = """
flow: forever
tools:
  book: {class: idempotent}
updates:
  hold:
    steps:
      - {id: wait, await_signal: {signal: never-sent}}
steps:
  - {id: work, call_tool: {tool: book, input: {}}}
"""


class Seen:
    """A user invariant that records what the exploration showed it."""

    def __init__(self) -> None:
        self.requests: list[UpdateRequested] = []
        self.replies: list[UpdateReply] = []

    def __call__(self, point: Point) -> bool:
        if isinstance(point.event, UpdateRequested):
            self.requests.append(point.event)
        self.replies.extend(point.replies)
        return True


def test_the_world_requests_each_example_and_a_refused_one_is_no_move() -> None:
    seen = Seen()
    x = explore(EXPENSE, None, World(default=[Ok("booked")], updates=1), invariants=[seen])
    assert x.ok and x.complete, x.summary()
    # mallory's request is refused by the validator at every state: never a transition.
    assert {(r.update_id, r.name, msgspec.json.encode(r.input)) for r in seen.requests} == {
        ("u1", "approve", b'{"by":"alice"}')
    }
    assert x.rejected > 0
    assert {(r.update_id, r.status) for r in seen.replies} == {("u1", "completed")}
    assert {msgspec.json.encode(r.output) for r in seen.replies} == {
        b'{"by":"alice","booked":"booked"}'
    }
    assert "updates" in x.invariants


def test_without_update_requests_the_exploration_is_as_before() -> None:
    seen = Seen()
    none = explore(EXPENSE, None, World(default=[Ok()]), invariants=[seen])
    one = explore(EXPENSE, None, World(default=[Ok()], updates=1))
    assert none.ok and not seen.requests
    assert none.states < one.states


def test_ids_count_up_in_the_order_requests_come() -> None:
    seen = Seen()
    x = explore(EXPENSE, None, World(default=[Ok()], updates=2), invariants=[seen])
    assert x.ok and x.complete
    assert {r.update_id for r in seen.requests} == {"u1", "u2"}
    # u2 only ever follows u1 on a path.
    assert {r.update_id for r in seen.replies} == {"u1", "u2"}


def test_a_cancel_abandons_a_running_update_with_a_reply() -> None:
    seen = Seen()
    world = World(tools={"book": [Ok(), Hang()]}, updates=1, cancel_at_ms=0)
    x = explore(EXPENSE, None, world, invariants=[seen])
    assert x.ok, [v.describe() for v in x.violations]
    abandoned = [r for r in seen.replies if r.status == "failed"]
    assert abandoned and {r.error.type for r in abandoned if r.error} == {"update-abandoned"}


def test_a_handler_that_waits_for_ever_keeps_the_run_from_settling() -> None:
    assert explore(FOREVER, None, World(updates=0), settles_within=10).ok
    x = explore(FOREVER, None, World(updates=1), settles_within=10)
    (v,) = x.violations
    assert v.invariant == "dead-end" and "never-sent" in v.message
    assert any(isinstance(e, UpdateRequested) for e in v.events)


# --- the updates invariant fires on a core that breaks it -----------------------------------


def broken_core(monkeypatch: pytest.MonkeyPatch, how: Any) -> None:
    real = explore_module.advance  # type: ignore[attr-defined]

    def advance(state: Any, event: Any) -> Any:
        return how(real(state, event), event)

    monkeypatch.setattr(explore_module, "advance", advance)


def test_an_update_that_ends_without_a_reply_is_a_violation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken_core(monkeypatch, lambda d, event: msgspec.structs.replace(d, replies=()))
    (v,) = explore(EXPENSE, None, World(updates=1)).violations
    assert v.invariant == "updates" and v.message == "update 'u1' ended without a reply"
    assert isinstance(v.events[0], UpdateRequested) or any(
        isinstance(e, UpdateRequested) for e in v.events
    )


def test_a_reply_for_an_update_never_accepted_is_a_violation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ghost = UpdateReply(update_id="u9", name="approve", status="completed")

    def how(d: Any, event: Any) -> Any:
        return msgspec.structs.replace(d, replies=(*d.replies, ghost))

    broken_core(monkeypatch, how)
    (v,) = explore(EXPENSE, None, World(updates=1)).violations
    assert v.invariant == "updates"
    assert v.message == "a reply for update 'u9', which the run never accepted"


def test_a_second_reply_is_a_violation(monkeypatch: pytest.MonkeyPatch) -> None:
    broken_core(monkeypatch, lambda d, event: msgspec.structs.replace(d, replies=d.replies * 2))
    (v,) = explore(EXPENSE, None, World(updates=1)).violations
    assert v.invariant == "updates" and v.message == "update 'u1' got two replies in one decision"


def test_a_reply_that_is_not_what_the_state_records_is_a_violation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def how(d: Any, event: Any) -> Any:
        wrong = tuple(msgspec.structs.replace(r, output="forged") for r in d.replies)
        return msgspec.structs.replace(d, replies=wrong)

    broken_core(monkeypatch, how)
    (v,) = explore(EXPENSE, None, World(default=[Ok()], updates=1)).violations
    assert v.invariant == "updates" and "is not what the state records" in v.message


def test_world_update_values_are_checked() -> None:
    with pytest.raises(ValueError):
        World(updates=-1)
    with pytest.raises(TypeError, match="update_inputs"):
        World(update_inputs=3)
    with pytest.raises(TypeError, match=r"update_inputs\['approve'\]"):
        World(update_inputs={"approve": "alice"})
    with pytest.raises(ValueError, match="does not declare: reject \\(it declares: approve\\)"):
        explore(EXPENSE, None, World(update_inputs={"reject": [None]}))


def test_update_inputs_replace_the_examples() -> None:
    seen = Seen()
    world = World(default=[Ok()], updates=1, update_inputs={"approve": [{"by": "carol"}]})
    assert explore(EXPENSE, None, world, invariants=[seen]).ok
    assert {msgspec.json.encode(r.input) for r in seen.requests} == {b'{"by":"carol"}'}


AGAIN = """
flow: again
tools:
  book: {class: idempotent}
updates:
  poke:
    steps:
      - {id: note, call_tool: {tool: book, input: {}}}
steps:
  - {id: work, call_tool: {tool: book, input: {}}}
  - id: more
    switch:
      - if: "run.incarnation == null || run.incarnation < `2`"
        steps: [{id: again, continue_as_new: {}}]
"""


def test_updates_across_a_continue_as_new_hold_every_invariant() -> None:
    seen = Seen()
    x = explore(AGAIN, None, World(tools={"book": [Ok(), Hang()]}, updates=2), invariants=[seen])
    assert x.ok, [v.describe() for v in x.violations]
    # An update still running when the run continued as new is abandoned, with a reply.
    assert any(
        r.status == "failed" and r.error is not None and r.error.type == "update-abandoned"
        for r in seen.replies
    )
    assert {r.status for r in seen.replies} == {"completed", "failed"}


INSTANT = """
flow: instant
tools:
  book: {class: idempotent}
updates:
  ping:
    reply: "${update.id}"
steps:
  - {id: work, call_tool: {tool: book, input: {}}}
"""


def test_an_update_answered_in_the_decision_that_accepts_it() -> None:
    seen = Seen()
    x = explore(INSTANT, None, World(default=[Ok()], updates=2), invariants=[seen])
    assert x.ok and x.complete, [v.describe() for v in x.violations]
    assert {(r.update_id, r.status, r.output) for r in seen.replies} == {
        ("u1", "completed", "u1"),
        ("u2", "completed", "u2"),
    }


# Flows without humans, children or signals to wait for: the world answers all.
LEAVES = ("call_tool", "sleep", "schedule", "set_metadata", "switch", "parallel", "try")

GENERATED = World(default=[Ok({"k": 1}), Fail("boom", retryable=True)], updates=2, cancel_at_ms=0)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(spec=flows(max_depth=1, max_steps=2, updates=True, kinds=LEAVES), inp=flow_inputs())
def test_generated_flows_with_updates_keep_every_invariant_on_every_path(
    spec: dict[str, Any], inp: dict[str, Any]
) -> None:
    x = explore(spec, inp, GENERATED, max_states=1500, max_depth=25)
    assert not x.violations, x.violations[0].describe()
