"""The JSON Schema of a flow spec, derived from the model ``flowcore.parse_flow`` builds.

``scripts/gen_schemas.py`` writes it to ``specs/schema/flow.json``. The shape
comes from the attrs classes in ``flowcore.language.spec``: every declaration, setting
and step body class is walked with ``attrs.fields``, each field becomes a
property under its spec key (``_WIRE_NAMES``: ``exec_class`` is ``class``),
required when it has no default, nullable when its type is ``X | None``, with
its default when that is a JSON value. A field added to the model (say to
``Budget``) is in the schema on the next run; a field of a type the table
below does not know stops the generator, naming the field.

What the model cannot say is in small tables here, each mirroring the hook of
``flowcore.language.spec`` that reads it: the constrained scalars (names, identifiers,
durations, templates, conditions), the step's common keys and its one kind
key, ``switch`` cases, ``try``/``catch``, and the top-level ``schedules``
(``flowcore.schedules.KEYS``).

Descriptions: each definition's is written here, short, from specs/language.md;
each property's is the "Meaning" cell of the key's row in that reference's
tables, so a reworded row makes the committed schema stale (and the test says
to regenerate it).

This module only describes specs; nothing in ``flowcore`` needs it at run time.
"""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

import attrs

from flowcore.language import metadata as flowcore_metadata
from flowcore.language import schedules as sched
from flowcore.language import spec
from flowcore.language.expr import Cond, Template

__all__ = ["flow_schema"]

ROOT = Path(__file__).resolve().parent.parent
LANGUAGE_MD = ROOT / "specs" / "language.md"

_DRAFT = "https://json-schema.org/draft/2020-12/schema"


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/$defs/{name}"}


def _present(key: str) -> dict[str, Any]:
    """``key`` is there and not null (flowcore reads a null setting as an absent one)."""
    return {"required": [key], "properties": {key: {"not": {"type": "null"}}}}


# ``(?!\n)$``: the end of the text in every regex dialect (Python's ``$`` alone
# also matches before a final newline, which flowcore refuses).
_IDENT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(?!\n)$"
_SCHEDULE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}(?!\n)$"
_INT_MS = {"type": "integer", "minimum": 0, "maximum": spec.MAX_MS}
# Milliseconds are a number: a string of digits is not duration text.
_TEXT = {"type": "string", "not": {"pattern": r"^\s*[0-9]+\s*$"}}
_LITERAL_TEXT = {
    "type": "string",
    "not": {"anyOf": [{"pattern": r"^\s*[0-9]+\s*$"}, {"pattern": r"\$\{"}]},
}

# --- the scalars the model names with NewTypes and aliases -------------------------

_SCALARS: dict[str, dict[str, Any]] = {
    "Name": {
        "description": "A name (of a flow, tool, agent, team, member, signal...): "
        "any string that is not empty or only whitespace.",
        "type": "string",
        "pattern": r"\S",
    },
    "Identifier": {
        "description": "An identifier, usable unquoted in JMESPath: letters, digits "
        "and `_`, not starting with a digit (step ids, branch names, loop variables).",
        "type": "string",
        "pattern": _IDENT_PATTERN,
    },
    "Template": {
        "description": "A template: any JSON value whose strings may hold `${...}` "
        "JMESPath expressions, evaluated when the step runs. A string that is exactly "
        "one `${...}` yields the raw value; otherwise results are interpolated as text "
        "(§8.1). flowcore compiles every expression when the spec is parsed.",
    },
    "Condition": {
        "description": "A condition: a bare JMESPath expression (a `${...}` wrapper "
        "around the whole of it is allowed and ignored), true unless its value is "
        'false, null, "", [] or {} (§8.3).',
        "type": "string",
    },
    "Duration": {
        "description": "A duration (§1 Durations): an integer of milliseconds "
        "(0 to ten 366-day years), duration text (`90s`, `2h30m`, `PT2H`), or a "
        "`${...}` template evaluated when the step begins.",
        "anyOf": [_INT_MS, _TEXT],
    },
    "PositiveDuration": {
        "description": "A duration (§1 Durations) that must not be zero: an integer of "
        "milliseconds, duration text (`90s`, `PT2H`), or a `${...}` template evaluated "
        "when the step begins.",
        "anyOf": [{**_INT_MS, "minimum": 1}, _TEXT],
    },
    "DurationLiteral": {
        "description": "A duration read when the spec is parsed (§1 Durations): an "
        "integer of milliseconds (0 to ten 366-day years) or duration text (`500ms`, "
        "`1m`, `PT2H`); not an expression.",
        "anyOf": [_INT_MS, _LITERAL_TEXT],
    },
    "PositiveDurationLiteral": {
        "description": "A duration read when the spec is parsed, not zero: an integer "
        "of milliseconds or duration text (`1h`, `PT15M`); not an expression.",
        "anyOf": [{**_INT_MS, "minimum": 1}, _LITERAL_TEXT],
    },
    "Count": {
        "description": "A count: an integer from 1 to 1,000,000,000.",
        "type": "integer",
        "minimum": 1,
        "maximum": spec.MAX_COUNT,
    },
    "Amount": {
        "description": "An amount: an integer from 0 to 10^15.",
        "type": "integer",
        "minimum": 0,
        "maximum": spec.MAX_AMOUNT,
    },
    "Factor": {
        "description": "A backoff factor: a number from 1.0 to 100.0.",
        "type": "number",
        "minimum": 1.0,
        "maximum": 100.0,
    },
    "Fraction": {
        "description": "A fraction: a number from 0.0 to 1.0.",
        "type": "number",
        "minimum": 0.0,
        "maximum": 1.0,
    },
    "JsonSchema": {
        "description": "A JSON Schema mapping (draft 2020-12 unless its own `$schema` "
        "says otherwise); flowcore checks it is a valid schema when the spec is parsed. "
        "Remote `$ref`s are never fetched.",
        "type": "object",
    },
    "Cron": {
        "description": "A 5-field cron (minute hour day-of-month month day-of-week), "
        "evaluated by cronsim; flowcore checks each field when the spec is parsed.",
        "type": "string",
        "pattern": r"^\s*\S+(\s+\S+){4}\s*$",
    },
    "TimeZone": {
        "description": "An IANA time-zone name (`Europe/Paris`, `UTC`), checked against "
        "the time-zone database when the spec is parsed.",
        "type": "string",
    },
}

# Model types -> the definition that describes them. ``Duration`` (``Ms |
# DurationExpr``) is matched as a union below; ``Ms`` alone is a literal.
_TYPE_REFS: dict[Any, str] = {
    spec.Name: "Name",
    spec.Ident: "Identifier",
    spec.Ms: "DurationLiteral",
    spec.Count: "Count",
    spec.Amount: "Amount",
    spec.Factor: "Factor",
    spec.Fraction: "Fraction",
    Template: "Template",
    Cond: "Condition",
    dict[str, Any]: "JsonSchema",
}
_PLAIN: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    bool: {"type": "boolean"},
    int: {"type": "integer", "minimum": -(2**53), "maximum": 2**53},
}
# The key hook of each mapping the converter reads (``dict_of`` in _spec).
_MAP_KEYS: dict[Any, str] = {
    spec.ToolDecl: "Name",
    spec.TeamDecl: "Name",
    spec.AgentDecl: "Name",
    tuple[spec.Step, ...]: "Identifier",
    spec.Count: "Identifier",
}

# Fields whose hook asks more than their type says (the ``*_hook`` functions).
_FIELD_EXTRA: dict[tuple[type[Any], str], dict[str, Any]] = {
    (spec.TeamDecl, "members"): {"minItems": 1},
    (spec.AskHumanStep, "options"): {"minItems": 1, "uniqueItems": True},
    (spec.ForEachStep, "as_"): {"not": {"enum": sorted(spec.RESERVED_NAMES)}},
    (spec.ForEachStep, "index"): {"not": {"enum": sorted(spec.RESERVED_NAMES)}},
}
_FIELD_TYPE: dict[tuple[type[Any], str], str] = {
    (spec.RepeatStep, "every_ms"): "PositiveDuration",
    (spec.RepeatStep, "cron"): "Cron",
    (spec.RepeatStep, "timezone"): "TimeZone",
    (spec.SignalRunStep, "signal"): "Name",  # a template that must be text
}
# Rules across fields, from the hooks.
_CLASS_EXTRA: dict[type[Any], dict[str, Any]] = {
    spec.SleepStep: {"oneOf": [_present("for_ms"), _present("until")]},
    spec.RepeatStep: {
        "oneOf": [_present("every_ms"), _present("cron")],
        "dependentSchemas": {
            "timezone": {
                "anyOf": [{"properties": {"timezone": {"type": "null"}}}, _present("cron")]
            }
        },
    },
    spec.AskHumanStep: {
        "if": {"required": ["default"], "properties": {"default": {"type": "string"}}},
        "then": _present("timeout_ms"),
    },
    spec.RunSubflowStep: {
        "if": {"required": ["detached"], "properties": {"detached": {"const": True}}},
        "then": {"not": _present("parent_close")},
    },
}

_DESCRIPTIONS: dict[str, str] = {
    "Flow": "",  # the document's own description
    "Steps": "A list of steps, run one at a time in order; the first that fails ends "
    "the list (§3).",
    "Step": "A step: an `id`, exactly one kind key holding the kind's settings, and "
    "optional common fields (§3). Any other key is an error.",
    "ToolDecl": "A declared tool (§2 tools): its execution class, whether a call to it "
    "may be scheduled from outside the run, the JSON Schemas its input and output "
    "must meet, and whether a person approves each call first. Empty or null: an "
    "uncertain tool.",
    "TeamDecl": "A declared agent team (§2 teams): its members, in order, run one after "
    "another or all at once.",
    "TeamMember": "A member of a declared team: its name, the agent that plays it, and "
    "its instructions.",
    "Budget": "The run's budget, one ledger per root run (§11): steps, cost, wall "
    "clock, tokens, tool calls and turns; a caller of `start` can only tighten it.",
    "OnExhausted": "What the run does when a budget limit is reached (§11.5): the final "
    "steps, run within a reserve the main work may not spend, and the output then.",
    "Limits": "Limits of the run (§12): sub-flow depth, work in flight, buffered signals.",
    "Defaults": "What every step has unless it says otherwise (§2 defaults): the "
    "cancellation type of its call.",
    "Retry": "How a failing step is retried, with exponential backoff and "
    "deterministic jitter (§5).",
    "CallToolStep": "§4.1 call_tool: call a declared tool; the output is the tool's.",
    "RunAgentStep": "§4.2 run_agent: run an agent with a prompt; agents are fail-closed.",
    "RunTeamStep": "§4.3 run_team: run a declared team (one run-agent per member) or an "
    "undeclared one (one run-team effect).",
    "AskHumanStep": "§4.4 ask_human: ask a person; with options the answer must be one "
    "of them; with timeout_ms, a default answer or a timeout failure.",
    "SleepStep": "§4.5 sleep: exactly one of `for_ms` or `until`.",
    "AwaitSignalStep": "§4.6 await_signal: wait for a named signal; its payload is the output.",
    "RunSubflowStep": "§4.7 run_subflow: start a child flow (depth-limited) that spends "
    "from this run's budget; or, detached, a root run of its own.",
    "SwitchStep": "§4.8 switch: a list of cases, at least one; the first true `if` (or "
    "the `else`, which must be the last case) runs its steps.",
    "SwitchCase": "A switch case: `{if: <condition>, steps: [...]}` or `{else: [...]}`.",
    "ParallelStep": "§4.9 parallel: run named branches at once; `mode` says how they end the step.",
    "ForEachStep": "§4.10 for_each: run the body once per item, up to max_concurrency "
    "at a time; `as` and `index` must differ.",
    "RepeatStep": "§4.11 repeat, the durable reminder: run the body on a cadence, "
    "exactly one of `every_ms` or `cron`.",
    "ScheduleStep": "§4.12 schedule: a detached, delayed, fire-and-forget tool call; "
    "the output is its schedule id.",
    "CancelScheduledStep": "§4.13 cancel_scheduled: cancel a scheduled call whose delay "
    "has not fired.",
    "FailStep": "§4.15 fail: fail at once with an error the flow makes (type, message, "
    "details); it travels as any failure.",
    "SignalRunStep": "§4.16 signal_run: send a signal (with a payload and optional key) to "
    "another run, delivered once per idempotency key.",
    "SetMetadataStep": "§4.17 set_metadata: set run metadata fields (declared at the top "
    "level) from templates; null clears a field. It emits nothing and spends no budget.",
    "ContinueAsNewStep": "§4.18 continue_as_new: start the run again from its first "
    "step with a new input and a fresh history, keeping its run id.",
    "CatchClause": "A catch clause of a try step (§4.14): the error types it handles "
    "(`*` any) and its steps, which see `error`.",
    "MaxUsage": "The most usage one call of a tool or one run of an agent reports "
    "(`max_usage`): steps, cost, tool calls, each 0 when not written. Read only by the "
    "worst-case budget (§11.6).",
    "UsageCap": "The most of each budget limit the work of a step is handed (a step's "
    "`max_usage`, §11.7): a limit not written is not capped.",
    "AgentDecl": "An agent's declaration (§2 agents): the most usage one run of it reports.",
    "Schedule": "A schedule (§2 schedules): runs of this flow a host starts on a cadence, "
    "`cron`, `every` or both. Its input reads only `schedule` (at, at_ms, name).",
}

# Where the reference describes each definition's keys: the section's tables,
# rows whose first cell is the key in backticks (``clause `errors``` for a
# catch clause's keys).
_DOC_SECTIONS: dict[str, tuple[str, str]] = {
    "Flow": ("## 2. Top-level keys", ""),
    "ToolDecl": ("### tools", ""),
    "TeamDecl": ("### teams", ""),
    "TeamMember": ("### teams", ""),
    "Step": ("## 3. Steps: common fields, sequences, results", ""),
    "Budget": ("### 11.1 Limits and defaults", ""),
    "OnExhausted": ("### 11.5 on_budget_exhausted: a reserve for the last steps", ""),
    "Limits": ("## 12. Limits", ""),
    "Defaults": ("### defaults", ""),
    "Retry": ("## 5. retry", ""),
    "CallToolStep": ("### 4.1 call_tool", ""),
    "RunAgentStep": ("### 4.2 run_agent", ""),
    "RunTeamStep": ("### 4.3 run_team", ""),
    "AskHumanStep": ("### 4.4 ask_human", ""),
    "SleepStep": ("### 4.5 sleep", ""),
    "AwaitSignalStep": ("### 4.6 await_signal", ""),
    "RunSubflowStep": ("### 4.7 run_subflow", ""),
    "ParallelStep": ("### 4.9 parallel", ""),
    "ForEachStep": ("### 4.10 for_each", ""),
    "RepeatStep": ("### 4.11 repeat", ""),
    "ScheduleStep": ("### 4.12 schedule", ""),
    "CancelScheduledStep": ("### 4.13 cancel_scheduled", ""),
    "FailStep": ("### 4.15 fail", ""),
    "SignalRunStep": ("### 4.16 signal_run", ""),
    "ContinueAsNewStep": ("### 4.18 continue_as_new", ""),
    "CatchClause": ("### 4.14 try / catch", "clause "),
    "Schedule": ("### schedules", ""),
    "AgentDecl": ("### agents", ""),
}

_ROW_KEY = re.compile(r"^(?P<prefix>[a-z]+ )?`(?P<key>[a-z_]+)`$")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_SECTION_ONLY = re.compile(r"^§[0-9.]+?\.?$")
# Rows of the reference whose meaning is only a link to the section that tells it.
_SEE = {
    "retry": "How the step is retried when it fails, with backoff (§5).",
    "timeout_ms": "A timeout over all the step's attempts and backoffs; not zero (§6).",
    "attempt_timeout_ms": "Each attempt's own timeout, a retryable failure; not zero (§6).",
    "compensate": "Steps that undo this one when the run later fails or is cancelled (§7).",
}


def _doc_rows(text: str, heading: str, prefix: str) -> dict[str, str]:
    """Key -> meaning, from the tables of one section of the language reference."""
    lines = text.splitlines()
    try:
        start = lines.index(heading)
    except ValueError:
        raise SystemExit(f"specs/language.md has no section {heading!r}") from None
    out: dict[str, str] = {}
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = _ROW_KEY.match(cells[0])
        if match is None or (match["prefix"] or "") != prefix or len(cells) < 2:
            continue
        meaning = _LINK.sub(r"\1", cells[-1]).replace("**", "").replace("\\|", "|")
        meaning = meaning.replace(" (below)", "")
        if _SECTION_ONLY.match(meaning):  # a bare "§5.": say what it is
            meaning = _SEE.get(match["key"], meaning)
        out.setdefault(match["key"], meaning)
    return out


# --- walking the model ----------------------------------------------------------------


class _Builder:
    def __init__(self) -> None:
        self.defs: dict[str, dict[str, Any]] = {}
        self.doc = LANGUAGE_MD.read_text(encoding="utf-8")

    def type_schema(self, typ: Any, where: str) -> dict[str, Any]:
        """The schema of a value of model type ``typ`` (``where`` names it for errors)."""
        args = typing.get_args(typ)
        origin = typing.get_origin(typ)
        if origin in (typing.Union, types.UnionType):
            members = [a for a in args if a is not type(None)]
            if set(members) == {spec.Ms, spec.DurationExpr}:
                inner = _ref("Duration")
            elif set(members) == {bool, Cond}:  # a tool's needs_approval
                inner = {"anyOf": [dict(_PLAIN[bool]), _ref("Condition")]}
            elif len(members) == 1:
                inner = self.type_schema(members[0], where)
            else:
                raise SystemExit(f"no schema for the union {typ!r} of {where}")
            if len(members) < len(args):
                return {"anyOf": [inner, {"type": "null"}]}
            return inner
        if typ in _TYPE_REFS:
            return _ref(_TYPE_REFS[typ])
        if typ in _PLAIN:
            return dict(_PLAIN[typ])
        if origin is typing.Literal:
            return {"enum": list(args)}
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            if args[0] is spec.Step:
                return _ref("Steps")
            return {"type": "array", "items": self.type_schema(args[0], where)}
        if origin is dict and args[0] is str and args[1] in _MAP_KEYS:
            value = self.type_schema(args[1], where)
            if attrs.has(args[1]) and not self.required(args[1]):
                value = {"anyOf": [value, {"type": "null"}]}  # null reads as {}
            return {
                "type": "object",
                "propertyNames": _ref(_MAP_KEYS[args[1]]),
                "additionalProperties": value,
            }
        if attrs.has(typ):
            return _ref(self.settings(typ))
        raise SystemExit(
            f"no schema for type {typ!r} of {where}: add it to the tables in scripts/flow_schema.py"
        )

    def required(self, cl: type[Any]) -> list[str]:
        return [spec._wire_key(f.name) for f in attrs.fields(cl) if f.default is attrs.NOTHING]

    def settings(self, cl: type[Any]) -> str:
        """A definition for an attrs settings class: its fields under their spec keys."""
        name = cl.__name__
        if name in self.defs:
            return name
        self.defs[name] = {}  # placeholder: the class may refer to itself
        hints = typing.get_type_hints(cl)
        props: dict[str, Any] = {}
        for f in attrs.fields(cl):
            key = spec._wire_key(f.name)
            where = f"{name}.{f.name}"
            if (cl, f.name) in _FIELD_TYPE:
                prop = _ref(_FIELD_TYPE[cl, f.name])
                if type(None) in typing.get_args(hints[f.name]):
                    prop = {"anyOf": [prop, {"type": "null"}]}
            else:
                prop = self.type_schema(hints[f.name], where)
            prop = {**prop, **_FIELD_EXTRA.get((cl, f.name), {})}
            props[key] = self.annotate(prop, f)
        self.defs[name] = self.object(name, props, self.required(cl), _CLASS_EXTRA.get(cl, {}))
        return name

    def annotate(self, prop: dict[str, Any], f: attrs.Attribute[Any] | None) -> dict[str, Any]:
        if f is not None and f.default is not attrs.NOTHING and f.default is not None:
            default = f.default
            if not isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                prop = {**prop, "default": list(default) if isinstance(default, tuple) else default}
        return prop

    def object(
        self,
        name: str,
        props: dict[str, Any],
        required: list[str],
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        section = _DOC_SECTIONS.get(name)
        if section is not None:
            rows = _doc_rows(self.doc, *section)
            props = {
                key: {**prop, "description": rows[key]} if key in rows else prop
                for key, prop in props.items()
            }
        out: dict[str, Any] = {
            "description": _DESCRIPTIONS[name],
            "type": "object",
            "properties": props,
            "additionalProperties": False,
        }
        if required:
            out["required"] = required
        return {**out, **(extra or {})}


def _step(b: _Builder) -> dict[str, Any]:
    """The step: its common keys (``_spec._COMMON``) and one key per kind (``_KINDS``)."""
    hints = typing.get_type_hints(spec.Step)
    fields = {f.name: f for f in attrs.fields(spec.Step)}
    props: dict[str, Any] = {}
    for key in spec._COMMON:
        if key == "id":
            props[key] = _ref("Identifier")
        elif key == "description":
            props[key] = {"type": "string"}
        elif key == "catch":  # read from the step, kept on the try body
            props[key] = b.type_schema(typing.get_type_hints(spec.TryStep)["catch"], "catch")
        elif key == "timeout_ms":  # a step's own timeout may not be zero
            props[key] = _ref("PositiveDuration")
        elif key in fields:
            # The step hook reads common keys with the bare type: null is refused.
            typ = hints[key]
            members = [a for a in typing.get_args(typ) if a is not type(None)]
            bare = members[0] if typing.get_origin(typ) in (typing.Union, types.UnionType) else typ
            props[key] = b.type_schema(bare, f"Step.{key}")
        else:
            raise SystemExit(f"no schema for the common step key {key!r}")
    for kind, cl in spec._KINDS.items():
        if cl is spec.SwitchStep:
            props[kind] = _ref(_switch(b))
        elif cl is spec.SetMetadataStep:  # `set_metadata: {field: template}`
            props[kind] = _ref(_set_metadata(b))
        elif cl is spec.TryStep:  # `try: [steps]`; its clauses are the step's `catch`
            steps = b.type_schema(typing.get_type_hints(cl)["steps"], "try")
            rows = _doc_rows(b.doc, "### 4.14 try / catch", "")
            props[kind] = {**steps, "description": f"§4.14 try: {rows['try']}"}
        else:
            props[kind] = _ref(b.settings(cl))
    extra = {
        "oneOf": [{"required": [kind]} for kind in spec._KINDS],
        "dependentRequired": {"catch": ["try"]},
    }
    return b.object("Step", props, ["id"], extra)


_META_NAME = {
    "type": "string",
    "pattern": _IDENT_PATTERN,
    "maxLength": flowcore_metadata.MAX_NAME,
}


def _set_metadata(b: _Builder) -> str:
    b.defs["SetMetadataStep"] = {
        "description": _DESCRIPTIONS["SetMetadataStep"],
        "type": "object",
        "propertyNames": _META_NAME,
        "additionalProperties": _ref("Template"),
        "minProperties": 1,
    }
    return "SetMetadataStep"


def _metadata() -> dict[str, Any]:
    """The top-level ``metadata:``: field name -> type."""
    return {
        "description": "The run's metadata fields (§2 metadata): field name -> type, at most "
        f"{flowcore_metadata.MAX_FIELDS}; hosts index them and list runs by them.",
        "type": "object",
        "propertyNames": _META_NAME,
        "additionalProperties": {"enum": list(flowcore_metadata.TYPES)},
        "maxProperties": flowcore_metadata.MAX_FIELDS,
    }


_DECL_NAME = {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_.-]{0,99}$"}


def _updates(b: _Builder) -> dict[str, Any]:
    """The top-level ``updates:`` (§16): update name -> its declaration."""
    b.defs["Update"] = {
        "description": "An update (§16): a request a caller sends a running run; its input "
        "is checked (input_schema, validator), its steps run beside the flow's, and the "
        "caller gets its reply.",
        "type": "object",
        "properties": {
            "description": {"type": "string"},
            "input_schema": {"type": "object"},
            "validator": _ref("Condition"),
            "examples": {"type": "array"},
            "steps": _ref("Steps"),
            "reply": _ref("Template"),
        },
        "additionalProperties": False,
    }
    return {
        "type": ["object", "null"],
        "propertyNames": _DECL_NAME,
        "additionalProperties": {"anyOf": [_ref("Update"), {"type": "null"}]},
    }


def _queries(b: _Builder) -> dict[str, Any]:
    """The top-level ``queries:`` (§16): query name -> its declaration."""
    b.defs["Query"] = {
        "description": "A query (§16): a read-only template over a run's state, with args.",
        "type": "object",
        "properties": {
            "description": {"type": "string"},
            "args_schema": {"type": "object"},
            "value": _ref("Template"),
        },
        "required": ["value"],
        "additionalProperties": False,
    }
    return {
        "type": ["object", "null"],
        "propertyNames": _DECL_NAME,
        "additionalProperties": _ref("Query"),
    }


def _switch(b: _Builder) -> str:
    b.defs["SwitchCase"] = {
        "description": _DESCRIPTIONS["SwitchCase"],
        "oneOf": [
            {
                "type": "object",
                "properties": {
                    "if": {**_ref("Condition"), "description": "Run `steps` when this is true."},
                    "steps": {**_ref("Steps"), "default": []},
                },
                "required": ["if"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "properties": {
                    "else": {**_ref("Steps"), "description": "Run when no case before matched."}
                },
                "required": ["else"],
                "additionalProperties": False,
            },
        ],
    }
    b.defs["SwitchStep"] = {
        "description": _DESCRIPTIONS["SwitchStep"],
        "type": "array",
        "items": _ref("SwitchCase"),
        "minItems": 1,
    }
    return "SwitchStep"


def _schedule(b: _Builder) -> dict[str, Any]:
    """A definition under ``schedules:``, as ``flowcore.schedules.check_schedule`` reads it."""
    keys: dict[str, dict[str, Any]] = {
        "cron": {"anyOf": [_ref("Cron"), {"type": "null"}]},
        "timezone": {"anyOf": [_ref("TimeZone"), {"type": "null"}]},
        "every": _ref("PositiveDurationLiteral"),
        "offset": {**_ref("DurationLiteral"), "default": 0},
        "input": _ref("Template"),
        "overlap": {"enum": [o.value for o in sched.Overlap], "default": "skip"},
        "catchup_window": {
            **_ref("PositiveDurationLiteral"),
            "default": sched.DEFAULT_CATCHUP_WINDOW_MS,
        },
        "jitter": {**_ref("DurationLiteral"), "default": 0},
        "paused": {"type": "boolean", "default": False},
        "note": {"type": "string", "maxLength": sched.MAX_NOTE_CHARS, "default": ""},
        "limit": {
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": sched.MAX_LIMIT},
                {"type": "null"},
            ]
        },
    }
    if set(keys) != set(sched.KEYS):
        raise SystemExit(f"schedule keys changed: {sorted(set(keys) ^ set(sched.KEYS))}")
    extra = {
        "anyOf": [{"required": ["cron"]}, {"required": ["every"]}],
        "dependentRequired": {"offset": ["every"]},
        "dependentSchemas": {
            "timezone": {
                "anyOf": [{"properties": {"timezone": {"type": "null"}}}, _present("cron")]
            }
        },
    }
    b.defs["Schedule"] = b.object("Schedule", keys, [], extra)
    return {
        "type": ["object", "null"],
        "propertyNames": {"type": "string", "pattern": _SCHEDULE_NAME_PATTERN},
        "additionalProperties": _ref("Schedule"),
    }


# Top-level keys that the Flow model holds under another name or type, or not at all.
_TOP_TYPES: dict[str, Any] = {
    "flow": spec.Name,
    "version": spec.Amount,
    "description": str,
    "output": Template,
    "on_budget_exhausted": spec.OnExhausted | None,
}


def _flow(b: _Builder) -> dict[str, Any]:
    hints = typing.get_type_hints(spec.Flow)
    fields = {f.name: f for f in attrs.fields(spec.Flow)}
    props: dict[str, Any] = {}
    for key in spec._TOP:
        if key == "schedules":
            props[key] = _schedule(b)
        elif key == "metadata":
            props[key] = _metadata()
        elif key == "updates":
            props[key] = _updates(b)
        elif key == "queries":
            props[key] = _queries(b)
        elif key in _TOP_TYPES:
            props[key] = b.type_schema(_TOP_TYPES[key], key)
        elif key in fields:
            props[key] = b.type_schema(hints[key], f"Flow.{key}")
        else:
            raise SystemExit(f"no schema for the top-level key {key!r}")
    props["version"]["default"] = 1
    props["steps"] = {**props["steps"], "minItems": 1}
    return b.object("Flow", props, ["flow", "steps"])


def flow_schema(schema_id: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a flow spec document, after YAML loading."""
    b = _Builder()
    b.defs.update({name: dict(value) for name, value in _SCALARS.items()})
    b.defs["Steps"] = {
        "description": _DESCRIPTIONS["Steps"],
        "type": "array",
        "items": _ref("Step"),
    }
    b.defs["Step"] = _step(b)
    root = _flow(b)
    root.pop("description")
    return {
        "$schema": _DRAFT,
        "$id": schema_id,
        "title": "flowcore flow spec",
        "description": (
            "A flowcore flow spec (specs/language.md), as a YAML or JSON document is "
            "loaded (YAML 1.2 core booleans, no implicit dates). It checks the shape: "
            "keys, types, ranges, enums, one kind per step, the forms of durations, "
            "names and identifiers. flowcore checks more when it parses a spec, and "
            "this schema does not: duplicate step ids, calls to undeclared tools, "
            "references to unknown step ids, expressions that do not compile, cron "
            "fields and time zones that do not exist, an `else` that is not the last "
            "case, tool inputs against their tools' schemas, and that constants are "
            "flowcore data. `flowcore validate` reports all of them with their places."
        ),
        **root,
        "$defs": dict(sorted(b.defs.items())),
    }
