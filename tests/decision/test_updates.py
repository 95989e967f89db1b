"""Updates (language.md §16): accepted or refused, handlers running beside the
flow's steps, replies on the decision, the run waiting for them, abandonment."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowcore
from flowcore import (
    CancelRequested,
    EffectFailed,
    EffectSucceeded,
    ErrorInfo,
    EventRejected,
    HumanAnswered,
    SignalReceived,
    TimerFired,
    UpdateRefused,
    UpdateRequested,
)

EXPENSE = """
flow: expense
version: 1
input_schema:
  type: object
  properties: {amount: {type: number}, requester: {type: string}}
metadata: {decision: string}
tools:
  pay: {class: idempotent}
  audit: {}
updates:
  approve:
    description: Approve or reject the expense
    input_schema: {type: object, properties: {by: {type: string}}, required: [by]}
    validator: "update.input.by != input.requester"
    examples: [{by: alice}]
    steps:
      - id: decide
        ask_human:
          question: "Approve ${input.amount} for ${input.requester}? (${update.input.by})"
          options: ["yes", "no"]
      - id: note
        set_metadata: {decision: "${steps.decide.answer}"}
    reply: "${ {decision: steps.decide.answer, by: update.input.by, seen: steps.prepare.output} }"
  pay_now:
    steps:
      - id: charge
        call_tool: {tool: pay, input: {amount: "${input.amount}"}}
  bad_reply:
    steps:
      - id: first
        call_tool: {tool: audit}
    reply: "${to_number('1e999')}"
  nothing: {}
queries:
  decision:
    description: What was decided
    value: "${ {decision: metadata.decision, status: status, waiting: waiting.questions} }"
  echo:
    args_schema: {type: object, properties: {n: {type: integer}}, required: [n]}
    value: "${ {n: args.n, updates: updates, output: output} }"
steps:
  - id: prepare
    call_tool: {tool: audit, input: {step: prepare}}
  - id: wait
    await_signal: {signal: go}
output: "${steps.prepare.output}"
"""

INPUT = {"amount": 5, "requester": "bob"}


class Run:
    """A run driven one event at a time, keeping every decision."""

    def __init__(self, spec: str = EXPENSE, input: Any = None, **kw: Any) -> None:
        self.flow = flowcore.parse_flow(spec)
        self.d = flowcore.start(self.flow, INPUT if input is None else input, run_id="r-1", **kw)
        self.now = 0

    @property
    def state(self) -> flowcore.State:
        return self.d.state

    def send(self, event: Any) -> flowcore.Decision:
        self.d = flowcore.advance(self.d.state, event)
        return self.d

    def at(self) -> int:
        self.now += 1
        return self.now

    def update(self, uid: str, name: str, input: Any = None) -> flowcore.Decision:
        return self.send(UpdateRequested(update_id=uid, name=name, input=input, at_ms=self.at()))

    def ok(self, key: str, output: Any = None) -> flowcore.Decision:
        return self.send(EffectSucceeded(idempotency_key=key, output=output, at_ms=self.at()))

    def answer(self, key: str, answer: Any) -> flowcore.Decision:
        return self.send(HumanAnswered(idempotency_key=key, answer=answer, at_ms=self.at()))

    def signal(self, name: str) -> flowcore.Decision:
        return self.send(SignalReceived(signal=name, at_ms=self.at()))


def prepared() -> Run:
    run = Run()
    run.ok("r-1/prepare#1", {"ready": True})
    return run


def test_an_update_asks_a_person_and_replies() -> None:
    run = prepared()
    d = run.update("u1", "approve", {"by": "alice"})
    assert [flowcore.effect_to_wire(e) for e in d.effects] == [
        {
            "kind": "ask-human",
            "question": "Approve 5 for bob? (alice)",
            "options": ["yes", "no"],
            "idempotencyKey": "r-1/~update-1/decide#1",
        }
    ]
    assert d.replies == ()
    [view] = flowcore.updates_of(d.state)
    assert (view.update_id, view.name, view.seq, view.status) == ("u1", "approve", 1, "running")
    assert flowcore.query(d.state, "decision")["waiting"][0]["question"] == (
        "Approve 5 for bob? (alice)"
    )
    d = run.answer("r-1/~update-1/decide#1", "yes")
    assert d.effects == ()
    assert [flowcore.update_reply_to_wire(r) for r in d.replies] == [
        {
            "updateId": "u1",
            "name": "approve",
            "status": "completed",
            "output": {"decision": "yes", "by": "alice", "seen": {"ready": True}},
        }
    ]
    done = flowcore.update_of(d.state, "u1")
    assert done is not None and done.status == "completed"
    assert done.output == {"decision": "yes", "by": "alice", "seen": {"ready": True}}
    assert d.state.metadata == {"decision": "yes"}
    assert flowcore.query(d.state, "decision") == {
        "decision": "yes",
        "status": "running",
        "waiting": [],
    }
    # The handler's scope went with it: the run's own steps never see its results.
    assert d.state.results.get("~update-1/decide") is None
    assert "~update-1/" not in d.state.tree.envs
    d = run.signal("go")
    assert d.state.status == "completed"


def test_a_tool_calling_handler_replies_with_its_last_output() -> None:
    run = prepared()
    d = run.update("u1", "pay_now")
    [call] = d.effects
    assert isinstance(call, flowcore.CallTool)
    assert call.idempotency_key == "r-1/~update-1/charge#1"
    assert call.input == {"amount": 5}
    d = run.ok(call.idempotency_key, {"paid": 5})
    [reply] = d.replies
    assert (reply.status, reply.output) == ("completed", {"paid": 5})
    info = flowcore.parse_key(call.idempotency_key, "r-1")
    assert (info.step, info.update, info.path, info.attempt) == ("charge", 1, "~update-1/charge", 1)


def test_an_update_without_steps_replies_null_at_once() -> None:
    run = prepared()
    d = run.update("u1", "nothing")
    assert d.effects == ()
    [reply] = d.replies
    assert (reply.status, reply.output) == ("completed", None)


def test_a_handler_failure_fails_only_the_update() -> None:
    run = prepared()
    run.update("u1", "pay_now")
    error = ErrorInfo(type="declined", message="card declined")
    d = run.send(EffectFailed(idempotency_key="r-1/~update-1/charge#1", error=error, at_ms=9))
    [reply] = d.replies
    assert reply.status == "failed" and reply.error is not None
    assert reply.error.type == "declined"
    assert d.state.status == "running"
    assert run.signal("go").state.status == "completed"


def test_a_handler_cannot_continue_the_run_as_new() -> None:
    spec = """
flow: again
version: 1
updates:
  renew:
    steps:
      - id: again
        continue_as_new: {}
steps:
  - {id: go, await_signal: {signal: go}}
"""
    run = Run(spec)
    d = run.update("u1", "renew")
    assert not any(isinstance(e, flowcore.ContinueAsNew) for e in d.effects)
    [reply] = d.replies
    assert reply.status == "failed" and reply.error is not None
    assert reply.error.type == "continue-refused"
    assert "an update's handler cannot continue the run as new" in reply.error.message
    assert d.state.status == "running"
    assert run.signal("go").state.status == "completed"


def test_a_reply_that_fails_to_evaluate_fails_the_update() -> None:
    run = prepared()
    run.update("u1", "bad_reply")
    d = run.ok("r-1/~update-1/first#1", 1)
    [reply] = d.replies
    assert reply.status == "failed" and reply.error is not None
    assert reply.error.type == "expression-error"
    assert "bad_reply" in reply.error.message


def test_updates_interleave_with_the_flows_steps_and_each_other() -> None:
    run = prepared()
    run.update("u1", "approve", {"by": "alice"})
    run.update("u2", "pay_now")
    assert [v.seq for v in flowcore.updates_of(run.state)] == [1, 2]
    d = run.ok("r-1/~update-2/charge#1", "paid")
    assert [r.update_id for r in d.replies] == ["u2"]
    d = run.answer("r-1/~update-1/decide#1", "no")
    assert [r.update_id for r in d.replies] == ["u1"]
    assert [v.status for v in flowcore.updates_of(d.state)] == ["completed", "completed"]


def test_the_run_waits_for_running_updates_before_it_completes() -> None:
    run = prepared()
    run.update("u1", "approve", {"by": "alice"})
    d = run.signal("go")  # the flow's own steps end: the run waits for the update
    assert d.state.status == "running"
    assert d.effects == ()
    with pytest.raises(UpdateRefused) as refused:
        run.update("u2", "pay_now")
    assert refused.value.code == "ending"
    d = run.answer("r-1/~update-1/decide#1", "yes")
    [settled] = d.effects
    assert isinstance(settled, flowcore.Settled) and settled.status == "completed"
    assert settled.output == {"ready": True}
    [reply] = d.replies
    assert reply.status == "completed" and reply.output["decision"] == "yes"


@pytest.mark.parametrize(
    ("name", "input", "code", "words"),
    [
        ("nope", None, "unknown-update", "approve, bad_reply, nothing, pay_now"),
        ("approve", {"who": "alice"}, "bad-input", 'missing required property "by"'),
        ("approve", {"by": "bob"}, "validator", "update.input.by != input.requester"),
    ],
)
def test_refused_updates_write_nothing(name: str, input: Any, code: str, words: str) -> None:
    run = prepared()
    before = run.state
    with pytest.raises(UpdateRefused) as refused:
        run.update("u1", name, input)
    assert refused.value.code == code
    assert refused.value.update == name
    assert words in str(refused.value)
    assert run.state is before
    with pytest.raises(UpdateRefused) as again:
        flowcore.validate_update(before, name, input)
    assert again.value.code == code


def test_a_validator_that_fails_to_evaluate_refuses() -> None:
    spec = EXPENSE.replace(
        'validator: "update.input.by != input.requester"',
        'validator: "input.requester > `1`"',
    )
    run = Run(spec)
    with pytest.raises(UpdateRefused) as refused:
        run.update("u1", "approve", {"by": "alice"})
    assert refused.value.code == "validator"
    assert "failed to evaluate" in str(refused.value)


def test_validate_update_accepts_what_advance_would() -> None:
    run = prepared()
    flowcore.validate_update(run.state, "approve", {"by": "alice"})  # no error
    assert flowcore.updates_of(run.state) == ()


def test_a_taken_update_id_is_rejected_plainly_even_once_settled() -> None:
    run = prepared()
    run.update("u1", "nothing")
    with pytest.raises(EventRejected) as taken:
        run.update("u1", "pay_now")
    assert not isinstance(taken.value, UpdateRefused)
    assert taken.value.reason.startswith("update id 'u1' was already taken")
    run.signal("go")
    assert run.state.status == "completed"
    with pytest.raises(EventRejected) as still:
        run.update("u1", "nothing")
    assert not isinstance(still.value, UpdateRefused)
    assert still.value.reason.startswith("update id 'u1' was already taken")
    with pytest.raises(UpdateRefused) as ended:
        run.update("u2", "nothing")
    assert ended.value.code == "ending"
    with pytest.raises(UpdateRefused):
        flowcore.validate_update(run.state, "nothing")


def test_limits_on_running_and_total_updates() -> None:
    spec = EXPENSE.replace(
        "version: 1\n", "version: 1\nlimits: {max_running_updates: 1, max_updates: 2}\n"
    )
    run = Run(spec)
    run.ok("r-1/prepare#1")
    run.update("u1", "pay_now")
    with pytest.raises(UpdateRefused) as running:
        run.update("u2", "pay_now")
    assert running.value.code == "limit" and "max_running_updates" in str(running.value)
    run.ok("r-1/~update-1/charge#1")
    run.update("u2", "nothing")
    with pytest.raises(UpdateRefused) as total:
        run.update("u3", "nothing")
    assert total.value.code == "limit" and "max_updates" in str(total.value)


def _abandoned(d: flowcore.Decision, status: str) -> None:
    [settled] = d.effects
    assert isinstance(settled, flowcore.Settled) and settled.status == status
    [reply] = d.replies
    assert reply.status == "failed" and reply.error is not None
    assert reply.error.type == "update-abandoned"
    assert reply.error.message == f"the run settled {status} before the update ended"
    view = flowcore.update_of(d.state, reply.update_id)
    assert view is not None and view.status == "failed"


def test_cancel_abandons_running_updates() -> None:
    run = prepared()
    run.update("u1", "pay_now")
    d = run.send(CancelRequested(reason="stop", at_ms=run.at()))
    _abandoned(d, "cancelled")
    report = {e.idempotency_key: e.status for e in d.effects[0].report}  # type: ignore[union-attr]
    assert report["r-1/~update-1/charge#1"] == "uncertain"


def test_cancel_while_the_run_waits_for_updates() -> None:
    run = prepared()
    run.update("u1", "approve", {"by": "alice"})
    run.signal("go")
    _abandoned(run.send(CancelRequested(at_ms=run.at())), "cancelled")


def test_a_failing_run_abandons_running_updates() -> None:
    run = prepared()
    run.update("u1", "approve", {"by": "alice"})
    error = ErrorInfo(type="boom", message="no")
    spec_fail = EXPENSE.replace(
        "  - id: wait\n    await_signal: {signal: go}\n",
        "  - id: wait\n    await_signal: {signal: go}\n  - id: explode\n    fail: {type: boom}\n",
    )
    run = Run(spec_fail)
    run.ok("r-1/prepare#1")
    run.update("u1", "approve", {"by": "alice"})
    _abandoned(run.signal("go"), "failed")
    del error


def test_a_budget_that_runs_out_abandons_running_updates() -> None:
    spec = EXPENSE.replace("version: 1\n", "version: 1\nbudget: {steps: 2}\n")
    run = Run(spec)
    run.ok("r-1/prepare#1")
    run.update("u1", "pay_now")
    d = run.ok("r-1/~update-1/charge#1")
    assert d.replies[0].status == "completed"
    run.update("u2", "approve", {"by": "alice"})
    d = run.update("u3", "pay_now")  # its call would be the third step
    _abandoned_all(d, "budget-exhausted", ["u2", "u3"])


def _abandoned_all(d: flowcore.Decision, status: str, ids: list[str]) -> None:
    [settled] = d.effects
    assert isinstance(settled, flowcore.Settled) and settled.status == status
    assert [r.update_id for r in d.replies] == ids
    assert {r.error.type for r in d.replies if r.error} == {"update-abandoned"}


def test_continue_as_new_abandons_running_updates_and_opens_a_fresh_window() -> None:
    spec = EXPENSE.replace(
        "  - id: wait\n    await_signal: {signal: go}\n",
        "  - id: wait\n    await_signal: {signal: go}\n  - id: again\n    continue_as_new: {}\n",
    )
    run = Run(spec)
    run.ok("r-1/prepare#1")
    run.update("u1", "approve", {"by": "alice"})
    d = run.signal("go")
    [effect] = d.effects
    assert isinstance(effect, flowcore.ContinueAsNew)
    [reply] = d.replies
    assert reply.error is not None and reply.error.type == "update-abandoned"
    assert reply.error.message == "the run continued as new before the update ended"
    with pytest.raises(UpdateRefused) as ended:
        run.update("u2", "nothing")
    assert ended.value.code == "ending"
    nxt = flowcore.continue_run(run.flow, effect, "r-1", now_ms=50)
    assert flowcore.updates_of(nxt.state) == ()
    d = flowcore.advance(
        nxt.state, UpdateRequested(update_id="u1", name="approve", input={"by": "a"}, at_ms=51)
    )
    assert d.effects[0].idempotency_key == "r-1/@2/~update-1/decide#1"  # type: ignore[union-attr]


def test_a_timer_in_a_handler() -> None:
    spec = EXPENSE.replace(
        "  nothing: {}\n",
        "  nothing: {}\n  later:\n    steps:\n      - id: pause\n        sleep: {for_ms: 100}\n",
    )
    run = Run(spec)
    run.ok("r-1/prepare#1")
    d = run.update("u1", "later")
    [sleep] = d.effects
    assert isinstance(sleep, flowcore.Sleep) and sleep.idempotency_key == "r-1/~update-1/pause#1"
    d = run.send(TimerFired(idempotency_key=sleep.idempotency_key, at_ms=200))
    assert d.replies[0].status == "completed"


def test_queries() -> None:
    run = prepared()
    run.update("u1", "nothing")
    assert flowcore.query(run.state, "echo", {"n": 3}) == {
        "n": 3,
        "updates": {
            "u1": {"name": "nothing", "status": "completed", "output": None, "error": None}
        },
        "output": None,
    }
    for name, args, code in (
        ("nope", None, "unknown-query"),
        ("echo", {"n": "x"}, "bad-args"),
        ("echo", {"n": float("nan")}, "bad-args"),
    ):
        with pytest.raises(flowcore.QueryError) as failed:
            flowcore.query(run.state, name, args)
        assert failed.value.code == code and failed.value.query == name
    run.signal("go")
    assert flowcore.query(run.state, "echo", {"n": 1})["output"] == {"ready": True}
    assert flowcore.query(run.state, "decision")["status"] == "completed"


def test_a_query_that_fails_to_evaluate() -> None:
    spec = EXPENSE.replace(
        '    value: "${ {n: args.n, updates: updates, output: output} }"',
        "    value: \"${to_number('1e999')}\"",
    )
    run = Run(spec)
    with pytest.raises(flowcore.QueryError) as failed:
        flowcore.query(run.state, "echo", {"n": 1})
    assert failed.value.code == "expression-error"


def test_an_update_survives_a_snapshot() -> None:
    run = prepared()
    run.update("u1", "approve", {"by": "alice"})
    back = flowcore.decode_state(flowcore.encode_state(run.state), run.flow)
    d = flowcore.advance(
        back, HumanAnswered(idempotency_key="r-1/~update-1/decide#1", answer="yes", at_ms=9)
    )
    assert d.replies[0].output["by"] == "alice"


def test_bad_update_ids_are_rejected() -> None:
    run = prepared()
    with pytest.raises(EventRejected):
        run.send(UpdateRequested(update_id="", name="nothing", at_ms=1))
    with pytest.raises(EventRejected):
        run.send(UpdateRequested(update_id="a\nb", name="nothing", at_ms=1))
    with pytest.raises(flowcore.WireError):
        flowcore.event_from_wire(
            {"kind": "update-requested", "updateId": "x" * 201, "name": "n", "atMs": 1}
        )


def test_a_snapshot_from_before_updates_decodes_and_a_run_without_updates_keeps_its_bytes() -> None:
    from pathlib import Path

    here = Path(__file__).resolve().parents[1] / "fixtures"
    flow = flowcore.parse_flow((here / "snapshot_shares_flow.yaml").read_text())
    old = flowcore.decode_state((here / "snapshot-before-shares.msgpack").read_bytes(), flow)
    assert flowcore.updates_of(old) == ()
    with pytest.raises(UpdateRefused) as refused:
        flowcore.advance(old, UpdateRequested(update_id="u", name="approve", at_ms=1))
    assert refused.value.code == "unknown-update" and "(declared: none)" in str(refused.value)
    # A tree that took no update writes no field for it: such snapshots keep their bytes.
    assert b"updates" not in flowcore.encode_state(prepared().state)


def test_incremental_persistence_keeps_running_updates() -> None:
    from flowcore import persist

    run = prepared()
    results: dict[str, Any] = {}
    rows: list[Any] = []

    def store() -> None:
        changes = persist.state_changes(run.state)
        results.update(changes.results)
        rows.extend(changes.report)

    store()
    run.update("u1", "approve", {"by": "alice"})
    store()
    restored = persist.restore_state(persist.encode_hot(run.state), results.items(), run.flow)
    assert flowcore.updates_of(restored) == flowcore.updates_of(run.state)
    event = HumanAnswered(idempotency_key="r-1/~update-1/decide#1", answer="no", at_ms=50)
    moved = persist.advance(restored, event)
    assert moved.replies == run.send(event).replies
    assert moved.replies[0].output["seen"] == {"ready": True}


def test_a_batch_says_which_updates_the_last_event_ended() -> None:
    from flowcore.decision.interp import Batch

    run = prepared()
    batch = Batch(run.state)
    batch.advance(UpdateRequested(update_id="u1", name="nothing", at_ms=5))
    assert [r.update_id for r in batch.replies] == ["u1"]
    batch.advance(UpdateRequested(update_id="u2", name="pay_now", at_ms=6))
    assert batch.replies == ()
    with pytest.raises(EventRejected):
        batch.advance(UpdateRequested(update_id="u2", name="nothing", at_ms=7))
    assert batch.replies == ()
    batch.advance(EffectSucceeded(idempotency_key="r-1/~update-2/charge#1", output=1, at_ms=8))
    ended: tuple[flowcore.UpdateReply, ...] = batch.replies
    assert [(r.update_id, r.output) for r in ended] == [("u2", 1)]


def test_hostile_arguments_to_the_views_are_typed_errors() -> None:
    run = prepared()
    with pytest.raises(UpdateRefused) as refused:
        flowcore.validate_update(run.state, ["approve"], None)  # type: ignore[arg-type]
    assert refused.value.code == "unknown-update"
    with pytest.raises(UpdateRefused) as bad:
        flowcore.validate_update(run.state, "approve", {"by": float("nan")})
    assert bad.value.code == "bad-input"
    with pytest.raises(flowcore.QueryError) as failed:
        flowcore.query(run.state, {"not": "a name"})  # type: ignore[arg-type]
    assert failed.value.code == "unknown-query"
    assert flowcore.update_of(run.state, "nobody") is None
    assert flowcore.update_of(run.state, ["u"]) is None  # type: ignore[arg-type]


# --- a property over hostile sequences ------------------------------------------------

_NAMES = ("approve", "pay_now", "bad_reply", "nothing", "nope")
_INPUTS = (None, {"by": "alice"}, {"by": "bob"}, {"who": 1}, [1])


def _event(state: flowcore.State, choice: int, at: int) -> Any:
    """One event a host or a caller might send now: updates (ids that repeat), answers to
    what the run waits for, the main signal, a cancel."""
    pending = sorted(state.waiting.pending)
    kind = choice % 6
    if kind <= 1:
        name = _NAMES[(choice // 6) % len(_NAMES)]
        uid = f"u{(choice // 30) % 4}"
        return UpdateRequested(
            update_id=uid, name=name, input=_INPUTS[(choice // 7) % len(_INPUTS)], at_ms=at
        )
    if kind == 2 and pending:
        key = pending[(choice // 6) % len(pending)]
        return HumanAnswered(idempotency_key=key, answer="yes", at_ms=at)
    if kind == 3 and pending:
        key = pending[(choice // 6) % len(pending)]
        return EffectSucceeded(idempotency_key=key, output=choice, at_ms=at)
    if kind == 4:
        return SignalReceived(signal="go", at_ms=at)
    if kind == 5 and choice % 5 == 0:
        return CancelRequested(at_ms=at)
    return UpdateRequested(update_id="u0", name="nothing", at_ms=at)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=14))
def test_any_sequence_applies_or_rejects_and_replies_match_the_state(choices: list[int]) -> None:
    from flowcore.decision.interp import Batch

    flow = flowcore.parse_flow(EXPENSE)
    state = flowcore.start(flow, INPUT, run_id="r-1").state
    batch = Batch(state)
    for at, choice in enumerate(choices, 1):
        event = _event(state, choice, at)
        try:
            d = flowcore.advance(state, event)
        except EventRejected as exc:
            with pytest.raises(EventRejected) as also:
                batch.advance(event)
            assert also.value.reason == exc.reason
            assert batch.state() == state
            continue
        assert list(batch.advance(event)) == list(d.effects)
        assert batch.replies == d.replies
        state = d.state
        assert flowcore.decode_state(flowcore.encode_state(state), flow) == state
        views = {v.update_id: v for v in flowcore.updates_of(state)}
        for reply in d.replies:  # each reply is of an update that has now ended
            view = views[reply.update_id]
            assert (view.status, view.output, view.error) == (
                reply.status,
                reply.output,
                reply.error,
            )
        running = [v for v in views.values() if v.status == "running"]
        assert len(running) <= flow.limits.max_running_updates
        assert [v.seq for v in views.values()] == list(range(1, len(views) + 1))
        if state.settled is not None:
            assert len(d.effects) == 1 and not running
            break
