"""Durations as people write them, decided at run time, and cron in a time zone.

- ``parse_duration``: both written forms (``2h30m`` and ISO-8601 ``PT2H30M``)
  agree with each other and with milliseconds;
- every duration field refuses a bad literal at parse time, with its path,
  line and column (``parse_flow`` and ``flowcore validate``);
- an expression (``${...}``) is evaluated when the step begins; a bad value
  fails the step ``invalid-duration``, which ``try/catch`` catches;
- a repeat's cadence decided at run time is kept in the state, so a decoded
  snapshot and a replay tick at the same times;
- a cron read in a time zone across DST (a spring-forward gap, a fall-back
  repeat).
"""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import flowcore
import flowcore.language.spec
from flowcore import SpecError, parse_flow
from flowcore.decision.state import RepeatProgress, StepFrame
from flowcore.language.times import MAX_DURATION_MS, DurationError, next_cron_ms, parse_duration
from flowcore.log.records import encode_records
from flowcore.testing import Simulator
from tests.cli.test_cli import fc
from tests.harness import Run

# --- parse_duration ---------------------------------------------------------------------

_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1))


@st.composite
def _parts(draw: st.DrawFn) -> dict[str, int]:
    """Some units (at least one), each with an amount, in a duration under ten years."""
    chosen = draw(st.lists(st.sampled_from([u for u, _ in _UNITS]), min_size=1, unique=True))
    return {unit: draw(st.integers(0, 3000)) for unit in chosen}


def _human(parts: dict[str, int]) -> str:
    return "".join(f"{parts[u]}{u}" for u, _ in _UNITS if u in parts)


def _iso(parts: dict[str, int]) -> str:
    days = f"{parts['d']}D" if "d" in parts else ""
    time = "".join(f"{parts[u]}{u.upper()}" for u in ("h", "m") if u in parts)
    if "s" in parts or "ms" in parts:
        time += f"{parts.get('s', 0) + parts.get('ms', 0) / 1000:.3f}S"
    return f"P{days}T{time}" if time else f"P{days}"


@given(_parts())
def test_both_written_forms_read_as_the_same_milliseconds(parts: dict[str, int]) -> None:
    expected = sum(parts[u] * size for u, size in _UNITS if u in parts)
    assert parse_duration(_human(parts), allow_zero=True) == expected
    assert parse_duration(_iso(parts), allow_zero=True) == expected
    assert parse_duration(expected, allow_zero=True) == expected


@given(st.integers(1, MAX_DURATION_MS))
def test_milliseconds_written_back_as_text_read_the_same(ms: int) -> None:
    parts = {}
    rest = ms
    for unit, size in _UNITS:
        parts[unit], rest = divmod(rest, size)
    assert parse_duration(_human(parts)) == ms
    assert parse_duration(_iso(parts)) == ms


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("90s", 90_000),
        ("2h30m", 9_000_000),
        ("1d", 86_400_000),
        ("250ms", 250),
        ("1m30s", 90_000),
        ("1.5s", 1500),
        (" 5m ", 300_000),
        ("PT2H", 7_200_000),
        ("P1DT2H", 93_600_000),
        ("PT0.25S", 250),
        (1500, 1500),
        (1500.0, 1500),
    ],
)
def test_written_durations(text: Any, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("soon", "'soon' is not a duration: write it like '90s'"),
        ("5000", "(milliseconds are a number, without quotes)"),
        ("2 hours", "is not a duration"),
        ("1h1h", "is not a duration"),
        ("P1Y", "Only units 'D', 'H', 'M', and 'S' are supported"),
        ("-5s", "a duration cannot be negative, got '-5s'"),
        ("-PT5S", "a duration cannot be negative"),
        (-1, "a duration cannot be negative, got -1"),
        (0, "a duration must be greater than zero"),
        ("0s", "a duration must be greater than zero"),
        (2.5, "a duration in milliseconds must be whole, got 2.5"),
        (True, "expected a duration"),
        (None, "expected a duration"),
        ([1], "expected a duration"),
        ("3661d", "is longer than ten years"),
        (MAX_DURATION_MS + 1, "is longer than ten years"),
    ],
)
def test_bad_durations_say_what_is_wrong(value: Any, message: str) -> None:
    with pytest.raises(DurationError) as caught:
        parse_duration(value)
    assert message in str(caught.value)


def test_zero_only_where_allowed() -> None:
    assert parse_duration(0, allow_zero=True) == 0
    assert parse_duration("0s", allow_zero=True) == 0
    assert parse_duration(MAX_DURATION_MS) == MAX_DURATION_MS


# --- literals at parse time -------------------------------------------------------------

_FIELDS: dict[str, tuple[str, tuple[Any, ...]]] = {
    # field -> (a step using it with the value {v}, the path of the value)
    "schedule.delay_ms": (
        "{{id: s, schedule: {{tool: t, delay_ms: {v}}}}}",
        ("steps", 0, "schedule", "delay_ms"),
    ),
    "repeat.every_ms": (
        "{{id: s, repeat: {{every_ms: {v}, max_fires: 1,"
        " steps: [{{id: x, call_tool: {{tool: t}}}}]}}}}",
        ("steps", 0, "repeat", "every_ms"),
    ),
    "sleep.for_ms": ("{{id: s, sleep: {{for_ms: {v}}}}}", ("steps", 0, "sleep", "for_ms")),
    "timeout_ms": (
        "{{id: s, call_tool: {{tool: t}}, timeout_ms: {v}}}",
        ("steps", 0, "timeout_ms"),
    ),
    "ask_human.timeout_ms": (
        "{{id: s, ask_human: {{question: q, timeout_ms: {v}}}}}",
        ("steps", 0, "ask_human", "timeout_ms"),
    ),
    "await_signal.timeout_ms": (
        "{{id: s, await_signal: {{signal: go, timeout_ms: {v}}}}}",
        ("steps", 0, "await_signal", "timeout_ms"),
    ),
    "retry.initial_interval_ms": (
        "{{id: s, call_tool: {{tool: t}}, retry: {{initial_interval_ms: {v}}}}}",
        ("steps", 0, "retry", "initial_interval_ms"),
    ),
    "retry.max_interval_ms": (
        "{{id: s, call_tool: {{tool: t}}, retry: {{max_interval_ms: {v}}}}}",
        ("steps", 0, "retry", "max_interval_ms"),
    ),
}


def _spec(field: str, value: str) -> str:
    step, _ = _FIELDS[field]
    return f"flow: f\ntools: {{t: {{}}}}\nsteps:\n  - {step.format(v=value)}\n"


def _value(flow: flowcore.Flow, field: str) -> Any:
    step = flow.steps[0]
    match field:
        case "timeout_ms":
            return step.timeout_ms
        case "retry.initial_interval_ms" | "retry.max_interval_ms":
            assert step.retry is not None
            return getattr(step.retry, field.split(".")[1])
        case _:
            return getattr(step.body, field.split(".")[1])


@pytest.mark.parametrize("field", sorted(_FIELDS))
@pytest.mark.parametrize(("text", "ms"), [("90s", 90_000), ("PT2H", 7_200_000), ("1500", 1500)])
def test_every_duration_field_reads_people_s_durations(field: str, text: str, ms: int) -> None:
    assert _value(parse_flow(_spec(field, text)), field) == ms


@pytest.mark.parametrize("field", sorted(_FIELDS))
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("soon", "'soon' is not a duration"),
        ("-5s", "a duration cannot be negative"),
        ("3700d", "longer than ten years"),
        ("'5000'", "milliseconds are a number, without quotes"),
    ],
)
def test_a_bad_literal_is_a_spec_problem_with_its_place(
    field: str, text: str, message: str
) -> None:
    with pytest.raises(SpecError) as caught:
        parse_flow(_spec(field, text), source_name="f.yaml")
    (problem,) = caught.value.problems
    _, path = _FIELDS[field]
    assert problem.path == flowcore.language.spec._format_path(path)
    assert message in problem.message
    assert (problem.source, problem.line) == ("f.yaml", 4)
    assert problem.column is not None and problem.column > 5


@pytest.mark.parametrize("field", ["repeat.every_ms", "timeout_ms"])
def test_a_zero_cadence_or_step_timeout_is_refused_in_any_form(field: str) -> None:
    for zero in ("0", "0s", "PT0S"):
        with pytest.raises(SpecError, match="must be positive"):
            parse_flow(_spec(field, zero))


@pytest.mark.parametrize("field", ["retry.initial_interval_ms", "retry.max_interval_ms"])
def test_retry_intervals_take_no_expression(field: str) -> None:
    with pytest.raises(SpecError, match="cannot be an expression"):
        parse_flow(_spec(field, '"${input.wait}"'))


def test_the_budget_s_wall_clock_reads_text_too() -> None:
    flow = parse_flow(
        "flow: f\nbudget: {wall_clock_ms: 1h}\nsteps: [{id: a, sleep: {for_ms: 1}}]\n"
    )
    assert flow.budget.wall_clock_ms == 3_600_000


def test_an_expression_field_reads_its_expression_s_step_ids_and_syntax() -> None:
    spec = _spec("timeout_ms", '"${steps.plam.output}"')
    with pytest.raises(SpecError, match="expression reads unknown step 'plam'"):
        parse_flow(spec)
    with pytest.raises(SpecError, match=r"steps\[0\]\.sleep\.for_ms"):
        parse_flow(_spec("sleep.for_ms", '"${input.[}"'))


def test_validate_prints_each_bad_duration_at_file_line_column(tmp_path: Path) -> None:
    spec = tmp_path / "times.yaml"
    spec.write_text(
        "flow: times\n"
        "tools: {t: {}}\n"
        "steps:\n"
        "  - id: nap\n"
        "    sleep: {for_ms: 2 hours}\n"
        "  - id: call\n"
        "    call_tool: {tool: t}\n"
        "    timeout_ms: -5s\n"
        "  - id: nightly\n"
        "    repeat:\n"
        "      cron: '0 3 * * *'\n"
        "      timezone: Europe/Pariss\n"
        "      steps: [{id: x, call_tool: {tool: t}}]\n"
    )
    proc = fc("validate", spec)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout.splitlines() == [
        f"{spec}:5:13: '2 hours' is not a duration: write it like '90s', '2h30m', '1d', '250ms'"
        " or ISO-8601 'PT2H' (at steps[0].sleep.for_ms)",
        f"{spec}:8:5: a duration cannot be negative, got '-5s' (at steps[1].timeout_ms)",
        f"{spec}:12:7: unknown time zone 'Europe/Pariss' (did you mean 'Europe/Paris'?)"
        " (an IANA name such as 'Europe/Paris' or 'UTC') (at steps[2].repeat.timezone)",
        "3 problems in 1 of 1 spec",
    ]
    spec.write_text(
        "flow: times\ntools: {t: {}}\nsteps:\n  - id: nap\n    sleep: {for_ms: 1m30s}\n"
    )
    proc = fc("validate", spec)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- time zones at parse time ------------------------------------------------------------


def _repeat(extra: str) -> str:
    return (
        "flow: f\ntools: {t: {}}\nsteps:\n"
        f"  - {{id: r, repeat: {{{extra}, max_fires: 1,"
        " steps: [{id: x, call_tool: {tool: t}}]}}\n"
    )


def test_a_cron_takes_an_iana_time_zone() -> None:
    body = parse_flow(_repeat("cron: '0 9 * * 1-5', timezone: America/New_York")).steps[0].body
    assert isinstance(body, flowcore.language.spec.RepeatStep)
    assert (body.cron, body.timezone) == ("0 9 * * 1-5", "America/New_York")
    assert parse_flow(_repeat("cron: '0 9 * * *'")).steps[0].body.timezone is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("cron: '0 9 * * *', timezone: Europe/Pariss", "(did you mean 'Europe/Paris'?)"),
        ("cron: '0 9 * * *', timezone: Mars/Olympus", "unknown time zone 'Mars/Olympus' (an IANA"),
        ("cron: '0 9 * * *', timezone: ../../etc/passwd", "unknown time zone '../../etc/passwd'"),
        ("cron: '0 9 * * *', timezone: ''", "unknown time zone ''"),
        ("cron: '0 9 * * *', timezone: 3", "expected a string, got the number 3"),
        ("every_ms: 1m, timezone: UTC", "timezone applies to a cron"),
    ],
)
def test_a_bad_time_zone_is_a_spec_problem(extra: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_flow(_repeat(extra))
    (problem,) = caught.value.problems
    assert problem.path == "steps[0].repeat.timezone"
    assert message in problem.message


# --- expressions at run time ------------------------------------------------------------

PLANNED = """
flow: planned
tools: {t: {}}
steps:
  - id: plan
    run_agent: {agent: planner, prompt: "plan"}
  - id: remind
    schedule: {tool: t, delay_ms: "${steps.plan.output.delay}"}
  - id: nap
    sleep: {for_ms: "${steps.plan.output.nap}"}
    timeout_ms: "${steps.plan.output.limit}"
  - id: ask
    ask_human: {question: go?, timeout_ms: "${steps.plan.output.ask}", default: "no"}
  - id: wait
    await_signal: {signal: go, timeout_ms: "${steps.plan.output.wait}m"}
"""


def _only_sleeps(effects: list[flowcore.Effect]) -> list[flowcore.Sleep]:
    return [e for e in effects if isinstance(e, flowcore.Sleep)]


def _sleeps(run: Run) -> dict[str, int]:
    return {e.idempotency_key: e.until_ms for e in run.effects if isinstance(e, flowcore.Sleep)}


def test_an_agent_s_output_decides_every_delay_when_its_step_begins() -> None:
    run = Run(PLANNED)
    out = {"delay": "2h", "nap": 45000, "limit": "PT1M", "ask": "90s", "wait": 5}
    run.ok("r/plan#1", out, at=1000)
    assert _sleeps(run) == {
        "r/remind#1/delay": 1000 + 7_200_000,
        "r/nap/timeout": 1000 + 60_000,
        "r/nap#1": 1000 + 45_000,
    }
    run.fire("r/nap#1")
    assert _sleeps(run) == {"r/ask#1/timeout": 46_000 + 90_000}
    run.fire("r/ask#1/timeout")
    assert _sleeps(run) == {"r/wait#1/timeout": 136_000 + 300_000}
    run.fire("r/wait#1/timeout")
    assert run.settled is not None and run.settled.status == "failed"
    assert run.settled.error is not None
    assert run.settled.error.message == (
        "signal 'go' not received within the time '${steps.plan.output.wait}m' gave"
    )


def test_the_simulator_runs_a_delay_an_agent_decides() -> None:
    sim = Simulator(
        agents={
            "planner": {"delay": "1h", "nap": "PT30S", "limit": 3_600_000, "ask": 1, "wait": 1}
        },
        tools={"t": "sent"},
        humans="yes",
        signals=[flowcore.testing.Signal(at_ms=40_000, name="go")],
    )
    t = sim.run(PLANNED)
    assert t.state.settled is not None and t.state.settled.status == "completed"
    sleeps = {e.idempotency_key: e.until_ms for e in _only_sleeps(t.effects("sleep"))}
    assert sleeps["run/remind#1/delay"] == sleeps["run/nap#1"] - 30_000 + 3_600_000
    assert t.effects("call-tool") == []  # the run ended before the reminder's hour
    log = encode_records(t.log_of(), "json")
    report = flowcore.replay(log, parse_flow(PLANNED))
    assert report.divergence is None and report.status == "completed"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("soon", "sleep.for_ms '${input.wait}' gave \"soon\": 'soon' is not a duration"),
        ("x" * 10_000, "characters) is not a duration"),
        (-5, "gave -5: a duration cannot be negative, got -5"),
        ("-PT5S", "a duration cannot be negative"),
        ("4000d", "is longer than ten years"),
        (None, "gave null: expected a duration (milliseconds or text like '90s'), not null"),
        ({"ms": 5}, 'gave {"ms":5}: expected a duration'),
        (True, "gave true: expected a duration (milliseconds or text like '90s'), not a boolean"),
        (1.5, "must be whole"),
    ],
)
def test_a_bad_value_fails_the_step_invalid_duration(value: Any, message: str) -> None:
    run = Run('flow: f\nsteps:\n  - {id: nap, sleep: {for_ms: "${input.wait}"}}\n', {"wait": value})
    settled = run.settled
    assert settled is not None and settled.status == "failed" and settled.error is not None
    assert settled.error.type == "invalid-duration"
    assert settled.error.message.startswith("step 'nap': sleep.for_ms '${input.wait}'")
    assert message in settled.error.message
    assert run.result("nap")["error"]["type"] == "invalid-duration"
    assert flowcore.waiting_for(run.state).timers == ()


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ("{id: s, call_tool: {tool: t}, timeout_ms: '${input.v}'}", "timeout_ms"),
        (
            "{id: s, repeat: {every_ms: '${input.v}', steps: [{id: x, call_tool: {tool: t}}]}}",
            "repeat.every_ms",
        ),
    ],
)
@pytest.mark.parametrize("value", [0, "0s", "PT0S"])
def test_zero_is_refused_at_run_time_where_the_spec_refuses_it(
    spec: str, field: str, value: Any
) -> None:
    run = Run(f"flow: f\ntools: {{t: {{}}}}\nsteps:\n  - {spec}\n", {"v": value})
    assert run.settled is not None and run.settled.error is not None
    assert run.settled.error.type == "invalid-duration"
    assert f"{field} '${{input.v}}' gave" in run.settled.error.message
    assert "must be greater than zero" in run.settled.error.message
    assert run.wire()[-1]["kind"] == "settled"  # no call was issued, no timer armed
    assert [k for k in run.kinds() if k != "settled"] == []


@pytest.mark.parametrize(
    "field_spec",
    [
        "schedule: {tool: t, delay_ms: '${input.v}'}",
        "sleep: {for_ms: '${input.v}'}",
        "ask_human: {question: q, timeout_ms: '${input.v}'}",
        "await_signal: {signal: go, timeout_ms: '${input.v}'}",
    ],
)
def test_zero_is_a_delay_or_a_wait_s_timeout(field_spec: str) -> None:
    run = Run(f"flow: f\ntools: {{t: {{}}}}\nsteps:\n  - {{id: s, {field_spec}}}\n", {"v": "0s"})
    assert run.settled is None or run.settled.status == "completed"


def test_an_expression_error_in_a_duration_is_invalid_duration() -> None:
    spec = "flow: f\nsteps:\n  - {id: nap, sleep: {for_ms: '${abs(input.wait)}'}}\n"
    run = Run(spec, {"wait": "x"})
    assert run.settled is not None and run.settled.error is not None
    assert run.settled.error.type == "invalid-duration"
    assert run.settled.error.message.startswith("step 'nap': sleep.for_ms '${abs(input.wait)}': ")


CAUGHT = """
flow: caught
tools: {t: {}}
steps:
  - id: guard
    try:
      - id: remind
        schedule: {tool: t, delay_ms: "${input.delay}"}
    catch:
      - errors: [expression-error]
        steps: [{id: wrong, call_tool: {tool: t, input: wrong}}]
      - errors: [invalid-duration]
        steps: [{id: fallback, call_tool: {tool: t, input: "${error.message}"}}]
output: "${steps.fallback.output}"
"""


def test_try_catch_catches_invalid_duration_by_its_type() -> None:
    run = Run(CAUGHT, {"delay": "next week"})
    (call,) = run.effects
    assert isinstance(call, flowcore.CallTool) and call.idempotency_key == "r/fallback#1"
    assert call.input == (
        "step 'remind': schedule.delay_ms '${input.delay}' gave \"next week\": 'next week' is not"
        " a duration: write it like '90s', '2h30m', '1d', '250ms' or ISO-8601 'PT2H'"
    )
    run.ok("r/fallback#1", "handled")
    assert run.settled is not None and run.settled.status == "completed"
    assert run.state.schedules == {} or all(s for s in run.state.schedules.values())
    assert flowcore.waiting_for(run.state).scheduled == ()


def test_a_bad_step_timeout_fails_the_step_before_it_begins() -> None:
    spec = (
        "flow: f\ntools: {t: {}}\nsteps:\n"
        "  - id: guard\n    try:\n"
        "      - {id: call, call_tool: {tool: t}, timeout_ms: '${input.limit}'}\n"
        "    catch: [{errors: [invalid-duration], steps: [{id: ok, sleep: {for_ms: 1s}}]}]\n"
    )
    run = Run(spec, {"limit": "forever"})
    assert list(_sleeps(run)) == ["r/ok#1"] and run.kinds() == ["sleep"]  # no call, no timer
    assert run.result("call")["error"]["type"] == "invalid-duration"
    run.fire("r/ok#1")
    assert run.settled is not None and run.settled.status == "completed"


# --- a cadence decided at run time is kept --------------------------------------------------

EVERY = """
flow: every
tools: {t: {class: readonly}}
steps:
  - id: plan
    run_agent: {agent: planner, prompt: "how often?"}
  - id: poll
    repeat:
      every_ms: "${steps.plan.output.every}"
      max_fires: 3
      steps: [{id: ping, call_tool: {tool: t, input: "${fire_count}"}}]
"""


def test_a_decided_cadence_is_kept_in_the_state_and_its_snapshot() -> None:
    run = Run(EVERY)
    run.ok("r/plan#1", {"every": "10m"}, at=5)
    assert _sleeps(run) == {"r/poll[1]/tick": 5 + 600_000}
    frame = run.state.tree.frames["poll"]
    assert isinstance(frame, StepFrame) and isinstance(frame.progress, RepeatProgress)
    assert frame.progress.every_ms == 600_000
    # The run goes on from a decoded snapshot, ticking on the same cadence; the
    # output it read the cadence from is gone from the expression's reach.
    restored = flowcore.decode_state(flowcore.encode_state(run.state), run.flow)
    assert restored == run.state
    run.state = restored
    run.fire("r/poll[1]/tick")
    run.ok("r/poll[1]/ping#1", "pong")
    assert _sleeps(run) == {"r/poll[2]/tick": 5 + 1_200_000}


def test_a_literal_cadence_is_not_copied_into_the_state() -> None:
    run = Run(EVERY.replace('"${steps.plan.output.every}"', "10m"))
    run.ok("r/plan#1", "ignored", at=5)
    frame = run.state.tree.frames["poll"]
    assert isinstance(frame, StepFrame) and isinstance(frame.progress, RepeatProgress)
    assert frame.progress.every_ms == 0  # read from the spec: old snapshots stay as they were
    assert _sleeps(run) == {"r/poll[1]/tick": 600_005}


def test_a_replay_of_a_decided_cadence_reproduces_its_effects() -> None:
    t = Simulator(agents={"planner": {"every": "PT1H"}}, tools={"t": "pong"}).run(EVERY)
    ticks = [e.until_ms for e in _only_sleeps(t.effects("sleep"))]
    assert ticks == [1 + 3_600_000, 1 + 7_200_000, 1 + 10_800_000]
    report = flowcore.replay(encode_records(t.log_of(), "json"), parse_flow(EVERY))
    assert report.divergence is None and report.status == "completed"


# --- cron in a time zone across DST ----------------------------------------------------------


def _ms(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso).timestamp() * 1000)


def _ticks(cron: str, zone: str | None, start: str, fires: int) -> list[str]:
    """The UTC times of a repeat's first ``fires`` ticks, started at ``start``."""
    extra = f", timezone: {zone}" if zone else ""
    spec = _repeat(f"cron: '{cron}'{extra}").replace("max_fires: 1", f"max_fires: {fires}")
    run = Run(spec, now_ms=_ms(start))
    seen: list[str] = []
    for fire in range(1, fires + 1):
        due = _sleeps(run)[f"r/r[{fire}]/tick"]
        seen.append(dt.datetime.fromtimestamp(due / 1000, dt.UTC).strftime("%m-%d %H:%M"))
        run.fire(f"r/r[{fire}]/tick")
        run.ok(f"r/r[{fire}]/x#1", "done")
    assert run.settled is not None and run.settled.status == "completed"
    return seen


def test_a_time_that_spring_forward_skips_fires_just_after_the_gap() -> None:
    # New York, 2026-03-08: 02:00 EST becomes 03:00 EDT; 02:30 does not exist.
    ticks = _ticks("30 2 * * *", "America/New_York", "2026-03-06T12:00:00+00:00", 4)
    assert ticks == ["03-07 07:30", "03-08 07:00", "03-09 06:30", "03-10 06:30"]
    # Paris, 2026-03-29: 02:00 CET becomes 03:00 CEST.
    ticks = _ticks("30 2 * * *", "Europe/Paris", "2026-03-28T12:00:00+00:00", 2)
    assert ticks == ["03-29 01:00", "03-30 00:30"]


def test_a_fixed_hour_fires_once_in_a_fall_back_repeat_a_wildcard_hour_in_both() -> None:
    # New York, 2026-11-01: 02:00 EDT becomes 01:00 EST; 01:30 happens twice.
    ticks = _ticks("30 1 * * *", "America/New_York", "2026-10-31T12:00:00+00:00", 3)
    assert ticks == ["11-01 05:30", "11-02 06:30", "11-03 06:30"]
    ticks = _ticks("*/30 1 * * *", "America/New_York", "2026-11-01T04:50:00+00:00", 4)
    assert ticks == ["11-01 05:00", "11-01 05:30", "11-01 06:00", "11-01 06:30"]


def test_a_cron_without_a_zone_is_utc() -> None:
    assert _ticks("30 2 * * *", None, "2026-03-28T12:00:00+00:00", 2) == [
        "03-29 02:30",
        "03-30 02:30",
    ]
    assert next_cron_ms("30 2 * * *", None, 0) == next_cron_ms("30 2 * * *", "UTC", 0)


def test_validate_runs_as_a_command(tmp_path: Path) -> None:
    spec = tmp_path / "ok.yaml"
    spec.write_text(_repeat("cron: '0 9 * * *', timezone: Asia/Tokyo"))
    proc = fc("validate", spec)
    assert isinstance(proc, subprocess.CompletedProcess)
    assert proc.returncode == 0 and proc.stdout.strip() == f"{spec}: ok (flow f v1, 2 steps)"


def test_graph_shows_a_decided_duration_and_a_cron_s_zone(tmp_path: Path) -> None:
    spec = tmp_path / "g.yaml"
    spec.write_text(
        "flow: g\ntools: {t: {}}\nsteps:\n"
        "  - {id: nap, sleep: {for_ms: '${input.wait}'}, timeout_ms: 90s}\n"
        "  - id: nightly\n"
        "    repeat: {cron: '0 3 * * *', timezone: Europe/Paris,"
        " steps: [{id: x, call_tool: {tool: t}}]}\n"
    )
    proc = fc("graph", spec)
    assert proc.returncode == 0, proc.stderr
    assert "sleep ${input.wait}" in proc.stdout and "timeout 90s" in proc.stdout
    assert "repeat cron 0 3 * * * (Europe/Paris)" in proc.stdout
