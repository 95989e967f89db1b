"""The property suite: generated flows x hostile event streams, the simulator with
faults, the wire path, and the stateful machine on flowcore's own example flows.

Case counts per run (``max_examples`` of each ``@given`` test below):

=============  ==========  ===========================================
profile        per test    total over the four ``@given`` tests
=============  ==========  ===========================================
``ci``         5,000       20,000 (plus 200 stateful runs per example)
``dev``        100         400 (fast local runs; the default)
``thorough``   20,000      80,000
=============  ==========  ===========================================

The profile is the one ``tests/conftest.py`` loads (``CI`` set -> ``ci``;
``FLOWCORE_HYPOTHESIS_PROFILE`` picks one explicitly);
``FLOWCORE_PROPERTY_EXAMPLES`` overrides the per-test count. Every
``@example`` below is a failure hypothesis once found, kept as a regression.

The two interpreter bugs this suite found are pinned as regressions at the
end of this module.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

import flowcore
from flowcore import EffectOutcomeUnknown, EffectSucceeded, InputError
from flowcore.testing import (
    CHILD_SPEC,
    SIGNALS,
    Fault,
    FlowMachine,
    Signal,
    Trajectory,
    check_determinism,
    check_history,
    check_trajectory,
    drive,
    faults,
    flow_inputs,
    flows,
    generated_world,
    moves,
    play,
)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = ROOT / "specs" / "examples"

PROFILE = os.environ.get("FLOWCORE_HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
EXAMPLES = int(
    os.environ.get("FLOWCORE_PROPERTY_EXAMPLES")
    or {"ci": 5_000, "dev": 100, "thorough": 20_000}.get(PROFILE, 100)
)
STATEFUL_EXAMPLES = {"ci": 200, "dev": 20, "thorough": 1_000}.get(PROFILE, 20)

PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- known interpreter bugs -------------------------------------------------------------------


def _reissue_exhausting_the_budget_keeps_the_key_in_the_report() -> bool:
    flow = flowcore.parse_flow(
        {
            "flow": "f",
            "tools": {"ro": {"class": "readonly"}},
            "budget": {"steps": 1},
            "steps": [{"id": "a", "call_tool": {"tool": "ro"}}],
        }
    )
    d = flowcore.start(flow, None, run_id="r-1")
    d = flowcore.advance(d.state, EffectOutcomeUnknown(idempotency_key="r-1/a#1", at_ms=1))
    settled = d.state.settled
    assert settled is not None and settled.exhausted == "steps"
    return [(e.idempotency_key, e.status) for e in settled.report] == [("r-1/a#1", "uncertain")]


HELD_MEMBER_SPEC = {
    "flow": "f",
    "tools": {"t": {}},
    "limits": {"max_concurrency": 1},
    "steps": [
        {
            "id": "p",
            "parallel": {
                "branches": {
                    "x": [{"id": "a", "call_tool": {"tool": "t"}}],
                    "y": [{"id": "b", "run_agent": {"agent": "bot", "prompt": "p", "member": "m"}}],
                }
            },
        }
    ],
}


def _held_run_agent_with_member_completes() -> bool:
    flow = flowcore.parse_flow(HELD_MEMBER_SPEC)
    d = flowcore.start(flow, None, run_id="r-1")
    d = flowcore.advance(d.state, EffectSucceeded(idempotency_key="r-1/a#1", output=1, at_ms=1))
    try:
        d = flowcore.advance(d.state, EffectSucceeded(idempotency_key="r-1/b#1", output=2, at_ms=2))
    except AssertionError:
        return False
    return d.state.settled is not None and d.state.settled.status == "completed"


def checked(body: Callable[[], None]) -> None:
    """Run one property body (kept as a hook for counting outcomes)."""
    body()


@functools.lru_cache(maxsize=4096)
def _parse_canonical(text: str) -> flowcore.Flow:
    return flowcore.parse_flow(text, source_name="generated")


def parse(spec: dict[str, Any]) -> flowcore.Flow:
    """``parse_flow``, cached: about a quarter of generated specs are repeats, and
    parsing is a third of what a case costs. Flows are immutable values."""
    return _parse_canonical(json.dumps(spec, sort_keys=True))


# --- 1. generated flows x hostile event streams ------------------------------------------------

_EXAMPLE_FLOW: dict[str, Any] = {
    "flow": "generated",
    "tools": {"read": {"class": "readonly"}, "put": {"class": "idempotent"}, "poke": {}},
    "steps": [
        {
            "id": "s1",
            "for_each": {
                "items": "${input.items}",
                "as": "it",
                "steps": [
                    {
                        "id": "s2",
                        "schedule": {"tool": "poke", "delay_ms": 1, "outlive_run": False},
                        "compensate": [
                            {"id": "s3", "call_tool": {"tool": "put", "input": {"v": 0}}}
                        ],
                    },
                    {"id": "s4", "await_signal": {"signal": "go"}},
                ],
            },
            "timeout_ms": 1,
        }
    ],
    "budget": {"steps": 3},
}


@PROPERTY
@given(spec=flows(), inp=flow_inputs(), ms=moves())
# The timeout compensates three iterations; the last compensation call comes
# back unknown and its re-issue would exceed the step budget.
@example(
    spec=_EXAMPLE_FLOW,
    inp={"flag": False, "items": [0, 0, 0], "n": 0},
    ms=[(0, 0), (0, 0), (0, 0), (56, 0)],
)
# A deadline timer fired early by a hostile host is the deadline.
@example(
    spec={
        "flow": "generated",
        "tools": {"poke": {}},
        "steps": [{"id": "s1", "call_tool": {"tool": "poke"}}],
        "budget": {"steps": 1, "cost_minor_units": 1, "wall_clock_ms": 1000},
    },
    inp={"flag": False, "items": [], "n": 0},
    ms=[(97, 0), (0, 0)],
)
# Exhausting the steps takes back the work emitted in the same decision and
# refunds its step: the ledger ends below the limit.
@example(
    spec={
        "flow": "generated",
        "tools": {"poke": {}},
        "steps": [
            {"id": "s1", "call_tool": {"tool": "poke"}},
            {
                "id": "s2",
                "for_each": {
                    "items": "${input.items}",
                    "steps": [{"id": "s3", "call_tool": {"tool": "poke"}}],
                },
            },
        ],
        "budget": {"steps": 2},
    },
    inp={"flag": False, "items": [0, 0], "n": 0},
    ms=[(0, 0)],
)
def test_hostile_streams_keep_every_invariant(
    spec: dict[str, Any], inp: dict[str, Any], ms: list[tuple[int, int]]
) -> None:
    flow = parse(spec)

    def body() -> None:
        try:
            history = play(flow, inp, ms)
        except InputError:
            return
        check_history(history)
        check_determinism(history)

    checked(body)


# --- 2. well-behaved hosts always get a run to settle -----------------------------------------


@PROPERTY
@given(
    spec=flows(max_depth=3, max_steps=6),
    inp=flow_inputs(),
    ms=moves(max_size=60, hostile=False),
)
@example(
    spec={**HELD_MEMBER_SPEC, "tools": {"t": {}, "poke": {}}},
    inp={"flag": False, "items": [], "n": 0},
    ms=[(0, 0), (0, 0)],
)
def test_well_behaved_hosts_always_get_runs_to_settle(
    spec: dict[str, Any], inp: dict[str, Any], ms: list[tuple[int, int]]
) -> None:
    flow = parse(spec)

    def body() -> None:
        try:
            history = play(flow, inp, ms, finish=True)
        except InputError:
            return
        state = history.state
        assert state.settled is not None, (
            f"run still {state.status} after {len(history.turns)} turns of a host that answers "
            f"everything; waiting for {sorted(state.waiting.pending.keys())}"
        )
        event(f"settled {state.status}")
        check_history(history)
        check_determinism(history)

    checked(body)


# --- 3. the simulator with faults --------------------------------------------------------------

signal_schedules = st.lists(
    st.builds(
        Signal,
        name=st.sampled_from(SIGNALS),
        payload=st.integers(0, 9),
        at_ms=st.integers(0, 20_000),
    ),
    max_size=3,
)


def _replay(trajectory: Trajectory) -> None:
    """Every run's log replays to the same effects and the same final state."""
    replay = getattr(flowcore, "replay", None)
    if replay is None:
        replay = importlib.import_module("flowcore.log.replay").replay
    for run_id, history in trajectory.histories.items():
        report = replay(trajectory.log_of(run_id), history.flow)
        assert report.ok, f"run {run_id}: {report.divergence}"
        assert report.status == history.state.status
        assert report.settled == history.state.settled
        # Replay folds answered work in place (_interp.Fold): it must end in
        # the very state advance reached, journal of the last event included.
        assert report.state == history.state


@PROPERTY
@given(
    spec=flows(),
    inp=flow_inputs(),
    injected=faults(),
    order=st.lists(st.integers(0, 5), max_size=10),
    signals=signal_schedules,
    cancel_at=st.one_of(st.none(), st.integers(0, 20_000)),
)
# A result moved past the wall-clock deadline (out of order): the run settles
# budget-exhausted and the report records the result's real outcome.
@example(
    spec={
        "flow": "generated",
        "tools": {"poke": {}},
        "steps": [
            {"id": "s1", "call_tool": {"tool": "poke", "input": {"v": "${input.n}"}}},
            {"id": "s2", "call_tool": {"tool": "poke", "input": {"v": "${steps.s1.output}"}}},
        ],
        "budget": {"steps": 1, "cost_minor_units": 1, "wall_clock_ms": 1000},
    },
    inp={"flag": False, "items": [], "n": 0},
    injected=[Fault("reorder", "*", delay_ms=0)],
    order=[1],
    signals=[],
    cancel_at=None,
)
# A watched team member the run stops waiting for (an attempt timeout) with
# wait_cancellation_completed, whose end is a heartbeat timeout: its report row
# is uncertain, as it would be had it not been cancelled.
@example(
    spec={
        "flow": "generated",
        "tools": {"poke": {}},
        "steps": [
            {
                "id": "s1",
                "attempt_timeout_ms": 1592,
                "try": [
                    {
                        "id": "s8",
                        "run_team": {"team": "duo", "prompt": "p"},
                        "heartbeat_timeout_ms": 2492,
                        "cancellation": "wait_cancellation_completed",
                    }
                ],
                "catch": [
                    {
                        "errors": ["*"],
                        "steps": [{"id": "s9", "call_tool": {"tool": "poke", "input": {"v": 1}}}],
                    }
                ],
            }
        ],
        "teams": {
            "duo": {
                "mode": "sequential",
                "members": [
                    {"member": "first", "agent": "a1"},
                    {"member": "second", "agent": "a2"},
                ],
            }
        },
    },
    inp={"flag": False, "items": [], "n": 0},
    injected=[Fault("heartbeat-timeout", "a1", delay_ms=0)],
    order=[],
    signals=[],
    cancel_at=None,
)
def test_simulated_runs_with_faults_keep_every_invariant(
    spec: dict[str, Any],
    inp: dict[str, Any],
    injected: list[Fault],
    order: list[int],
    signals: list[Signal],
    cancel_at: int | None,
) -> None:
    flow = parse(spec)

    def body() -> None:
        sim = generated_world(injected, signals, order, cancel_at)
        try:
            trajectory = sim.run(flow, inp)
        except InputError:
            return
        event(f"stop {trajectory.stop}, {len(trajectory.runs)} runs")
        check_trajectory(trajectory)
        _replay(trajectory)

    checked(body)


# --- 4. the wire path --------------------------------------------------------------------------


@PROPERTY
@given(spec=flows(), inp=flow_inputs(), ms=moves(max_size=30))
def test_streams_through_the_wire_drive_runs_identically(
    spec: dict[str, Any], inp: dict[str, Any], ms: list[tuple[int, int]]
) -> None:
    """What a JSON host sends: every event of a hostile stream as JSON bytes,
    decoded and validated by ``decode_event``, drives the run exactly as the
    events themselves do; every effect round-trips through both byte codecs."""
    flow = parse(spec)

    def body() -> None:
        try:
            direct = play(flow, inp, ms, paranoid=False)
        except InputError:
            return
        wire = [json.dumps(flowcore.event_to_wire(e)).encode() for e in direct.events()]
        sent = [flowcore.decode_event(data) for data in wire]
        assert sent == direct.events()
        history = check_history(drive(flow, inp, sent, run_id="r", paranoid=True))
        for mine, theirs in zip(history.turns, direct.turns, strict=True):
            assert mine.rejected == theirs.rejected
            assert mine.effects == theirs.effects
        for effect in history.effects():
            assert flowcore.decode_effect(flowcore.encode_effect(effect)) == effect
            packed = flowcore.encode_effect(effect, "msgpack")
            assert flowcore.decode_effect(packed, "msgpack") == effect

    checked(body)


# --- the stateful machine on flowcore's own example flows ---------------------------------------

EXAMPLE_INPUTS: dict[str, Any] = {
    "incident-triage": {"incident_id": "INC-7"},
    "incident-response": {"incident_id": "INC-7"},
    "postmortem": {"incident": "INC-7", "fix": {"commit": "abc123"}},
    "mcp-warehouse": {"sku": "widget", "quantity": 20},
}
EXAMPLE_OUTPUTS: dict[str, Any] = {
    "pagerduty.get_incident": {"title": "checkout latency", "service": "checkout"},
    "triager": {"owner": "payments-oncall", "plan": "raise the pool size"},
}


def example_flows() -> list[flowcore.Flow]:
    out = []
    for path in sorted(EXAMPLES_DIR.glob("*.yaml")) + sorted(EXAMPLES_DIR.glob("*.json")):
        out.append(flowcore.parse_flow(path.read_text(encoding="utf-8"), source_name=path.name))
    return out


def _machine_for(flow: flowcore.Flow) -> type[FlowMachine]:
    body = {
        "flow": flow,
        "input": EXAMPLE_INPUTS.get(flow.id, {}),
        "outputs": EXAMPLE_OUTPUTS,
        "run_id": "r-1",
    }
    return type(f"{flow.id.title().replace('-', '')}Machine", (FlowMachine,), body)


def test_every_example_flow_has_an_input() -> None:
    flows_found = example_flows()
    assert {f.id for f in flows_found} >= {"incident-triage"}
    for flow in flows_found:
        try:
            flowcore.start(flow, EXAMPLE_INPUTS.get(flow.id, {}))
        except InputError as exc:  # pragma: no cover - a new example needs an input
            pytest.fail(f"add an input for example flow {flow.id!r} to EXAMPLE_INPUTS: {exc}")


@pytest.mark.parametrize("flow", example_flows(), ids=lambda f: f.id)
def test_the_state_machine_on_example_flows(flow: flowcore.Flow) -> None:
    machine = _machine_for(flow)

    def body() -> None:
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=STATEFUL_EXAMPLES,
                stateful_step_count=40,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )

    checked(body)


# --- determinism across processes --------------------------------------------------------------

_XPROC = textwrap.dedent(
    """
    import hashlib, json, sys
    import flowcore
    from flowcore.testing import generated_world, Fault
    cases, subflows = json.loads(sys.stdin.read())
    digest = hashlib.sha256()
    for spec, inp in cases:
        faults = [Fault("unknown", "read", calls=[1]), Fault("fail-retryable", calls=[2])]
        world = generated_world(faults, paranoid=False, subflows=subflows)
        trajectory = world.run(spec, inp)
        digest.update(flowcore.encode_records(trajectory.log))
    print(digest.hexdigest())
    """
)


def test_effects_are_identical_across_processes_with_different_hash_seeds() -> None:
    """``hash()`` of a string is salted per process: nothing may depend on it."""
    cases = []
    subflows = {}
    for path in sorted(EXAMPLES_DIR.glob("*.yaml")):
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
        cases.append((spec, EXAMPLE_INPUTS.get(spec["flow"], {})))
        subflows[spec["flow"]] = spec
    cases.append((CHILD_SPEC, {"v": 1}))
    tricky = {
        "flow": "tricky",
        "tools": {"read": {"class": "readonly"}, "poke": {}},
        "limits": {"max_concurrency": 2},
        "steps": [
            {
                "id": "p",
                "parallel": {
                    "mode": "race",
                    "branches": {
                        name: [
                            {"id": f"{name}{i}", "call_tool": {"tool": "read"}} for i in range(3)
                        ]
                        for name in ("x", "y", "z")
                    },
                },
            },
            {
                "id": "each",
                "for_each": {
                    "items": "${input.items}",
                    "steps": [{"id": "w", "call_tool": {"tool": "poke"}, "timeout_ms": 1}],
                },
            },
        ],
    }
    cases.append((tricky, {"items": list(range(8))}))
    digests = set()
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", _XPROC],
            input=json.dumps([cases, subflows]),
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=120,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        digests.add(out.stdout.strip())
    assert len(digests) == 1, digests


# --- regressions: interpreter bugs this suite found ---------------------------------


def test_reissue_that_exhausts_the_budget_stays_in_the_report() -> None:
    assert _reissue_exhausting_the_budget_keeps_the_key_in_the_report()


def test_held_run_agent_with_member_completes() -> None:
    assert _held_run_agent_with_member_completes()
