"""``flowcore.testing.explore``: every ordering of a world's reports, checked.

The explorer finds a real saga bug and its shortest path, identifies equal
states and leaves out commuting orders without losing any settled state,
checks liveness at its bound, and each built-in invariant fires on a core
that breaks it (the core is wrapped to misbehave: a check that cannot fail
is no check). Violations replay: as events (``drive``), as a log
(``flowcore.replay``), as text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

import flowcore
import flowcore.explore.search as explore_module
from flowcore import EventRejected, parse_flow, replay
from flowcore.decision.wire import EffectSucceeded, encode_effect
from flowcore.log.records import decode_log
from flowcore.testing import (
    BUILT_IN,
    Fail,
    Hang,
    HeartbeatTimeout,
    Ok,
    Point,
    Progress,
    Signal,
    Unknown,
    World,
    drive,
    explore,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "specs" / "examples"

BROKEN_SAGA = """
flow: order
tools:
  payments.charge: {}                 # uncertain: a lost answer may mean money moved
  payments.refund: {class: idempotent}
  inventory.reserve: {class: idempotent}
steps:
  - id: charge
    call_tool: {tool: payments.charge, input: {order: "${input.order}"}}
    compensate:
      - id: refund
        call_tool: {tool: payments.refund, input: {order: "${input.order}"}}
        retry: {max_attempts: 5}
  - id: reserve
    call_tool: {tool: inventory.reserve, input: {order: "${input.order}"}}
"""

FIXED_SAGA = """
flow: order
tools:
  payments.charge: {}
  payments.refund: {class: idempotent}
  inventory.reserve: {class: idempotent}
steps:
  - id: pay
    try:
      - id: charge
        call_tool: {tool: payments.charge, input: {order: "${input.order}"}}
        compensate:
          - id: refund
            call_tool: {tool: payments.refund, input: {order: "${input.order}"}}
            retry: {max_attempts: 5}
    catch:
      - errors: [outcome-unknown]
        steps:
          - id: reconcile
            call_tool: {tool: payments.refund, input: {order: "${input.order}"}}
            retry: {max_attempts: 5}
          - id: give_up
            fail: {type: payment-unknown, message: "the charge may have happened; refunded"}
  - id: reserve
    call_tool: {tool: inventory.reserve, input: {order: "${input.order}"}}
"""

SHOP = World(
    tools={
        "payments.charge": [Ok({"id": "ch-1"}), Fail("declined"), Unknown()],
        "inventory.reserve": [Ok(), Fail("out-of-stock")],
        "payments.refund": [Ok()],
    }
)


def money_returned(point: Point) -> bool | str:
    """A charge that may have happened is refunded unless the run completed."""
    settled = point.settled
    if settled is None or settled.status == "completed":
        return True
    charged = [
        r
        for r in settled.report
        if r.target == "payments.charge" and r.status in ("succeeded", "uncertain")
    ]
    refunded = [
        r for r in settled.report if r.target == "payments.refund" and r.status == "succeeded"
    ]
    if charged and not refunded:
        return f"{charged[0].idempotency_key} is {charged[0].status} but nothing refunded it"
    return True


def test_the_broken_saga_is_found_with_its_shortest_path() -> None:
    flow = parse_flow(BROKEN_SAGA)
    x = explore(flow, {"order": "o-1"}, SHOP, invariants=[money_returned])
    assert not x.ok and x.stop == "violation" and not x.complete
    (v,) = x.violations
    assert v.invariant == "money_returned"
    assert v.message == "r/charge#1 is uncertain but nothing refunded it"
    # One event: the charge's answer is lost.
    assert [type(e).__name__ for e in v.events] == ["EffectOutcomeUnknown"]
    h = v.history()
    assert h.state.settled is not None and h.state.settled.status == "failed"
    assert money_returned(Point(_explorer_of(flow), -1, None, None, (), h.state, 1)) is not True
    # The log replays: every recorded effect re-derived.
    records = v.log()
    report = replay(records, flow)
    assert report.divergence is None and report.status == "failed"
    assert decode_log(v.ndjson()).records == records
    text = v.describe()
    assert "money_returned: r/charge#1 is uncertain but nothing refunded it" in text
    assert "effect-outcome-unknown r/charge#1" in text
    assert "settled failed: outcome-unknown" in text


def _explorer_of(flow: flowcore.Flow) -> Any:
    return explore_module._Explorer(
        flow,
        None,
        World(),
        {},
        (),
        max_depth=1,
        max_states=1,
        max_events=None,
        settles_within=None,
        reduce=False,
        dedup=False,
        determinism=False,
        max_violations=1,
        progress=None,
        progress_every=1,
    )


def test_the_fixed_saga_holds_on_every_path() -> None:
    x = explore(FIXED_SAGA, {"order": "o-1"}, SHOP, invariants=[money_returned], settles_within=20)
    assert x.ok and x.complete and x.stop == "exhausted", x.violations
    assert x.dead_ends == 0
    assert x.settled == {"completed": 1, "failed": x.settled["failed"]}
    # Every path: charge, then reserve or a refund (at most 5 tries) and the end.
    assert x.longest is not None and 2 <= x.longest <= 7
    assert "money_returned" in x.invariants and "settles-within" in x.invariants


def test_a_cancel_while_the_charge_is_out_is_found_too() -> None:
    world = World(tools=SHOP.tools, cancel_at_ms=0)
    x = explore(FIXED_SAGA, {"order": "o-1"}, world, invariants=[money_returned])
    (v,) = x.violations
    assert [type(e).__name__ for e in v.events] == ["CancelRequested"]
    assert v.history().state.settled.status == "cancelled"  # type: ignore[union-attr]


# --- deduplication and partial-order reduction -------------------------------------------


def parallel(branches: int, depth: int = 1, mode: str = "all_settled") -> dict[str, Any]:
    lists = {
        f"b{i}": [{"id": f"s{i}_{j}", "call_tool": {"tool": "t"}} for j in range(depth)]
        for i in range(branches)
    }
    return {
        "flow": "par",
        "tools": {"t": {"class": "idempotent"}},
        "steps": [{"id": "p", "parallel": {"mode": mode, "branches": lists}}],
    }


OK_OR_FAIL = World(tools={"t": [Ok(1), Fail("x")]})


def settled_outcomes(spec: Any, world: World, **options: Any) -> set[bytes]:
    """Every distinct settled effect reachable, found by an invariant."""
    seen: set[bytes] = set()

    def collect(point: Point) -> None:
        if point.settled is not None and any(e is point.settled for e in point.effects):
            seen.add(encode_effect(point.settled))

    x = explore(spec, None, world, invariants=[collect], **options)
    assert x.ok and x.complete
    return seen


@pytest.mark.parametrize(
    ("branches", "depth", "mode"),
    [(3, 1, "all_settled"), (3, 1, "all"), (2, 2, "all_settled"), (3, 1, "race"), (3, 1, "any")],
)
def test_reduction_and_dedup_keep_every_settled_outcome(
    branches: int, depth: int, mode: str
) -> None:
    spec = parallel(branches, depth, mode)
    full = settled_outcomes(spec, OK_OR_FAIL, reduce=False, dedup=False)
    assert full == settled_outcomes(spec, OK_OR_FAIL, reduce=False)
    assert full == settled_outcomes(spec, OK_OR_FAIL)


def test_dedup_and_reduction_shrink_a_parallel_flow() -> None:
    spec = parallel(5)
    tree = explore(spec, None, OK_OR_FAIL, reduce=False, dedup=False)
    dag = explore(spec, None, OK_OR_FAIL, reduce=False)
    reduced = explore(spec, None, OK_OR_FAIL)
    # Five answers in any order, each ok or failed: the tree holds every order
    # (sum over k of 5!/(5-k)! * 2^k), the graph every subset (3^5), the reduced
    # graph one order (1 + 2 + ... + 2^5).
    assert tree.states == 1 + sum(_perm(5, k) * 2**k for k in range(1, 6)) and tree.revisits == 0
    assert dag.states == 3**5 and dag.revisits == dag.transitions + 1 - dag.states
    assert reduced.states == 2**6 - 1 and reduced.reduced > 0
    assert tree.settled == {"completed": 5 * 4 * 3 * 2 * 2**5}
    assert dag.settled == reduced.settled == {"completed": 2**5}


def _perm(n: int, k: int) -> int:
    out = 1
    for i in range(k):
        out *= n - i
    return out


def test_timers_do_not_commute_with_answers() -> None:
    spec = parallel(2)
    spec["steps"][0]["timeout_ms"] = 1000
    x = explore(spec, None, OK_OR_FAIL, settles_within=10)
    assert x.ok and x.complete
    # The step may time out before either answer, between them, or not at all.
    full = settled_outcomes(spec, OK_OR_FAIL, reduce=False)
    assert full == settled_outcomes(spec, OK_OR_FAIL)
    assert any(b'"timeout"' in s for s in full)


# --- time, lateness, signals, humans ---------------------------------------------------


TIMED = """
flow: timed
tools: {slow: {class: readonly}}
steps:
  - id: call
    call_tool: {tool: slow}
    timeout_ms: 1000
"""


def test_late_ms_says_whether_a_result_can_miss_its_timeout() -> None:
    world = World(tools={"slow": [Ok(1)]})
    anytime = explore(TIMED, None, world)
    prompt = explore(TIMED, None, World(tools={"slow": [Ok(1)]}, late_ms=999))
    hangs = explore(TIMED, None, World(tools={"slow": [Ok(1), Hang()]}, late_ms=0))
    assert anytime.settled == {"completed": 1, "failed": 1}  # in time, or timed out
    assert prompt.settled == {"completed": 1}
    assert hangs.settled == {"completed": 1, "failed": 1}  # a hang ignores late_ms


def test_a_wait_the_world_never_answers_is_a_dead_end() -> None:
    spec = """
flow: w
steps:
  - {id: go, await_signal: {signal: go}}
"""
    x = explore(spec, None, World(), settles_within=5)
    (v,) = x.violations
    assert v.invariant == "dead-end" and v.events == ()
    assert "signal 'go'" in v.message
    assert x.dead_ends == 1
    # Without liveness it is counted, not a violation.
    quiet = explore(spec, None, World())
    assert quiet.ok and quiet.dead_ends == 1
    sent = explore(spec, None, World(signals=[Signal("go", {"n": 1})]), settles_within=5)
    assert sent.ok and sent.settled == {"completed": 1}


def test_every_path_must_settle_within_n_events() -> None:
    spec = """
flow: retrying
tools: {t: {class: idempotent}}
steps:
  - {id: a, call_tool: {tool: t}, retry: {max_attempts: 3, initial_interval_ms: 10}}
"""
    world = World(tools={"t": [Ok(), Fail("busy", retryable=True)]})
    # The longest path: fail, backoff timer, fail, backoff timer, answer: 5 events.
    ok = explore(spec, None, world, settles_within=5)
    assert ok.ok and ok.longest == 5
    short = explore(spec, None, world, settles_within=4)
    (v,) = short.violations
    assert v.invariant == "settles-within" and len(v.events) == 4
    assert drive(spec, None, v.events).state.settled is None


def test_answers_signals_and_subflows_come_from_the_world() -> None:
    spec = """
flow: asks
steps:
  - {id: q, ask_human: {question: "ship?", options: ["yes", "no", "later"]}}
  - {id: child, run_subflow: {flow: kid}}
  - {id: hb, call_tool: {tool: scan}, heartbeat_timeout_ms: 50}
tools: {scan: {class: readonly}}
output: "${steps.q.answer}"
"""
    answers: set[str] = set()

    def seen(point: Point) -> None:
        if point.settled is not None and point.settled.status == "completed":
            answers.add(point.settled.output)

    world = World(
        subflows={"kid": [Ok({"done": True}), Fail("kid-broke")]},
        tools={"scan": [Ok(), HeartbeatTimeout({"page": 3})]},
    )
    x = explore(spec, None, world, invariants=[seen])
    assert x.ok and x.complete
    assert answers == {"yes", "no", "later"}
    only = World(humans={"q": ["no"]}, subflows={"kid": [Ok()]}, tools={"scan": [Ok()]})
    answers.clear()
    assert explore(spec, None, only, invariants=[seen]).ok
    assert answers == {"no"}


# --- points and user invariants ------------------------------------------------------------


def test_a_point_knows_its_path_and_every_effect_on_it() -> None:
    checked = 0

    def replays(point: Point) -> None:
        nonlocal checked
        h = drive(BROKEN_SAGA, {"order": "o-1"}, point.path())
        assert [encode_effect(e) for e in h.effects()] == [
            encode_effect(e) for e in point.emitted()
        ]
        assert point.depth == len(point.path())
        if point.before is not None:
            assert point.waits.run_id == "r"
        checked += 1

    x = explore(BROKEN_SAGA, {"order": "o-1"}, SHOP, invariants=[replays])
    assert x.ok and checked == x.transitions + 1


def test_an_invariant_may_fail_by_false_message_or_assertion() -> None:
    def never_settles(point: Point) -> bool:
        """The run never settles."""
        return point.settled is None

    def asserts(point: Point) -> None:
        assert point.depth < 2, "too deep"

    def raises(point: Point) -> None:
        if point.depth == 1:
            raise KeyError("oops")

    world = World(tools={"payments.charge": [Ok()], "inventory.reserve": [Ok()]})
    for inv, message in (
        (never_settles, "The run never settles."),
        (asserts, "too deep"),
        (raises, "the invariant raised KeyError: 'oops'"),
    ):
        (v,) = explore(BROKEN_SAGA, {"order": "o-1"}, world, invariants=[inv]).violations
        # (pytest's assertion rewriting adds its explanation to an assert's message)
        assert v.invariant == inv.__name__ and v.message.startswith(message)


def test_progress_is_reported() -> None:
    seen: list[Progress] = []
    x = explore(parallel(4), None, OK_OR_FAIL, progress=seen.append, progress_every=10)
    assert len(seen) >= 3 and seen[-1].states == x.states and seen[-1].frontier == 0
    assert [p.states for p in seen] == sorted(p.states for p in seen)


def test_bounds_cut_the_exploration_and_say_so() -> None:
    deep = explore(parallel(4), None, OK_OR_FAIL, max_depth=2)
    assert deep.ok and not deep.complete and deep.stop == "max-depth" and deep.depth == 2
    wide = explore(parallel(4), None, OK_OR_FAIL, max_states=10)
    assert not wide.complete and wide.stop == "max-states" and wide.states <= 10 + 8
    rows = dict(wide.summary())
    assert rows["complete"].startswith("no (") and "max-states" in rows["complete"]


# --- the built-in invariants fire on a core that breaks them -----------------------------


SIMPLE = """
flow: simple
tools: {t: {class: idempotent}}
steps:
  - {id: a, call_tool: {tool: t}}
  - {id: b, call_tool: {tool: t}}
"""


def broken_core(monkeypatch: pytest.MonkeyPatch, how: Any) -> None:
    real = explore_module.advance  # type: ignore[attr-defined]

    def advance(state: Any, event: Any) -> Any:
        return how(real, state, event)

    monkeypatch.setattr(explore_module, "advance", advance)


def _second(event: Any) -> bool:
    return isinstance(event, EffectSucceeded) and event.idempotency_key.endswith("/b#1")


def test_an_untyped_error_is_a_violation(monkeypatch: pytest.MonkeyPatch) -> None:
    def how(real: Any, state: Any, event: Any) -> Any:
        if _second(event):
            raise KeyError("frames")
        return real(state, event)

    broken_core(monkeypatch, how)
    (v,) = explore(SIMPLE, None, World()).violations
    assert v.invariant == "typed-errors" and v.message == "advance raised KeyError: 'frames'"
    assert len(v.events) == 2


def test_a_key_emitted_twice_is_a_violation(monkeypatch: pytest.MonkeyPatch) -> None:
    def how(real: Any, state: Any, event: Any) -> Any:
        d = real(state, event)
        if isinstance(event, EffectSucceeded) and d.effects:
            return msgspec.structs.replace(d, effects=(*d.effects, *d.effects))
        return d

    broken_core(monkeypatch, how)
    (v,) = explore(SIMPLE, None, World()).violations
    assert v.invariant == "unique-keys" and "r/b#1" in v.message


def test_a_nondeterministic_core_is_a_violation(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}

    def how(real: Any, state: Any, event: Any) -> Any:
        calls["n"] += 1
        if _second(event) and calls["n"] % 2 == 0:
            event = msgspec.structs.replace(event, output="other")
        return real(state, event)

    broken_core(monkeypatch, how)
    (v,) = explore(SIMPLE, None, World()).violations
    assert v.invariant == "determinism"
    assert explore(SIMPLE, None, World(), determinism=False).ok


def test_a_ledger_over_its_limit_is_a_violation(monkeypatch: pytest.MonkeyPatch) -> None:
    def how(real: Any, state: Any, event: Any) -> Any:
        d = real(state, event)
        led = msgspec.structs.replace(d.state.ledger, used_steps=d.state.ledger.steps + 1)
        return msgspec.structs.replace(d, state=msgspec.structs.replace(d.state, ledger=led))

    broken_core(monkeypatch, how)
    (v,) = explore(SIMPLE, None, World(), determinism=False).violations
    assert v.invariant == "budget" and "steps used of" in v.message


def test_a_settled_run_that_accepts_events_is_a_violation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def how(real: Any, state: Any, event: Any) -> Any:
        if state.settled is not None:
            return flowcore.Decision(state, ())
        return real(state, event)

    broken_core(monkeypatch, how)
    (v,) = explore(SIMPLE, None, World(), determinism=False).violations
    assert v.invariant == "settlement" and "accepted after settlement" in v.message


def test_a_refused_answer_to_pending_work_is_a_violation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def how(real: Any, state: Any, event: Any) -> Any:
        if _second(event):
            raise EventRejected("no", event.idempotency_key)
        return real(state, event)

    broken_core(monkeypatch, how)
    (v,) = explore(SIMPLE, None, World()).violations
    assert v.invariant == "waits" and "r/b#1" in v.message


def test_the_built_in_invariants_are_named() -> None:
    assert BUILT_IN == (
        "determinism",
        "unique-keys",
        "budget",
        "settlement",
        "typed-errors",
        "waits",
        "updates",
    )


# --- the example flows ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["triage", "incident", "postmortem", "research", "agent_team"])
def test_the_example_flows_keep_every_invariant(name: str) -> None:
    flow = parse_flow((EXAMPLES / f"{name}.yaml").read_bytes())
    world = World(
        default=[Ok({"title": "t", "services": ["a", "b"], "owner": "o"}), Fail("boom")],
        signals=[Signal("fix-deployed", {"sha": "abc"})],
        cancel_at_ms=0,
    )
    inputs = {"triage": {"incident_id": "I-1"}, "incident": {"incident_id": "I-1"}}
    x = explore(flow, inputs.get(name, {}), world, max_states=3000)
    assert x.ok, x.violations[0].describe()
    assert x.transitions > 0 and sum(x.settled.values()) > 0


def test_world_values_are_checked() -> None:
    with pytest.raises(TypeError, match=r"World\.tools must map an id to responses"):
        World(tools=["t"])
    with pytest.raises(ValueError, match=r"World: tools\['t'\] lists no response"):
        World(tools={"t": []})
    with pytest.raises(TypeError, match=r"World.humans\['q'\]: answers are strings"):
        World(humans={"q": [1]})
    with pytest.raises(TypeError, match=r"World\.signals: expected Signal"):
        World(signals=[3])
    with pytest.raises(ValueError, match="settles_within must be at least 1"):
        explore(SIMPLE, None, World(), settles_within=0)


# --- where the reduction is used ------------------------------------------------------------


def _with(**changes: Any) -> dict[str, Any]:
    spec = parallel(3)
    p = spec["steps"][0]
    for key, value in changes.items():
        if key == "mode":
            p["parallel"]["mode"] = value
        elif key == "compensate":
            p["parallel"]["branches"]["b0"][0]["compensate"] = [
                {"id": "undo", "call_tool": {"tool": "t"}}
            ]
        elif key == "reads":
            p["parallel"]["branches"]["b1"].append(
                {"id": "peek", "call_tool": {"tool": "t", "input": "${steps.s0_0.output}"}}
            )
        elif key == "budget":
            spec["budget"] = value
        elif key == "max_concurrency":
            p["parallel"]["max_concurrency"] = value
    return spec


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"compensate": True}, "step 's0_0' declares compensate"),
        ({"reads": True}, "parallel 'p': step 'peek' reads another branch"),
        ({"budget": {"cost_minor_units": 100}}, "a budget beyond steps"),
        ({"budget": {"steps": 3}}, "the step budget may run out"),
        ({"max_concurrency": 2}, "parallel 'p' has max_concurrency"),
    ],
)
def test_the_reduction_is_refused_where_an_order_could_matter_later(
    changes: dict[str, Any], why: str
) -> None:
    from flowcore.explore.reduction import Reducible

    spec = _with(**changes)
    assert Reducible(parse_flow(spec)).why_not == why
    x = explore(spec, None, OK_OR_FAIL)
    assert x.ok and x.complete and x.reduced == 0


def test_the_reduction_waits_for_a_cancel_and_skips_early_ending_constructs() -> None:
    base = explore(parallel(3), None, OK_OR_FAIL)
    assert base.reduced > 0
    for mode in ("all", "race", "any"):
        assert explore(_with(mode=mode), None, OK_OR_FAIL).reduced == 0
    cancel = World(tools={"t": [Ok(1), Fail("x")]}, cancel_at_ms=0)
    assert explore(parallel(3), None, cancel).reduced == 0
    usage = World(tools={"t": [Ok(1, steps=1), Fail("x")]})
    assert explore(parallel(3), None, usage).reduced == 0
