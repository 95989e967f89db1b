"""A flow's worst-case budget, computed from its spec alone: ``budget_bound``.

The bound is the most any run of the flow can spend, counted as the ledger
counts it (specs/language.md §11.2): one step per issue of a work effect,
one tool call per issue of a ``call-tool``, and the usage results report.
Each construct multiplies or adds what its parts may spend:

- a sequence adds its steps; a ``switch`` takes its costliest case; a
  ``parallel`` adds every branch, whatever its mode (all may be issued);
  a ``try`` adds its body and its costliest catch clause;
- a ``for_each`` multiplies its body by ``max_items``, a ``repeat`` by
  ``max_fires``; without them the loop is unbounded (unless its body spends
  nothing of that limit);
- ``retry`` multiplies a composite step by its attempts. A work step is issued
  once per attempt, and one that may be issued again after an unknown outcome
  (a ``readonly``/``idempotent`` tool, a ``run_subflow``, a ``signal_run``)
  up to ``max_attempts - attempt + 1`` times in attempt ``attempt``
  (``transitions._may_reissue``: re-issues are counted per attempt), or
  ``DEFAULT_UNKNOWN_REISSUES`` times without ``retry``;
- a call reports at most its tool's or agent's ``max_usage``. A tool without
  it is taken to report no steps and no tool calls, and an unknown cost; an
  agent without it an unknown usage (agents report a step per model
  request), which leaves the bound open;
- a ``run_subflow`` costs its issues plus, per attempt, the child's whole
  bound at the next depth; beyond ``limits.max_subflow_depth`` the step fails
  at once and costs nothing. A detached child costs only its issues;
- a ``schedule`` step costs its call when it fires (issued again after an
  unknown outcome up to three times for a safe tool); a tool declared
  ``schedulable`` may be called from outside the run, without bound;
- compensations of every step are added (they run when the run fails), and
  the ``on_budget_exhausted`` steps are added to the main work;
- each update's handler is added ``limits.max_updates`` times (the most an
  incarnation takes);
- a ``continue_as_new`` starts the run again with the budget afresh: the
  run's total is unbounded, each incarnation's is the bound of its steps
  (``BudgetBound.incarnation``), but for scheduled calls, which carry over
  to the next incarnations until they fire.

Pure: no I/O, no clock. The bound assumes every report stays within the
declared maxima (a run charges what is reported, whatever was declared).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Literal, TypeAlias

import attrs

from .defaults import DEFAULT_STEP_BUDGET, DEFAULT_UNKNOWN_REISSUES, SCHEDULED_ATTEMPTS
from .spec import (
    AskHumanStep,
    AwaitSignalStep,
    Budget,
    CallToolStep,
    CancelScheduledStep,
    ContinueAsNewStep,
    FailStep,
    Flow,
    ForEachStep,
    MaxUsage,
    ParallelStep,
    RepeatStep,
    RunAgentStep,
    RunSubflowStep,
    RunTeamStep,
    ScheduleStep,
    SetMetadataStep,
    SignalRunStep,
    SleepStep,
    Step,
    SwitchStep,
    TryStep,
)

__all__ = [
    "LIMITS",
    "MAX_NESTED_SUBFLOWS",
    "BudgetBound",
    "Limit",
    "Shortfall",
    "Spend",
    "StepBound",
    "Unbounded",
    "budget_bound",
]

Limit: TypeAlias = Literal["steps", "cost", "tool_calls"]
LIMITS: tuple[Limit, ...] = ("steps", "cost", "tool_calls")

MAX_NESTED_SUBFLOWS = 64  # deeper chains of child flows are not computed


@attrs.frozen
class Spend:
    """Steps, cost (minor units) and tool calls; ``None``: no bound."""

    steps: int | None = 0
    cost_minor_units: int | None = 0
    tool_calls: int | None = 0

    def get(self, limit: Limit) -> int | None:
        """The amount of one limit: ``steps``, ``cost`` or ``tool_calls``."""
        if limit == "steps":
            return self.steps
        return self.cost_minor_units if limit == "cost" else self.tool_calls

    def __add__(self, other: Spend) -> Spend:
        return Spend(*(_add(a, b) for a, b in zip(self._all(), other._all(), strict=True)))

    def times(self, n: int) -> Spend:
        return Spend(*(_mul(a, n) for a in self._all()))

    def most(self, other: Spend) -> Spend:
        return Spend(*(_max(a, b) for a, b in zip(self._all(), other._all(), strict=True)))

    def _all(self) -> tuple[int | None, int | None, int | None]:
        return (self.steps, self.cost_minor_units, self.tool_calls)


ZERO = Spend()
NONE = Spend(None, None, None)


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def _mul(a: int | None, n: int) -> int | None:
    if n == 0 or a == 0:
        return 0
    return None if a is None else a * n


def _max(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else max(a, b)


@attrs.frozen
class Unbounded:
    """Why one limit has no bound: the construct, where it is (a spec path, as
    ``Problem.path``), and a one-line reason."""

    limit: Limit
    construct: str
    path: str
    why: str


@attrs.frozen
class StepBound:
    """One step's own worst case, per time it runs: everything inside it, its
    retries and its compensation. ``level``: how deep it is nested. ``why``:
    what the row counts, in words (``6 issues: 3 attempts + re-issues after an
    unknown outcome (3+2+1); per issue 1 step, 1 tool call + max_usage``)."""

    id: str
    path: str
    kind: str
    level: int
    spend: Spend
    why: str = ""


@attrs.frozen
class Shortfall:
    """A declared budget limit below the worst case: ``worst`` > ``declared``."""

    limit: Limit
    declared: int
    worst: int
    default: bool = False  # the limit is DEFAULT_STEP_BUDGET, not declared

    @property
    def message(self) -> str:
        what = "the default step budget" if self.default else f"budget.{_BUDGET_KEY[self.limit]}"
        return (
            f"{what} {self.declared} is below the worst case {self.worst}: "
            f"a run may be stopped budget-exhausted"
        )


_BUDGET_KEY: dict[Limit, str] = {
    "steps": "steps",
    "cost": "cost_minor_units",
    "tool_calls": "tool_calls",
}


@attrs.frozen
class BudgetBound:
    """The most any run of a flow can spend (``None``: no bound; ``unbounded``
    says why), each incarnation's (``incarnation``: the run's own unless it
    continues as new) and each step's (``breakdown``, in spec order)."""

    steps: int | None
    cost_minor_units: int | None
    tool_calls: int | None
    unbounded: tuple[Unbounded, ...]
    breakdown: tuple[StepBound, ...]
    incarnation: Spend

    @property
    def spend(self) -> Spend:
        return Spend(self.steps, self.cost_minor_units, self.tool_calls)

    @property
    def bounded(self) -> bool:
        return not self.unbounded

    def below(self, declared: Budget) -> tuple[Shortfall, ...]:
        """The limits of ``declared`` that an incarnation's worst case exceeds
        (each incarnation gets the budget afresh). ``steps`` not declared is
        ``DEFAULT_STEP_BUDGET``. A limit with no bound is not listed: then the
        budget is what stops the run, as intended."""
        out: list[Shortfall] = []
        for limit in LIMITS:
            value = getattr(declared, _BUDGET_KEY[limit])
            default = limit == "steps" and value is None
            if default:
                value = DEFAULT_STEP_BUDGET
            worst = self.incarnation.get(limit)
            if value is not None and worst is not None and worst > value:
                out.append(Shortfall(limit, value, worst, default))
        return tuple(out)


# --- the computation ---------------------------------------------------------------------


class _Walk:
    """One flow at one depth: its steps' spend, the reasons, the breakdown."""

    def __init__(
        self, flow: Flow, depth: int, subflows: Mapping[str, Flow], memo: _Memo, record: bool
    ) -> None:
        self.flow = flow
        self.depth = depth
        self.subflows = subflows
        self.memo = memo
        self.record = record
        self.reasons: list[Unbounded] = []
        self.rows: list[StepBound] = []
        self.scheduled: list[tuple[Step, Spend]] = []  # schedule steps, what a call costs
        self.said = ""  # what the step whose body was just walked counts (StepBound.why)

    def why(self, spend: Spend, construct: str, path: str, why: str) -> None:
        """Note ``why`` for each limit ``spend`` leaves open."""
        for limit in LIMITS:
            if spend.get(limit) is None:
                self.reasons.append(Unbounded(limit, construct, path, why))

    def steps(self, steps: tuple[Step, ...], level: int, comp: bool = True) -> Spend:
        total = ZERO
        for step in steps:
            total = total + self.step(step, level, comp)
        return total

    def step(self, step: Step, level: int, comp: bool) -> Spend:
        row = len(self.rows)
        if self.record:
            self.rows.append(StepBound(step.id, step.path, step.kind, level, ZERO))
        spend = self.body(step, level, comp)
        why = self.said
        if comp and step.compensate:
            spend = spend + self.steps(step.compensate, level + 1, comp)
            why += "; + compensate"
        if self.record:
            self.rows[row] = attrs.evolve(self.rows[row], spend=spend, why=why)
        return spend

    def say(self, spend: Spend, why: str) -> Spend:
        """``spend``, noting ``why`` for the step being walked (its nested steps
        were walked before: this is the last word)."""
        self.said = why
        return spend

    def body(self, step: Step, level: int, comp: bool) -> Spend:
        body = step.body
        here = f"{step.path}.{step.kind}"
        attempts = step.retry.max_attempts if step.retry else 1
        inner = level + 1
        times = "" if attempts == 1 else f", in each of {attempts} attempts (retry)"
        if isinstance(body, CallToolStep):
            safe = self.safe(body.tool)
            each = self.call(body.tool, step, here)
            why = (
                f"{_issues_why(step, safe)}; per issue 1 step, 1 tool call + {self.what(body.tool)}"
            )
            return self.say(each.times(_issues(step, safe)), why)
        if isinstance(body, RunAgentStep):
            each = self.agent(body.agent, here)
            why = f"{_issues_why(step, False)}; per issue 1 step + "
            return self.say(each.times(attempts), why + self.what(body.agent, agent=True))
        if isinstance(body, RunTeamStep):
            each = self.team(body, here)
            return self.say(each.times(attempts), self.team_why(body) + times)
        if isinstance(body, RunSubflowStep):
            return self.subflow(step, body, here)
        if isinstance(body, SignalRunStep):
            return self.say(
                Spend(steps=_issues(step, True)), f"{_issues_why(step, True)}; 1 step per issue"
            )
        if isinstance(body, ScheduleStep):
            safe = self.safe(body.tool)
            issues = SCHEDULED_ATTEMPTS if safe else 1
            call = self.call(body.tool, step, here).times(issues)
            if body.every_ms is not None or body.cron is not None:  # once per firing
                call = self.loop(call, body.count, here, f"schedule {step.id!r} has no count")
            self.scheduled.append((step, call))
            why = "its call when the delay fires: " + (
                f"{issues} issues (a {self.flow.tools[body.tool].exec_class} tool is re-issued"
                " after an unknown outcome)"
                if safe
                else "1 issue"
            )
            if body.every_ms is not None or body.cron is not None:
                firings = "any number of" if body.count is None else str(body.count)
                why = (
                    f"{firings} firings, each {why.removeprefix('its call when the delay fires: ')}"
                )
            return self.say(call, f"{why}; per issue 1 step, 1 tool call + {self.what(body.tool)}")
        if isinstance(body, SwitchStep):
            most = ZERO
            for case in body.cases:
                most = most.most(self.steps(case.steps, inner, comp))
            return self.say(most.times(attempts), f"its costliest case{times}")
        if isinstance(body, ParallelStep):
            total = ZERO
            for branch in body.branches.values():
                total = total + self.steps(branch, inner, comp)
            n = len(body.branches)
            why = f"its {_plural(n, 'branch')} added (all may run, whatever the mode){times}"
            return self.say(total.times(attempts), why)
        if isinstance(body, ForEachStep):
            why = f"for_each {step.id!r} declares no max_items"
            each = self.steps(body.steps, inner, comp)
            said = (
                "its body, any number of times (no max_items)"
                if body.max_items is None
                else f"its body, max_items {body.max_items} times"
            )
            spend = self.loop(each, body.max_items, here, why).times(attempts)
            return self.say(spend, said + times)
        if isinstance(body, RepeatStep):
            why = f"repeat {step.id!r} has no max_fires"
            fire = self.steps(body.steps, inner, comp)
            said = (
                "its body, any number of times (no max_fires)"
                if body.max_fires is None
                else f"its body, max_fires {body.max_fires} times"
            )
            spend = self.loop(fire, body.max_fires, here, why).times(attempts)
            return self.say(spend, said + times)
        if isinstance(body, TryStep):
            protected = self.steps(body.steps, inner, comp)
            handlers = ZERO
            for clause in body.catch:
                handlers = handlers.most(self.steps(clause.steps, inner, comp))
            why = "its body + its costliest catch clause"
            return self.say((protected + handlers).times(attempts), why + times)
        if isinstance(body, ContinueAsNewStep):
            # the run's total is left open by budget_bound
            return self.say(ZERO, "nothing here: the next incarnation spends afresh")
        assert isinstance(
            body,
            (
                AskHumanStep,
                SleepStep,
                AwaitSignalStep,
                CancelScheduledStep,
                FailStep,
                SetMetadataStep,
            ),
        ), body
        return self.say(ZERO, "costs nothing (no work effect)")

    def loop(self, each: Spend, count: int | None, here: str, why: str) -> Spend:
        """A loop's body ``count`` times; with no count, open where the body spends
        anything (``why`` says so)."""
        if count is not None:
            return each.times(count)
        out = Spend(*(None if v != 0 else 0 for v in each._all()))
        self.why(out, here.rsplit(".", 1)[1], here, why)
        return out

    def what(self, name: str, agent: bool = False) -> str:
        """What one call reports, for ``why``: the declared maximum, or why it is unknown."""
        decls = self.flow.agents if agent else self.flow.tools
        decl = decls.get(name)
        usage = decl.max_usage if decl is not None else None
        if usage is None:
            if agent:
                return "no max_usage (usage unknown)"
            return "no max_usage (cost unknown)"
        return "max_usage"

    def team_why(self, body: RunTeamStep) -> str:
        team = self.flow.teams.get(body.team)
        if team is None:
            return f"team {body.team!r} is not declared: its usage is unknown"
        agents = ", ".join(repr(m.agent) for m in team.members)
        members = _plural(len(team.members), "member")
        unknown = [
            repr(m.agent)
            for m in team.members
            if self.what(m.agent, agent=True) != "max_usage"  # no max_usage declared
        ]
        each = "its agent's max_usage"
        if unknown:
            each += f" ({', '.join(unknown)}: no max_usage, usage unknown)"
        return f"{members} ({agents}): per member 1 step + {each}"

    def safe(self, tool: str) -> bool:
        decl = self.flow.tools.get(tool)
        return decl is not None and decl.exec_class in ("readonly", "idempotent")

    def call(self, tool: str, step: Step, here: str) -> Spend:
        """One issue of a call to ``tool``: a step, a tool call, its usage."""
        decl = self.flow.tools.get(tool)
        usage = decl.max_usage if decl is not None else None
        if usage is None:
            # Taken to report no steps and no tool calls (a tool is not an
            # agent); what it costs is unknown.
            spend = Spend(1, None, 1)
            self.why(
                spend, "tool", here, f"tool {tool!r} declares no max_usage: its cost is unknown"
            )
            return spend
        return Spend(1, 0, 1) + _usage(usage)

    def agent(self, agent: str, here: str) -> Spend:
        """One issue of a run-agent: a step and the agent's usage."""
        decl = self.flow.agents.get(agent)
        usage = decl.max_usage if decl is not None else None
        if usage is None:
            self.why(NONE, "agent", here, f"agent {agent!r} declares no max_usage")
            return NONE
        return Spend(1, 0, 0) + _usage(usage)

    def team(self, body: RunTeamStep, here: str) -> Spend:
        team = self.flow.teams.get(body.team)
        if team is None:
            why = f"team {body.team!r} is not declared: the usage of its run-team is unknown"
            self.why(NONE, "run_team", here, why)
            return NONE
        total = ZERO
        for member in team.members:
            total = total + self.agent(member.agent, here)
        return total

    def subflow(self, step: Step, body: RunSubflowStep, here: str) -> Spend:
        issues = Spend(steps=_issues(step, True))
        counted = _issues_why(step, True)
        if body.detached:
            # a root run of its own: its usage never comes back
            return self.say(issues, f"{counted}; 1 step per issue (detached: no usage comes back)")
        depth = self.depth + 1
        if depth > self.flow.limits.max_subflow_depth:
            # fails depth-exceeded at once: nothing issued
            return self.say(ZERO, f"nothing: depth {depth} is beyond max_subflow_depth")
        attempts = step.retry.max_attempts if step.retry else 1
        child = self.subflows.get(body.flow)
        if child is None:
            why = f"run_subflow {step.id!r}: flow {body.flow!r} not given"
            self.why(NONE, "run_subflow", here, why)
            return self.say(NONE, f"{counted}; flow {body.flow!r} not given: unknown")
        spend, reasons = self.memo.child(child, depth, self.subflows)
        for reason in reasons:
            why = reason.why
            if not why.startswith("in flow "):  # the deepest flow where it happens
                why = f"in flow {body.flow!r} at depth {depth}, {reason.path}: {why}"
            self.reasons.append(Unbounded(reason.limit, reason.construct, here, why))
        why = f"{counted}; 1 step per issue + flow {body.flow!r}'s worst case at depth {depth}" + (
            "" if attempts == 1 else f" in each of {attempts} attempts"
        )
        return self.say(issues + spend.times(attempts), why)


def _issues(step: Step, reissue: bool) -> int:
    """The most issues of a work step: one per attempt; with re-issues after
    unknown outcomes, ``max_attempts - attempt + 1`` in attempt ``attempt``."""
    if not reissue:
        return step.retry.max_attempts if step.retry else 1
    if step.retry is None:
        return DEFAULT_UNKNOWN_REISSUES
    n = step.retry.max_attempts
    return n * (n + 1) // 2


def _issues_why(step: Step, reissue: bool) -> str:
    """How ``_issues`` counts, in words: ``6 issues: 3 attempts + re-issues after
    an unknown outcome (3+2+1)``."""
    n = step.retry.max_attempts if step.retry else 1
    if not reissue:
        return f"{_plural(n, 'issue')}{_attempts(n)}"
    if step.retry is None:
        k = DEFAULT_UNKNOWN_REISSUES
        return f"{_plural(k, 'issue')}: 1 + {k - 1} re-issues after an unknown outcome"
    each = "+".join(str(k) for k in range(n, 0, -1))
    return (
        f"{_issues(step, True)} issues: {n} attempts + re-issues after an unknown outcome ({each})"
    )


def _attempts(n: int) -> str:
    return "" if n == 1 else f": {n} attempts (retry)"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}{'es' if word.endswith('ch') else 's'}"


def _usage(usage: MaxUsage) -> Spend:
    return Spend(usage.steps, usage.cost_minor_units, usage.tool_calls)


class _Memo:
    """Child flows' bounds by (flow, depth), and the chain being computed."""

    def __init__(self) -> None:
        self.done: dict[tuple[str, int], tuple[Spend, tuple[Unbounded, ...]]] = {}

    def child(
        self, flow: Flow, depth: int, subflows: Mapping[str, Flow]
    ) -> tuple[Spend, tuple[Unbounded, ...]]:
        key = (flow.spec_hash, depth)
        found = self.done.get(key)
        if found is not None:
            return found
        if depth > MAX_NESTED_SUBFLOWS:
            why = f"subflows nest deeper than {MAX_NESTED_SUBFLOWS} levels: not computed"
            where = f"in flow {flow.id!r} at depth {depth}: {why}"
            reason = tuple(Unbounded(limit, "run_subflow", "steps", where) for limit in LIMITS)
            return NONE, reason
        walk = _Walk(flow, depth, subflows, self, record=False)
        total, _ = _flow_spend(walk)
        out = (total, tuple(walk.reasons))
        self.done[key] = out
        return out


def _flow_spend(walk: _Walk) -> tuple[Spend, Spend]:
    """The run's total and one incarnation's spend of ``walk.flow`` at ``walk.depth``."""
    flow = walk.flow
    if walk.depth > flow.limits.max_subflow_depth:
        return ZERO, ZERO  # the run settles depth-exceeded at once
    for name, decl in flow.tools.items():
        if decl.schedulable:
            why = f"tool {name!r} is schedulable: calls may be added from outside the run"
            walk.why(NONE, "tool", f"tools.{name}", why)
    incarnation = walk.steps(flow.steps, 0)
    if flow.on_exhausted is not None:
        incarnation = incarnation + walk.steps(flow.on_exhausted.steps, 0, comp=False)
    for update in flow.updates.values():  # each handler up to max_updates times
        incarnation = incarnation + walk.steps(update.steps, 0).times(flow.limits.max_updates)
    if any(decl.schedulable for decl in flow.tools.values()):
        incarnation = NONE
    total = incarnation
    for step in _continues(flow):
        why = f"continue_as_new {step.id!r} starts the run again: each incarnation spends afresh"
        walk.why(NONE, "continue_as_new", f"{step.path}.continue_as_new", why)
        total = NONE
        for scheduled, call in walk.scheduled:
            # A call whose delay has not fired is carried over to the next
            # incarnation, and the next: any incarnation may fire earlier ones'.
            why = (
                f"schedule {scheduled.id!r}: calls not yet fired carry over to the next "
                f"incarnation (continue_as_new {step.id!r})"
            )
            carried = walk.loop(call, None, f"{scheduled.path}.schedule", why)
            incarnation = incarnation + carried
    return total, incarnation


def _continues(flow: Flow) -> Iterator[Step]:
    """The ``continue_as_new`` steps that may continue the run: not those in a
    ``compensate`` list or in ``on_budget_exhausted`` (they fail ``continue-refused``)."""
    for step in flow.by_id.values():
        if not isinstance(step.body, ContinueAsNewStep):
            continue
        if step.path.startswith("on_budget_exhausted") or ".compensate[" in step.path:
            continue
        yield step


def budget_bound(
    flow: Flow, *, subflows: Mapping[str, Flow] | None = None, depth: int = 0
) -> BudgetBound:
    """The most any run of ``flow`` (started at ``depth``) can spend, from the spec
    alone: steps, cost and tool calls, each ``None`` when no bound holds (then
    ``unbounded`` names every construct that leaves it open).

    ``subflows``: the flows ``run_subflow`` steps start, by flow id (a flow
    that recurses into itself is bounded by ``limits.max_subflow_depth``).
    """
    walk = _Walk(flow, depth, subflows or {}, _Memo(), record=True)
    total, incarnation = _flow_spend(walk)
    return BudgetBound(
        steps=total.steps,
        cost_minor_units=total.cost_minor_units,
        tool_calls=total.tool_calls,
        unbounded=tuple(dict.fromkeys(walk.reasons)),
        breakdown=tuple(walk.rows),
        incarnation=incarnation,
    )
