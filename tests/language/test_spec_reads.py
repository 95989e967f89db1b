"""What expressions read, checked when the spec is parsed (language.md §8.2,
§8.4, §14): names that do not exist where an expression stands, fields a
record never has, steps that cannot have run where they are read, JMESPath
calls that always fail; ``signal_run.signal`` as a template; and
``flowcore validate``'s warning about a scheduled call the run may cancel."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

import flowcore
from flowcore import SpecError, parse_flow
from flowcore.testing import flows
from flowcore_cli.main import run as cli
from tests.harness import Run

TYPO = """\
flow: typo
tools: {t: {class: readonly}}
steps:
  - id: a
    call_tool: {tool: t, input: {x: 1}}
  - id: b
    call_tool: {tool: t, input: {z: "${stepz.a.output}", w: "${steps.a.outputt}"}}
"""


def problems(spec: str | dict[str, Any]) -> list[tuple[str, str]]:
    """``(path, message)`` of every problem (none: the spec is valid)."""
    if isinstance(spec, str):
        spec = textwrap.dedent(spec)
    try:
        parse_flow(spec, "f.yaml")
    except SpecError as exc:
        return [(p.path, p.message) for p in exc.problems]
    return []


def one(spec: str | dict[str, Any], path: str, *words: str) -> str:
    """The one problem of ``spec``: at ``path``, its message holding ``words``."""
    found = problems(spec)
    assert len(found) == 1, found
    assert found[0][0] == path, found
    for word in words:
        assert word in found[0][1], found
    return found[0][1]


def valid(spec: str | dict[str, Any]) -> None:
    assert problems(spec) == []


def flow(*steps: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"flow": "f", "tools": {"t": {}}, "steps": list(steps), **top}


def call(sid: str, value: Any = None, **more: Any) -> dict[str, Any]:
    return {"id": sid, "call_tool": {"tool": "t", "input": value}, **more}


# --- the example of a typo: both reads refused, with place and suggestion -----------------


def test_a_misspelt_root_and_a_misspelt_result_field_are_refused_with_their_places() -> None:
    with pytest.raises(SpecError) as caught:
        parse_flow(TYPO, "typo.yaml")
    first, second = caught.value.problems
    assert (first.line, first.column, first.path) == (7, 34, "steps[1].call_tool.input.z")
    assert first.message == (
        "expression reads 'stepz', which is not defined here (did you mean 'steps'?);"
        " here it can read input, steps, run"
    )
    assert (second.line, second.column, second.path) == (7, 58, "steps[1].call_tool.input.w")
    assert second.message == (
        "the result of step 'a' has no field 'outputt' (did you mean 'output'?):"
        " it has status, output, error"
    )
    assert first.location == "typo.yaml:7:34"


def test_validate_refuses_the_typo_with_file_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "typo.yaml"
    spec.write_text(TYPO)
    assert cli(["validate", str(spec)]) == 2
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{spec}:7:34: expression reads 'stepz'")
    assert "(did you mean 'steps'?)" in lines[0]
    assert lines[1].startswith(f"{spec}:7:58: the result of step 'a' has no field 'outputt'")
    assert lines[2] == "2 problems in 1 of 1 spec"


# --- names: what exists where an expression stands ------------------------------------------


def test_error_is_a_name_only_inside_a_catch_clause() -> None:
    guarded = {
        "id": "g",
        "try": [call("a")],
        "catch": [{"steps": [call("h", "${error.type}")]}],
    }
    valid(flow(guarded))
    message = one(flow(call("a", "${error.type}")), "steps[0].call_tool.input", "'error'")
    assert "exists only inside a catch clause's steps" in message
    assert message.endswith("here it can read input, steps, run")


def test_loop_variables_exist_only_in_their_loop() -> None:
    loop: dict[str, Any] = {
        "id": "per",
        "for_each": {"items": "${input.xs}", "as": "svc", "steps": [call("a", "${svc}")]},
    }
    valid(flow(loop))
    message = one(flow(loop, call("b", "${svc}")), "steps[1].call_tool.input")
    assert "exists only inside the steps of for_each 'per'" in message
    inside = one(
        flow({**loop, "for_each": {**loop["for_each"], "steps": [call("a", "${scv}")]}}),
        "steps[0].for_each.steps[0].call_tool.input",
        "did you mean 'svc'?",
    )
    assert inside.endswith("here it can read input, steps, run, svc, index")
    one(
        flow({"id": "per", "for_each": {"items": "${item}", "steps": [call("a")]}}),
        "steps[0].for_each.items",
        "'item'",
    )


def test_fire_count_payload_received_members_and_schedule_where_they_exist() -> None:
    valid(
        flow(
            {
                "id": "poll",
                "repeat": {
                    "every_ms": 1000,
                    "until": "fire_count >= `3`",
                    "steps": [call("a", "${fire_count}")],
                },
            },
            {"id": "w", "await_signal": {"signal": "s", "where": "payload.ok"}},
            {"id": "v", "await_signal": {"signal": "s", "until": "length(received) > `1`"}},
            {"id": "team", "run_team": {"team": "crew", "prompt": "${members.x}"}},
        )
    )
    one(flow(call("a", "${fire_count}")), "steps[0].call_tool.input", "repeat's steps")
    one(flow(call("a", "${payload}")), "steps[0].call_tool.input", "await_signal's where")
    one(
        flow({"id": "w", "await_signal": {"signal": "s", "where": "paylod.ok"}}),
        "steps[0].await_signal.where",
        "did you mean 'payload'?",
    )
    one(
        flow({"id": "w", "await_signal": {"signal": "s", "where": "received"}}),
        "steps[0].await_signal.where",
        "'received' exists only in an await_signal's until",
    )
    crew = {"members": [{"member": "m", "agent": "x", "instructions": "${member.x}"}]}
    one(
        flow({"id": "team", "run_team": {"team": "crew", "prompt": "p"}}, teams={"crew": crew}),
        "teams.crew.members[0].instructions",
        "did you mean 'members'?",
    )
    schedules = {"daily": {"every": "1d", "input": {"day": "${input.day}"}}}
    one(
        flow(call("a"), schedules=schedules),
        "schedules.daily.input.day",
        "'input'",
        "here it can read schedule",
    )
    valid(flow(call("a"), schedules={"daily": {"every": "1d", "input": "${schedule.at}"}}))


def test_bare_true_and_false_are_refused_and_bare_null_reads_null() -> None:
    message = one(
        flow({"id": "s", "switch": [{"if": "input.ok == true", "steps": [call("a")]}]}),
        "steps[0].switch[0].if",
    )
    assert "(`true`)" in message and "backticks" in message
    valid(flow({"id": "s", "switch": [{"if": "run.incarnation == null", "steps": [call("a")]}]}))


def test_names_inside_projections_filters_and_function_references_are_not_roots() -> None:
    valid(
        flow(
            call("a", "${input.items[?price > `10`].name}"),
            call("b", "${sort_by(input.items, &price)[*].name}"),
            call("c", "${steps.a.output | [0].anything}"),
            call("d", "${ {first: input.xs[0], n: length(keys(steps))} }"),
        )
    )


# --- fields of records whose shape is known -----------------------------------------------


def test_fields_of_a_result_an_error_and_run_are_checked() -> None:
    ask = {"id": "q", "ask_human": {"question": "ok?"}}
    valid(flow(ask, call("a", "${steps.q.answer}"), call("b", "${steps.a.error.details.x}")))
    one(
        flow(call("a"), call("b", "${steps.a.answer}")),
        "steps[1].call_tool.input",
        "step 'a' is a call_tool: only an ask_human step's result has 'answer'",
    )
    one(
        flow(call("a"), call("b", "${steps.a.error.typ}")),
        "steps[1].call_tool.input",
        "the error of step 'a' has no field 'typ' (did you mean 'type'?)",
    )
    one(
        flow(call("a"), call("b", "${steps.a.error.cause.mesage}")),
        "steps[1].call_tool.input",
        "has no field 'mesage' (did you mean 'message'?)",
    )
    one(flow(call("a", "${run.atempt}")), "steps[0].call_tool.input", "did you mean 'attempt'?")
    catch = {"id": "g", "try": [call("a")], "catch": [{"steps": [call("h", "${error.mesage}")]}]}
    one(flow(catch), "steps[0].catch[0].steps[0].call_tool.input", "did you mean 'message'?")
    one(
        flow(call("a"), schedules={"d": {"every": "1d", "input": "${schedule.att}"}}),
        "schedules.d.input",
        "did you mean 'at'?",
    )


# --- steps read where they can never have run ------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "path", "words"),
    [
        pytest.param(
            flow(call("a", "${steps.b.output}"), call("b")),
            "steps[0].call_tool.input",
            "step 'b' comes after this in the same steps",
            id="later-step",
        ),
        pytest.param(
            flow(call("a", "${steps.a.output}")),
            "steps[0].call_tool.input",
            "step 'a' reads its own result",
            id="itself",
        ),
        pytest.param(
            flow({"id": "g", "try": [call("a", "${steps.g.status}")]}),
            "steps[0].try[0].call_tool.input",
            "this is inside step 'g'",
            id="the-step-it-is-in",
        ),
        pytest.param(
            flow({"id": "s", "switch": [{"if": "steps.a.output", "steps": [call("a")]}]}),
            "steps[0].switch[0].if",
            "step 'a' runs inside step 's', after this is evaluated",
            id="switch-condition-reads-its-case",
        ),
        pytest.param(
            flow(
                {
                    "id": "s",
                    "switch": [
                        {"if": "input.x", "steps": [call("a")]},
                        {"else": [call("b", "${steps.a.output}")]},
                    ],
                }
            ),
            "steps[0].switch[1].else[0].call_tool.input",
            "step 'a' is in another case of switch 's'",
            id="another-switch-case",
        ),
        pytest.param(
            flow(
                {
                    "id": "p",
                    "parallel": {
                        "max_concurrency": 1,
                        "branches": {"x": [call("a", "${steps.b.output}")], "y": [call("b")]},
                    },
                }
            ),
            "steps[0].parallel.branches.x[0].call_tool.input",
            "branch 'y' of parallel 'p', which starts only after this branch 'x' has ended",
            id="parallel-one-at-a-time-later-branch",
        ),
        pytest.param(
            flow(
                {
                    "id": "g",
                    "try": [call("a", "${steps.h.output}")],
                    "catch": [{"steps": [call("h")]}],
                }
            ),
            "steps[0].try[0].call_tool.input",
            "step 'h' is in a catch clause of 'g'",
            id="catch-read-from-try",
        ),
        pytest.param(
            flow(
                {
                    "id": "g",
                    "try": [call("a")],
                    "catch": [
                        {"errors": ["x"], "steps": [call("h")]},
                        {"steps": [call("k", "${steps.h.output}")]},
                    ],
                }
            ),
            "steps[0].catch[1].steps[0].call_tool.input",
            "another catch clause of 'g'",
            id="another-catch-clause",
        ),
        pytest.param(
            flow(
                {"id": "per", "for_each": {"items": "${input.xs}", "steps": [call("a")]}},
                call("b", "${steps.a.output}"),
            ),
            "steps[1].call_tool.input",
            "inside the steps of for_each 'per'",
            id="for-each-body-after-the-loop",
        ),
        pytest.param(
            flow(
                {"id": "poll", "repeat": {"every_ms": 10, "max_fires": 2, "steps": [call("a")]}},
            )
            | {"output": "${steps.a.output}"},
            "output",
            "inside the steps of repeat 'poll'",
            id="repeat-body-from-output",
        ),
        pytest.param(
            flow(call("a", compensate=[call("undo")]), call("b", "${steps.undo.status}")),
            "steps[1].call_tool.input",
            "step 'undo' runs only as a compensation",
            id="compensation-from-the-flow",
        ),
        pytest.param(
            flow(
                call("a", "${steps.last.output}"),
                on_budget_exhausted={"reserve": {"steps": 1}, "steps": [call("last")]},
            ),
            "steps[0].call_tool.input",
            "one of on_budget_exhausted's steps",
            id="final-step-from-the-flow",
        ),
    ],
)
def test_a_step_read_where_it_can_never_have_run_is_refused(
    spec: dict[str, Any], path: str, words: str
) -> None:
    message = one(spec, path, words)
    assert "so it reads null here" in message


def test_a_step_that_may_have_run_is_readable_where_it_may_be_null() -> None:
    branches = {
        "id": "p",
        "parallel": {
            "mode": "any",
            "max_concurrency": 1,
            "branches": {"x": [call("a")], "y": [call("b", "${steps.a.status}")]},
        },
    }
    beside = {
        "id": "p2",
        "parallel": {
            "mode": "race",
            "branches": {"x": [call("a2")], "y": [call("b2", "${steps.a2.output}")]},
        },
    }
    cases = {
        "id": "s",
        "switch": [{"if": "input.x", "steps": [call("c")]}, {"else": [call("d")]}],
    }
    guarded = {
        "id": "g",
        "try": [call("e"), call("f")],
        "catch": [{"steps": [call("h", "${[steps.e.status, steps.f.status]}")]}],
    }
    poll = {
        "id": "poll",
        "repeat": {"every_ms": 10, "until": "steps.i.output.done", "steps": [call("i")]},
    }
    valid(
        flow(
            branches,
            beside,
            cases,
            guarded,
            poll,
            # a compensation runs as the run winds down: anything it can see may have run
            call("j", compensate=[call("undo", "${steps.k.output}")]),
            call("k", "${[steps.a.output, steps.c.output, steps.d.output, steps.h.output]}"),
            output="${ {c: steps.c.output, d: steps.d.output, e: steps.e.status} }",
            on_budget_exhausted={
                "reserve": {"steps": 2},
                "steps": [call("last", "${steps.k.output}"), call("z", "${steps.last.output}")],
                "output": "${steps.z.output}",
            },
        )
    )


def test_inside_a_retried_composite_an_earlier_attempts_results_stay_readable() -> None:
    body = [call("a", "${steps.b.output}"), call("b")]
    valid(flow({"id": "g", "try": body, "retry": {"max_attempts": 2}}))
    one(
        flow({"id": "g", "try": body, "retry": {"max_attempts": 1}}),
        "steps[0].try[0].call_tool.input",
        "comes after this",
    )


def test_the_runtime_reads_null_where_the_check_allows_a_step_that_did_not_run() -> None:
    spec = flow(
        {
            "id": "s",
            "switch": [{"if": "input.x", "steps": [call("c")]}, {"else": [call("d")]}],
        },
        output="${ {c: steps.c.output, d: steps.d.output} }",
    )
    r = Run(spec, {"x": True})
    r.ok("r/c#1", "C")
    assert r.settled is not None and r.settled.output == {"c": "C", "d": None}


# --- JMESPath functions ------------------------------------------------------------------------


def test_an_unknown_function_a_wrong_arity_and_a_missing_reference_are_refused() -> None:
    one(
        flow(call("a", "${lenght(input.xs)}")),
        "steps[0].call_tool.input",
        "unknown JMESPath function lenght() (did you mean length()?)",
    )
    one(
        flow(call("a", "${length(input.xs, input.ys)}")),
        "steps[0].call_tool.input",
        "JMESPath function length() takes 1 argument, got 2",
    )
    one(
        flow(call("a", "${sort_by(input.xs, input.key)}")),
        "steps[0].call_tool.input",
        "argument 2 of sort_by() must be an expression reference (&field)",
    )
    one(
        flow({"id": "s", "switch": [{"if": "contains(&x, 'a')", "steps": [call("a")]}]}),
        "steps[0].switch[0].if",
        "argument 1 of contains() is an expression reference",
    )
    valid(flow(call("a", "${not_null(input.a, input.b, `1`)}")))


# --- every example and generated flow stays valid -----------------------------------------------


def test_every_shipped_example_still_validates() -> None:
    root = Path(__file__).resolve().parents[2]
    examples = sorted((root / "specs" / "examples").glob("*.yaml"))
    assert examples
    for path in examples:
        parse_flow(path.read_text(), str(path))


# --- signal_run.signal is a template ------------------------------------------------------------

SENDS = """
flow: f
steps:
  - id: tell
    signal_run: {run: "${input.to}", signal: "${input.name}", payload: 1}
"""


def test_signal_run_evaluates_its_signal_as_a_template() -> None:
    run = Run(SENDS, {"to": "r-9", "name": "child-done"})
    (sent,) = run.wire()
    assert sent["signal"] == "child-done"
    literal = Run(SENDS.replace('"${input.name}"', '"done-${input.to}"'), {"to": "r-9"})
    assert literal.wire()[0]["signal"] == "done-r-9"


def test_a_signal_that_evaluates_to_no_name_fails_the_step_and_sends_nothing() -> None:
    run = Run(SENDS, {"to": "r-9", "name": ""})
    assert run.kinds() == ["settled"]
    settled = run.settled
    assert settled is not None and settled.error is not None
    assert settled.error.type == "invalid-signal-name"
    assert "signal_run.signal must be 1 to" in settled.error.message


def test_a_signal_that_is_not_text_or_does_not_compile_is_refused() -> None:
    send: dict[str, Any] = {"run": "r", "signal": 5}
    one(flow({"id": "a", "signal_run": send}), "steps[0].signal_run.signal", "expected a string")
    send = {"run": "r", "signal": "${input.name"}
    one(flow({"id": "a", "signal_run": send}), "steps[0].signal_run.signal", "unclosed")
    send = {"run": "r", "signal": "${inptu.name}"}
    one(flow({"id": "a", "signal_run": send}), "steps[0].signal_run.signal", "'input'")


def test_an_expression_in_a_field_that_is_a_name_is_refused() -> None:
    wait = {"id": "w", "await_signal": {"signal": "${input.name}"}}
    one(flow(wait), "steps[0].await_signal.signal", "await_signal.signal is a name")
    child = {"id": "c", "run_subflow": {"flow": "kid-${input.n}"}}
    one(flow(child), "steps[0].run_subflow.flow", "is not evaluated")
    valid(flow({"id": "w", "await_signal": {"signal": "done"}}))


# --- validate's warning: a scheduled call the run may cancel -------------------------------------

REMINDER = """\
flow: remind
tools: {send_reminder: {}, t: {}}
steps:
  - id: work
    call_tool: {tool: t}
  - id: nudge
    schedule: {tool: send_reminder, input: {to: "${input.who}"}, delay_ms: 1h}
"""


def warnings_of(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> list[Any]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    assert cli(["validate", "--json", str(spec)]) == 0
    (result,) = json.loads(capsys.readouterr().out)["files"]
    return list(result["warnings"])


def test_validate_warns_of_a_schedule_the_run_may_cancel_before_it_is_due(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "remind.yaml"
    spec.write_text(REMINDER)
    assert cli(["validate", str(spec)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{spec}: ok (flow remind v1, 2 steps)"
    assert lines[1].startswith(f"{spec}: warning: schedule step 'nudge': the run may settle")
    assert "set outlive_run: true" in lines[1] and lines[1].endswith("(at steps[1])")
    (warning,) = warnings_of(tmp_path, REMINDER, capsys)
    assert warning["step"] == "nudge" and warning["path"] == "steps[1]"
    assert "cancels a call not yet due" in warning["message"]


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(
            lambda t: t.replace("delay_ms: 1h}", "delay_ms: 1h, outlive_run: true}"), id="outlives"
        ),
        pytest.param(lambda t: t + "  - id: wait\n    sleep: {for_ms: 2h}\n", id="a-sleep-after"),
        pytest.param(
            lambda t: t + "  - id: wait\n    await_signal: {signal: done}\n", id="a-wait-after"
        ),
    ],
)
def test_no_warning_when_the_call_outlives_the_run_or_something_waits_after_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any
) -> None:
    assert warnings_of(tmp_path, change(REMINDER), capsys) == []


def test_the_warning_follows_the_flow_into_nested_lists() -> None:
    from flowcore.language.lint import spec_warnings

    def schedule(sid: str) -> dict[str, Any]:
        return {"id": sid, "schedule": {"tool": "t", "delay_ms": 1000}}

    sleep = {"id": "zz", "sleep": {"for_ms": 10}}
    parsed = flowcore.parse_flow(
        flow(
            {"id": "poll", "repeat": {"every_ms": 10, "max_fires": 2, "steps": [schedule("r")]}},
            {
                "id": "p",
                "parallel": {"branches": {"x": [schedule("px")], "y": [sleep]}},
            },
            {"id": "g", "try": [schedule("g1")], "catch": [{"steps": [schedule("g2")]}]},
        )
    )
    # The repeat waits between fires and the branch y sleeps beside px; g1 and g2
    # come last, with nothing that waits after them.
    assert [w.step for w in spec_warnings(parsed)] == ["g1", "g2"]


@settings(max_examples=150, derandomize=True, deadline=None)
@given(
    flows(
        max_depth=3,
        kinds=(
            "call_tool",
            "schedule",
            "cancel_scheduled",
            "switch",
            "parallel",
            "for_each",
            "repeat",
            "try",
        ),
    )
)
def test_generated_flows_cancel_only_the_schedules_they_can_read(spec: dict[str, Any]) -> None:
    parse_flow(spec)
