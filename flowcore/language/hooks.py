"""The structure hooks a spec's converter is built from, and the collection of
their errors into ``(path, message)`` pairs.

Each hook checks one value (a scalar, a step, a mapping) and raises ``_Msg``
naming what is wrong; cattrs notes where. No I/O.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import typing
from collections.abc import Iterator
from typing import Any

import attrs
import cattrs
import msgspec
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, override

from .expr import Cond, Template, TemplateError, compile_cond, compile_template, find_expressions
from .model import (
    _BUDGETED_KINDS,
    _COMMON,
    _HEARTBEAT_KINDS,
    _IDENT,
    _KINDS,
    AgentDecl,
    Budget,
    Cancellation,
    CatchClause,
    Defaults,
    Duration,
    DurationExpr,
    Limits,
    MaxUsage,
    Ms,
    Retry,
    Step,
    SwitchCase,
    TeamDecl,
    TeamMember,
    TryStep,
    UsageCap,
)
from .times import DurationError, check_zone, parse_duration


class _Msg(ValueError):
    """A problem message raised from inside a structure hook."""


def _note_attr(exc: Exception, name: str) -> Exception:
    exc.__notes__ = [*getattr(exc, "__notes__", []), AttributeValidationNote(name, name, object)]
    return exc


def _note_index(exc: Exception, index: int) -> Exception:
    exc.__notes__ = [
        *getattr(exc, "__notes__", []),
        IterableValidationNote(str(index), index, object),
    ]
    return exc


def _strict_int(value: Any, lo: int, hi: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Msg(f"expected {what}, got {_describe(value)}")
    if not lo <= value <= hi:
        raise _Msg(f"{value} is out of range: expected {what} in {lo}..{hi}")
    return value


def _strict_float(value: Any, lo: float, hi: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Msg(f"expected {what}, got {_describe(value)}")
    if not lo <= value <= hi:
        raise _Msg(f"{value} is out of range: expected {what} in {lo}..{hi}")
    return float(value)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _did_you_mean(word: Any, candidates: typing.Iterable[Any]) -> str:
    """`` (did you mean 'x'?)`` naming the candidate closest to ``word``, or ``""``.

    Only a close match (difflib's default cutoff) is suggested: a typo, not a guess.
    """
    if not isinstance(word, str) or not word:
        return ""
    pool = [c for c in candidates if isinstance(c, str) and c != word]
    match = difflib.get_close_matches(word, pool, n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _unknown_key(key: Any, allowed: typing.Iterable[str], where: str = "") -> str:
    return f"unknown key {key!r}{where}{_did_you_mean(key, allowed)}"


def _str(value: Any, _: Any = None) -> str:
    if not isinstance(value, str):
        raise _Msg(f"expected a string, got {_describe(value)}")
    return value


def _name(value: Any, _: Any) -> str:
    text = _str(value)
    if not text.strip():
        raise _Msg("expected a non-empty name")
    return text


def _ident(value: Any, _: Any) -> str:
    text = _str(value)
    if not _IDENT.match(text):
        raise _Msg(
            f"{text!r} is not a valid id: use letters, digits and '_', not starting with a digit"
        )
    return text


def _strings(
    value: Any, path: tuple[Any, ...], skip: frozenset[str]
) -> Iterator[tuple[str, tuple[Any, ...]]]:
    if isinstance(value, str):
        yield value, path
    elif isinstance(value, dict):
        for k, v in value.items():
            if k not in skip:
                yield from _strings(v, (*path, k), frozenset())
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, (*path, i), frozenset())


def _template(value: Any, _: Any) -> Template:
    try:
        msgspec.json.encode(value)
    except (TypeError, msgspec.EncodeError):
        raise _Msg(f"expected a JSON value, got {_describe(value)}") from None
    try:
        return compile_template(value)
    except TemplateError:
        pass
    # Name the exact string that does not compile, however deep it sits.
    errors: list[Exception] = []
    for text, path in _strings(value, (), frozenset()):
        try:
            compile_template(text)
        except TemplateError as exc:
            err: Exception = _Msg(str(exc))
            for part in path:
                err = _note_index(err, part) if isinstance(part, int) else _note_attr(err, part)
            errors.append(err)
    _gather("template", errors, Template)
    raise _Msg("invalid template")  # unreachable: some string failed above


def _cond(value: Any, _: Any) -> Cond:
    try:
        return compile_cond(_str(value))
    except TemplateError as exc:
        raise _Msg(str(exc)) from None


def _literal_ms(value: Any, _: Any = None) -> int:
    """A duration written in the spec: milliseconds, or text read by ``parse_duration``."""
    if isinstance(value, str) and find_expressions(value):
        raise _Msg(
            f"{value!r}: this duration is read when the flow is parsed, so it cannot be an"
            " expression; write milliseconds or text like '90s'"
        )
    try:
        return parse_duration(value, allow_zero=True)
    except DurationError as exc:
        raise _Msg(str(exc)) from None


def _duration(value: Any, _: Any) -> Duration:
    """A literal duration (checked now), or ``${...}`` evaluated when the step begins."""
    if isinstance(value, str) and find_expressions(value):
        try:
            return DurationExpr(compile_template(value))
        except TemplateError as exc:
            raise _Msg(str(exc)) from None
    return Ms(_literal_ms(value))


# Zones suggested for a misspelt ``timezone``. A fixed list: listing the tz
# database (``zoneinfo.available_timezones``) reads the file system.
_ZONES = (
    "UTC",
    "Africa/Cairo",
    "Africa/Johannesburg",
    "Africa/Lagos",
    "America/Chicago",
    "America/Denver",
    "America/Los_Angeles",
    "America/Mexico_City",
    "America/New_York",
    "America/Sao_Paulo",
    "America/Toronto",
    "Asia/Dubai",
    "Asia/Hong_Kong",
    "Asia/Kolkata",
    "Asia/Seoul",
    "Asia/Shanghai",
    "Asia/Singapore",
    "Asia/Tokyo",
    "Australia/Sydney",
    "Europe/Amsterdam",
    "Europe/Berlin",
    "Europe/Istanbul",
    "Europe/London",
    "Europe/Madrid",
    "Europe/Moscow",
    "Europe/Paris",
    "Europe/Rome",
    "Europe/Stockholm",
    "Europe/Zurich",
    "Pacific/Auckland",
)


def _timezone(value: Any) -> str:
    text = _str(value)
    try:
        check_zone(text)
    except DurationError:
        hint = _did_you_mean(text, _ZONES)
        raise _Msg(
            f"unknown time zone {text!r}{hint} (an IANA name such as 'Europe/Paris' or 'UTC')"
        ) from None
    return text


def _cron(value: Any) -> str:
    from cronsim import CronSim, CronSimError

    text = _str(value)
    if len(text.split()) != 5:
        raise _Msg(f"invalid cron {text!r}: expected 5 fields (minute hour day month weekday)")
    try:
        CronSim(text, _EPOCH)
    except CronSimError as exc:
        raise _Msg(f"invalid cron {text!r}: {exc}") from None
    return text


def _seq(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise _Msg(f"expected a list of {what}, got {_describe(value)}")
    return value


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Msg(f"expected a mapping of {what}, got {_describe(value)}")
    return value


def _gather(where: str, errors: list[Exception], cl: type[Any]) -> None:
    if errors:
        raise ClassValidationError(f"While structuring {where}", errors, cl)


def _literal(value: Any, typ: Any) -> Any:
    allowed = typing.get_args(typ)
    if value not in allowed or not isinstance(value, str):
        shown = ", ".join(allowed)
        raise _Msg(f"{value!r} is not one of: {shown}{_did_you_mean(value, allowed)}")
    return value


def _is_literal(typ: Any) -> bool:
    return typing.get_origin(typ) is typing.Literal


def _register_generic(conv: cattrs.Converter, typ: Any, hook: Any) -> None:
    conv.register_structure_hook_func(lambda t: t == typ, hook)


def _raise(message: str) -> Any:
    raise _Msg(message)


_SETTINGS_NAME: dict[type[Any], str] = {
    Budget: "budget",
    Limits: "limits",
    Defaults: "defaults",
    Retry: "retry",
    TeamDecl: "team",
    TeamMember: "team member",
    CatchClause: "catch clause",
    MaxUsage: "max_usage",
    UsageCap: "max_usage",
    AgentDecl: "agent",
    **{cl: kind for kind, cl in _KINDS.items()},
}


def _structure_fn(conv: cattrs.Converter, cl: type[Any]) -> Any:
    """cattrs' structure function for ``cl``, fields renamed to their spec names."""
    renames: dict[str, Any] = {
        f.name: override(rename=_WIRE_NAMES[f.name])
        for f in attrs.fields(cl)
        if f.name in _WIRE_NAMES
    }
    return make_dict_structure_fn(cl, conv, _cattrs_forbid_extra_keys=True, **renames)


def _mapping_first(conv: cattrs.Converter, cl: type[Any]) -> Any:
    """A structure hook that first insists on a mapping, then runs cattrs'."""
    inner = _structure_fn(conv, cl)
    what = _SETTINGS_NAME.get(cl, cl.__name__)

    def hook(value: Any, _: Any) -> Any:
        return inner(_mapping(value, f"{what} fields"), cl)

    return hook


def _switch_case(conv: cattrs.Converter, item: Any, last: bool) -> SwitchCase:
    raw = _mapping(item, "switch case fields ('if' and 'steps', or 'else')")
    errors: list[Exception] = []
    if "else" in raw:
        for key in raw:
            if key != "else":
                errors.append(_note_attr(_Msg(_unknown_key(key, (), " in an else case")), key))
        if not last:
            errors.append(_note_attr(_Msg("'else' must be the last case"), "else"))
        steps: tuple[Step, ...] = ()
        try:
            steps = conv.structure(raw["else"], tuple[Step, ...])
        except Exception as exc:
            errors.append(_note_attr(exc, "else"))
        _gather("switch case", errors, SwitchCase)
        return SwitchCase(None, steps)
    cond: Cond | None = None
    for key in raw:
        if key not in ("if", "steps"):
            message = _unknown_key(key, ("if", "steps", "else"), " in a switch case")
            errors.append(_note_attr(_Msg(message), key))
    if "if" not in raw:
        errors.append(_Msg("a switch case needs 'if' (or is an 'else' case)"))
    else:
        try:
            cond = conv.structure(raw["if"], Cond)
        except Exception as exc:
            errors.append(_note_attr(exc, "if"))
    steps = ()
    try:
        steps = conv.structure(raw.get("steps", []), tuple[Step, ...])
    except Exception as exc:
        errors.append(_note_attr(exc, "steps"))
    _gather("switch case", errors, SwitchCase)
    return SwitchCase(cond, steps)


_KIND_LIST = ", ".join(_KINDS)


def _structure_step(conv: cattrs.Converter, value: Any) -> Step:
    raw = _mapping(value, "step fields (an 'id' and one step kind)")
    errors: list[Exception] = []
    kinds = [k for k in raw if k in _KINDS]
    kind_named = False  # some unknown key was taken for a step kind
    for key in raw:
        if key in _KINDS or key in _COMMON:
            continue
        if kinds:  # the step has its kind: a stray key is a misspelled common key
            errors.append(_note_attr(_Msg(_unknown_key(key, _COMMON)), str(key)))
            continue
        # No kind: a misspelled kind, a misspelled common key, or a kind that
        # does not exist; say which when the spelling is close enough to tell.
        as_kind = _did_you_mean(key, _KINDS)
        as_common = _did_you_mean(key, _COMMON)
        if as_common and not as_kind:
            errors.append(_note_attr(_Msg(_unknown_key(key, _COMMON)), key))
            continue
        kind_named = True
        message = f"unknown step kind {key!r}"
        message += as_kind or f" (expected one of {_KIND_LIST})"
        errors.append(_note_attr(_Msg(message), key))
    if not kinds and not kind_named:
        errors.append(_Msg(f"missing step kind: expected one of {_KIND_LIST}"))
    for extra in kinds[1:]:
        errors.append(
            _note_attr(
                _Msg(f"a step has exactly one kind; found {kinds[0]!r} and {extra!r}"), extra
            )
        )
    step_id = ""
    if "id" not in raw:
        errors.append(_Msg("missing required key 'id'"))
    else:
        try:
            step_id = _ident(raw["id"], None)
        except _Msg as exc:
            errors.append(_note_attr(exc, "id"))
    kind = kinds[0] if kinds else ""
    body: Any = None
    if kind:
        try:
            if kind == "try":
                body = TryStep(conv.structure(raw["try"], tuple[Step, ...]))
            else:
                body = conv.structure(raw[kind], _KINDS[kind])
        except Exception as exc:
            errors.append(_note_attr(exc, kind))
    if "catch" in raw:
        if kind != "try":
            errors.append(_note_attr(_Msg("'catch' is only allowed on a 'try' step"), "catch"))
        else:
            try:
                catch = conv.structure(raw["catch"], tuple[CatchClause, ...])
                if body is not None:
                    body = attrs.evolve(body, catch=catch)
            except Exception as exc:
                errors.append(_note_attr(exc, "catch"))
    common: dict[str, Any] = {}
    fields: tuple[tuple[str, Any], ...] = (
        ("retry", Retry),
        ("timeout_ms", Duration),
        ("attempt_timeout_ms", Duration),
        ("heartbeat_timeout_ms", Duration),
        ("cancellation", Cancellation),
        ("max_usage", UsageCap),
        ("compensate", tuple[Step, ...]),
        ("description", str),
    )
    for key, typ in fields:
        if key in raw:
            try:
                common[key] = conv.structure(raw[key], typ)
            except Exception as exc:
                errors.append(_note_attr(exc, key))
    for key in ("timeout_ms", "attempt_timeout_ms", "heartbeat_timeout_ms"):
        if common.get(key) == 0:
            errors.append(_note_attr(_Msg(f"{key} must be positive"), key))
    if "heartbeat_timeout_ms" in raw and kind and kind not in _HEARTBEAT_KINDS:
        message = "heartbeat_timeout_ms is only allowed on call_tool, run_agent and run_team steps"
        errors.append(_note_attr(_Msg(message), "heartbeat_timeout_ms"))
    if "cancellation" in raw and kind and kind not in _HEARTBEAT_KINDS:
        message = (
            "cancellation is only allowed on call_tool, run_agent and run_team steps"
            " (a run_subflow says what becomes of its child with parent_close)"
        )
        errors.append(_note_attr(_Msg(message), "cancellation"))
    if "max_usage" in raw and kind and kind not in _BUDGETED_KINDS:
        message = (
            "max_usage is only allowed on run_agent, run_team and run_subflow steps"
            " (the steps whose work is handed a budget; a tool declares its own max_usage)"
        )
        errors.append(_note_attr(_Msg(message), "max_usage"))
    _gather("step", errors, Step)
    common.pop("description", None)
    return Step(id=step_id, kind=kind, body=body, **common)


_EPOCH = _dt.datetime(2000, 1, 1, tzinfo=_dt.UTC)


def _collect(
    exc: BaseException, path: tuple[Any, ...], out: list[tuple[tuple[Any, ...], str]]
) -> None:
    """Turn a (nested) cattrs error into ``(path, message)`` pairs."""
    for note in getattr(exc, "__notes__", ()):
        if isinstance(note, AttributeValidationNote):
            path = (*path, _wire_key(note.name))
        elif isinstance(note, IterableValidationNote):
            path = (*path, note.index)
    if isinstance(exc, ForbiddenExtraKeysError):
        for key in sorted(exc.extra_fields, key=str):
            out.append(((*path, key), _unknown_key(key, _wire_fields(exc.cl))))
        return
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            _collect(sub, path, out)
        return
    if isinstance(exc, KeyError):
        key = exc.args[0] if exc.args else "?"
        if isinstance(key, str) and key:
            out.append((path, f"missing required key {_wire_key(key)!r}"))
            return
    if isinstance(exc, _Msg):
        out.append((path, str(exc)))
        return
    out.append((path, f"invalid value: {exc}"))


# Model fields whose spec key is a Python keyword.
_WIRE_NAMES = {"exec_class": "class", "as_": "as"}


def _wire_fields(cl: Any) -> list[str]:
    """The spec keys of an attrs class's fields (none for anything else)."""
    if not attrs.has(cl):
        return []
    return [_wire_key(f.name) for f in attrs.fields(cl)]


def _wire_key(name: str) -> str:
    return _WIRE_NAMES.get(name, name)
