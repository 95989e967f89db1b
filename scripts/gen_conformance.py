"""Generate the conformance vectors under ``specs/conformance/``.

Usage: ``python scripts/gen_conformance.py`` from anywhere.

Each case drives one flow through ``flowcore.start`` / ``flowcore.advance``
with a scripted event sequence, records the run with ``flowcore.Recorder``
and writes ``specs/conformance/<case>/``:

``flow.yaml``      the spec to replay the log against
``log.ndjson``     the full log (``specs/log.md``)
``README.md``      one line: what the case shows
``expect.json``    what replaying the log must find: the final status, or the
                   exact index of the divergence, the torn tail, the error
``recorded.yaml``  only for version cases: the spec the log was recorded with

Divergent cases take a faithful log and edit it (or replay it against a newer
spec); the generator checks that replay finds the divergence at the index the
case declares before writing anything. ``tests/conformance/test_vectors.py``
regenerates every file in memory and fails when the committed copies differ,
so the vectors cannot go stale.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a plain script, without an installed flowcore
    sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402

import flowcore  # noqa: E402
from flowcore import (  # noqa: E402
    Budget,
    CancelRequested,
    EffectFailed,
    EffectOutcomeUnknown,
    EffectSucceeded,
    ErrorInfo,
    Event,
    EventRejected,
    HumanAnswered,
    Record,
    Recorder,
    ScheduledAddRequested,
    ScheduledCancelRequested,
    ScheduledReplayRequested,
    ScheduledRunNowRequested,
    SignalReceived,
    SubflowSettled,
    TimerFired,
    UpdateRequested,
    Usage,
)
from flowcore.log.records import LogCorrupt, encode_records  # noqa: E402
from flowcore.log.replay import replay  # noqa: E402

OUT_DIR = ROOT / "specs" / "conformance"
RUN_ID = "r-1"


class Driver:
    """Drives one run and records its log. Keys are given without the ``r-1/`` prefix."""

    def __init__(
        self,
        spec: str,
        input: Any = None,
        *,
        budget: Budget | None = None,
        depth: int = 0,
        now: int = 0,
        metadata: dict[str, Any] | None = None,
        run_id: str = RUN_ID,
    ) -> None:
        self.flow = flowcore.parse_flow(spec, source_name="flow.yaml")
        self.run_id = run_id
        self.recorder = Recorder(run_id)
        self.now = now
        decision = flowcore.start(
            self.flow,
            input,
            run_id=run_id,
            now_ms=now,
            budget=budget,
            depth=depth,
            metadata=metadata,
        )
        self.records: list[Record] = self.recorder.started(
            self.flow, input, now, decision, budget=budget, depth=depth, metadata=metadata
        )
        self.state = decision.state
        self.timers: dict[str, int] = {}  # key -> due, as last armed
        self.upgraded_at: int | None = None  # where the run moved to another version
        self._arm(decision)
        self._continue(decision)

    def upgrade(self, spec: str) -> None:
        """Move the run to another version of its flow, as a host does (``flowcore.upgrade``)."""
        flow = flowcore.parse_flow(spec.strip() + "\n", source_name="flow.yaml")
        made = flowcore.upgrade(self.records, flow)
        assert made.changed
        self.flow, self.state, self.upgraded_at = flow, made.state, made.at

    def _arm(self, decision: flowcore.Decision) -> None:
        self.timers.update({s.idempotency_key: s.until_ms for s in flowcore.plan(decision).arm})

    def _at(self, at: int | None) -> int:
        self.now = self.now + 1 if at is None else max(self.now, at)
        return self.now

    def send(self, event: Event, reject: bool = False) -> None:
        try:
            decision = flowcore.advance(self.state, event)
        except EventRejected as exc:
            if not reject:
                raise AssertionError(f"unexpected rejection of {event}: {exc}") from None
            self.records.extend(self.recorder.rejected(event, exc.reason))
            return
        if reject:
            raise AssertionError(f"expected a rejection of {event}")
        self.state = decision.state
        self.records.extend(self.recorder.applied(event, decision))
        self._arm(decision)
        self._continue(decision)

    def _continue(self, decision: flowcore.Decision) -> None:
        # The next incarnation starts at once, as every host does (and may
        # itself continue at once).
        while (continued := flowcore.plan(decision).continued) is not None:
            depth = self.state.run.depth
            decision = flowcore.continue_run(self.flow, continued, RUN_ID, self.now, depth)
            self.state = decision.state
            self.records.extend(
                self.recorder.started(
                    self.flow, continued.input, self.now, decision, depth=depth, continued=continued
                )
            )
            self._arm(decision)

    def key(self, short: str) -> str:
        return f"{self.run_id}/{short}"

    def fork_from(self, source: Driver, from_step: str) -> None:
        """Become the fork of ``source``'s run from ``from_step`` (``flowcore.fork``)."""
        forked = flowcore.fork(source.records, self.flow, self.run_id, from_step=from_step)
        self.records = list(forked.records)
        self.state = forked.state
        self.recorder = Recorder(self.run_id, len(forked.records))
        self.now = forked.records[-1].at
        self.timers = {
            e.idempotency_key: e.until_ms for e in forked.pending if isinstance(e, flowcore.Sleep)
        }

    # --- events ------------------------------------------------------------------------

    def ok(
        self,
        key: str,
        output: Any = None,
        *,
        usage: Usage | None = None,
        at: int | None = None,
        reject: bool = False,
    ) -> None:
        event = EffectSucceeded(
            idempotency_key=self.key(key), output=output, usage=usage, at_ms=self._at(at)
        )
        self.send(event, reject)

    def fail(
        self,
        key: str,
        type: str = "boom",
        *,
        retryable: bool = False,
        at: int | None = None,
        reject: bool = False,
    ) -> None:
        error = ErrorInfo(type=type, message=f"{type} happened", retryable=retryable)
        self.send(
            EffectFailed(idempotency_key=self.key(key), error=error, at_ms=self._at(at)), reject
        )

    def heartbeat_timeout(self, key: str, details: Any, timeout_ms: int, *, at: int) -> None:
        """What a host reports for an attempt it stopped for not heartbeating."""
        message = f"no heartbeat within {timeout_ms} ms"
        error = ErrorInfo(type="heartbeat-timeout", message=message, details=details)
        self.send(EffectFailed(idempotency_key=self.key(key), error=error, at_ms=self._at(at)))

    def unknown(self, key: str, *, at: int | None = None, reject: bool = False) -> None:
        self.send(EffectOutcomeUnknown(idempotency_key=self.key(key), at_ms=self._at(at)), reject)

    def answer(self, key: str, answer: Any, *, at: int | None = None, reject: bool = False) -> None:
        self.send(
            HumanAnswered(idempotency_key=self.key(key), answer=answer, at_ms=self._at(at)), reject
        )

    def fire(self, key: str, *, at: int | None = None, reject: bool = False) -> None:
        """Fire a timer, by default at the time its sleep effect asked for."""
        full = self.key(key)
        due = self.timers.get(full, self.now + 1) if at is None else at
        self.send(TimerFired(idempotency_key=full, at_ms=self._at(due)), reject)

    def signal(
        self,
        name: str,
        payload: Any = None,
        *,
        at: int | None = None,
        reject: bool = False,
        key: str | None = None,
    ) -> None:
        self.send(SignalReceived(signal=name, payload=payload, at_ms=self._at(at), key=key), reject)

    def signal_failed(self, key: str, type: str, message: str) -> None:
        """A host's answer to a signal-run it could not deliver, at once."""
        error = ErrorInfo(type=type, message=message)
        self.send(EffectFailed(idempotency_key=self.key(key), error=error, at_ms=self.now))

    def child(
        self,
        key: str,
        status: str = "completed",
        output: Any = None,
        *,
        usage: Usage | None = None,
        error: ErrorInfo | None = None,
        at: int | None = None,
        reject: bool = False,
    ) -> None:
        event = SubflowSettled(
            idempotency_key=self.key(key),
            status=status,  # type: ignore[arg-type]
            output=output,
            usage=usage,
            error=error,
            at_ms=self._at(at),
        )
        self.send(event, reject)

    def cancel(self, reason: str = "", *, at: int | None = None, reject: bool = False) -> None:
        self.send(CancelRequested(reason=reason, at_ms=self._at(at)), reject)

    def cancel_scheduled(self, sid: str, *, at: int | None = None) -> None:
        self.send(ScheduledCancelRequested(schedule_id=self.key(sid), at_ms=self._at(at)))

    def run_now(self, sid: str, *, at: int | None = None) -> None:
        self.send(ScheduledRunNowRequested(schedule_id=self.key(sid), at_ms=self._at(at)))

    def add_scheduled(
        self,
        tool: str,
        input: Any = None,
        delay_ms: int = 0,
        *,
        at: int | None = None,
        reject: bool = False,
        **recurrence: Any,
    ) -> None:
        event = ScheduledAddRequested(
            tool=tool, input=input, delay_ms=delay_ms, at_ms=self._at(at), **recurrence
        )
        self.send(event, reject)

    def replay_scheduled(
        self, sid: str, *, request: str | None = None, at: int | None = None, reject: bool = False
    ) -> None:
        event = ScheduledReplayRequested(
            schedule_id=self.key(sid), at_ms=self._at(at), request=request
        )
        self.send(event, reject)

    def update(
        self,
        update_id: str,
        name: str,
        input: Any = None,
        *,
        principal: str | None = None,
        at: int | None = None,
        reject: bool = False,
    ) -> None:
        event = UpdateRequested(
            update_id=update_id, name=name, input=input, principal=principal, at_ms=self._at(at)
        )
        self.send(event, reject)


Script = Callable[[Driver], None]
Edit = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


@dataclass
class Case:
    name: str
    about: str
    spec: str
    script: Script
    input: Any = None
    budget: Budget | None = None
    depth: int = 0
    now: int = 0  # the run's start time (epoch ms)
    metadata: dict[str, Any] | None = None  # given at start
    # divergent cases
    edit: Edit | None = None
    newer_spec: str | None = None  # replay against this instead of ``spec``
    diverges_at: int | None = None
    # log-level cases
    tear: int | None = None  # bytes cut off the end of the log
    corrupt_line: int | None = None  # 0-based line replaced by garbage
    extra: dict[str, Any] = field(default_factory=dict)
    # (name, args) of the flow's queries asked of the final state (expect.json "queries")
    queries: list[tuple[str, Any]] = field(default_factory=list)


CASES: list[Case] = []


def case(name: str, about: str, spec: str, **options: Any) -> Callable[[Script], Script]:
    def register(script: Script) -> Script:
        CASES.append(Case(name, about, spec.strip() + "\n", script, **options))
        return script

    return register


# =====================================================================================
# Constructs
# =====================================================================================

SEQUENCE = """
flow: sequence
tools: {lookup: {class: readonly}, store: {class: idempotent}}
steps:
  - id: fetch
    call_tool: {tool: lookup, input: {id: "${input.id}"}}
  - id: enrich
    call_tool: {tool: lookup, input: {name: "${steps.fetch.output.name}"}}
  - id: save
    call_tool:
      tool: store
      input: "${ {name: steps.fetch.output.name, tier: steps.enrich.output.tier} }"
output: "${ {saved: steps.save.output, name: steps.fetch.output.name} }"
"""


@case(
    "sequence-call-tool",
    "Three call_tool steps in sequence; inputs built from earlier outputs; the output expression.",
    SEQUENCE,
    input={"id": "u-7"},
)
def _sequence(d: Driver) -> None:
    d.ok("fetch#1", {"name": "Ada"})
    d.ok("enrich#1", {"tier": "gold"})
    d.ok("save#1", True)


@case(
    "run-agent",
    "run_agent with instructions and member; reported usage shrinks budgetRemaining of the "
    "next agent.",
    """
flow: agents
budget: {steps: 20, cost_minor_units: 1000, wall_clock_ms: 600000}
steps:
  - id: draft
    run_agent:
      agent: writer
      prompt: "Draft a reply to ${input.ticket}"
      instructions: "Be brief."
  - id: review
    run_agent: {agent: reviewer, member: lead, prompt: "Review: ${steps.draft.output}"}
output: "${steps.review.output}"
""",
    input={"ticket": "T-9"},
)
def _run_agent(d: Driver) -> None:
    d.ok("draft#1", "Hello!", usage=Usage(steps=2, cost_minor_units=120))
    d.ok("review#1", "LGTM", usage=Usage(steps=1, cost_minor_units=30))


TEAMS = """
flow: teams
budget: {steps: 20, cost_minor_units: 1000}
teams:
  reviewers:
    mode: sequential
    members:
      - {member: security, agent: sec-bot}
      - {member: style, agent: style-bot, instructions: "Earlier: ${members.security}"}
  voters:
    mode: parallel
    members: [{member: a, agent: vote-a}, {member: b, agent: vote-b}]
steps:
  - id: review
    run_team: {team: reviewers, prompt: "Review PR ${input.pr}"}
output: "${steps.review.output}"
"""


@case(
    "team-sequential",
    "A declared sequential team: one member run-agent at a time, later members see earlier "
    "outputs; usage per member.",
    TEAMS,
    input={"pr": 42},
)
def _team_sequential(d: Driver) -> None:
    d.ok("review/security#1", "no secrets", usage=Usage(steps=1, cost_minor_units=10))
    d.ok("review/style#1", "fine", usage=Usage(steps=1, cost_minor_units=20))


@case(
    "team-parallel",
    "A declared parallel team: every member's run-agent at once; the output maps members.",
    TEAMS.replace("run_team: {team: reviewers", "run_team: {team: voters"),
    input={"pr": 7},
)
def _team_parallel(d: Driver) -> None:
    d.ok("review/b#1", "yes", usage=Usage(steps=1, cost_minor_units=5))
    d.ok("review/a#1", "no", usage=Usage(steps=1, cost_minor_units=7))


@case(
    "team-undeclared",
    "run_team of a team the spec does not declare: one run-team effect for the host.",
    """
flow: host-team
steps:
  - id: panel
    run_team: {team: experts, prompt: "Assess ${input.topic}"}
output: "${steps.panel.output}"
""",
    input={"topic": "latency"},
)
def _team_undeclared(d: Driver) -> None:
    d.ok("panel#1", {"verdict": "ok"}, usage=Usage(steps=3, cost_minor_units=50))


ASK = """
flow: ask
steps:
  - id: decide
    ask_human:
      question: "Page ${input.owner}?"
      options: [page, ignore]
      timeout_ms: 60000
      default: ignore
  - id: strict
    ask_human: {question: "Really?", options: [yes, no], timeout_ms: 1000}
output: "${ {decide: steps.decide.answer, strict: steps.strict.answer} }"
"""


@case(
    "ask-human-answered",
    "ask_human with options answered in time; the timeout timers are dropped.",
    ASK,
    input={"owner": "ana"},
)
def _ask_answered(d: Driver) -> None:
    d.answer("decide#1", "page")
    d.answer("strict#1", "yes")


@case(
    "ask-human-timeout",
    "ask_human timeouts: one falls back to its default answer, one without a default fails "
    "the run.",
    ASK,
    input={"owner": "ana"},
)
def _ask_timeout(d: Driver) -> None:
    d.fire("decide#1/timeout")
    d.fire("strict#1/timeout")


@case(
    "sleep",
    "sleep for_ms and sleep until an instant from the input (ISO 8601); timer-fired wakes "
    "each; an instant already past does not sleep.",
    """
flow: sleeper
steps:
  - id: nap
    sleep: {for_ms: 5000}
  - id: until
    sleep: {until: "${input.wake_at}"}
  - id: past
    sleep: {until: 0}
output: done
""",
    input={"wake_at": "1970-01-01T00:01:00Z"},
)
def _sleep(d: Driver) -> None:
    d.fire("nap#1")
    d.fire("until#1")


SIGNALS = """
flow: signals
limits: {max_buffered_signals: 2}
steps:
  - id: first
    await_signal: {signal: go, timeout_ms: 30000}
  - id: second
    await_signal: {signal: go}
  - id: third
    await_signal: {signal: go}
output: "${ [steps.first.output, steps.second.output, steps.third.output] }"
"""


@case(
    "await-signal",
    "await_signal: the payload becomes the step's output; the signal timeout is dropped.",
    SIGNALS,
)
def _await_signal(d: Driver) -> None:
    d.signal("go", {"n": 1})
    d.signal("go", {"n": 2})
    d.signal("go", {"n": 3})


@case(
    "signal-buffered",
    "Signals sent before the flow waits are buffered (up to max_buffered_signals, the next "
    "is rejected) and consumed in order without await-signal effects.",
    """
flow: buffered
limits: {max_buffered_signals: 2}
tools: {work: {class: readonly}}
steps:
  - id: busy
    call_tool: {tool: work}
  - id: first
    await_signal: {signal: go}
  - id: second
    await_signal: {signal: go}
  - id: third
    await_signal: {signal: go}
output: "${ [steps.first.output, steps.second.output, steps.third.output] }"
""",
)
def _signal_buffered(d: Driver) -> None:
    d.signal("go", "a")
    d.signal("go", "b")
    d.signal("go", "c", reject=True)
    d.ok("busy#1", None)
    d.signal("go", "c")


@case(
    "await-signal-timeout",
    "await_signal with a timeout that fires: the step fails with error type timeout and the "
    "run fails.",
    SIGNALS,
)
def _await_signal_timeout(d: Driver) -> None:
    d.fire("first#1/timeout")


SUBFLOW = """
flow: parent
budget: {steps: 30, cost_minor_units: 500}
limits: {max_subflow_depth: 2}
steps:
  - id: child
    run_subflow: {flow: postmortem, input: {incident: "${input.incident}"}}
output: "${steps.child.output}"
"""


@case(
    "subflow-completed",
    "run_subflow: the child gets the parent's remaining budget; its usage comes back into "
    "the parent's ledger.",
    SUBFLOW,
    input={"incident": "INC-1"},
)
def _subflow_completed(d: Driver) -> None:
    d.child("child#1", "completed", {"doc": "pm.md"}, usage=Usage(steps=4, cost_minor_units=80))


# How a conformance player's child run fails (tests/conformance/vectors.py).
CHILD_ERROR = ErrorInfo(type="child-failed", message="failed as recorded")


@case(
    "subflow-failed",
    "A child that settles failed fails the run_subflow step (error type subflow-failed) "
    "with the child's error as its cause.",
    SUBFLOW,
    input={"incident": "INC-2"},
)
def _subflow_failed(d: Driver) -> None:
    d.child("child#1", "failed", usage=Usage(steps=1), error=CHILD_ERROR)


@case(
    "subflow-failed-caught",
    "catch matches a type down the cause chain: the child's own error type catches the "
    "parent's subflow-failed, and the handler reads the cause.",
    """
flow: parent
tools: {note: {class: idempotent}}
steps:
  - id: guard
    try:
      - id: child
        run_subflow: {flow: postmortem, input: {incident: "${input.incident}"}}
    catch:
      - errors: [child-failed]
        steps:
          - id: tell
            call_tool: {tool: note, input: "${error.cause}"}
output: "${steps.guard.output}"
""",
    input={"incident": "INC-4"},
)
def _subflow_failed_caught(d: Driver) -> None:
    d.child("child#1", "failed", usage=Usage(steps=1), error=CHILD_ERROR)
    d.ok("tell#1", "noted")


def _race_child(policy: str) -> str:
    return f"""
flow: parent
tools: {{quick: {{class: idempotent}}}}
steps:
  - id: first
    parallel:
      mode: race
      branches:
        slow:
          - id: child
            run_subflow:
              flow: postmortem
              input: {{incident: "${{input.incident}}"}}
              parent_close: {policy}
        fast:
          - id: quick
            call_tool: {{tool: quick}}
"""


@case(
    "subflow-abandon",
    "run_subflow parent_close: abandon: the child of a lost race is not cancelled (the plan "
    "detaches it) and runs on; its settlement, coming while the run still waits for a "
    "signal, is a late result: its usage is charged, nothing else changes.",
    _race_child("abandon")
    + """  - id: hold
    await_signal: {signal: go}
output: "${ {first: steps.first.output, child: steps.child.status} }"
""",
    input={"incident": "INC-5"},
)
def _subflow_abandon(d: Driver) -> None:
    d.ok("quick#1", "done")
    d.child("child#1", "completed", {"doc": "pm.md"}, usage=Usage(steps=1))
    d.signal("go")


@case(
    "subflow-wait",
    "run_subflow parent_close: wait: the child of a lost race runs on and the run settles "
    "only after it; the child's failure is in the report but the run completes.",
    _race_child("wait") + 'output: "${steps.first.output}"\n',
    input={"incident": "INC-6"},
)
def _subflow_wait(d: Driver) -> None:
    d.ok("quick#1", "done")
    d.child("child#1", "failed", usage=Usage(steps=1), error=CHILD_ERROR)


@case(
    "subflow-detached",
    "run_subflow detached: the host starts the child as a root run of its own and answers "
    "at once with its run id; the parent never hears of it again.",
    """
flow: parent
tools: {note: {class: idempotent}}
steps:
  - id: kick
    run_subflow: {flow: postmortem, input: {incident: "${input.incident}"}, detached: true}
  - id: note
    call_tool: {tool: note, input: "${steps.kick.output.run_id}"}
output: "${steps.kick.output}"
""",
    input={"incident": "INC-7"},
)
def _subflow_detached(d: Driver) -> None:
    d.ok("kick#1", {"run_id": d.key("kick#1")}, at=0)
    d.ok("note#1", "noted")


@case(
    "fail-step",
    "fail: a step fails with the type, message and details the flow makes; a try catches "
    "one by its type and reads its details, the other fails the run.",
    """
flow: refunds
tools: {check: {class: readonly}, notify: {class: idempotent}}
steps:
  - id: check
    call_tool: {tool: check, input: {order: "${input.order}"}}
  - id: guard
    try:
      - id: too_late
        fail:
          type: refund-too-late
          message: "order ${input.order}: ${steps.check.output.days} days"
          details: {order: "${input.order}", days: "${steps.check.output.days}"}
    catch:
      - errors: [refund-too-late]
        steps:
          - id: notify
            call_tool: {tool: notify, input: "${error.details}"}
  - id: stop
    fail: {type: refund-refused, message: "refused", details: "${steps.notify.output}"}
""",
    input={"order": "A-7"},
)
def _fail_step(d: Driver) -> None:
    d.ok("check#1", {"days": 40})
    d.ok("notify#1", {"sent": True})


@case(
    "run-metadata",
    "Run metadata: the start gives customer and tier; set_metadata sets amount and urgent "
    "from a tool's output and clears tier (null); a value of the wrong type fails its step "
    "with expression-error (caught) and changes nothing; set_metadata emits no effect and "
    "spends no budget.",
    """
flow: orders
metadata: {customer: string, amount: number, urgent: boolean, tier: integer, stage: string}
budget: {steps: 2}
tools: {quote: {class: readonly}, ship: {class: idempotent}}
steps:
  - id: quote
    call_tool: {tool: quote, input: {order: "${input.order}"}}
  - id: mark
    set_metadata:
      amount: "${steps.quote.output.total}"
      urgent: "${steps.quote.output.total > `100`}"
      stage: quoted
      tier: null
  - id: check
    try:
      - id: wrong
        set_metadata: {tier: "${steps.quote.output.currency}"}
    catch:
      - errors: [expression-error]
        steps:
          - id: ship
            call_tool: {tool: ship, input: {order: "${input.order}"}}
  - id: done
    set_metadata: {stage: shipped}
output: "${steps.mark.output}"
""",
    input={"order": "A-7"},
    metadata={"customer": "acme", "tier": 2},
)
def _run_metadata(d: Driver) -> None:
    d.ok("quote#1", {"total": 140.5, "currency": "EUR"})
    d.ok("ship#1", {"shipped": True})


@case(
    "continue-as-new",
    "continue_as_new: a reminder ends its first incarnation after two fires and starts again "
    "with a new input; the buffered signal it did not take is carried over; the second "
    "incarnation's keys begin r-1/@2/.",
    """
flow: reminder
tools: {remind: {class: idempotent}}
steps:
  - id: tick
    repeat:
      every_ms: 60000
      max_fires: 2
      steps:
        - id: ping
          call_tool: {tool: remind, input: {round: "${input.round}", fire: "${fire_count}"}}
  - id: note
    await_signal: {signal: note}
  - id: next
    switch:
      - if: "input.round < `1`"
        steps:
          - id: again
            continue_as_new:
              input:
                round: "${sum([input.round, `1`])}"
                notes: "${[input.notes, [steps.note.output]][]}"
output: "${ {notes: [input.notes, [steps.note.output]][], incarnation: run.incarnation} }"
""",
    input={"round": 0, "notes": []},
)
def _continue_as_new(d: Driver) -> None:
    d.signal("note", "a")
    d.signal("note", "b")
    for base in ("", "@2/"):
        d.fire(f"{base}tick[1]/tick")
        d.ok(f"{base}tick[1]/ping#1", "sent")
        d.fire(f"{base}tick[2]/tick")
        d.ok(f"{base}tick[2]/ping#1", "sent")


@case(
    "retry-at-once",
    "retry with initial_interval_ms 0: the next attempt is issued at once, without a "
    "backoff timer; the last error lists every attempt's error.",
    """
flow: eager
tools: {flaky: {class: idempotent}}
steps:
  - id: call
    call_tool: {tool: flaky}
    retry: {max_attempts: 3, initial_interval_ms: 0, errors: ["*"]}
""",
)
def _retry_at_once(d: Driver) -> None:
    d.fail("call#1", "busy")
    d.fail("call#2", "busy")
    d.fail("call#3", "down")


@case(
    "subflow-depth",
    "A run started at depth 2 with a budget from its parent: its run_subflow would exceed "
    "max_subflow_depth and fails at once.",
    SUBFLOW,
    input={"incident": "INC-3"},
    depth=2,
    budget=Budget(steps=5, cost_minor_units=100),  # type: ignore[arg-type]
)
def _subflow_depth(d: Driver) -> None:
    pass


SWITCH = """
flow: router
tools: {pagerduty.page: {class: idempotent}, slack.post: {}}
steps:
  - id: route
    switch:
      - if: "input.severity == 'high'"
        steps:
          - id: page
            call_tool: {tool: pagerduty.page, input: {who: "${input.owner}"}}
      - if: "input.severity == 'low'"
        steps: []
      - else:
          - id: note
            call_tool: {tool: slack.post, input: {text: "sev ${input.severity}"}}
output: "${steps.route.output}"
"""


@case(
    "switch",
    "switch: the first matching case runs; the step's output is its last step's output.",
    SWITCH,
    input={"severity": "high", "owner": "ana"},
)
def _switch(d: Driver) -> None:
    d.ok("page#1", {"paged": True})


@case(
    "switch-else", "switch: nothing matches, the else case runs.", SWITCH, input={"severity": "mid"}
)
def _switch_else(d: Driver) -> None:
    d.ok("note#1", {"ts": 1})


def parallel(mode: str, extra: str = "", tail: str = "") -> str:
    return f"""
flow: fan-out
tools: {{a: {{class: readonly}}, b: {{class: readonly}}, c: {{class: readonly}}}}
steps:
  - id: fan
    parallel:
      mode: {mode}{extra}
      branches:
        left: [{{id: l, call_tool: {{tool: a}}}}]
        mid: [{{id: m, call_tool: {{tool: b}}}}]
        right: [{{id: r, call_tool: {{tool: c}}}}]
{tail}output: "${{steps.fan.output}}"
"""


@case(
    "parallel-all",
    "parallel mode all: every branch starts in declared order; the output maps branches.",
    parallel("all"),
)
def _parallel_all(d: Driver) -> None:
    d.ok("r#1", 3)
    d.ok("l#1", 1)
    d.ok("m#1", 2)


@case(
    "parallel-all-settled",
    "parallel mode all_settled: a failed branch does not fail the step; the output holds "
    "status and output or error per branch.",
    parallel("all_settled"),
)
def _parallel_all_settled(d: Driver) -> None:
    d.fail("m#1", "boom")
    d.ok("l#1", 1)
    d.ok("r#1", 3)


@case(
    "parallel-race",
    "parallel mode race: the first branch to finish wins, the others are abandoned; a "
    "loser's late result is accepted and ignored, a duplicate is rejected.",
    parallel("race", tail="  - id: after\n    ask_human: {question: done?}\n"),
)
def _parallel_race(d: Driver) -> None:
    d.ok("m#1", "mid wins")
    d.ok("l#1", "too late")
    d.ok("l#1", "duplicate", reject=True)
    d.answer("after#1", "yes")


@case(
    "parallel-any",
    "parallel mode any: failures are tolerated until one branch succeeds.",
    parallel("any"),
)
def _parallel_any(d: Driver) -> None:
    d.fail("l#1", "nope")
    d.ok("r#1", "right")


@case(
    "parallel-max-concurrency",
    "parallel with max_concurrency 1: branches start one after another in declared order.",
    parallel("all", "\n      max_concurrency: 1"),
)
def _parallel_max_concurrency(d: Driver) -> None:
    d.ok("l#1", 1)
    d.ok("m#1", 2)
    d.ok("r#1", 3)


@case(
    "for-each",
    "for_each with max_concurrency 2: the loop variable and index, keys per item, outputs "
    "in item order whatever the completion order.",
    """
flow: per-service
tools: {check: {class: readonly}}
steps:
  - id: per
    for_each:
      items: "${input.services}"
      as: svc
      max_concurrency: 2
      steps:
        - id: look
          call_tool: {tool: check, input: {service: "${svc}", n: "${index}"}}
output: "${steps.per.output}"
""",
    input={"services": ["api", "db", "web"]},
)
def _for_each(d: Driver) -> None:
    d.ok("per[1]/look#1", "db ok")
    d.ok("per[0]/look#1", "api ok")
    d.ok("per[2]/look#1", "web ok")


@case(
    "for-each-max-items",
    "for_each with max_items 2 over three items: the step fails too-many-items before any "
    "iteration starts (nothing is issued, no budget spent); a catch handles it.",
    """
flow: per-service-capped
tools: {check: {class: readonly}, note: {class: idempotent}}
steps:
  - id: guard
    try:
      - id: per
        for_each:
          items: "${input.services}"
          max_items: 2
          steps:
            - id: look
              call_tool: {tool: check, input: "${item}"}
    catch:
      - errors: [too-many-items]
        steps:
          - id: note
            call_tool: {tool: note, input: "${error}"}
output: "${steps.guard.output}"
""",
    input={"services": ["api", "db", "web"]},
)
def _for_each_max_items(d: Driver) -> None:
    d.ok("note#1", "noted")


@case(
    "repeat-every",
    "repeat every_ms with max_fires: a tick timer per fire, fire_count visible to the body.",
    """
flow: reminder
tools: {ping: {class: readonly}}
steps:
  - id: recheck
    repeat:
      every_ms: 60000
      max_fires: 3
      steps:
        - id: poll
          call_tool: {tool: ping, input: {fire: "${fire_count}"}}
output: "${steps.recheck.output}"
""",
)
def _repeat_every(d: Driver) -> None:
    for fire in (1, 2, 3):
        d.fire(f"recheck[{fire}]/tick")
        d.ok(f"recheck[{fire}]/poll#1", {"fire": fire})


@case(
    "repeat-cron-until",
    "repeat on a 5-field UTC cron with an until condition checked after each fire.",
    """
flow: cron
tools: {ci: {class: readonly}}
steps:
  - id: recheck
    repeat:
      cron: "*/5 * * * *"
      until: "steps.status.output.green"
      steps:
        - id: status
          call_tool: {tool: ci}
output: "${steps.recheck.output}"
""",
)
def _repeat_cron(d: Driver) -> None:
    d.fire("recheck[1]/tick")
    d.ok("recheck[1]/status#1", {"green": False})
    d.fire("recheck[2]/tick")
    d.ok("recheck[2]/status#1", {"green": True})


SCHEDULE = """
flow: nudger
tools: {send_reminder: {}, cleanup: {class: idempotent}}
steps:
  - id: nudge
    schedule: {tool: send_reminder, input: {to: "${input.who}"}, delay_ms: 1000}
  - id: later
    schedule: {tool: cleanup, delay_ms: 2000}
  - id: drop
    cancel_scheduled: {id: "${steps.later.output}"}
  - id: wait
    sleep: {for_ms: 5000}
output: "${ {nudge: steps.nudge.output, dropped: steps.drop.output} }"
"""


@case(
    "schedule",
    "schedule returns its id at once; the delay fires a detached call-tool whose failure "
    "never fails the flow; cancel_scheduled cancels another before its delay reaches the host.",
    SCHEDULE,
    input={"who": "ana"},
)
def _schedule(d: Driver) -> None:
    d.fire("nudge#1/delay")
    d.fail("nudge#1/call", "smtp-down")
    d.fire("wait#1")


@case(
    "schedule-outlive",
    "schedule with outlive_run: the run waits for the call after its steps end.",
    """
flow: outlive
tools: {audit: {class: idempotent}}
steps:
  - id: log
    schedule: {tool: audit, input: {event: done}, delay_ms: 10000, outlive_run: true}
output: "${steps.log.output}"
""",
)
def _schedule_outlive(d: Driver) -> None:
    d.fire("log#1/delay")
    d.ok("log#1/call", "logged")


MANAGED = """
flow: managed
tools:
  send_reminder: {class: idempotent, schedulable: true}
  cleanup: {class: readonly}
steps:
  - id: nudge
    schedule: {tool: send_reminder, input: {to: "${input.who}"}, delay_ms: 3600000}
  - id: wait
    await_signal: {signal: done}
output: "${steps.nudge.output}"
"""


@case(
    "scheduled-cancel-from-outside",
    "scheduled-cancel-requested cancels a pending scheduled call from outside the run (its "
    "delay timer is dropped). A cancel that would change nothing (the same id again, an "
    "unknown id) is answered by the local host without an event (local.md §13), so this log "
    "holds none.",
    MANAGED,
    input={"who": "ana"},
)
def _scheduled_cancel(d: Driver) -> None:
    d.cancel_scheduled("nudge#1")
    d.signal("done")


@case(
    "scheduled-run-now",
    "scheduled-run-now-requested issues a pending scheduled call now: its delay timer is "
    "dropped and its call-tool emitted; its result only changes the call's status.",
    MANAGED,
    input={"who": "ana"},
)
def _scheduled_run_now(d: Driver) -> None:
    d.run_now("nudge#1")
    d.ok("nudge#1/call", {"sent": True})
    d.signal("done")


@case(
    "scheduled-add-from-outside",
    "scheduled-add-requested schedules a call to a tool the flow declares schedulable, under "
    "an id the run counts (r-1/~scheduled-1); a tool that is not schedulable is rejected.",
    MANAGED,
    input={"who": "ana"},
)
def _scheduled_add(d: Driver) -> None:
    d.add_scheduled("cleanup", {"all": True}, 1000, reject=True)
    d.add_scheduled("send_reminder", {"to": "bo"}, 2000)
    d.fire("~scheduled-1/delay")
    d.fail("~scheduled-1/call", "smtp-down")
    d.signal("done")


@case(
    "schedule-recurring",
    "schedule with every_ms and count: each firing issues the call under its own keys "
    "(/delay, /call, then /delay-2, /call-2...); the next firing is the first slot after the "
    "last due time that is not before the call's end (slots passed while it was out are "
    "skipped); after count firings the call ends with its last firing's status.",
    """
flow: recurring
tools: {send_reminder: {class: idempotent}}
steps:
  - id: nudge
    schedule: {tool: send_reminder, input: {to: ana}, every_ms: 1000, count: 3, outlive_run: true}
output: "${steps.nudge.output}"
""",
)
def _schedule_recurring(d: Driver) -> None:
    d.fire("nudge#1/delay")
    d.ok("nudge#1/call", "sent", at=2500)  # out past the slot at 2000: it is skipped
    d.fire("nudge#1/delay-2")
    d.fail("nudge#1/call-2", "smtp-down")  # a failed firing does not stop the others
    d.fire("nudge#1/delay-3")
    d.ok("nudge#1/call-3", "sent")


@case(
    "scheduled-recurring-from-outside",
    "scheduled-add-requested with a cron in a time zone and until_ms: firings follow the "
    "cron; a cancel while a firing is out lets that call finish and ends the call cancelled.",
    MANAGED,
    input={"who": "ana"},
)
def _scheduled_recurring(d: Driver) -> None:
    d.cancel_scheduled("nudge#1")
    d.add_scheduled(
        "send_reminder", {"to": "bo"}, cron="0 9 * * *", timezone="nowhere/Zone", reject=True
    )
    d.add_scheduled(
        "send_reminder",
        {"to": "bo"},
        cron="0 9 * * *",
        timezone="Europe/Paris",
        until_ms=10 * 86_400_000,
    )
    d.fire("~scheduled-1/delay")
    d.ok("~scheduled-1/call", "sent")
    d.fire("~scheduled-1/delay-2")
    d.cancel_scheduled("~scheduled-1")
    d.ok("~scheduled-1/call-2", "sent")
    d.signal("done")


@case(
    "scheduled-replay",
    "scheduled-replay-requested issues a finished scheduled call again, same tool and input, "
    "under <id>/replay-<n>; the same request again replays nothing; a call still pending is "
    "refused.",
    MANAGED,
    input={"who": "ana"},
)
def _scheduled_replay(d: Driver) -> None:
    d.replay_scheduled("nudge#1", request="q-0", reject=True)  # still pending
    d.run_now("nudge#1")
    d.fail("nudge#1/call", "smtp-down")
    d.replay_scheduled("nudge#1", request="q-1")
    d.replay_scheduled("nudge#1", request="q-1")  # the same request: nothing more
    d.ok("nudge#1/replay-1", {"sent": True})
    d.signal("done")


RETRY = """
flow: retrying
tools: {flaky: {class: idempotent}}
steps:
  - id: call
    call_tool: {tool: flaky, input: {n: 1}}
    retry:
      max_attempts: 3
      initial_interval_ms: 1000
      backoff: 2.0
      max_interval_ms: 60000
      jitter: 0.5
output: "${steps.call.output}"
"""


@case(
    "retry-backoff",
    "retry with exponential backoff and deterministic jitter: new key per attempt, a "
    "backoff timer between attempts.",
    RETRY,
)
def _retry_backoff(d: Driver) -> None:
    d.fail("call#1", "busy", retryable=True)
    d.fire("call#1/backoff")
    d.fail("call#2", "busy", retryable=True)
    d.fire("call#2/backoff")
    d.ok("call#3", "third time lucky")


@case(
    "retry-exhausted",
    "retry gives up after max_attempts; a non-retryable error is not retried at all.",
    RETRY,
)
def _retry_exhausted(d: Driver) -> None:
    d.fail("call#1", "busy", retryable=True)
    d.fire("call#1/backoff")
    d.fail("call#2", "bad-request", retryable=False)


@case(
    "signal-where",
    "await_signal with where: two waits for one signal name take the payloads they accept, "
    "out of arrival order; a payload neither accepts is buffered.",
    """
flow: payments
steps:
  - id: both
    parallel:
      branches:
        a: [{id: wa, await_signal: {signal: paid, where: "payload.order == 'A'"}}]
        b: [{id: wb, await_signal: {signal: paid, where: "payload.order == input.mine"}}]
output: "${steps.both.output}"
""",
    input={"mine": "B"},
)
def _signal_where(d: Driver) -> None:
    d.signal("paid", {"order": "C"})
    d.signal("paid", {"order": "B", "n": 1})
    d.signal("paid", {"order": "A", "n": 2})


@case(
    "signals-collect",
    "await_signal for any of two names, collecting until two approvals (at most three "
    "signals); a signal buffered before the wait is taken at once; then a wait for either "
    "name says which came.",
    """
flow: votes
steps:
  - id: hold
    await_signal: {signal: open}
  - id: votes
    await_signal:
      signals: [approve, reject]
      count: 3
      until: "length(received[?signal=='approve']) >= `2`"
  - id: last
    await_signal: {signals: [done, abort]}
output: {votes: "${steps.votes.output}", last: "${steps.last.output}"}
""",
)
def _signals_collect(d: Driver) -> None:
    d.signal("reject", {"by": "ann"})
    d.signal("open")
    d.signal("approve", {"by": "bo"})
    d.signal("approve", {"by": "cy"})
    d.signal("abort", "enough")


@case(
    "signal-key",
    "await_signal with key: two waits for one name each take the signal sent with their own "
    "key (one buffered before the wait, taken at once); a signal for another key and one "
    "without a key stay buffered, the latter for a wait without a key.",
    """
flow: payments
steps:
  - id: hold
    await_signal: {signal: open}
  - id: both
    parallel:
      branches:
        a: [{id: wa, await_signal: {signal: paid, key: "order-${input.a}"}}]
        b: [{id: wb, await_signal: {signal: paid, key: "order-${input.b}"}}]
  - id: plain
    await_signal: {signal: paid}
output: {both: "${steps.both.output}", plain: "${steps.plain.output}"}
""",
    input={"a": "A", "b": "B"},
)
def _signal_key(d: Driver) -> None:
    d.signal("paid", {"for": "B"}, key="order-B")
    d.signal("paid", "no key")
    d.signal("open")
    d.signal("paid", {"for": "Z"}, key="order-Z")
    d.signal("paid", {"for": "A"}, key="order-A")


@case(
    "signal-run",
    "signal_run: a signal to a run the host does not have fails with unknown-run (caught); a "
    "run signals itself with a key, taken by the wait for that key; the host answers with the "
    "run id. The host produces these events itself.",
    """
flow: notify
steps:
  - id: lost
    try:
      - id: nobody
        signal_run: {run: "${input.nobody}", signal: done, payload: 1}
    catch:
      - errors: [unknown-run]
        steps: [{id: noted, sleep: {for_ms: 0}}]
  - id: both
    parallel:
      branches:
        wait: [{id: w, await_signal: {signal: done, key: self}}]
        tell:
          - id: t
            signal_run: {run: "${run.id}", signal: done, payload: {n: 1}, key: self}
output: "${steps.both.output}"
""",
    input={"nobody": "no-such-run"},
)
def _signal_run(d: Driver) -> None:
    d.signal_failed("nobody#1", "unknown-run", "no run 'no-such-run' to signal")
    d.signal("done", {"n": 1}, key="self", at=d.now)
    d.send(EffectSucceeded(idempotency_key=d.key("t#1"), output={"run_id": RUN_ID}, at_ms=d.now))


@case(
    "attempt-timeout",
    "attempt_timeout_ms: the first attempt times out (a retryable timeout) and its work is "
    "abandoned (its late result is accepted once and ignored); the retry's second attempt, "
    "timed afresh, succeeds.",
    """
flow: patient
tools: {slow: {class: idempotent}}
steps:
  - id: call
    call_tool: {tool: slow, input: {n: 1}}
    attempt_timeout_ms: 2s
    retry: {max_attempts: 3, initial_interval_ms: 3000}
output: "${steps.call.output}"
""",
)
def _attempt_timeout(d: Driver) -> None:
    d.fire("call#1/attempt-timeout")
    d.ok("call#1", "late", at=3500)
    d.fire("call#1/backoff")
    d.ok("call#2", "second", at=5500)


@case(
    "heartbeat-timeout",
    "heartbeat_timeout_ms: the first attempt of an idempotent scan heartbeats and goes quiet; "
    "the host reports heartbeat-timeout with the last details, a retryable failure, and the "
    "retry's effect carries them (heartbeatDetails). A side-effecting post that goes quiet "
    "ends outcome-unknown caused by the timeout (its details readable), caught, never retried.",
    """
flow: resumable
tools: {scan: {class: idempotent}, post: {}, note: {class: readonly}}
steps:
  - id: scan
    call_tool: {tool: scan, input: {book: moby}}
    heartbeat_timeout_ms: 1s
    retry: {max_attempts: 3, initial_interval_ms: 2000}
  - id: publish
    try:
      - id: post
        call_tool: {tool: post, input: "${steps.scan.output}"}
        heartbeat_timeout_ms: 1s
        retry: {max_attempts: 3, errors: ["*"]}
    catch:
      - errors: [outcome-unknown]
        steps:
          - id: note
            call_tool: {tool: note, input: "${ {why: error.cause.type, at: error.cause.details} }"}
output: "${ {scan: steps.scan.output, note: steps.note.output} }"
""",
)
def _heartbeat_timeout(d: Driver) -> None:
    d.heartbeat_timeout("scan#1", {"page": 40}, 1000, at=1500)
    d.fire("scan#1/backoff")
    d.ok("scan#2", {"pages": 80}, at=4000)
    d.heartbeat_timeout("post#1", {"sent": 3}, 1000, at=5200)
    d.ok("note#1", "noted", at=5300)


@case(
    "step-timeout",
    "timeout_ms on a step: the timer fails it with error type timeout (caught here); the "
    "late result is accepted once and ignored, a duplicate of it is rejected.",
    """
flow: slow
tools: {slow: {class: readonly}, fast: {class: readonly}}
steps:
  - id: guard
    try:
      - id: call
        call_tool: {tool: slow}
        timeout_ms: 2000
    catch:
      - errors: [timeout]
        steps: []
  - id: next
    call_tool: {tool: fast}
output: "${steps.call.error.type}"
""",
)
def _step_timeout(d: Driver) -> None:
    d.fire("call/timeout")
    d.ok("call#1", "too late")
    d.ok("call#1", "again", reject=True)
    d.ok("next#1", "fast")


# --- cancellation types (language.md §9.2) ----------------------------------------------


def _cancel_acknowledged(d: Driver, key: str, *, at: int | None = None) -> None:
    """What a host reports once a cancelled call of wait_cancellation_completed has
    stopped (``flowcore_handlers.cancelled_event``)."""
    full = d.key(key)
    error = ErrorInfo(type="cancelled", message=f"call-tool {full} stopped when cancelled")
    d.send(EffectFailed(idempotency_key=full, error=error, at_ms=d._at(at)))


@case(
    "cancellation-timeout",
    "cancellation on steps that time out: try_cancel (the default) cancels the call and "
    "the run goes on; abandon detaches it (plan.detach) and its late result is recorded and "
    "ignored; wait_cancellation_completed cancels it and the step ends (caught timeout, the "
    "next step starts) only once the host reports the call's end, here its cancelled failure.",
    """
flow: cancellation-timeout
tools: {slow: {class: readonly}, fast: {class: readonly}}
steps:
  - id: cut
    try:
      - {id: a, call_tool: {tool: slow, input: 1}, timeout_ms: 5s}
    catch: [{errors: [timeout], steps: []}]
  - id: left
    try:
      - {id: b, call_tool: {tool: slow, input: 2}, timeout_ms: 5s, cancellation: abandon}
    catch: [{errors: [timeout], steps: []}]
  - id: held
    try:
      - id: c
        call_tool: {tool: slow, input: 3}
        timeout_ms: 5s
        cancellation: wait_cancellation_completed
    catch: [{errors: [timeout], steps: []}]
  - id: next
    call_tool: {tool: fast}
output: "${ {a: steps.a.error.type, b: steps.b.error.type, c: steps.c.error.type} }"
""",
)
def _cancellation_timeout(d: Driver) -> None:
    d.fire("a/timeout")
    d.fire("b/timeout")
    d.ok("b#1", "finished anyway", at=12500)
    d.fire("c/timeout")
    _cancel_acknowledged(d, "c#1", at=15200)
    d.ok("next#1", "fast")


@case(
    "cancellation-race",
    "cancellation of a race's losers (the flow's defaults.cancellation is abandon): the "
    "try_cancel loser is cancelled, the abandon one detached (its late result, while the "
    "race still waits, is recorded and ignored), and the race ends with the winner's output "
    "only once the wait_cancellation_completed loser's end is reported.",
    """
flow: cancellation-race
defaults: {cancellation: abandon}
tools: {slow: {class: readonly}, fast: {class: readonly}}
steps:
  - id: fan
    parallel:
      mode: race
      branches:
        cut: [{id: x, call_tool: {tool: slow, input: x}, cancellation: try_cancel}]
        left: [{id: y, call_tool: {tool: slow, input: y}}]
        held:
          - {id: z, call_tool: {tool: slow, input: z}, cancellation: wait_cancellation_completed}
        win: [{id: w, call_tool: {tool: fast}}]
  - id: next
    call_tool: {tool: fast}
output: "${ {fan: steps.fan.output, x: steps.x.status, y: steps.y.status, z: steps.z.status} }"
""",
)
def _cancellation_race(d: Driver) -> None:
    d.ok("w#1", "won", at=100)
    d.ok("y#1", "finished anyway", at=150)
    _cancel_acknowledged(d, "z#1", at=200)
    d.ok("next#1", "after", at=300)


@case(
    "try-catch",
    "try/catch by error type: the handler sees the error; an uncaught type would propagate.",
    """
flow: guarded
tools: {risky: {class: idempotent}, fallback: {class: readonly}}
steps:
  - id: guard
    try:
      - id: attempt
        call_tool: {tool: risky}
    catch:
      - errors: [quota]
        steps:
          - id: degrade
            call_tool: {tool: fallback, input: {why: "${error.type}", msg: "${error.message}"}}
      - errors: ["*"]
        steps: []
output: "${steps.guard.output}"
""",
)
def _try_catch(d: Driver) -> None:
    d.fail("attempt#1", "quota")
    d.ok("degrade#1", "cached answer")


SAGA = """
flow: saga
tools:
  charge: {class: idempotent}
  refund: {class: idempotent}
  book: {class: idempotent}
  unbook: {class: idempotent}
  ship: {}
steps:
  - id: pay
    call_tool: {tool: charge, input: {amount: "${input.amount}"}}
    compensate:
      - id: undo_pay
        call_tool: {tool: refund, input: {charge: "${steps.pay.output.id}"}}
  - id: reserve
    call_tool: {tool: book}
    compensate:
      - id: undo_reserve
        call_tool: {tool: unbook, input: {booking: "${steps.reserve.output}"}}
  - id: deliver
    call_tool: {tool: ship}
output: done
"""


@case(
    "compensation-on-failure",
    "saga: a later step fails, so completed steps' compensations run in reverse order "
    "before the run settles failed.",
    SAGA,
    input={"amount": 30},
)
def _compensation_failure(d: Driver) -> None:
    d.ok("pay#1", {"id": "ch_1"})
    d.ok("reserve#1", "bk_9")
    d.fail("deliver#1", "no-stock")
    d.ok("undo_reserve#1", True)
    d.ok("undo_pay#1", True)


@case(
    "compensation-on-cancel",
    "saga: a cancel request abandons pending work and runs the compensations before the run "
    "settles cancelled; a second cancel while compensating is rejected.",
    SAGA,
    input={"amount": 12},
)
def _compensation_cancel(d: Driver) -> None:
    d.ok("pay#1", {"id": "ch_2"})
    d.cancel("customer changed their mind")
    d.cancel("again", reject=True)
    d.ok("undo_pay#1", True)


@case(
    "cancel",
    "cancel-requested while the run waits on work, a question, a signal and a timer: "
    "everything is abandoned and the run settles cancelled.",
    """
flow: waiting
tools: {long: {class: readonly}}
steps:
  - id: all
    parallel:
      branches:
        work: [{id: job, call_tool: {tool: long}}]
        ask: [{id: q, ask_human: {question: "Continue?"}}]
        wait: [{id: sig, await_signal: {signal: done}}]
        nap: [{id: zz, sleep: {for_ms: 100000}}]
""",
)
def _cancel(d: Driver) -> None:
    d.cancel("operator stop")
    d.ok("job#1", "late", reject=True)
    d.answer("q#1", "yes", reject=True)


@case(
    "max-concurrency",
    "limits.max_concurrency: work beyond the limit is held and released in request order "
    "as earlier work finishes.",
    """
flow: throttled
limits: {max_concurrency: 2}
tools: {t: {class: readonly}}
steps:
  - id: per
    for_each:
      items: "${input.items}"
      steps:
        - id: do
          call_tool: {tool: t, input: "${item}"}
""",
    input={"items": [1, 2, 3, 4]},
)
def _max_concurrency(d: Driver) -> None:
    d.ok("per[1]/do#1", "b")
    d.ok("per[0]/do#1", "a")
    d.ok("per[2]/do#1", "c")
    d.ok("per[3]/do#1", "d")


@case(
    "expression-error",
    "An expression that fails at run time (sleep until a non-instant) fails its step with "
    "error type expression-error, which try/catch can catch.",
    """
flow: bad-expr
steps:
  - id: guard
    try:
      - id: nap
        sleep: {until: "${input.when}"}
    catch:
      - errors: [expression-error]
        steps:
          - id: ask
            ask_human: {question: "Bad time ${input.when}: ${error.message}"}
output: "${steps.ask.answer}"
""",
    input={"when": "soon"},
)
def _expression_error(d: Driver) -> None:
    d.answer("ask#1", "use tomorrow")


@case(
    "run-time-delays",
    "Durations decided at run time: a schedule's delay_ms and a sleep's for_ms read an earlier "
    "step's output (duration text and milliseconds), beside durations written as people write "
    "them (90s, PT10M).",
    """
flow: run-time-delays
tools: {planner: {class: readonly}, send_reminder: {}}
steps:
  - id: plan
    call_tool: {tool: planner, input: {ticket: "${input.ticket}"}}
    timeout_ms: PT10M
  - id: remind
    schedule:
      tool: send_reminder
      input: {ticket: "${input.ticket}"}
      delay_ms: "${steps.plan.output.remind_in}"
  - id: pause
    sleep: {for_ms: "${steps.plan.output.pause_ms}"}
  - id: settle
    sleep: {for_ms: 90s}
output: "${ {reminder: steps.remind.output} }"
""",
    input={"ticket": "T-42"},
)
def _run_time_delays(d: Driver) -> None:
    d.ok("plan#1", {"remind_in": "2m", "pause_ms": 45000})
    d.fire("pause#1")
    d.fire("remind#1/delay")
    d.ok("remind#1/call", "sent")
    d.fire("settle#1")


@case(
    "invalid-duration",
    "A duration decided at run time that is not one (here 'soon') fails its step with error "
    "type invalid-duration, naming the field and the value; try/catch catches it.",
    """
flow: bad-duration
steps:
  - id: guard
    try:
      - id: nap
        sleep: {for_ms: "${input.wait}"}
    catch:
      - errors: [invalid-duration]
        steps:
          - id: ask
            ask_human: {question: "${error.message}", timeout_ms: 1h}
output: "${steps.ask.answer}"
""",
    input={"wait": "soon"},
)
def _invalid_duration(d: Driver) -> None:
    d.answer("ask#1", "wait an hour")


@case(
    "tool-schemas",
    "A tool's declared input_schema and output_schema: an evaluated input that does not "
    "meet it fails the step with invalid-input and the tool is never called (try/catch "
    "catches it); an output that does not meet it fails the step with invalid-output.",
    """
flow: tool-schemas
tools:
  lookup:
    class: readonly
    input_schema:
      type: object
      required: [id]
      properties: {id: {type: string}}
    output_schema:
      type: object
      required: [name]
steps:
  - id: guard
    try:
      - id: first
        call_tool: {tool: lookup, input: {id: "${input.id}"}}
    catch:
      - errors: [invalid-input]
        steps:
          - id: again
            call_tool: {tool: lookup, input: {id: "${to_string(input.id)}"}}
  - id: named
    call_tool: {tool: lookup, input: {id: "${steps.guard.output.name}"}}
output: "${steps.named.output}"
""",
    input={"id": 7},
)
def _tool_schemas(d: Driver) -> None:
    d.ok("again#1", {"name": "ada"})
    d.ok("named#1", {"nom": "ada"})


APPROVAL = """
flow: approval
tools:
  refund: {class: idempotent, needs_approval: "input.amount > `100`"}
steps:
  - id: small
    call_tool: {tool: refund, input: {amount: 20}}
  - id: large
    call_tool: {tool: refund, input: {amount: "${input.amount}"}}
output: "${steps.large.output}"
"""


@case(
    "approval-approved",
    "A tool that needs approval when its input says so: a small refund is called at once; "
    "before the large one an ask-human (key .../large#1/approval) shows its input, and once "
    "approved the call is issued under the step's own key.",
    APPROVAL,
    input={"amount": 250},
)
def _approval_approved(d: Driver) -> None:
    d.ok("small#1", "refunded 20")
    d.answer("large#1/approval", "approve")
    d.ok("large#1", "refunded 250")


@case(
    "approval-denied",
    "A call denied approval: the step fails with approval-denied (details: tool, input, "
    "answer), the tool is never called, and the run fails.",
    APPROVAL,
    input={"amount": 250},
)
def _approval_denied(d: Driver) -> None:
    d.ok("small#1", "refunded 20")
    d.answer("large#1/approval", "deny")


@case(
    "approval-denied-caught",
    "A denied approval caught: catch takes approval-denied and its steps run with the "
    "error's details.",
    """
flow: approval-caught
tools:
  refund: {class: idempotent, needs_approval: true}
  notify: {class: idempotent}
steps:
  - id: guard
    try:
      - id: pay
        call_tool: {tool: refund, input: {amount: "${input.amount}"}}
    catch:
      - errors: [approval-denied]
        steps:
          - id: tell
            call_tool: {tool: notify, input: "${error.details}"}
output: "${steps.guard.output}"
""",
    input={"amount": 250},
)
def _approval_denied_caught(d: Driver) -> None:
    d.answer("pay#1/approval", "deny")
    d.ok("tell#1", "told")


@case(
    "repeat-cron-timezone",
    "repeat on a cron read in a time zone (Europe/Paris): 02:30 does not exist on the night "
    "clocks spring forward, so that fire comes at the first instant after the gap (03:00 "
    "CEST, 01:00 UTC); the next day's comes at 02:30 CEST (00:30 UTC).",
    """
flow: paris-nightly
tools: {report: {class: readonly}}
steps:
  - id: nightly
    repeat:
      cron: "30 2 * * *"
      timezone: Europe/Paris
      max_fires: 2
      steps:
        - id: run
          call_tool: {tool: report, input: {fire: "${fire_count}"}}
output: "${steps.nightly.output}"
""",
    now=1_774_699_200_000,  # 2026-03-28T12:00:00Z; Paris springs forward 2026-03-29 02:00
)
def _repeat_cron_timezone(d: Driver) -> None:
    d.fire("nightly[1]/tick")
    d.ok("nightly[1]/run#1", "first")
    d.fire("nightly[2]/tick")
    d.ok("nightly[2]/run#1", "second")


def _triage_spec() -> str:
    return (ROOT / "specs" / "examples" / "triage.yaml").read_text(encoding="utf-8")


@case(
    "triage-example",
    "The example flow specs/examples/triage.yaml end to end: input schema, retry, timeout, "
    "ask_human, switch, await_signal, wall-clock deadline, output.",
    "",
    input={"incident_id": "INC-42"},
    extra={"spec_from": "triage"},
)
def _triage(d: Driver) -> None:
    d.fail("fetch#1", "unavailable", retryable=True)
    d.fire("fetch#1/backoff")
    d.ok("fetch#2", {"title": "checkout latency p99 > 2s", "services": ["api"]})
    d.ok(
        "triage#1",
        {"owner": "payments-oncall", "severity": "high"},
        usage=Usage(steps=1, cost_minor_units=42),
    )
    d.answer("decide#1", "page")
    d.ok("page#1", {"paged": True})
    d.signal("fix-deployed", {"commit": "a1b2c3"})


# =====================================================================================
# Budgets
# =====================================================================================

LOOP = """
flow: spender
budget: {steps: 3, cost_minor_units: 100, wall_clock_ms: 60000}
tools: {t: {class: readonly}}
steps:
  - id: a
    call_tool: {tool: t}
  - id: b
    call_tool: {tool: t}
  - id: c
    call_tool: {tool: t}
  - id: d
    call_tool: {tool: t}
"""


@case(
    "budget-steps",
    "Step budget: the fourth work effect would exceed steps 3; the run settles "
    "budget-exhausted (steps) and no call is issued.",
    LOOP,
)
def _budget_steps(d: Driver) -> None:
    d.ok("a#1", 1)
    d.ok("b#1", 2)
    d.ok("c#1", 3)


@case(
    "budget-cost",
    "Cost budget: reported usage passes cost_minor_units and the run settles "
    "budget-exhausted (cost).",
    LOOP,
)
def _budget_cost(d: Driver) -> None:
    d.ok("a#1", 1, usage=Usage(cost_minor_units=60))
    d.ok("b#1", 2, usage=Usage(cost_minor_units=60))


@case(
    "budget-tokens-turns-tool-calls",
    "Token, turn and tool-call limits: a call-tool costs a tool call, an agent reports tokens, "
    "its own tool calls and turns as usage; budgetRemaining carries what is left; the turns "
    "an agent reported use up the limit and the run settles budget-exhausted (turns).",
    """
flow: agentic
budget: {tokens: 5000, tool_calls: 4, turns: 3}
tools: {search: {class: readonly}}
steps:
  - id: look
    call_tool: {tool: search, input: first}
  - id: think
    run_agent: {agent: analyst, prompt: "think about ${steps.look.output}"}
  - id: again
    run_agent: {agent: analyst, prompt: "and again"}
output: "${steps.again.output}"
""",
)
def _budget_tokens_turns(d: Driver) -> None:
    d.ok("look#1", "found")
    d.ok("think#1", "thought", usage=Usage(tokens=1200, tool_calls=2, turns=3))


@case(
    "budget-reserve",
    "on_budget_exhausted: the main work runs within the budget less the reserve; when a limit "
    "is reached (tokens here) the final steps run within the reserve, and the run settles "
    "budget-exhausted with their output.",
    """
flow: researcher
budget: {steps: 6, tokens: 1000}
tools: {search: {class: readonly}}
steps:
  - id: research
    for_each:
      items: "${input.topics}"
      as: topic
      max_concurrency: 1
      steps:
        - id: look
          call_tool: {tool: search, input: "${topic}"}
        - id: think
          run_agent: {agent: analyst, prompt: "think about ${steps.look.output}"}
output: "${steps.research.output}"
on_budget_exhausted:
  reserve: {steps: 1, tokens: 300}
  steps:
    - id: best
      run_agent: {agent: writer, prompt: "Budget spent: your best answer so far"}
  output: {answer: "${steps.best.output}", partial: true}
""",
    input={"topics": ["a", "b", "c"]},
)
def _budget_reserve(d: Driver) -> None:
    d.ok("research[0]/look#1", "A")
    d.ok("research[0]/think#1", "about A", usage=Usage(tokens=400))
    d.ok("research[1]/look#1", "B")
    d.ok("research[1]/think#1", "about B", usage=Usage(tokens=400))
    d.ok("best#1", "A and B", usage=Usage(tokens=150))


@case(
    "budget-shares",
    "Work at once is handed shares of what remains: branches weighted 3:1 get 75 and 25 of "
    "a cost of 100, each holding its part until it reports; the next agent is handed what "
    "is left, at most its step's max_usage.",
    """
flow: shares
budget: {steps: 20, cost_minor_units: 100}
steps:
  - id: pair
    parallel:
      weights: {lead: 3}
      branches:
        lead: [{id: write, run_agent: {agent: writer, prompt: "Draft ${input.topic}"}}]
        check: [{id: review, run_agent: {agent: critic, prompt: "Critique ${input.topic}"}}]
  - id: finish
    run_agent: {agent: writer, prompt: "Finish ${input.topic}"}
    max_usage: {cost_minor_units: 10}
output: "${steps.finish.output}"
""",
    input={"topic": "shares"},
)
def _budget_shares(d: Driver) -> None:
    d.ok("review#1", "fine", usage=Usage(steps=1, cost_minor_units=20))
    d.ok("write#1", "draft", usage=Usage(steps=2, cost_minor_units=75))
    d.ok("finish#1", "done", usage=Usage(cost_minor_units=5))


@case(
    "budget-wall-clock",
    "Wall-clock budget: the deadline timer armed at start fires and the run settles "
    "budget-exhausted (wall-clock).",
    LOOP,
)
def _budget_wall(d: Driver) -> None:
    d.ok("a#1", 1)
    d.fire("$deadline")


@case(
    "budget-wall-clock-late-event",
    "Wall-clock budget: an event reported after the deadline (before its timer) settles the "
    "run budget-exhausted.",
    LOOP,
)
def _budget_wall_late(d: Driver) -> None:
    d.ok("a#1", 1, at=70000)


@case(
    "budget-from-parent",
    "A budget passed to start (a child's share) caps the spec's own budget: steps 2 of the "
    "spec's 3.",
    LOOP,
    budget=Budget(steps=2),  # type: ignore[arg-type]
    depth=1,
)
def _budget_parent(d: Driver) -> None:
    d.ok("a#1", 1)
    d.ok("b#1", 2)


# =====================================================================================
# Unknown outcomes, one per execution class
# =====================================================================================

UNKNOWN = """
flow: unsure
tools: {read: {class: readonly}, put: {class: idempotent}, send: {class: uncertain}, poke: {}}
steps:
  - id: guard
    try:
      - id: call
        call_tool: {tool: TOOL, input: {x: 1}}
    catch:
      - errors: [outcome-unknown]
        steps:
          - id: reconcile
            ask_human: {question: "Reconcile: ${error.message}", options: [done, not-done]}
output: "${steps.call.output}"
"""


@case(
    "unknown-readonly",
    "effect-outcome-unknown for a readonly tool: re-issued under the same key, then succeeds.",
    UNKNOWN.replace("TOOL", "read"),
)
def _unknown_readonly(d: Driver) -> None:
    d.unknown("call#1")
    d.ok("call#1", "read it")


@case(
    "unknown-idempotent",
    "effect-outcome-unknown for an idempotent tool: re-issued with the same key until the "
    "bound, then the step fails outcome-unknown (caught).",
    UNKNOWN.replace("TOOL", "put"),
)
def _unknown_idempotent(d: Driver) -> None:
    d.unknown("call#1")
    d.unknown("call#1")
    d.unknown("call#1")
    d.answer("reconcile#1", "not-done")


@case(
    "unknown-uncertain",
    "effect-outcome-unknown for an uncertain tool: never re-issued; the step fails "
    "outcome-unknown and the catch asks a human to reconcile.",
    UNKNOWN.replace("TOOL", "send"),
)
def _unknown_uncertain(d: Driver) -> None:
    d.unknown("call#1")
    d.answer("reconcile#1", "done")


@case(
    "unknown-unclassified",
    "A tool declared without a class is uncertain (fail-closed): an unknown outcome fails "
    "the step; uncaught, it fails the run.",
    """
flow: unclassified
tools: {poke: {}}
steps:
  - id: call
    call_tool: {tool: poke}
""",
)
def _unknown_unclassified(d: Driver) -> None:
    d.unknown("call#1")


@case(
    "unknown-subflow",
    "effect-outcome-unknown for a run-subflow: re-issued under the same key (the key names "
    "the child run).",
    SUBFLOW,
    input={"incident": "INC-9"},
)
def _unknown_subflow(d: Driver) -> None:
    d.unknown("child#1")
    d.child("child#1", "completed", "ok")


@case(
    "unknown-scheduled-call",
    "effect-outcome-unknown for a scheduled call: reported uncertain, the flow is unaffected.",
    SCHEDULE,
    input={"who": "bo"},
)
def _unknown_scheduled(d: Driver) -> None:
    d.fire("nudge#1/delay")
    d.unknown("nudge#1/call")
    d.fire("wait#1")


# =====================================================================================
# Rejected events
# =====================================================================================


@case(
    "rejected-events",
    "Events that cannot apply are logged as event.rejected and must still be rejected: an "
    "unknown key, an answer not among the options, a duplicate, anything after settlement.",
    """
flow: picky
tools: {t: {class: readonly}}
steps:
  - id: q
    ask_human: {question: "Pick", options: [a, b]}
  - id: w
    call_tool: {tool: t}
output: "${steps.q.answer}"
""",
)
def _rejected(d: Driver) -> None:
    d.ok("nope#1", 1, reject=True)
    d.answer("q#1", "c", reject=True)
    d.answer("q#1", "a")
    d.answer("q#1", "b", reject=True)
    d.ok("q#1", 1, reject=True)
    d.ok("w#1", "done")
    d.signal("late", reject=True)
    d.cancel("too late", reject=True)


# =====================================================================================
# Divergent logs: each must be detected at the declared index
# =====================================================================================


def _index_of(records: list[dict[str, Any]], pred: Callable[[dict[str, Any]], bool]) -> int:
    for i, record in enumerate(records):
        if pred(record):
            return i
    raise AssertionError("no such record")


def _renumber(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, "index": i} for i, r in enumerate(records)]


def _effect_with_key(key: str) -> Callable[[dict[str, Any]], bool]:
    full = f"{RUN_ID}/{key}"
    return lambda r: r["type"] == "effect.emitted" and r["data"].get("idempotencyKey") == full


def _edit_tool_input(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    i = _index_of(records, _effect_with_key("enrich#1"))
    records[i]["data"]["input"] = {"name": "Grace"}
    return records


@case(
    "diverge-effect-edited",
    "Divergent: a recorded call-tool input was edited; replay reports that index, expected "
    "(recorded) and actual (re-derived) effect.",
    SEQUENCE,
    input={"id": "u-7"},
    edit=_edit_tool_input,
    diverges_at=3,
)
def _diverge_edited(d: Driver) -> None:
    _sequence(d)


def _drop_effect(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    i = _index_of(records, _effect_with_key("m#1"))
    return _renumber(records[:i] + records[i + 1 :])


@case(
    "diverge-effect-missing",
    "Divergent: one effect of a parallel fan-out is missing from the log; the interpreter "
    "emits it where the log has the next record.",
    parallel("all"),
    edit=_drop_effect,
    diverges_at=2,
)
def _diverge_missing(d: Driver) -> None:
    _parallel_all(d)


def _insert_effect(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    i = _index_of(records, _effect_with_key("enrich#1"))
    extra = {**records[i], "data": {**records[i]["data"], "idempotencyKey": "r-1/extra#1"}}
    return _renumber([*records[: i + 1], extra, *records[i + 1 :]])


@case(
    "diverge-extra-effect",
    "Divergent: the log records an effect the interpreter never emits.",
    SEQUENCE,
    input={"id": "u-7"},
    edit=_insert_effect,
    diverges_at=4,
)
def _diverge_extra(d: Driver) -> None:
    _sequence(d)


def _edit_event_output(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    i = _index_of(
        records,
        lambda r: r["type"] == "event.reported" and r["data"].get("idempotencyKey") == "r-1/q#1",
    )
    records[i]["data"]["answer"] = "b"
    return records


@case(
    "diverge-event-edited",
    "Divergent: a human answer was edited, so the switch takes another branch and the next "
    "recorded effect no longer matches.",
    """
flow: branchy
tools: {a: {class: readonly}, b: {class: readonly}}
steps:
  - id: q
    ask_human: {question: "Which?", options: [a, b]}
  - id: go
    switch:
      - if: "steps.q.answer == 'a'"
        steps: [{id: do_a, call_tool: {tool: a}}]
      - else: [{id: do_b, call_tool: {tool: b}}]
""",
    edit=_edit_event_output,
    diverges_at=3,
)
def _diverge_event(d: Driver) -> None:
    d.answer("q#1", "a")
    d.ok("do_a#1", "A")


def _unreject(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    i = _index_of(records, lambda r: r["type"] == "event.rejected")
    records[i]["data"]["event"]["answer"] = "a"
    return records


@case(
    "diverge-rejected-now-applies",
    "Divergent: an event.rejected record whose event the interpreter applies.",
    """
flow: picky2
steps:
  - id: q
    ask_human: {question: "Pick", options: [a, b]}
output: "${steps.q.answer}"
""",
    edit=_unreject,
    diverges_at=2,
)
def _diverge_unreject(d: Driver) -> None:
    d.answer("q#1", "c", reject=True)
    d.answer("q#1", "b")


def _reported_bad_answer(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    i = _index_of(records, lambda r: r["type"] == "event.reported")
    records[i]["data"]["answer"] = "maybe"
    return records


@case(
    "diverge-applied-now-rejected",
    "Divergent: an event.reported record the interpreter rejects (an answer not among the "
    "options).",
    """
flow: picky3
steps:
  - id: q
    ask_human: {question: "Pick", options: [a, b]}
output: "${steps.q.answer}"
""",
    edit=_reported_bad_answer,
    diverges_at=2,
)
def _diverge_reject(d: Driver) -> None:
    d.answer("q#1", "a")


def _settled_status(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    records[-1]["data"]["status"] = "completed"
    return records


@case(
    "diverge-settled-edited",
    "Divergent: the run.settled record says completed where the settled effect says failed.",
    """
flow: failing
tools: {t: {class: readonly}}
steps:
  - id: x
    call_tool: {tool: t}
""",
    edit=_settled_status,
    diverges_at=4,
)
def _diverge_settled(d: Driver) -> None:
    d.fail("x#1", "boom")


def _swap_effects(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    i = _index_of(records, _effect_with_key("l#1"))
    j = _index_of(records, _effect_with_key("m#1"))
    records[i]["data"], records[j]["data"] = records[j]["data"], records[i]["data"]
    return records


@case(
    "diverge-effect-order",
    "Divergent: two effects of one decision are swapped; the order of effects is part of "
    "the contract.",
    parallel("all"),
    edit=_swap_effects,
    diverges_at=1,
)
def _diverge_order(d: Driver) -> None:
    _parallel_all(d)


def _drop_tail_effects(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return records[:-2]


# Version 2 only adds a description: it behaves exactly like version 1.
SEQUENCE_V2_DESCRIBED = SEQUENCE.replace(
    "flow: sequence\n", "flow: sequence\nversion: 2\ndescription: the same steps\n"
)


@case(
    "log-ends-inside-decision",
    "A log that ends cleanly inside its last decision (its records past the last event "
    "lost, no torn line), replayed with its own spec: the log was cut, exactly as if the "
    "next line had been torn; the derived effects past the end are unrecorded.",
    SEQUENCE,
    input={"id": "u-7"},
    edit=_drop_tail_effects,
)
def _ends_inside(d: Driver) -> None:
    _sequence(d)


@case(
    "diverge-log-ends-early",
    "Divergent: the same log that ends inside its last decision, replayed against another "
    "version of its flow: an effect past the end may be one the new version adds, so the "
    "run cannot be confirmed to move; it diverges where the log ends.",
    SEQUENCE,
    input={"id": "u-7"},
    edit=_drop_tail_effects,
    newer_spec=SEQUENCE_V2_DESCRIBED,
    diverges_at=7,
)
def _diverge_ends(d: Driver) -> None:
    _sequence(d)


# Version 2 renames the second call's input field: v1 runs cannot move to it.
SEQUENCE_V2 = SEQUENCE.replace("flow: sequence\n", "flow: sequence\nversion: 2\n").replace(
    'input: {name: "${steps.fetch.output.name}"}', 'input: {user: "${steps.fetch.output.name}"}'
)
# Version 2 adds a timeout to the last step only: runs that have not reached it can move.
SEQUENCE_V2_COMPATIBLE = SEQUENCE.replace(
    "flow: sequence\n", "flow: sequence\nversion: 2\n"
).replace("  - id: save\n", "  - id: save\n    timeout_ms: 30000\n")


@case(
    "version-divergent",
    "Newer spec: an in-flight run recorded with version 1 cannot move to version 2, which "
    "calls the second tool with another input; the divergence names the first index where "
    "v2 acts differently.",
    SEQUENCE,
    input={"id": "u-7"},
    newer_spec=SEQUENCE_V2,
    diverges_at=3,
)
def _version_divergent(d: Driver) -> None:
    d.ok("fetch#1", {"name": "Ada"})
    d.ok("enrich#1", {"tier": "gold"})


@case(
    "version-compatible",
    "Newer spec: version 2 only changes a step the in-flight run has not reached, so every "
    "recorded effect is re-derived and the run can continue on v2 (the spec hash differs).",
    SEQUENCE,
    input={"id": "u-7"},
    newer_spec=SEQUENCE_V2_COMPATIBLE,
)
def _version_compatible(d: Driver) -> None:
    d.ok("fetch#1", {"name": "Ada"})


@case(
    "version-upgraded",
    "A run recorded with version 1 moved to version 2 (flowcore.upgrade) after its first "
    "step, then finished under v2 (save's timeout arms a timer v1 has not): the whole log "
    "replays against v2; no record marks the move (expect.json's upgradedAt says where).",
    SEQUENCE,
    input={"id": "u-7"},
    newer_spec=SEQUENCE_V2_COMPATIBLE,
)
def _version_upgraded(d: Driver) -> None:
    d.ok("fetch#1", {"name": "Ada"})
    d.upgrade(SEQUENCE_V2_COMPATIBLE)
    d.ok("enrich#1", {"tier": "gold"})
    d.ok("save#1", True)


# =====================================================================================
# Log damage
# =====================================================================================


@case(
    "torn-tail",
    "A crash mid-write tore the last line: it is reported with its byte offset and the "
    "complete records before it replay (the derived effects past the tear are unrecorded).",
    SEQUENCE,
    input={"id": "u-7"},
    tear=40,
)
def _torn(d: Driver) -> None:
    d.ok("fetch#1", {"name": "Ada"})
    d.ok("enrich#1", {"tier": "gold"})


@case(
    "corrupt-middle",
    "A damaged record in the middle of a log is an error (LogCorrupt with its line and byte "
    "offset), never skipped.",
    SEQUENCE,
    input={"id": "u-7"},
    corrupt_line=3,
)
def _corrupt(d: Driver) -> None:
    _sequence(d)


# =====================================================================================
# continue_as_new at once; a handler's failure details
# =====================================================================================


@case(
    "continue-as-new-at-once",
    "continue_as_new in an incarnation that waits for nothing: the first continues at once "
    "(idleIncarnations 1 in the effect and the next run.started), the second takes the other "
    "way on run.incarnation, calls a tool and completes; within limits.max_idle_incarnations, "
    "nothing is refused.",
    """
flow: countdown
tools: {work: {class: readonly}}
steps:
  - id: next
    switch:
      - if: "run.incarnation == null"
        steps:
          - id: again
            continue_as_new: {input: {round: "${sum([input.round, `1`])}"}}
  - id: job
    call_tool: {tool: work, input: {round: "${input.round}", incarnation: "${run.incarnation}"}}
output: "${ {round: input.round, incarnation: run.incarnation, job: steps.job.output} }"
""",
    input={"round": 0},
)
def _continue_at_once(d: Driver) -> None:
    d.ok("@2/job#1", "done")


@case(
    "continue-as-new-idle-bound",
    "limits.max_idle_incarnations 1: the first incarnation continues at once, the second "
    "would too and its continue_as_new fails continue-refused, the message naming the limit; "
    "a catch reads it and calls a tool.",
    """
flow: spin
limits: {max_idle_incarnations: 1}
tools: {alert: {class: idempotent}}
steps:
  - id: loop
    try:
      - id: again
        continue_as_new: {}
    catch:
      - errors: [continue-refused]
        steps:
          - id: tell
            call_tool:
              tool: alert
              input: {incarnation: "${run.incarnation}", error: "${error.message}"}
output: "${steps.tell.output}"
""",
)
def _continue_idle_bound(d: Driver) -> None:
    d.ok("@2/tell#1", "sent")


@case(
    "failure-details",
    "A handler fails with type, message, details and retryable: the retryable failure is "
    "retried at once, the second is caught by its type and the catch reads "
    "${error.details.status} and a nested detail; details travel on effect-failed's error.",
    """
flow: charge
tools: {charge: {class: idempotent}, notify: {class: idempotent}}
steps:
  - id: attempt
    try:
      - id: pay
        call_tool: {tool: charge, input: {order: "${input.order}"}}
        retry: {max_attempts: 2, initial_interval_ms: 0}
    catch:
      - errors: [card-declined]
        steps:
          - id: tell
            call_tool:
              tool: notify
              input:
                status: "${error.details.status}"
                code: "${error.details.decline.code}"
                message: "${error.message}"
output: "${steps.tell.output}"
""",
    input={"order": "A-7"},
)
def _failure_details(d: Driver) -> None:
    busy = ErrorInfo(
        type="gateway-busy", message="try later", retryable=True, details={"status": 503}
    )
    d.send(EffectFailed(idempotency_key=d.key("pay#1"), error=busy, at_ms=d._at(None)))
    declined = ErrorInfo(
        type="card-declined",
        message="card declined",
        details={"status": 402, "decline": {"code": "insufficient_funds", "retry": False}},
    )
    d.send(EffectFailed(idempotency_key=d.key("pay#2"), error=declined, at_ms=d._at(None)))
    d.ok("tell#1", {"sent": True})


# =====================================================================================
# Updates and queries (language.md §16)
# =====================================================================================

EXPENSE = """
flow: expense
version: 1
input_schema:
  type: object
  properties: {amount: {type: number}, requester: {type: string}}
metadata: {decision: string}
limits: {max_running_updates: 2}
tools: {pay: {class: idempotent}}
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
    reply: "${ {decision: steps.decide.answer, by: update.input.by} }"
  pay_now:
    steps:
      - id: charge
        call_tool: {tool: pay, input: {amount: "${input.amount}", by: "${update.principal}"}}
queries:
  decision:
    description: What was decided
    value: "${ {decision: metadata.decision, status: status, waiting: waiting.questions} }"
  update:
    args_schema: {type: object, properties: {id: {type: string}}, required: [id]}
    value: "${ {asked: args.id, updates: updates} }"
steps:
  - id: wait
    await_signal: {signal: close}
output: "${ {closed: steps.wait.output} }"
"""
EXPENSE_INPUT = {"amount": 120, "requester": "bob"}


@case(
    "update-reply",
    "An update asks a person and replies: approve's handler runs beside the waiting main "
    "steps (keys r-1/~update-1/...), sets metadata and replies; a taken update id, an unknown "
    "update, input failing input_schema and a falsy validator are rejected and change "
    "nothing; queries read the metadata, the status, what the run waits for and the updates.",
    EXPENSE,
    input=EXPENSE_INPUT,
    queries=[
        ("decision", None),
        ("update", {"id": "u-1"}),
        ("update", {}),
        ("nope", None),
    ],
)
def _update_reply(d: Driver) -> None:
    d.update("u-1", "approve", {"by": "alice"}, principal="alice@example.com")
    d.update("u-1", "approve", {"by": "carol"}, reject=True)  # the id is taken
    d.update("u-2", "reject", {"by": "carol"}, reject=True)  # no such update
    d.update("u-2", "approve", {"who": "carol"}, reject=True)  # input_schema
    d.update("u-2", "approve", {"by": "bob"}, reject=True)  # the validator
    d.answer("~update-1/decide#1", "yes")
    d.signal("close", {"by": "bob"})


@case(
    "update-waits",
    "The run waits for a running update: the main steps end while pay_now's call is out, "
    "a new update is then refused (ending), and the run settles completed in the decision "
    "that ends the update; two updates run at once, a third is refused (limit).",
    EXPENSE,
    input=EXPENSE_INPUT,
    queries=[("decision", None)],
)
def _update_waits(d: Driver) -> None:
    d.update("u-1", "pay_now", principal="ops")
    d.update("u-2", "approve", {"by": "alice"})
    d.update("u-3", "pay_now", reject=True)  # max_running_updates: 2
    d.answer("~update-2/decide#1", "no")
    d.signal("close")
    d.update("u-4", "approve", {"by": "alice"}, reject=True)  # the run is ending
    d.ok("~update-1/charge#1", {"paid": 120})


@case(
    "update-abandoned",
    "A cancel abandons the running update: its question is dropped, the update ends failed "
    "with update-abandoned, the run settles cancelled; a taken id is still rejected after.",
    EXPENSE,
    input=EXPENSE_INPUT,
)
def _update_abandoned(d: Driver) -> None:
    d.update("u-1", "approve", {"by": "alice"})
    d.cancel("cancel requested")
    d.update("u-1", "approve", {"by": "alice"}, reject=True)


CONTINUED = """
flow: renew
version: 1
tools: {pay: {class: idempotent}}
updates:
  pay_now:
    steps:
      - id: charge
        call_tool: {tool: pay, input: {round: "${input.round}"}}
steps:
  - id: wait
    await_signal: {signal: next}
  - id: again
    continue_as_new:
      input: {round: "${sum([input.round, `1`])}"}
"""


@case(
    "update-continue-as-new",
    "continue_as_new abandons a running update (update-abandoned: the run continued as new); "
    "the next incarnation takes the same update id again (ids are unique per incarnation) "
    "under keys r-1/@2/~update-1/...",
    CONTINUED,
    input={"round": 1},
)
def _update_continue_as_new(d: Driver) -> None:
    d.update("u-1", "pay_now")
    d.signal("next")
    d.update("u-1", "pay_now")
    d.ok("@2/~update-1/charge#1", {"paid": 2})


# =====================================================================================
# Building the files
# =====================================================================================


def _json_line(record: dict[str, Any]) -> bytes:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


FORKED = """
flow: pay
tools: {lookup: {class: readonly}, charge: {class: idempotent}, notify: {}}
steps:
  - id: fetch
    call_tool: {tool: lookup, input: {order: "${input.order}"}}
  - id: charge
    call_tool: {tool: charge, input: {amount: "${steps.fetch.output.amount}"}}
  - id: notify
    call_tool: {tool: notify, input: {paid: "${steps.charge.output.id}"}}
output: "${ {paid: steps.charge.output.id} }"
"""


@case(
    "fork",
    "A fork of run r-0, which failed at charge, from step charge, as run r-1: run.started "
    "records forkedFrom; fetch's result is carried under r-1's key, charge runs again.",
    FORKED,
    input={"order": "o-9"},
)
def _fork(d: Driver) -> None:
    source = Driver(FORKED, {"order": "o-9"}, run_id="r-0")
    source.ok("fetch#1", {"amount": 40})
    source.fail("charge#1", "card-declined")
    d.fork_from(source, "charge")
    d.ok("charge#1", {"id": "ch-1"})
    d.ok("notify#1", {"sent": True})


def build(c: Case) -> dict[str, bytes]:
    """The files of one case, by name."""
    spec = _triage_spec() if c.extra.get("spec_from") == "triage" else c.spec
    driver = Driver(spec, c.input, budget=c.budget, depth=c.depth, now=c.now, metadata=c.metadata)
    c.script(driver)
    log = encode_records(driver.records, "json")
    replay_spec = spec if c.newer_spec is None else c.newer_spec.strip() + "\n"
    flow = flowcore.parse_flow(replay_spec, source_name="flow.yaml")
    files: dict[str, bytes] = {"flow.yaml": replay_spec.encode()}
    if c.newer_spec is not None:
        files["recorded.yaml"] = spec.encode()
    if c.edit is not None:
        records = [json.loads(line) for line in log.splitlines()]
        log = b"".join(_json_line(r) for r in c.edit(records))
    expect: dict[str, Any] = {}
    if c.corrupt_line is not None:
        lines = log.splitlines(keepends=True)
        offset = sum(len(line) for line in lines[: c.corrupt_line])
        lines[c.corrupt_line] = b'{"type":"event.reported","index":\x00garbage\n'
        log = b"".join(lines)
        try:
            replay(log, flow)
        except LogCorrupt as exc:
            assert exc.offset == offset, (exc.offset, offset)
            expect = {"error": "corrupt", "offset": offset, "line": c.corrupt_line + 1}
        else:
            raise AssertionError(f"{c.name}: corruption not detected")
    else:
        if c.tear is not None:
            log = log[: -c.tear]
        report = replay(log, flow, raise_on_divergence=False)
        found = report.divergence.index if report.divergence is not None else None
        if found != c.diverges_at:
            raise AssertionError(f"{c.name}: divergence at {found}, declared {c.diverges_at}")
        expect = {
            "replays": report.divergence is None,
            "divergenceIndex": found,
            "status": report.status,
            "specMatches": report.spec_matches,
            "lastIndex": report.last_index,
            "tornOffset": None if report.torn is None else report.torn.offset,
            "unrecorded": len(report.unrecorded),
        }
        if report.state is not None and report.state.metadata:  # absent: none set
            expect["metadata"] = report.state.metadata
        if report.state is not None and report.state.tree.updates:  # absent: none taken
            expect["updates"] = [msgspec.to_builtins(v) for v in flowcore.updates_of(report.state)]
        if c.queries:
            assert report.state is not None
            expect["queries"] = [_asked(report.state, name, args) for name, args in c.queries]
        if driver.upgraded_at is not None:  # absent: the run never moved
            expect["upgradedAt"] = driver.upgraded_at
        if c.tear is not None:
            assert report.torn is not None, f"{c.name}: the tear was not detected"
    files["log.ndjson"] = log
    files["expect.json"] = (json.dumps(expect, indent=2) + "\n").encode()
    files["README.md"] = f"# {c.name}\n\n{c.about}\n".encode()
    return files


def _asked(state: flowcore.State, name: str, args: Any) -> dict[str, Any]:
    """A query asked of ``state``: its value, or its error's code."""
    try:
        return {"name": name, "args": args, "value": flowcore.query(state, name, args)}
    except flowcore.QueryError as exc:
        return {"name": name, "args": args, "error": exc.code}


def build_all() -> dict[str, bytes]:
    """Every file under ``specs/conformance/``, by path relative to it."""
    out: dict[str, bytes] = {}
    names = [c.name for c in CASES]
    assert len(names) == len(set(names)), "duplicate case names"
    rows = []
    for c in CASES:
        for name, data in build(c).items():
            out[f"{c.name}/{name}"] = data
        rows.append(f"| [{c.name}]({c.name}/) | {c.about} |")
    out["README.md"] = (
        "# Conformance vectors\n\n"
        "Each directory holds a flow (`flow.yaml`), the full log of one run of it\n"
        "(`log.ndjson`, format in [../log.md](../log.md)), what replaying that log must\n"
        "find (`expect.json`) and one line saying what the case shows. Divergent cases\n"
        "hold a log edited to differ (or a newer spec, with the recording one in\n"
        "`recorded.yaml`); replay must report the divergence at exactly\n"
        "`divergenceIndex`. Every host must produce logs that replay identically.\n\n"
        "Generated by `python scripts/gen_conformance.py`;\n"
        "`tests/conformance/test_vectors.py` replays every case and fails when these\n"
        "files are stale, and `tests/conformance/test_hosts.py` plays the cases on\n"
        "each host (the simulator, the local host, Temporal) and compares the effects.\n"
        "Not every case is played on every host: of the pairs of a host and a case,\n"
        "nearly a quarter are refused, each with a reason. Logs no host could record\n"
        "(divergent, torn, cut, corrupt, forked, upgraded) are only replayed, and each\n"
        "host refuses the logs holding an event it never produces (an event after a\n"
        "timer was due; on Temporal a late result of abandoned work; on the local host\n"
        "an unknown outcome of work it runs again itself, and a start with a parent's\n"
        "budget; on the simulator a child's depth and another cancel reason).\n"
        "`tests/conformance/refusals.py` lists every refused case per host with its\n"
        "reason, and the test fails when a host refuses more or fewer.\n\n"
        "| Case | What it shows |\n|---|---|\n" + "\n".join(rows) + "\n"
    ).encode()
    return out


def main() -> int:
    files = build_all()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    wanted = {OUT_DIR / rel for rel in files}
    for path in sorted(OUT_DIR.rglob("*")):
        if path.is_file() and path not in wanted:
            path.unlink()
            print(f"removed {path.relative_to(ROOT)}")
    for path in sorted(OUT_DIR.iterdir()):
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    written = 0
    for rel, data in sorted(files.items()):
        path = OUT_DIR / rel
        if path.exists() and path.read_bytes() == data:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written += 1
    print(f"{len(CASES)} cases, {len(files)} files, {written} written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
