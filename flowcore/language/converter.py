"""The cattrs converter that structures a spec's mapping into the flow model:
the hooks of ``hooks`` registered per type, with the checks that span a
step's fields.
"""

from __future__ import annotations

from typing import Any, cast

import cattrs
from cattrs.errors import (
    ClassValidationError,
    IterableValidationError,
)

from .expr import Cond, Template
from .hooks import (
    _cond,
    _cron,
    _describe,
    _duration,
    _gather,
    _ident,
    _is_literal,
    _literal,
    _literal_ms,
    _mapping,
    _mapping_first,
    _Msg,
    _name,
    _note_attr,
    _note_index,
    _raise,
    _register_generic,
    _seq,
    _str,
    _strict_float,
    _strict_int,
    _structure_fn,
    _structure_step,
    _switch_case,
    _template,
    _timezone,
)
from .metadata import MAX_FIELDS, MetaType, name_problem
from .model import (
    MAX_AMOUNT,
    MAX_COUNT,
    RESERVED_NAMES,
    AgentDecl,
    Amount,
    AskHumanStep,
    AwaitSignalStep,
    Budget,
    CallToolStep,
    CancelScheduledStep,
    CatchClause,
    ContinueAsNewStep,
    Count,
    Defaults,
    Duration,
    Factor,
    FailStep,
    ForEachStep,
    Fraction,
    Ident,
    Limits,
    MaxUsage,
    Ms,
    Name,
    OnExhausted,
    ParallelStep,
    RepeatStep,
    Retry,
    RunAgentStep,
    RunSubflowStep,
    RunTeamStep,
    ScheduleStep,
    SetMetadataStep,
    SignalRunStep,
    SleepStep,
    Step,
    SwitchCase,
    SwitchStep,
    TeamDecl,
    TeamMember,
    ToolDecl,
    UsageCap,
)


def _build_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    # The order matters: cattrs resolves a class's field hooks when its
    # structure function is made, so each step registers what the next uses.
    _register_scalars(conv)
    _register_collections(conv)
    base = _register_settings(conv)
    _register_checked_decls(conv, base)
    _register_checked_steps(conv, base)
    _register_field_maps(conv)
    return conv


def _register_scalars(conv: cattrs.Converter) -> None:
    """Hooks for the scalars: strings, numbers in range, names, durations, choices, expressions."""
    conv.register_structure_hook(str, _str)
    conv.register_structure_hook(
        bool,
        lambda v, _: (
            v if isinstance(v, bool) else _raise(f"expected true or false, got {_describe(v)}")
        ),
    )
    conv.register_structure_hook(int, lambda v, _: _strict_int(v, -(2**53), 2**53, "an integer"))
    conv.register_structure_hook(Name, _name)
    conv.register_structure_hook(Ident, _ident)
    conv.register_structure_hook(Ms, _literal_ms)
    _register_generic(conv, Duration, _duration)
    _register_generic(conv, Duration | None, lambda v, _: None if v is None else _duration(v, _))
    conv.register_structure_hook(
        Count, lambda v, _: _strict_int(v, 1, MAX_COUNT, "a positive integer")
    )
    conv.register_structure_hook(
        Amount, lambda v, _: _strict_int(v, 0, MAX_AMOUNT, "a non-negative integer")
    )
    conv.register_structure_hook(
        Factor, lambda v, _: _strict_float(v, 1.0, 100.0, "a backoff factor")
    )
    conv.register_structure_hook(
        Fraction, lambda v, _: _strict_float(v, 0.0, 1.0, "a fraction between 0 and 1")
    )
    conv.register_structure_hook_func(_is_literal, _literal)
    conv.register_structure_hook(Template, _template)
    conv.register_structure_hook(Cond, _cond)
    _register_generic(conv, bool | Cond, _approval)


def _approval(value: Any, _: Any) -> bool | Cond:
    """A tool's ``needs_approval``: true or false, or a condition on the call's input."""
    if isinstance(value, bool):
        return value
    if not isinstance(value, str) or not value.strip():
        raise _Msg(
            "expected true, false or a condition on the call's input"
            f' (like "input.amount > `100`"), got {_describe(value)}'
        )
    return _cond(value, Cond)


def _register_collections(conv: cattrs.Converter) -> None:
    """Hooks for the lists and maps of a spec (steps, names, tools, teams, agents, branches)."""

    def tuple_of(inner: Any, what: str) -> Any:
        def hook(value: Any, _: Any) -> tuple[Any, ...]:
            items = _seq(value, what)
            out: list[Any] = []
            errors: list[Exception] = []
            for i, item in enumerate(items):
                try:
                    out.append(conv.structure(item, inner))
                except Exception as exc:
                    errors.append(_note_index(exc, i))
            if errors:
                raise IterableValidationError(f"While structuring {what}", errors, tuple)
            return tuple(out)

        return hook

    _register_generic(conv, tuple[Step, ...], tuple_of(Step, "steps"))
    _register_generic(conv, tuple[Name, ...], tuple_of(Name, "names"))
    _register_generic(conv, tuple[str, ...], tuple_of(str, "strings"))
    _register_generic(conv, tuple[TeamMember, ...], tuple_of(TeamMember, "team members"))
    _register_generic(conv, tuple[CatchClause, ...], tuple_of(CatchClause, "catch clauses"))

    def dict_of(inner: Any, what: str, key: Any = _str) -> Any:
        def hook(value: Any, _: Any) -> dict[str, Any]:
            items = _mapping(value, what)
            out: dict[str, Any] = {}
            errors: list[Exception] = []
            for k, v in items.items():
                try:
                    key(k, None)
                    out[k] = conv.structure(v if v is not None else {}, inner)
                except Exception as exc:
                    errors.append(_note_attr(exc, str(k)))
            _gather(what, errors, dict)
            return out

        return hook

    _register_generic(conv, dict[str, ToolDecl], dict_of(ToolDecl, "tools", _name))
    _register_generic(conv, dict[str, TeamDecl], dict_of(TeamDecl, "teams", _name))
    _register_generic(conv, dict[str, AgentDecl], dict_of(AgentDecl, "agents", _name))
    _register_generic(
        conv, dict[str, tuple[Step, ...]], dict_of(tuple[Step, ...], "branches", _ident)
    )
    _register_generic(conv, dict[str, Count], dict_of(Count, "weights", _ident))
    # A tool's schemas are taken as written; _tool_schemas checks them with their place.
    conv.register_structure_hook(dict[str, Any] | None, lambda value, _: value)
    conv.register_structure_hook(ToolDecl, _structure_fn(conv, ToolDecl))


def _register_settings(conv: cattrs.Converter) -> dict[type[Any], Any]:
    """Hooks for the classes taken as written; returns the base hooks the checked ones wrap."""
    plain: tuple[type[Any], ...] = (
        Budget,
        Defaults,
        OnExhausted,
        Limits,
        Retry,
        TeamDecl,
        TeamMember,
        RunAgentStep,
        RunTeamStep,
        CallToolStep,
        AskHumanStep,
        FailStep,
        ContinueAsNewStep,
        MaxUsage,
        UsageCap,
        AgentDecl,
    )
    for cl in plain:
        conv.register_structure_hook(cl, _mapping_first(conv, cl))

    base = {
        cl: _mapping_first(conv, cl)
        for cl in (
            TeamDecl,
            AskHumanStep,
            AwaitSignalStep,
            ForEachStep,
            SleepStep,
            RepeatStep,
            ScheduleStep,
            CancelScheduledStep,
            RunSubflowStep,
        )
    }
    return base


def _register_checked_decls(conv: cattrs.Converter, base: dict[type[Any], Any]) -> None:
    """Hooks that check across fields: teams, ask_human, await_signal, run_subflow, for_each."""

    def team_hook(value: Any, _: Any) -> TeamDecl:
        team = cast(TeamDecl, base[TeamDecl](value, TeamDecl))
        errors: list[Exception] = []
        if not team.members:
            errors.append(_note_attr(_Msg("a team needs at least one member"), "members"))
        seen: set[str] = set()
        for i, member in enumerate(team.members):
            if member.member in seen:
                err = _note_attr(_Msg(f"duplicate member name {member.member!r}"), "member")
                errors.append(_note_attr(_note_index(err, i), "members"))
            seen.add(member.member)
        _gather("team", errors, TeamDecl)
        return team

    conv.register_structure_hook(TeamDecl, team_hook)

    def ask_hook(value: Any, _: Any) -> AskHumanStep:
        ask = cast(AskHumanStep, base[AskHumanStep](value, AskHumanStep))
        errors: list[Exception] = []
        if ask.options is not None and not ask.options:
            errors.append(_note_attr(_Msg("options must not be empty"), "options"))
        if ask.options is not None and len(set(ask.options)) != len(ask.options):
            errors.append(_note_attr(_Msg("options must be distinct"), "options"))
        if ask.default is not None and ask.options and ask.default not in ask.options:
            errors.append(
                _note_attr(
                    _Msg(f"default {ask.default!r} is not one of {list(ask.options)}"), "default"
                )
            )
        if ask.default is not None and ask.timeout_ms is None:
            errors.append(_note_attr(_Msg("a default answer needs a timeout_ms"), "default"))
        _gather("ask_human", errors, AskHumanStep)
        return ask

    conv.register_structure_hook(AskHumanStep, ask_hook)

    def await_hook(value: Any, _: Any) -> AwaitSignalStep:
        wait = cast(AwaitSignalStep, base[AwaitSignalStep](value, AwaitSignalStep))
        errors: list[Exception] = []
        if (wait.signal is None) == (wait.signals is None):
            errors.append(_Msg("await_signal needs exactly one of 'signal' or 'signals'"))
        if wait.signals is not None and not wait.signals:
            errors.append(_note_attr(_Msg("signals must not be empty"), "signals"))
        if wait.signals is not None and len(set(wait.signals)) != len(wait.signals):
            errors.append(_note_attr(_Msg("signals must be distinct"), "signals"))
        if wait.count == 0:
            errors.append(_note_attr(_Msg("count must be at least 1"), "count"))
        _gather("await_signal", errors, AwaitSignalStep)
        return wait

    conv.register_structure_hook(AwaitSignalStep, await_hook)

    def subflow_hook(value: Any, _: Any) -> RunSubflowStep:
        sub = cast(RunSubflowStep, base[RunSubflowStep](value, RunSubflowStep))
        if sub.detached and sub.parent_close is not None:
            message = "a detached run_subflow has no parent_close: the parent never waits for it"
            _gather("run_subflow", [_note_attr(_Msg(message), "parent_close")], RunSubflowStep)
        return sub

    conv.register_structure_hook(RunSubflowStep, subflow_hook)

    def for_each_hook(value: Any, _: Any) -> ForEachStep:
        each = cast(ForEachStep, base[ForEachStep](value, ForEachStep))
        errors: list[Exception] = []
        for key, name in (("as", each.as_), ("index", each.index)):
            if name in RESERVED_NAMES:
                errors.append(
                    _note_attr(
                        _Msg(f"{name!r} is reserved in expressions; choose another name"), key
                    )
                )
        if each.as_ == each.index:
            errors.append(_note_attr(_Msg("'as' and 'index' must differ"), "index"))
        _gather("for_each", errors, ForEachStep)
        return each

    conv.register_structure_hook(ForEachStep, for_each_hook)


def _register_checked_steps(conv: cattrs.Converter, base: dict[type[Any], Any]) -> None:
    """Hooks that check across fields: parallel, sleep, repeat, signal_run,
    cancel_scheduled (schedule: ``_register_schedule_step``)."""
    _register_schedule_step(conv, base)
    parallel_base = _mapping_first(conv, ParallelStep)

    def parallel_hook(value: Any, _: Any) -> ParallelStep:
        par = cast(ParallelStep, parallel_base(value, ParallelStep))
        errors: list[Exception] = []
        for name in par.weights:
            if name not in par.branches:
                message = (
                    f"weight for {name!r}, which is not a branch (branches: {list(par.branches)})"
                )
                errors.append(_note_attr(_note_attr(_Msg(message), "weights"), name))
        if par.weights and par.share == "first-come":
            message = "weights share the budget evenly; a first-come parallel has none"
            errors.append(_note_attr(_Msg(message), "weights"))
        _gather("parallel", errors, ParallelStep)
        return par

    conv.register_structure_hook(ParallelStep, parallel_hook)

    def sleep_hook(value: Any, _: Any) -> SleepStep:
        step = cast(SleepStep, base[SleepStep](value, SleepStep))
        if (step.for_ms is None) == (step.until is None):
            raise _Msg("sleep needs exactly one of 'for_ms' or 'until'")
        return step

    conv.register_structure_hook(SleepStep, sleep_hook)

    def repeat_hook(value: Any, _: Any) -> RepeatStep:
        raw = _mapping(value, "repeat settings")
        errors: list[Exception] = []
        cron = raw.get("cron")
        if cron is not None:
            try:
                _cron(cron)
            except _Msg as exc:
                errors.append(_note_attr(exc, "cron"))
        if raw.get("timezone") is not None:
            if isinstance(raw["timezone"], str):  # else the structure below says so
                try:
                    _timezone(raw["timezone"])
                except _Msg as exc:
                    errors.append(_note_attr(exc, "timezone"))
            if cron is None and "every_ms" in raw:
                message = "timezone applies to a cron: use it with 'cron', not 'every_ms'"
                errors.append(_note_attr(_Msg(message), "timezone"))
        try:
            step = cast(RepeatStep, base[RepeatStep](raw, RepeatStep))
        except ClassValidationError as exc:
            errors.extend(exc.exceptions)
            step = None
        if step is not None and (step.every_ms is None) == (step.cron is None):
            errors.append(_Msg("repeat needs exactly one of 'every_ms' or 'cron'"))
        if step is not None and step.every_ms == 0:
            errors.append(_note_attr(_Msg("every_ms must be positive"), "every_ms"))
        _gather("repeat", errors, RepeatStep)
        assert step is not None
        return step

    conv.register_structure_hook(RepeatStep, repeat_hook)

    signal_run = _mapping_first(conv, SignalRunStep)

    def signal_run_hook(value: Any, _: Any) -> SignalRunStep:
        raw = _mapping(value, "signal_run fields")
        errors: list[Exception] = []
        step: SignalRunStep | None = None
        if "signal" in raw:
            try:
                _name(raw["signal"], None)  # text (a name, or a template giving one)
            except _Msg as exc:
                errors.append(_note_attr(exc, "signal"))
        try:
            step = cast(SignalRunStep, signal_run(raw, SignalRunStep))
        except ClassValidationError as exc:
            errors.extend(exc.exceptions)
        _gather("signal_run", errors, SignalRunStep)
        assert step is not None
        return step

    conv.register_structure_hook(SignalRunStep, signal_run_hook)

    def cancel_hook(value: Any, _: Any) -> CancelScheduledStep:
        raw = _mapping(value, "cancel_scheduled settings")
        return cast(
            CancelScheduledStep,
            base[CancelScheduledStep](raw, CancelScheduledStep),
        )

    conv.register_structure_hook(CancelScheduledStep, cancel_hook)


def _register_schedule_step(conv: cattrs.Converter, base: dict[type[Any], Any]) -> None:
    """The hook of ``schedule``: its recurrence fields checked across each other."""

    def schedule_hook(value: Any, _: Any) -> ScheduleStep:
        raw = _mapping(value, "schedule settings")
        errors: list[Exception] = []
        cron = raw.get("cron")
        if isinstance(cron, str):  # else the structure below says so
            try:
                _cron(cron)
            except _Msg as exc:
                errors.append(_note_attr(exc, "cron"))
        if isinstance(raw.get("timezone"), str):
            try:
                _timezone(raw["timezone"])
            except _Msg as exc:
                errors.append(_note_attr(exc, "timezone"))
            if cron is None:
                message = "timezone applies to a cron: use it with 'cron'"
                errors.append(_note_attr(_Msg(message), "timezone"))
        if cron is not None and raw.get("every_ms") is not None:
            message = "give one of 'every_ms' or 'cron', not both"
            errors.append(_note_attr(_Msg(message), "cron"))
        if cron is None and raw.get("every_ms") is None:
            for name in ("count", "until_ms"):
                if raw.get(name) is not None:
                    message = f"{name} applies to a recurring call: give 'every_ms' or 'cron'"
                    errors.append(_note_attr(_Msg(message), name))
        try:
            step = cast(ScheduleStep, base[ScheduleStep](raw, ScheduleStep))
        except ClassValidationError as exc:
            errors.extend(exc.exceptions)
            step = None
        if step is not None and step.every_ms == 0:
            errors.append(_note_attr(_Msg("every_ms must be positive"), "every_ms"))
        _gather("schedule", errors, ScheduleStep)
        assert step is not None
        return step

    conv.register_structure_hook(ScheduleStep, schedule_hook)


def _register_field_maps(conv: cattrs.Converter) -> None:
    """Hooks for set_metadata, metadata, switch and catch clauses, and for a step itself."""

    def set_metadata_hook(value: Any, _: Any) -> SetMetadataStep:
        items = _mapping(value, "set_metadata fields")
        out: dict[str, Template] = {}
        errors: list[Exception] = []
        for k, v in items.items():
            problem = name_problem(k)
            try:
                if problem is not None:
                    raise _Msg(problem)
                out[k] = conv.structure(v, Template)
            except Exception as exc:
                errors.append(_note_attr(exc, str(k)))
        _gather("set_metadata", errors, SetMetadataStep)
        if not out:
            raise _Msg("set_metadata needs at least one field")
        return SetMetadataStep(out)

    conv.register_structure_hook(SetMetadataStep, set_metadata_hook)

    def metadata_hook(value: Any, _: Any) -> dict[str, MetaType]:
        items = _mapping(value, "metadata fields")
        out: dict[str, MetaType] = {}
        errors: list[Exception] = []
        for k, v in items.items():
            try:
                problem = name_problem(k)
                if problem is not None:
                    raise _Msg(problem)
                out[k] = _literal(v, MetaType)
            except Exception as exc:
                errors.append(_note_attr(exc, str(k)))
        _gather("metadata", errors, dict)
        if len(out) > MAX_FIELDS:
            raise _Msg(f"a flow declares at most {MAX_FIELDS} metadata fields, got {len(out)}")
        return out

    _register_generic(conv, dict[str, MetaType], metadata_hook)

    def switch_hook(value: Any, _: Any) -> SwitchStep:
        items = _seq(value, "switch cases")
        cases: list[SwitchCase] = []
        errors: list[Exception] = []
        for i, item in enumerate(items):
            try:
                cases.append(_switch_case(conv, item, last=i == len(items) - 1))
            except Exception as exc:
                errors.append(_note_index(exc, i))
        if errors:
            raise IterableValidationError("While structuring switch", errors, tuple)
        if not cases:
            raise _Msg("a switch needs at least one case")
        return SwitchStep(tuple(cases))

    conv.register_structure_hook(SwitchStep, switch_hook)
    conv.register_structure_hook(CatchClause, _mapping_first(conv, CatchClause))
    conv.register_structure_hook(Step, lambda v, _: _structure_step(conv, v))
