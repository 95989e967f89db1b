"""specs/schema/flow.json, the JSON Schema of a flow spec, against ``parse_flow``.

Every valid spec of the repository and of ``flowcore.testing.flows()`` must
validate; structurally invalid specs must be refused by both the schema and
``parse_flow``. Problems only ``parse_flow`` can see (duplicate ids, unknown
references, expressions that do not compile...) are listed apart: a schema
cannot check them, and its description says so. That the committed file is
the generated one is checked in ``tests/decision/test_wire.py`` with the other schemas.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from jsonschema import Draft202012Validator

from flowcore import SpecError, parse_flow
from flowcore.language import spec
from flowcore.language.spec import _load_text
from flowcore.schedules import KEYS as SCHEDULE_KEYS
from flowcore.testing import flows

REPO = Path(__file__).resolve().parents[2]
SCHEMA: dict[str, Any] = json.loads((REPO / "specs" / "schema" / "flow.json").read_text("utf-8"))
VALIDATOR = Draft202012Validator(SCHEMA)
BAD_SPECS = REPO / "tests" / "bad_specs"

VALID_FILES = sorted(
    [
        *REPO.glob("specs/examples/*.yaml"),
        *REPO.glob("specs/conformance/*/flow.yaml"),
        *REPO.glob("specs/conformance/*/recorded.yaml"),
        *REPO.glob("tests/serve/flows/*.yaml"),
    ]
)


def _errors(data: Any) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in VALIDATOR.iter_errors(data)]


def _load(path: Path) -> Any:
    data, _, problems = _load_text(path.read_text(encoding="utf-8"), path.name)
    assert not problems, problems
    return data


# --- the document -----------------------------------------------------------------


def test_schema_is_a_standalone_2020_12_document() -> None:
    Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA["$id"] == "https://flowcore.dev/schema/flow.json"
    refs = set(re.findall(r'"\$ref": "([^"]*)"', json.dumps(SCHEMA)))
    assert refs
    for ref in refs:
        assert ref.removeprefix("#/$defs/") in SCHEMA["$defs"], f"dangling {ref}"
    for name, definition in SCHEMA["$defs"].items():
        assert definition.get("description"), f"$defs.{name} has no description"


def test_description_says_what_the_schema_does_not_check() -> None:
    text = SCHEMA["description"]
    for words in ("duplicate step ids", "undeclared tools", "unknown step ids"):
        assert words in text


def test_tools_list_their_input_and_output_schemas() -> None:
    tool = SCHEMA["$defs"]["ToolDecl"]
    keys = {"class", "schedulable", "input_schema", "output_schema", "max_usage", "needs_approval"}
    assert keys == set(tool["properties"])
    for key in ("input_schema", "output_schema"):
        assert {"$ref": "#/$defs/JsonSchema"} in tool["properties"][key]["anyOf"]
        assert tool["properties"][key]["description"]
    assert tool["additionalProperties"] is False


MODEL_CLASSES = [
    spec.ToolDecl,
    spec.TeamDecl,
    spec.TeamMember,
    spec.Budget,
    spec.Limits,
    spec.Retry,
    spec.CallToolStep,
    spec.RunAgentStep,
    spec.RunTeamStep,
    spec.AskHumanStep,
    spec.SleepStep,
    spec.AwaitSignalStep,
    spec.RunSubflowStep,
    spec.ParallelStep,
    spec.ForEachStep,
    spec.RepeatStep,
    spec.ScheduleStep,
    spec.CancelScheduledStep,
    spec.CatchClause,
]


@pytest.mark.parametrize("cl", MODEL_CLASSES, ids=lambda c: c.__name__)
def test_each_settings_class_is_derived_from_the_model(cl: type[Any]) -> None:
    # Every attrs field under its spec key, required exactly when it has no
    # default: a field added to the model shows up here without a table entry.
    definition = SCHEMA["$defs"][cl.__name__]
    keys = {spec._wire_key(f.name) for f in attrs.fields(cl)}
    required = {spec._wire_key(f.name) for f in attrs.fields(cl) if f.default is attrs.NOTHING}
    assert set(definition["properties"]) == keys
    assert set(definition.get("required", [])) == required
    assert definition["additionalProperties"] is False


def test_steps_and_top_level_list_the_keys_flowcore_reads() -> None:
    step = SCHEMA["$defs"]["Step"]
    assert set(step["properties"]) == set(spec._COMMON) | set(spec._KINDS)
    assert [one["required"] for one in step["oneOf"]] == [[kind] for kind in spec._KINDS]
    assert set(SCHEMA["properties"]) == set(spec._TOP)
    assert set(SCHEMA["$defs"]["Schedule"]["properties"]) == set(SCHEDULE_KEYS)


# --- valid specs ------------------------------------------------------------------


def test_the_valid_corpus_is_there() -> None:
    assert len(VALID_FILES) > 60


@pytest.mark.parametrize("path", VALID_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_spec_of_the_repository_validates(path: Path) -> None:
    data = _load(path)
    parse_flow(data, source_name=path.name)  # valid for flowcore...
    assert _errors(data) == []  # ...and for the schema


@settings(max_examples=300)
@given(flows())
def test_every_generated_flow_validates(flow: dict[str, Any]) -> None:
    assert _errors(flow) == []


EDGE_VALID: list[tuple[str, dict[str, Any]]] = [
    ("a null tool", {"tools": {"t": None}}),
    (
        "tool schemas",
        {"tools": {"t": {"input_schema": {"type": ["object", "null"]}, "output_schema": None}}},
    ),
    ("null input_schema and schedules", {"input_schema": None, "schedules": None}),
    ("whole float ms", {"steps": [{"id": "a", "sleep": {"for_ms": 1500.0}}]}),
    ("duration text", {"steps": [{"id": "a", "sleep": {"for_ms": "1m30s"}, "timeout_ms": "PT2H"}]}),
    ("run-time duration", {"steps": [{"id": "a", "sleep": {"for_ms": "${input.n}"}}]}),
    ("null beside until", {"steps": [{"id": "a", "sleep": {"for_ms": None, "until": 5}}]}),
    (
        "null options and default",
        {"steps": [{"id": "a", "ask_human": {"question": "q", "options": None, "default": None}}]},
    ),
    (
        "retry with null errors and text intervals",
        {
            "steps": [
                {
                    "id": "a",
                    "call_tool": {"tool": "t"},
                    "retry": {"errors": None, "initial_interval_ms": "500ms", "backoff": 1},
                }
            ]
        },
    ),
    (
        "switch with else",
        {"steps": [{"id": "a", "switch": [{"if": "input.x"}, {"else": []}]}]},
    ),
    ("try without catch", {"steps": [{"id": "a", "try": [], "description": "a group"}]}),
    (
        "a schedule with every",
        {"schedules": {"hourly.v2": {"every": "1h", "offset": 0, "limit": None, "input": 1}}},
    ),
    (
        "repeat on cron in a zone",
        {
            "steps": [
                {
                    "id": "a",
                    "repeat": {"cron": "0 3 * * *", "timezone": "Europe/Paris", "steps": []},
                }
            ]
        },
    ),
]


def _spec(extra: dict[str, Any]) -> dict[str, Any]:
    base: dict[str, Any] = {
        "flow": "f",
        "tools": {"t": {}},
        "steps": [{"id": "s", "call_tool": {"tool": "t"}}],
    }
    return {**base, **extra}


@pytest.mark.parametrize(("what", "extra"), EDGE_VALID, ids=[w for w, _ in EDGE_VALID])
def test_edges_flowcore_accepts_the_schema_accepts(what: str, extra: dict[str, Any]) -> None:
    data = _spec(extra)
    parse_flow(data)
    assert _errors(data) == []


# --- invalid specs ----------------------------------------------------------------

STEP = {"id": "s", "call_tool": {"tool": "t"}}

INVALID: list[tuple[str, dict[str, Any]]] = [
    ("unknown top-level key", _spec({"timeout": 5})),
    ("unknown step key", _spec({"steps": [{**STEP, "retries": 3}]})),
    ("unknown settings key", _spec({"steps": [{"id": "s", "call_tool": {"tool": "t", "in": 1}}]})),
    ("unknown tool key", _spec({"tools": {"t": {"clas": "readonly"}}})),
    ("unknown budget key", _spec({"budget": {"step": 3}})),
    ("unknown schedule key", _spec({"schedules": {"n": {"every": "1h", "ofset": 0}}})),
    ("two kinds", _spec({"steps": [{**STEP, "sleep": {"for_ms": 1}}]})),
    ("no kind", _spec({"steps": [{"id": "s"}]})),
    ("unknown kind", _spec({"steps": [{"id": "s", "http_get": {}}]})),
    ("missing id", _spec({"steps": [{"call_tool": {"tool": "t"}}]})),
    ("id not an identifier", _spec({"steps": [{**STEP, "id": "two words"}]})),
    ("id with a final newline", _spec({"steps": [{**STEP, "id": "s\n"}]})),
    ("missing flow", {"steps": [STEP], "tools": {"t": {}}}),
    ("missing steps", {"flow": "f"}),
    ("empty steps", _spec({"steps": []})),
    ("blank flow name", _spec({"flow": "  "})),
    ("version as text", _spec({"version": "3"})),
    ("boolean for a number", _spec({"budget": {"steps": True}})),
    ("negative budget", _spec({"budget": {"cost_minor_units": -1}})),
    ("null budget", _spec({"budget": None})),
    ("list for a mapping", _spec({"tools": [{"t": {}}]})),
    ("bad class", _spec({"tools": {"t": {"class": "safe"}}})),
    ("yes for a boolean", _spec({"tools": {"t": {"schedulable": "yes"}}})),
    ("schema not a mapping", _spec({"tools": {"t": {"input_schema": ["id"]}}})),
    ("zero attempts", _spec({"steps": [{**STEP, "retry": {"max_attempts": 0}}]})),
    ("jitter over one", _spec({"steps": [{**STEP, "retry": {"jitter": 1.5}}]})),
    ("expression in a literal duration", _spec({"budget": {"wall_clock_ms": "${input.t}"}})),
    ("quoted milliseconds", _spec({"steps": [{"id": "s", "sleep": {"for_ms": "5000"}}]})),
    ("zero timeout", _spec({"steps": [{**STEP, "timeout_ms": 0}]})),
    ("null timeout", _spec({"steps": [{**STEP, "timeout_ms": None}]})),
    ("over ten years", _spec({"steps": [{"id": "s", "sleep": {"for_ms": 10**15}}]})),
    ("catch on a call", _spec({"steps": [{**STEP, "catch": []}]})),
    ("sleep with both", _spec({"steps": [{"id": "s", "sleep": {"for_ms": 1, "until": 2}}]})),
    ("repeat with neither", _spec({"steps": [{"id": "s", "repeat": {"steps": []}}]})),
    (
        "timezone without cron",
        _spec({"steps": [{"id": "s", "repeat": {"every_ms": 5, "timezone": "UTC", "steps": []}}]}),
    ),
    (
        "cron of four fields",
        _spec({"steps": [{"id": "s", "repeat": {"cron": "0 3 * *", "steps": []}}]}),
    ),
    ("empty switch", _spec({"steps": [{"id": "s", "switch": []}]})),
    ("case with if and else", _spec({"steps": [{"id": "s", "switch": [{"if": "x", "else": []}]}]})),
    ("case without if", _spec({"steps": [{"id": "s", "switch": [{"when": "x", "steps": []}]}]})),
    ("bad branch name", _spec({"steps": [{"id": "s", "parallel": {"branches": {"a-b": []}}}]})),
    (
        "bad parallel mode",
        _spec({"steps": [{"id": "s", "parallel": {"branches": {}, "mode": "x"}}]}),
    ),
    (
        "reserved loop variable",
        _spec({"steps": [{"id": "s", "for_each": {"items": [], "as": "input", "steps": []}}]}),
    ),
    (
        "empty options",
        _spec({"steps": [{"id": "s", "ask_human": {"question": "q", "options": []}}]}),
    ),
    (
        "default without a timeout",
        _spec({"steps": [{"id": "s", "ask_human": {"question": "q", "default": "x"}}]}),
    ),
    ("team without members", _spec({"teams": {"crew": {"members": []}}})),
    ("schedule without cadence", _spec({"schedules": {"n": {"input": 1}}})),
    ("bad overlap", _spec({"schedules": {"n": {"every": "1h", "overlap": "buffer_on"}}})),
    ("bad schedule name", _spec({"schedules": {"-n": {"every": "1h"}}})),
]


@pytest.mark.parametrize(("what", "data"), INVALID, ids=[w for w, _ in INVALID])
def test_structural_problems_are_refused_by_both(what: str, data: dict[str, Any]) -> None:
    with pytest.raises(SpecError):
        parse_flow(data)
    assert _errors(data), f"the schema accepts a spec with {what}"


# The bad-spec corpus (tests/language/test_spec_errors.py): the files whose problems a
# schema can see must be refused by it; the others hold problems only
# parse_flow can find, out of scope for a schema.
SEMANTIC = {
    "07-duplicate-id-top-level.yaml": "duplicate step id",
    "08-duplicate-id-in-parallel.yaml": "duplicate step id",
    "09-duplicate-id-in-for-each.yaml": "duplicate step id",
    "10-duplicate-id-in-switch.yaml": "duplicate step id",
    "11-duplicate-id-in-try-catch.yaml": "duplicate step id",
    "12-duplicate-id-in-compensate.yaml": "duplicate step id",
    "13-undeclared-tool-call-tool.yaml": "undeclared tool",
    "14-undeclared-tool-schedule.yaml": "undeclared tool",
    "15-unknown-ref-in-input.yaml": "unknown step reference",
    "16-unknown-ref-in-prompt.yaml": "unknown step reference",
    "17-unknown-ref-in-switch-if.yaml": "unknown step reference",
    "18-unknown-ref-in-repeat-until.yaml": "unknown step reference",
    "19-unknown-ref-in-output.yaml": "unknown step reference",
    "20-invalid-jmespath.yaml": "expression that does not compile",
    "21-unclosed-template.yaml": "expression that does not compile",
    "23-cron-bad-value.yaml": "cron field values",
    "42-else-not-last.yaml": "position of the else case",
    "48-duplicate-yaml-key.yaml": "duplicate keys are gone once YAML is loaded",
    "50-invalid-input-schema.yaml": "validity of a JSON Schema",
    "51-json-unknown-step-ref.json": "unknown step reference",
    "62-duplicate-key-in-step.yaml": "duplicate keys are gone once YAML is loaded",
    "65-invalid-switch-condition.yaml": "expression that does not compile",
    "67-unknown-ref-nested-in-switch-and-try.yaml": "unknown step reference",
}
NOT_YAML = {"47-yaml-syntax-error.yaml", "52-json-syntax-error.json"}
CORPUS = sorted(p.name for p in BAD_SPECS.iterdir() if p.name != "expected.json")


@pytest.mark.parametrize("name", [n for n in CORPUS if n not in NOT_YAML])
def test_the_bad_spec_corpus(name: str) -> None:
    text = (BAD_SPECS / name).read_text(encoding="utf-8")
    with pytest.raises(SpecError):
        parse_flow(text, source_name=name)
    if name not in SEMANTIC:
        data, _, _ = _load_text(text, name)
        assert _errors(data), f"the schema accepts {name}"


def test_every_semantic_exception_is_in_the_corpus() -> None:
    assert set(SEMANTIC) | NOT_YAML <= set(CORPUS)
