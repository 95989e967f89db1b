"""The ``updates:`` and ``queries:`` sections of a spec (language.md §16, §14)."""

from __future__ import annotations

import pytest

import flowcore
from flowcore import SpecError

BASE = """
flow: f
tools: {t: {}}
steps:
  - id: main
    call_tool: {tool: t}
"""


def problems(extra: str, base: str = BASE) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as err:
        flowcore.parse_flow(base + extra)
    return [(p.path, p.message) for p in err.value.problems]


def test_a_full_declaration_parses() -> None:
    flow = flowcore.parse_flow(
        BASE
        + """
limits: {max_running_updates: 3, max_updates: 50}
updates:
  approve.v2:
    description: Approve
    input_schema: {type: object, properties: {by: {type: string}}, required: [by]}
    validator: "${update.input.by != input.requester}"
    examples: [{by: alice}, {by: bob}]
    steps:
      - id: ask
        call_tool: {tool: t, input: "${ {by: update.input.by, main: steps.main.output} }"}
    reply: "${steps.ask.output}"
  ping: {}
queries:
  state:
    description: The state
    args_schema: {type: object}
    value: "${ {s: status, w: waiting, u: updates, m: metadata, a: args, o: output, e: error} }"
"""
    )
    approve = flow.updates["approve.v2"]
    assert approve.examples == ({"by": "alice"}, {"by": "bob"})
    assert approve.scoped == ("ask",)
    assert flow.by_id["ask"].path == "updates.approve.v2.steps[0]"
    assert flow.updates["ping"].examples == (None,)  # no schema: null is an input
    assert flow.updates["ping"].steps == ()
    assert flow.queries["state"].description == "The state"
    assert (flow.limits.max_running_updates, flow.limits.max_updates) == (3, 50)


def test_defaults() -> None:
    flow = flowcore.parse_flow(BASE)
    assert flow.updates == {} and flow.queries == {}
    assert (flow.limits.max_running_updates, flow.limits.max_updates) == (10, 2000)
    schema_only = flowcore.parse_flow(BASE + "updates:\n  u:\n    input_schema: {type: object}\n")
    assert schema_only.updates["u"].examples == ()  # null fails the schema: no example


@pytest.mark.parametrize(
    ("extra", "path", "words"),
    [
        ("updates:\n  u: {stepz: []}\n", "updates.u.stepz", "unknown key 'stepz'"),
        ("updates:\n  9bad: {}\n", "updates.9bad", "is not a valid name"),
        ("updates:\n  " + "a" * 101 + ": {}\n", "updates." + "a" * 101, "at most 100"),
        ("updates: [1]\n", "updates", "expected a mapping"),
        ("updates:\n  u: 3\n", "updates.u", "expected a mapping of update fields"),
        (
            "updates:\n  u:\n    input_schema: {type: object, required: [by]}\n"
            "    examples: [{}]\n",
            "updates.u.examples[0]",
            "example fails the input_schema",
        ),
        ("updates:\n  u: {validator: 'a ++ b'}\n", "updates.u.validator", "invalid JMESPath"),
        ("updates:\n  u: {reply: '${a ++}'}\n", "updates.u.reply", "invalid JMESPath"),
        (
            "updates:\n  u: {input_schema: {type: 3}}\n",
            "updates.u.input_schema.type",
            "JSON Schema",
        ),
        ("queries:\n  q: {}\n", "queries.q", "missing required key 'value'"),
        ("queries:\n  q: {value: '${a ++}'}\n", "queries.q.value", "invalid JMESPath"),
        ("queries:\n  q: {value: 1, args: {}}\n", "queries.q.args", "unknown key 'args'"),
        ("limits: {max_updates: 0}\n", "limits.max_updates", "positive integer"),
        ("limits: {max_running_updates: 0}\n", "limits.max_running_updates", "positive"),
    ],
)
def test_bad_declarations(extra: str, path: str, words: str) -> None:
    found = problems(extra)
    assert any(p == path and words in m for p, m in found), found


@pytest.mark.parametrize(
    ("extra", "path", "words"),
    [
        # ``update`` exists only in an update's validator, steps and reply
        (
            "output: '${update.input}'\n",
            "output",
            "'update' exists only in an update's validator, steps and reply",
        ),
        # ``args`` only in a query's value
        (
            "updates:\n  u: {reply: '${args}'}\n",
            "updates.u.reply",
            "'args' exists only in a query's value",
        ),
        ("updates:\n  u: {reply: '${update.nope}'}\n", "updates.u.reply", "has no field 'nope'"),
        # the flow's steps may not read a handler's steps
        (
            "updates:\n  u:\n    steps: [{id: h, call_tool: {tool: t}}]\n"
            "output: '${steps.h.output}'\n",
            "output",
            "in the steps of update 'u'",
        ),
        # nor may a query's value
        (
            "updates:\n  u:\n    steps: [{id: h, call_tool: {tool: t}}]\n"
            "queries:\n  q: {value: '${steps.h}'}\n",
            "queries.q.value",
            "in the steps of update 'u'",
        ),
        # a handler may not read another update's steps
        (
            "updates:\n  u:\n    steps: [{id: h, call_tool: {tool: t}}]\n"
            "  v:\n    steps: [{id: k, call_tool: {tool: t, input: '${steps.h.output}'}}]\n",
            "updates.v.steps[0].call_tool.input",
            "in the steps of update 'u'",
        ),
        # a validator runs before the handler's steps
        (
            "updates:\n  u:\n    validator: 'steps.h.output'\n"
            "    steps: [{id: h, call_tool: {tool: t}}]\n",
            "updates.u.validator",
            "comes after this",
        ),
        # step ids are unique across the whole flow
        (
            "updates:\n  u:\n    steps: [{id: main, call_tool: {tool: t}}]\n",
            "updates.u.steps[0].id",
            "duplicate step id 'main'",
        ),
        (
            "updates:\n  u:\n    steps: [{id: h, call_tool: {tool: nope}}]\n",
            "updates.u.steps[0].call_tool.tool",
            "tool 'nope' is not declared",
        ),
    ],
)
def test_reads_are_checked(extra: str, path: str, words: str) -> None:
    found = problems(extra)
    assert any(p == path and words in m for p, m in found), found


def test_a_handler_reads_the_flows_steps_and_its_own() -> None:
    flowcore.parse_flow(
        BASE
        + """
updates:
  u:
    validator: "steps.main.status == 'succeeded' && update.input"
    steps:
      - {id: a, call_tool: {tool: t, input: "${steps.main.output}"}}
      - {id: b, call_tool: {tool: t, input: "${steps.a.output}"}}
    reply: "${ [steps.a.output, steps.b.output, update.id, update.principal] }"
queries:
  q: {value: "${ [steps.main.output, input, run.id] }"}
"""
    )


def test_the_worst_case_budget_counts_each_handler_max_updates_times() -> None:
    flow = flowcore.parse_flow(
        BASE
        + "limits: {max_updates: 3}\n"
        + "updates:\n  u:\n    steps: [{id: h, call_tool: {tool: t}}]\n"
    )
    bound = flowcore.budget_bound(flow)
    assert (bound.steps, bound.tool_calls) == (1 + 3, 1 + 3)
    assert [row.id for row in bound.breakdown] == ["main", "h"]
