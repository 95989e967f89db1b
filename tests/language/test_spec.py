"""Valid specs: the model ``parse_flow`` builds, ``spec_hash``, ``by_id`` and templates."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
import yaml

from flowcore import Flow, InputError, SpecError, parse_flow, start
from flowcore.language.expr import Template, compile_cond, compile_template
from flowcore.language.spec import (
    AskHumanStep,
    AwaitSignalStep,
    Budget,
    CallToolStep,
    CancelScheduledStep,
    ForEachStep,
    Limits,
    ParallelStep,
    RepeatStep,
    Retry,
    RunAgentStep,
    RunSubflowStep,
    RunTeamStep,
    ScheduleStep,
    SleepStep,
    SwitchStep,
    TeamMember,
    TryStep,
)

ALL_KINDS = {
    "call_tool",
    "run_agent",
    "run_team",
    "ask_human",
    "sleep",
    "await_signal",
    "run_subflow",
    "switch",
    "parallel",
    "for_each",
    "repeat",
    "schedule",
    "cancel_scheduled",
    "try",
}

FULL = """\
flow: incident-triage          # every construct of the language
version: 3
description: Triage an incident end to end.
input_schema:
  type: object
  properties: {incident_id: {type: string}}
  required: [incident_id]
budget: {steps: 400, cost_minor_units: 5000, wall_clock_ms: 3600000}
limits: {max_subflow_depth: 2, max_concurrency: 8, max_buffered_signals: 16}
tools:
  pagerduty.get_incident: {class: readonly}
  payments.refund: {class: idempotent}
  payments.reverse: {class: idempotent}
  slack.post: {}
  send_reminder:
  ci.status: {class: readonly}
teams:
  reviewers:
    mode: parallel
    members:
      - {member: security, agent: sec-bot, instructions: "Focus on ${input.incident_id}"}
      - {member: style, agent: style-bot}
steps:
  - id: fetch
    description: Load the incident.
    call_tool: {tool: pagerduty.get_incident, input: {id: "${input.incident_id}"}}
  - id: triage
    run_agent:
      agent: triager
      prompt: "Triage ${steps.fetch.output.title}"
      instructions: Be brief.
      member: lead
    retry:
      max_attempts: 5
      initial_interval_ms: 500
      backoff: 1.5
      max_interval_ms: 30000
      jitter: 0.25
      errors: [rate-limited, timeout]
    timeout_ms: 60000
  - id: review
    run_team: {team: reviewers, prompt: "Review ${steps.triage.output}"}
  - id: decide
    ask_human:
      question: "Page ${steps.triage.output.owner}?"
      options: [page, ignore]
      timeout_ms: 900000
      default: ignore
  - id: route
    switch:
      - if: "steps.decide.answer == 'page'"
        steps:
          - id: page
            call_tool: {tool: slack.post, input: {text: "paging"}}
      - if: "${steps.decide.answer == 'ignore'}"
        steps:
          - id: note
            call_tool: {tool: slack.post, input: {text: "ignored"}}
      - else:
          - id: shrug
            sleep: {for_ms: 1}
  - id: reviews
    parallel:
      mode: all_settled
      max_concurrency: 2
      branches:
        sec:
          - id: sec_scan
            call_tool: {tool: ci.status}
        style:
          - id: style_scan
            call_tool: {tool: ci.status}
  - id: per_service
    for_each:
      items: "${steps.fetch.output.services}"
      as: svc
      index: i
      max_concurrency: 4
      steps:
        - id: restart
          call_tool: {tool: slack.post, input: {text: "restart ${svc} (${i})"}}
  - id: wait_fix
    await_signal: {signal: fix-deployed, timeout_ms: 86400000}
  - id: recheck
    repeat:
      every_ms: 1800000
      max_fires: 3
      until: "steps.ci.output.green"
      steps:
        - id: ci
          call_tool: {tool: ci.status}
  - id: nightly
    repeat:
      cron: "0 3 * * 1-5"
      max_fires: 2
      steps:
        - id: nightly_nap
          sleep: {until: "${input.wake_at}"}
  - id: child
    run_subflow: {flow: postmortem, input: {incident: "${input.incident_id}"}}
  - id: nudge
    schedule:
      tool: send_reminder
      delay_ms: 7200000
      input: {to: "${steps.triage.output.owner}"}
      outlive_run: true
  - id: unnudge
    cancel_scheduled: {id: "${steps.nudge.output.id}"}
  - id: refund
    call_tool: {tool: payments.refund, input: {amount: 100}}
    compensate:
      - id: undo_refund
        call_tool: {tool: payments.reverse, input: {of: "${steps.refund.output}"}}
  - id: guarded
    try:
      - id: risky
        call_tool: {tool: payments.refund}
    catch:
      - errors: [outcome-unknown]
        steps:
          - id: reconcile
            call_tool: {tool: ci.status}
      - steps:
          - id: give_up
            sleep: {for_ms: 10}
output: "${ {owner: steps.triage.output.owner, reviews: steps.reviews.output} }"
"""


def _fields(value: Any) -> dict[str, Any]:
    return attrs.asdict(value)


@pytest.fixture(scope="module")
def full() -> Flow:
    return parse_flow(FULL, source_name="full.yaml")


# --- the model ---------------------------------------------------------------------------


def test_every_step_kind_parses(full: Flow) -> None:
    assert {step.kind for step in full.by_id.values()} == ALL_KINDS
    assert full.id == "incident-triage"
    assert full.version == 3
    assert full.source_name == "full.yaml"
    assert [s.id for s in full.steps] == [
        "fetch",
        "triage",
        "review",
        "decide",
        "route",
        "reviews",
        "per_service",
        "wait_fix",
        "recheck",
        "nightly",
        "child",
        "nudge",
        "unnudge",
        "refund",
        "guarded",
    ]


def test_flow_level_settings(full: Flow) -> None:
    assert _fields(full.budget) == {
        "steps": 400,
        "cost_minor_units": 5000,
        "wall_clock_ms": 3600000,
        "tokens": None,
        "tool_calls": None,
        "turns": None,
    }
    assert _fields(full.limits) == {
        "max_subflow_depth": 2,
        "max_concurrency": 8,
        "max_buffered_signals": 16,
        "max_idle_incarnations": 1000,
        "max_running_updates": 10,
        "max_updates": 2000,
    }
    assert full.input_schema == {
        "type": "object",
        "properties": {"incident_id": {"type": "string"}},
        "required": ["incident_id"],
    }
    assert full.output is not None
    assert full.output.refs == {"triage", "reviews"}
    team = full.teams["reviewers"]
    assert team.mode == "parallel"
    assert [m.member for m in team.members] == ["security", "style"]
    assert isinstance(team.members[0], TeamMember)
    assert team.members[0].instructions == compile_template("Focus on ${input.incident_id}")
    assert team.members[1].instructions is None


def test_tool_classes(full: Flow) -> None:
    classes = {name: tool.exec_class for name, tool in full.tools.items()}
    assert classes == {
        "pagerduty.get_incident": "readonly",
        "payments.refund": "idempotent",
        "payments.reverse": "idempotent",
        "slack.post": "uncertain",  # {}: no class given
        "send_reminder": "uncertain",  # null: no settings at all
        "ci.status": "readonly",
    }


def test_minimal_defaults() -> None:
    flow = parse_flow("flow: f\nsteps: [{id: a, sleep: {for_ms: 0}}]\n")
    assert flow.version == 1
    assert flow.tools == {}
    assert flow.teams == {}
    assert flow.budget == Budget()
    assert flow.limits == Limits()
    assert _fields(flow.limits) == {
        "max_subflow_depth": 4,
        "max_concurrency": None,
        "max_buffered_signals": 64,
        "max_idle_incarnations": 1000,
        "max_running_updates": 10,
        "max_updates": 2000,
    }
    assert flow.input_schema is None
    assert flow.output is None
    assert flow.steps[0].retry is None
    assert flow.steps[0].timeout_ms is None
    assert flow.steps[0].compensate == ()


def test_step_bodies(full: Flow) -> None:
    by_id = full.by_id
    fetch = by_id["fetch"].body
    assert isinstance(fetch, CallToolStep)
    assert fetch.tool == "pagerduty.get_incident"
    assert fetch.input.refs == frozenset()
    assert not fetch.input.constant

    triage = by_id["triage"]
    assert isinstance(triage.body, RunAgentStep)
    assert triage.body.agent == "triager"
    assert triage.body.member == "lead"
    assert triage.body.prompt.refs == {"fetch"}
    assert triage.body.instructions is not None and triage.body.instructions.constant
    assert triage.retry is not None
    assert _fields(triage.retry) == {
        "max_attempts": 5,
        "initial_interval_ms": 500,
        "backoff": 1.5,
        "max_interval_ms": 30000,
        "jitter": 0.25,
        "errors": ("rate-limited", "timeout"),
    }
    assert triage.timeout_ms == 60000

    review = by_id["review"].body
    assert isinstance(review, RunTeamStep) and review.team == "reviewers"

    decide = by_id["decide"].body
    assert isinstance(decide, AskHumanStep)
    assert decide.options == ("page", "ignore")
    assert decide.timeout_ms == 900000
    assert decide.default == "ignore"

    route = by_id["route"].body
    assert isinstance(route, SwitchStep)
    assert [c.cond is None for c in route.cases] == [False, False, True]
    assert route.cases[0].cond is not None and route.cases[0].cond.refs == {"decide"}
    assert route.cases[1].cond is not None and route.cases[1].cond.refs == {"decide"}

    reviews = by_id["reviews"].body
    assert isinstance(reviews, ParallelStep)
    assert reviews.mode == "all_settled"
    assert reviews.max_concurrency == 2
    assert list(reviews.branches) == ["sec", "style"]

    each = by_id["per_service"].body
    assert isinstance(each, ForEachStep)
    assert (each.as_, each.index, each.max_concurrency) == ("svc", "i", 4)
    assert each.items.refs == {"fetch"}

    wait = by_id["wait_fix"].body
    assert isinstance(wait, AwaitSignalStep)
    assert (wait.signal, wait.timeout_ms) == ("fix-deployed", 86400000)

    recheck = by_id["recheck"].body
    assert isinstance(recheck, RepeatStep)
    assert (recheck.every_ms, recheck.cron, recheck.max_fires) == (1800000, None, 3)
    assert recheck.until is not None and recheck.until.refs == {"ci"}

    nightly = by_id["nightly"].body
    assert isinstance(nightly, RepeatStep)
    assert (nightly.every_ms, nightly.cron, nightly.until) == (None, "0 3 * * 1-5", None)
    nap = by_id["nightly_nap"].body
    assert isinstance(nap, SleepStep)
    assert nap.for_ms is None and nap.until == compile_template("${input.wake_at}")

    child = by_id["child"].body
    assert isinstance(child, RunSubflowStep) and child.flow == "postmortem"

    nudge = by_id["nudge"].body
    assert isinstance(nudge, ScheduleStep)
    assert (nudge.tool, nudge.delay_ms, nudge.outlive_run) == ("send_reminder", 7200000, True)

    unnudge = by_id["unnudge"].body
    assert isinstance(unnudge, CancelScheduledStep) and unnudge.id.refs == {"nudge"}

    refund = by_id["refund"]
    assert [s.id for s in refund.compensate] == ["undo_refund"]

    guarded = by_id["guarded"].body
    assert isinstance(guarded, TryStep)
    assert [s.id for s in guarded.steps] == ["risky"]
    assert [c.errors for c in guarded.catch] == [("outcome-unknown",), ("*",)]
    assert [[s.id for s in c.steps] for c in guarded.catch] == [["reconcile"], ["give_up"]]


def test_retry_defaults() -> None:
    flow = parse_flow(
        "flow: f\ntools: {t: {}}\nsteps: [{id: a, call_tool: {tool: t}, retry: {}}]\n"
    )
    retry = flow.steps[0].retry
    assert retry == Retry()
    assert retry is not None
    assert _fields(retry) == {
        "max_attempts": 3,
        "initial_interval_ms": 1000,
        "backoff": 2.0,
        "max_interval_ms": 60000,
        "jitter": 0.0,
        "errors": None,
    }


def test_call_tool_input_defaults_to_null() -> None:
    flow = parse_flow("flow: f\ntools: {t: {}}\nsteps: [{id: a, call_tool: {tool: t}}]\n")
    body = flow.steps[0].body
    assert isinstance(body, CallToolStep)
    assert body.input.constant and body.input.source is None


# --- by_id and paths -------------------------------------------------------------------------


def test_by_id_indexes_nested_steps_with_their_path(full: Flow) -> None:
    paths = {sid: step.path for sid, step in full.by_id.items()}
    assert paths == {
        "fetch": "steps[0]",
        "triage": "steps[1]",
        "review": "steps[2]",
        "decide": "steps[3]",
        "route": "steps[4]",
        "page": "steps[4].switch[0].steps[0]",
        "note": "steps[4].switch[1].steps[0]",
        "shrug": "steps[4].switch[2].else[0]",
        "reviews": "steps[5]",
        "sec_scan": "steps[5].parallel.branches.sec[0]",
        "style_scan": "steps[5].parallel.branches.style[0]",
        "per_service": "steps[6]",
        "restart": "steps[6].for_each.steps[0]",
        "wait_fix": "steps[7]",
        "recheck": "steps[8]",
        "ci": "steps[8].repeat.steps[0]",
        "nightly": "steps[9]",
        "nightly_nap": "steps[9].repeat.steps[0]",
        "child": "steps[10]",
        "nudge": "steps[11]",
        "unnudge": "steps[12]",
        "refund": "steps[13]",
        "undo_refund": "steps[13].compensate[0]",
        "guarded": "steps[14]",
        "risky": "steps[14].try[0]",
        "reconcile": "steps[14].catch[0].steps[0]",
        "give_up": "steps[14].catch[1].steps[0]",
    }
    assert all(step.id == sid for sid, step in full.by_id.items())


def test_by_id_holds_the_placed_steps(full: Flow) -> None:
    # The tree and the index share the same step values, paths included.
    route = full.by_id["route"].body
    assert isinstance(route, SwitchStep)
    assert route.cases[0].steps[0] is full.by_id["page"]
    reviews = full.by_id["reviews"].body
    assert isinstance(reviews, ParallelStep)
    assert reviews.branches["style"][0] is full.by_id["style_scan"]
    assert full.by_id["refund"].compensate[0] is full.by_id["undo_refund"]
    assert full.steps[0] is full.by_id["fetch"]


# --- spec_hash ---------------------------------------------------------------------------------

SMALL_YAML = """\
flow: hash-me
version: 2
tools:
  fetch: {class: readonly}
steps:
  - id: get
    call_tool: {tool: fetch, input: {id: "${input.id}", n: 1}}
    timeout_ms: 1000
output: "${steps.get.output}"
"""

SMALL_JSON = """\
{"flow": "hash-me", "version": 2,
 "tools": {"fetch": {"class": "readonly"}},
 "steps": [{"id": "get", "call_tool": {"tool": "fetch", "input": {"id": "${input.id}", "n": 1}},
            "timeout_ms": 1000}],
 "output": "${steps.get.output}"}
"""

SMALL_REORDERED = """\
# the same spec: other key order, other styles, comments
output: '${steps.get.output}'
steps:
- timeout_ms: 1000
  call_tool:
    input:
      n: 1
      id: '${input.id}'
    tool: fetch
  id: get
tools: {fetch: {"class": readonly}}
version: 2
flow: "hash-me"
"""


def test_spec_hash_is_a_sha256_hex_digest() -> None:
    digest = parse_flow(SMALL_YAML).spec_hash
    assert len(digest) == 64
    assert int(digest, 16) >= 0


def test_yaml_and_equivalent_json_have_the_same_hash() -> None:
    from_yaml = parse_flow(SMALL_YAML, source_name="small.yaml")
    from_json = parse_flow(SMALL_JSON, source_name="small.json")
    assert from_yaml.spec_hash == from_json.spec_hash
    assert from_yaml == from_json
    assert hash(from_yaml) == hash(from_json)


def test_full_spec_as_json_has_the_same_hash(full: Flow) -> None:
    as_json = json.dumps(yaml.safe_load(FULL), indent=1)
    assert parse_flow(as_json).spec_hash == full.spec_hash
    assert parse_flow(as_json.encode()).spec_hash == full.spec_hash
    assert parse_flow(yaml.safe_load(FULL)).spec_hash == full.spec_hash


def test_key_order_and_formatting_do_not_change_the_hash() -> None:
    assert parse_flow(SMALL_REORDERED).spec_hash == parse_flow(SMALL_YAML).spec_hash


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("version: 2", "version: 3"),
        ("n: 1", "n: 2"),
        ("timeout_ms: 1000", "timeout_ms: 1001"),
        ("${input.id}", "${input.key}"),
        ("{class: readonly}", "{class: idempotent}"),
    ],
)
def test_a_changed_value_changes_the_hash(old: str, new: str) -> None:
    assert old in SMALL_YAML
    changed = parse_flow(SMALL_YAML.replace(old, new))
    original = parse_flow(SMALL_YAML)
    assert changed.spec_hash != original.spec_hash
    assert changed != original


def test_hash_does_not_depend_on_source_name() -> None:
    assert parse_flow(SMALL_YAML, source_name="a").spec_hash == parse_flow(SMALL_YAML).spec_hash


def test_yaml_dates_stay_strings() -> None:
    # Spec values are JSON values: no implicit YAML timestamps.
    flow = parse_flow("flow: f\nsteps:\n  - {id: a, sleep: {until: 2024-01-02}}\n")
    body = flow.steps[0].body
    assert isinstance(body, SleepStep) and body.until is not None
    assert body.until.source == "2024-01-02"


# --- templates ---------------------------------------------------------------------------------


class Ctx:
    """A resolver over plain dicts: roots by name, step records by id."""

    def __init__(self, roots: dict[str, Any], steps: dict[str, Any]) -> None:
        self.roots = roots
        self.steps = steps
        self.step_reads: list[str] = []

    def root(self, name: str) -> Any:
        if name == "$all_steps":
            return self.steps
        return self.roots.get(name)

    def step(self, step_id: str) -> Any:
        self.step_reads.append(step_id)
        return self.steps.get(step_id)


def ctx() -> Ctx:
    return Ctx(
        {"input": {"x": 3, "name": "db", "tags": ["a", "b"], "opts": {"k": True}, "none": None}},
        {"fetch": {"status": "succeeded", "output": {"title": "Disk full", "n": 7}}},
    )


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ("${input.x}", 3),
        ("${input.tags}", ["a", "b"]),
        ("${input.opts}", {"k": True}),
        ("${input.none}", None),
        ("${input.missing}", None),
        ("${steps.fetch.output.n}", 7),
        ("${steps.fetch.output}", {"title": "Disk full", "n": 7}),
        ("${ input.x }", 3),
        ("${length(input.tags)}", 2),
        ("${input.tags[0]}", "a"),
    ],
)
def test_exact_expression_yields_the_raw_value(source: str, value: Any) -> None:
    template = compile_template(source)
    assert not template.constant
    result = template.evaluate(ctx())
    assert result == value
    assert type(result) is type(value)


@pytest.mark.parametrize(
    ("source", "text"),
    [
        ("x=${input.x}", "x=3"),
        ("${input.name}-${input.x}", "db-3"),
        ("tags ${input.tags}!", 'tags ["a","b"]!'),
        ("opts ${input.opts}", 'opts {"k":true}'),
        ("none ${input.none}", "none null"),
        (" ${input.x}", " 3"),
        ("Triage ${steps.fetch.output.title} now", "Triage Disk full now"),
    ],
)
def test_mixed_text_interpolates(source: str, text: str) -> None:
    assert compile_template(source).evaluate(ctx()) == text


def test_multi_select_hash_in_braces() -> None:
    template = compile_template("${ {a: input.x, t: steps.fetch.output.title} }")
    assert template.evaluate(ctx()) == {"a": 3, "t": "Disk full"}
    assert template.refs == {"fetch"}
    assert compile_template("${ {a: input.x} }").evaluate(ctx()) == {"a": 3}


def test_braces_inside_string_literals_do_not_close_the_expression() -> None:
    assert compile_template("${ '}' }").evaluate(ctx()) == "}"
    assert compile_template('<${ `{"k": 1}` }>').evaluate(ctx()) == '<{"k":1}>'


@pytest.mark.parametrize(
    "source",
    ["plain text", "", "$ {not} an expression", 5, 2.5, True, None, ["a", 1], {"k": "v"}],
)
def test_constants_stay_constants(source: Any) -> None:
    template = compile_template(source)
    assert template.constant
    assert template.refs == frozenset()
    resolver = ctx()
    assert template.evaluate(resolver) is source
    assert resolver.step_reads == []


def test_nested_templates_keep_constants_and_evaluate_expressions() -> None:
    source = {"a": "${input.x}", "b": 1, "c": ["${input.name}", "lit", {"d": "n=${input.x}"}]}
    template = compile_template(source)
    assert not template.constant
    assert template.evaluate(ctx()) == {"a": 3, "b": 1, "c": ["db", "lit", {"d": "n=3"}]}
    assert template.source == source


def test_template_refs_name_the_steps_read() -> None:
    template = compile_template("${steps.fetch.output.title} ${steps.other.output}")
    assert template.refs == {"fetch", "other"}
    assert not template.wholesale
    assert compile_template("${length(steps)}").wholesale


def test_only_the_referenced_steps_are_read() -> None:
    resolver = ctx()
    compile_template("${steps.fetch.output.title}").evaluate(resolver)
    compile_template("${steps.fetch.output.n > `5`}").evaluate(resolver)
    assert resolver.step_reads == ["fetch", "fetch"]


def test_template_equality_is_by_source() -> None:
    assert compile_template("${input.x}") == compile_template("${input.x}")
    assert compile_template("${input.x}") != compile_template("${input.y}")
    assert isinstance(compile_template("a"), Template)
    assert hash(compile_template({"a": 1, "b": 2})) == hash(compile_template({"b": 2, "a": 1}))


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("input.x == `3`", True),
        ("${input.x == `4`}", False),
        ("steps.fetch.output.title", True),
        ("input.tags[?@ == 'z']", False),
        ("input.missing", False),
    ],
)
def test_conditions(source: str, expected: bool) -> None:
    assert compile_cond(source).test(ctx()) is expected


# --- regressions --------------------------------------------------------------------------------


def test_bare_steps_yields_every_step_record() -> None:
    resolver = ctx()
    assert compile_template("${length(keys(steps))}").evaluate(resolver) == 1  # slow path
    assert compile_template("${steps}").evaluate(resolver) == resolver.steps


def test_steps_field_inside_a_filter_is_not_a_step_reference() -> None:
    template = compile_template("${input.jobs[?steps.build].name}")
    assert template.refs == frozenset()
    flow = parse_flow(
        "flow: f\nsteps:\n  - {id: a, sleep: {for_ms: 1}}\n"
        "output: '${input.jobs[?steps.build].name}'\n"
    )
    assert flow.output is not None


def test_constant_until_in_tool_input_inside_switch_is_not_a_condition() -> None:
    spec = """\
flow: f
tools: {t: {}}
steps:
  - id: route
    switch:
      - if: input.go
        steps:
          - id: inner
            call_tool: {tool: t, input: {until: "steps.later"}}
"""
    flow = parse_flow(spec)
    body = flow.by_id["inner"].body
    assert isinstance(body, CallToolStep)
    assert body.input.constant


# --- input_schema: problems said in the spec's terms ---------------------------------------------

_SCHEMA = {
    "type": "object",
    "required": ["name", "items"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 3,
            "uniqueItems": True,
            "items": {"type": "integer", "minimum": 0, "maximum": 9},
        },
        "colour": {"enum": ["red", "green", None]},
        "strict": {"const": True},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "step": {"type": "integer", "multipleOf": 5},
        "note": {"type": ["string", "null"]},
        "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "tags": {"type": "object", "minProperties": 1, "maxProperties": 1},
        "odd key": {"type": "boolean"},
    },
}


def _input_problems(value: Any, schema: dict[str, Any] = _SCHEMA) -> tuple[str, ...]:
    flow = parse_flow(
        {"flow": "f", "input_schema": schema, "steps": [{"id": "a", "sleep": {"for_ms": 1}}]}
    )
    with pytest.raises(InputError) as info:
        start(flow, value)
    return info.value.problems


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (None, "$: expected an object, got null"),
        (True, "$: expected an object, got true"),
        ("x", '$: expected an object, got "x"'),
        (1.5, "$: expected an object, got 1.5"),
        ([1], "$: expected an object, got an array"),
        ({"items": [1]}, '$: missing required property "name"'),
        ({"name": "ab", "items": [1], "foo": 1}, '$: additional property "foo" is not allowed'),
        ({"name": "ab", "items": [1, 2, "x"]}, '$.items[2]: expected an integer, got "x"'),
        ({"name": "ab", "items": [1, 10]}, "$.items[1]: expected a number <= 9, got 10"),
        ({"name": "ab", "items": [-1]}, "$.items[0]: expected a number >= 0, got -1"),
        ({"name": "ab", "items": []}, "$.items: expected at least 1 item, got 0 items"),
        ({"name": "ab", "items": [1, 2, 3, 4]}, "$.items: expected at most 3 items, got 4 items"),
        (
            {"name": "ab", "items": [1, 1]},
            "$.items: expected the items to be unique, got duplicates",
        ),
        ({"name": "a", "items": [1]}, '$.name: expected at least 2 characters, got "a"'),
        ({"name": "abcdef", "items": [1]}, '$.name: expected at most 5 characters, got "abcdef"'),
        (
            {"name": "AB", "items": [1]},
            '$.name: expected a string matching the pattern "^[a-z]+$", got "AB"',
        ),
        (
            {"name": "ab", "items": [1], "colour": "blue"},
            '$.colour: expected one of ["red", "green", null], got "blue"',
        ),
        ({"name": "ab", "items": [1], "strict": False}, "$.strict: expected true, got false"),
        ({"name": "ab", "items": [1], "ratio": 1}, "$.ratio: expected a number < 1, got 1"),
        ({"name": "ab", "items": [1], "ratio": 0}, "$.ratio: expected a number > 0, got 0"),
        ({"name": "ab", "items": [1], "step": 7}, "$.step: expected a multiple of 5, got 7"),
        ({"name": "ab", "items": [1], "note": 3}, "$.note: expected a string or null, got 3"),
        (
            {"name": "ab", "items": [1], "maybe": {}},
            "$.maybe: expected a string or null, got an empty object",
        ),
        (
            {"name": "ab", "items": [1], "tags": {}},
            "$.tags: expected at least 1 property, got 0 properties",
        ),
        (
            {"name": "ab", "items": [1], "tags": {"a": 1, "b": 2}},
            "$.tags: expected at most 1 property, got 2 properties",
        ),
        (
            {"name": "ab", "items": [1], "odd key": None},
            '$["odd key"]: expected a boolean, got null',
        ),
    ],
)
def test_input_problems_speak_json(value: Any, problem: str) -> None:
    assert _input_problems(value) == (problem,)


def test_every_input_problem_is_listed_in_path_order() -> None:
    value = {"items": [1, "x", 20], "foo": None, "bar": 1}
    assert _input_problems(value) == (
        '$: missing required property "name"',
        '$: additional property "foo" is not allowed',
        '$: additional property "bar" is not allowed',
        '$.items[1]: expected an integer, got "x"',
        "$.items[2]: expected a number <= 9, got 20",
    )


def test_input_problems_quote_no_python() -> None:
    # None/True/False and single-quoted strings are how Python spells values.
    value = {"name": None, "items": [True, "x"], "colour": False, "strict": None}
    problems = _input_problems(value)
    assert len(problems) == 5
    for problem in problems:
        assert not any(word in problem for word in ("None", "True", "False", "'")), problem


@pytest.mark.parametrize(
    ("schema", "value", "problem"),
    [
        (
            {"not": {"type": "string"}},
            "x",
            '$: must not match the schema {"type":"string"}, got "x"',
        ),
        (
            {"anyOf": [{"type": "string"}, {"minimum": 3}]},
            1,
            "$: matches none of the anyOf alternatives, got 1",
        ),
        (
            {"oneOf": [{"type": "integer"}, {"minimum": 0}]},
            5,
            "$: matches more than one of the oneOf alternatives, got 5",
        ),
        (
            {"type": "array", "contains": {"const": 1}},
            [2],
            '$: expected an array with an item matching the schema {"const":1}',
        ),
        (
            {"dependentRequired": {"card": ["billing"]}},
            {"card": 1},
            '$: missing property "billing", required when "card" is present',
        ),
        (
            {"propertyNames": {"maxLength": 2}},
            {"abc": 1},
            '$: property name "abc": expected at most 2 characters, got "abc"',
        ),
        ({"properties": {"a": {"type": "string"}}}, {"a": "x" * 100}, None),
        (
            {"properties": {"a": {"maxLength": 1}}},
            {"a": "y" * 100},
            '$.a: expected at most 1 character, got "' + "y" * 60 + '…" (100 characters)',
        ),
        (
            {"enum": list(range(12))},
            "a",
            '$: expected one of [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, … (12 values)], got "a"',
        ),
    ],
)
def test_other_keywords_speak_json(schema: dict[str, Any], value: Any, problem: str | None) -> None:
    flow = parse_flow(
        {"flow": "f", "input_schema": schema, "steps": [{"id": "a", "sleep": {"for_ms": 1}}]}
    )
    if problem is None:
        start(flow, value)
        return
    assert _input_problems(value, schema) == (problem,)


def test_unevaluated_properties_are_named() -> None:
    schema = {"type": "object", "unevaluatedProperties": False, "properties": {"k": {}}}
    assert _input_problems({"k": 1, "z": None}, schema) == (
        '$: property "z" is not allowed (unevaluated)',
    )


def test_a_keyword_without_words_keeps_the_validators_message_in_json() -> None:
    schema = {"$schema": "http://json-schema.org/draft-03/schema#", "disallow": "string"}
    assert _input_problems("x", schema) == ('$: "string" is disallowed for "x" (disallow)',)


def test_a_ref_that_cannot_resolve_is_a_spec_problem() -> None:
    schema = {
        "$defs": {"id": {"type": "string"}},
        "properties": {
            "a": {"$ref": "#/$defs/id"},
            "b": {"$ref": "#/$defs/nope"},
            "c": {"$ref": "https://example.com/remote.json"},
        },
    }
    with pytest.raises(SpecError) as info:
        parse_flow(
            {"flow": "f", "input_schema": schema, "steps": [{"id": "a", "sleep": {"for_ms": 1}}]}
        )
    assert [(p.path, p.message) for p in info.value.problems] == [
        (
            "input_schema.properties.b.$ref",
            'invalid JSON Schema: $ref "#/$defs/nope" points at nothing in this schema',
        ),
        (
            "input_schema.properties.c.$ref",
            'invalid JSON Schema: $ref "https://example.com/remote.json" is not in this schema'
            " (remote $refs are never fetched)",
        ),
    ]


def test_a_ref_found_only_at_start_is_an_input_problem_not_a_crash() -> None:
    # With a nested $id the spec check leaves references to the validator.
    schema = {
        "$id": "https://example.com/root",
        "$defs": {"name": {"$id": "name", "type": "string"}},
        "properties": {"a": {"$ref": "name"}, "b": {"$ref": "missing"}},
    }
    assert _input_problems({"a": 1}, schema) == ("$.a: expected a string, got 1",)
    assert _input_problems({"b": 1}, schema) == (
        '$: the input_schema cannot be applied: $ref "missing" resolves to no part of it'
        " (remote $refs are never fetched)",
    )
