"""Malformed specs: every problem reported at once, with its path, line and column.

The corpus lives in ``tests/bad_specs/``: one small file per kind of problem
(a few deliberately hold two or three), and ``expected.json`` lists, for each
file, the exact problems ``parse_flow`` must report, in order. Expectations
were derived from where the offending key or value sits in the file, not
copied from the parser's output; where the parser disagrees with them, the
file is listed in ``KNOWN_BUGS`` and its test is a strict xfail.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from flowcore import FlowcoreError, Problem, SpecError, parse_flow

BAD_SPECS = Path(__file__).resolve().parent.parent / "bad_specs"
EXPECTED_FILE = BAD_SPECS / "expected.json"
EXPECTED: dict[str, list[dict[str, Any]]] = json.loads(EXPECTED_FILE.read_text(encoding="utf-8"))
MIN_CORPUS = 45
NAME = re.compile(r"^\d{2}-[a-z0-9]+(?:-[a-z0-9]+)*\.(?:yaml|json)$")

# Files whose correct expectation the parser does not meet yet (see each reason).
KNOWN_BUGS: dict[str, str] = {}


def _spec_files() -> list[str]:
    return sorted(p.name for p in BAD_SPECS.iterdir() if p.name != EXPECTED_FILE.name)


def _as_dicts(problems: tuple[Problem, ...]) -> list[dict[str, Any]]:
    return [
        {"path": p.path, "line": p.line, "column": p.column, "message": p.message} for p in problems
    ]


def _parse_error(spec: str | bytes | dict[str, Any], source_name: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_flow(spec, source_name=source_name)
    return info.value


def _params(names: list[str]) -> list[Any]:
    return [
        pytest.param(
            name,
            marks=pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[name]),
            id=name,
        )
        if name in KNOWN_BUGS
        else pytest.param(name, id=name)
        for name in names
    ]


ALL_NAMES = sorted(set(_spec_files()) | set(EXPECTED))


# --- the corpus itself ----------------------------------------------------------------


def test_corpus_is_big_enough() -> None:
    assert len(_spec_files()) >= MIN_CORPUS


def test_every_file_has_an_expectation_and_every_expectation_a_file() -> None:
    files = set(_spec_files())
    assert sorted(files - set(EXPECTED)) == [], "files without an expectation"
    assert sorted(set(EXPECTED) - files) == [], "expectations without a file"


def test_corpus_file_names() -> None:
    bad = [name for name in _spec_files() if not NAME.match(name)]
    assert bad == []
    numbers = [name[:2] for name in _spec_files()]
    assert len(numbers) == len(set(numbers)), "two corpus files share a number"


def test_corpus_has_json_specs() -> None:
    assert len([n for n in _spec_files() if n.endswith(".json")]) >= 3


def test_known_bugs_name_corpus_files() -> None:
    assert set(KNOWN_BUGS) <= set(_spec_files())


def test_expectations_are_well_formed() -> None:
    for name, problems in EXPECTED.items():
        assert problems, f"{name}: an expectation must list at least one problem"
        for problem in problems:
            assert set(problem) == {"path", "line", "column", "message"}, name
            assert isinstance(problem["path"], str), name
            assert isinstance(problem["message"], str) and problem["message"], name
            # Every corpus file is text, so every problem must be located.
            assert isinstance(problem["line"], int) and problem["line"] >= 1, name
            assert isinstance(problem["column"], int) and problem["column"] >= 1, name


def test_some_files_hold_several_problems() -> None:
    multi = [name for name, problems in EXPECTED.items() if len(problems) >= 2]
    assert len(multi) >= 2


# --- parsing every file of the corpus -----------------------------------------------------


@pytest.mark.parametrize("name", _params(ALL_NAMES))
def test_bad_spec(name: str) -> None:
    path = BAD_SPECS / name
    assert path.is_file(), f"{name} has an expectation but no file"
    assert name in EXPECTED, f"{name} has no expectation in expected.json"
    expected = EXPECTED[name]

    error = _parse_error(path.read_text(encoding="utf-8"), name)

    assert _as_dicts(error.problems) == expected
    assert all(p.source == name for p in error.problems)
    text = str(error)
    count = len(expected)
    assert text.startswith(f"{count} problem{'s' if count != 1 else ''} in flow spec:")
    for problem in expected:
        where = f"{name}:{problem['line']}:{problem['column']}"
        assert where in text
        assert f"{where} ({problem['path'] or '$'}): {problem['message']}" in text


# --- the same problems without text: paths only ------------------------------------------

_TEXT_ONLY = ("not valid YAML/JSON: ", "duplicate key ")


def _loads(name: str) -> Any:
    text = (BAD_SPECS / name).read_text(encoding="utf-8")
    try:
        return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError):
        return None


MAPPING_NAMES = [
    name
    for name in sorted(EXPECTED)
    if name not in KNOWN_BUGS
    and isinstance(_loads(name), dict)
    and not any(p["message"].startswith(_TEXT_ONLY) for p in EXPECTED[name])
]


def test_most_of_the_corpus_is_checked_as_mappings_too() -> None:
    assert len(MAPPING_NAMES) >= MIN_CORPUS


@pytest.mark.parametrize("name", MAPPING_NAMES)
def test_bad_mapping_has_paths_without_positions(name: str) -> None:
    error = _parse_error(_loads(name), "mapping")

    def key(p: dict[str, Any]) -> tuple[str, str]:
        return (p["path"], p["message"])

    # The problems are the same, only unlocated (text sorts them by position).
    expected = sorted(({**p, "line": None, "column": None} for p in EXPECTED[name]), key=key)
    assert sorted(_as_dicts(error.problems), key=key) == expected
    text = str(error)
    for problem in error.problems:
        assert problem.location == f"mapping:{problem.path or '$'}"
        assert f"  mapping:{problem.path or '$'}: {problem.message}" in text


def test_mapping_problem_path_names_nested_step() -> None:
    spec = {
        "flow": "f",
        "tools": {"scan": {}},
        "steps": [
            {
                "id": "outer",
                "parallel": {
                    "branches": {"sec": [{"id": "inner", "call_tool": {"tool": "scan"}, "x": 1}]}
                },
            }
        ],
    }
    error = _parse_error(spec, "<spec>")
    assert error.problems == (
        Problem("steps[0].parallel.branches.sec[0].x", "unknown key 'x'", "<spec>", None, None),
    )
    assert "<spec>:steps[0].parallel.branches.sec[0].x: unknown key 'x'" in str(error)


# --- bytes ---------------------------------------------------------------------------------


def test_bytes_input_reports_the_same_problems() -> None:
    name = "54-multiple-problems.yaml"
    error = _parse_error((BAD_SPECS / name).read_bytes(), name)
    assert _as_dicts(error.problems) == EXPECTED[name]


def test_valid_bytes_input_parses() -> None:
    flow = parse_flow(b"flow: caf\xc3\xa9\nsteps:\n  - {id: nap, sleep: {for_ms: 5}}\n")
    assert flow.id == "caf\u00e9"
    assert flow.by_id["nap"].kind == "sleep"


def test_non_utf8_bytes_give_a_spec_error() -> None:
    error = _parse_error(b"flow: caf\xe9\nsteps: []\n", "latin1.yaml")
    assert error.problems == (
        Problem(
            "",
            "not UTF-8 text: 'utf-8' codec can't decode byte 0xe9 in position 9: "
            "invalid continuation byte",
            "latin1.yaml",
        ),
    )
    assert isinstance(error, FlowcoreError)
    assert isinstance(error, ValueError)
    assert "latin1.yaml:$: not UTF-8 text" in str(error)


# --- every problem at once ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", _params([name for name, problems in sorted(EXPECTED.items()) if len(problems) >= 2])
)
def test_multi_problem_file_reports_all_in_one_error(name: str) -> None:
    # One call, one SpecError, holding every problem (not just the first found).
    error = _parse_error((BAD_SPECS / name).read_text(encoding="utf-8"), name)
    assert len(error.problems) == len(EXPECTED[name]) >= 2
    assert {(p.path, p.message) for p in error.problems} == {
        (p["path"], p["message"]) for p in EXPECTED[name]
    }


def test_problems_from_every_pass_come_in_one_error_in_source_order() -> None:
    # Text layer (duplicate key), structure pass (unknown key, bad number, bad
    # cron) and cross-reference pass (undeclared tool, unknown step) together.
    text = (
        "flow: everything-at-once\n"  # 1
        "colour: blue\n"  # 2
        "tools:\n"  # 3
        "  fetch: {}\n"  # 4
        "steps:\n"  # 5
        "  - id: get\n"  # 6
        "    call_tool: {tool: fetch_all, input: '${steps.nope.output}'}\n"  # 7
        "    timeout_ms: -1\n"  # 8
        "  - id: tick\n"  # 9
        "    repeat: {cron: '* * *', steps: [{id: nap, sleep: {for_ms: 1}}]}\n"  # 10
        "flow: again\n"  # 11
    )
    error = _parse_error(text, "all.yaml")
    assert _as_dicts(error.problems) == [
        {"path": "colour", "line": 2, "column": 1, "message": "unknown key 'colour'"},
        {
            "path": "steps[0].call_tool.tool",
            "line": 7,
            "column": 17,
            "message": "tool 'fetch_all' is not declared under 'tools' (did you mean 'fetch'?)",
        },
        {
            "path": "steps[0].call_tool.input",
            "line": 7,
            "column": 34,
            "message": "expression reads unknown step 'nope'",
        },
        {
            "path": "steps[0].timeout_ms",
            "line": 8,
            "column": 5,
            "message": "a duration cannot be negative, got -1",
        },
        {
            "path": "steps[1].repeat.cron",
            "line": 10,
            "column": 14,
            "message": "invalid cron '* * *': expected 5 fields (minute hour day month weekday)",
        },
        {"path": "flow", "line": 11, "column": 1, "message": "duplicate key 'flow'"},
    ]
    assert str(error).startswith("6 problems in flow spec:\n")


# --- suggestions: a close spelling is named, a far one is not ---------------------------------

_SLEEP = {"id": "nap", "sleep": {"for_ms": 1}}


@pytest.mark.parametrize(
    ("spec", "path", "message"),
    [
        pytest.param(
            {"flow": "f", "tools": {"t": {"clas": "readonly"}}, "steps": [_SLEEP]},
            "tools.t.clas",
            "unknown key 'clas' (did you mean 'class'?)",
            id="tool-class",
        ),
        pytest.param(
            {"flow": "f", "stepz": [], "steps": [_SLEEP]},
            "stepz",
            "unknown key 'stepz' (did you mean 'steps'?)",
            id="top-level",
        ),
        pytest.param(
            {"flow": "f", "steps": [{**_SLEEP, "retyr": {}}]},
            "steps[0].retyr",
            "unknown key 'retyr' (did you mean 'retry'?)",
            id="common-step-key",
        ),
        pytest.param(
            {"flow": "f", "steps": [{"id": "a", "sleeep": {"for_ms": 1}}]},
            "steps[0].sleeep",
            "unknown step kind 'sleeep' (did you mean 'sleep'?)",
            id="step-kind",
        ),
        pytest.param(
            {"flow": "f", "steps": [{"id": "a", "sleep": {"for_ms": 1, "untl": "x"}}]},
            "steps[0].sleep.untl",
            "unknown key 'untl' (did you mean 'until'?)",
            id="kind-settings",
        ),
        pytest.param(
            {"flow": "f", "steps": [{**_SLEEP, "retry": {"backof": 2}}]},
            "steps[0].retry.backof",
            "unknown key 'backof' (did you mean 'backoff'?)",
            id="retry-settings",
        ),
        pytest.param(
            {"flow": "f", "steps": [{"id": "s", "switch": [{"if": "input.ok", "step": []}]}]},
            "steps[0].switch[0].step",
            "unknown key 'step' in a switch case (did you mean 'steps'?)",
            id="switch-case",
        ),
        pytest.param(
            {
                "flow": "f",
                "steps": [
                    {"id": "s", "switch": [{"if": "input.ok", "steps": [_SLEEP]}, {"elsee": []}]}
                ],
            },
            "steps[0].switch[1].elsee",
            "unknown key 'elsee' in a switch case (did you mean 'else'?)",
            id="switch-else",
        ),
        pytest.param(
            {
                "flow": "f",
                "tools": {"lookup": {}},
                "steps": [{"id": "a", "call_tool": {"tool": "lookpu"}}],
            },
            "steps[0].call_tool.tool",
            "tool 'lookpu' is not declared under 'tools' (did you mean 'lookup'?)",
            id="call-tool",
        ),
        pytest.param(
            {
                "flow": "f",
                "tools": {"remind": {}},
                "steps": [{"id": "a", "schedule": {"tool": "remnd", "delay_ms": 5}}],
            },
            "steps[0].schedule.tool",
            "tool 'remnd' is not declared under 'tools' (did you mean 'remind'?)",
            id="schedule-tool",
        ),
        pytest.param(
            {"flow": "f", "steps": [_SLEEP], "output": "${steps.npa.output}"},
            "output",
            "expression reads unknown step 'npa' (did you mean 'nap'?)",
            id="step-ref",
        ),
        pytest.param(
            {
                "flow": "f",
                "steps": [{"id": "p", "parallel": {"mode": "rase", "branches": {"a": [_SLEEP]}}}],
            },
            "steps[0].parallel.mode",
            "'rase' is not one of: all, all_settled, race, any (did you mean 'race'?)",
            id="choice",
        ),
    ],
)
def test_a_close_spelling_is_suggested(spec: dict[str, Any], path: str, message: str) -> None:
    error = _parse_error(spec, "<spec>")
    assert (path, message) in [(p.path, p.message) for p in error.problems], error


def test_a_misspelled_common_key_on_a_step_without_kind_still_misses_its_kind() -> None:
    error = _parse_error({"flow": "f", "steps": [{"id": "a", "timout_ms": 5}]}, "<spec>")
    assert [(p.path, p.message) for p in error.problems] == [
        ("steps[0].timout_ms", "unknown key 'timout_ms' (did you mean 'timeout_ms'?)"),
        ("steps[0]", f"missing step kind: expected one of {', '.join(KINDS)}"),
    ]


@pytest.mark.parametrize(
    "spec",
    [
        {"flow": "f", "colour": "blue", "steps": [_SLEEP]},
        {"flow": "f", "tools": {"t": {"zzz": 1}}, "steps": [_SLEEP]},
        {"flow": "f", "steps": [{"id": "a", "http_get": {}}]},
        {"flow": "f", "tools": {"fetch": {}}, "steps": [{"id": "a", "call_tool": {"tool": "zzz"}}]},
        {"flow": "f", "steps": [_SLEEP], "output": "${steps.unrelated.output}"},
        {"flow": "f", "steps": [{"id": "s", "switch": [{"if": "input.k", "steps": [], "xyz": 1}]}]},
        {"flow": "f", "tools": {"t": {"class": "safe"}}, "steps": [_SLEEP]},
    ],
)
def test_a_far_spelling_gets_no_suggestion(spec: dict[str, Any]) -> None:
    error = _parse_error(spec, "<spec>")
    assert error.problems
    assert not any("did you mean" in p.message for p in error.problems), error


KINDS = (
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
    "fail",
    "try",
    "signal_run",
    "set_metadata",
    "continue_as_new",
)
