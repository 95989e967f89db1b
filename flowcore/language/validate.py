"""JSON Schema checks for ``input_schema`` (the ``jsonschema`` package).

Pure: schemas are checked and applied in memory; remote ``$ref`` retrieval is
never attempted (the validator is given no retriever).

The validator words its errors in Python (``None is not of type 'object'``);
``input_problems`` says them in the spec's terms instead: where, as a JSON
path (``$.items[2]``), then what, in plain words with values spelled as JSON
(``expected an integer, got "x"``). Keywords it has no words for keep the
validator's message, with the value it names spelled as JSON.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .._data import short

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

__all__ = ["input_problems", "schema_problems", "value_problem"]

MAX_PROBLEMS_SHOWN = 5


def schema_problems(schema: dict[str, Any]) -> list[tuple[tuple[Any, ...], str]]:
    """Why ``schema`` is not a valid JSON Schema: ``(path inside it, message)`` pairs."""
    from jsonschema import exceptions, validators

    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except exceptions.SchemaError as exc:
        path = tuple(exc.absolute_path)
        where = "/".join(str(p) for p in path)
        return [(path, f"invalid JSON Schema{' at ' + where if where else ''}: {exc.message}")]
    return _ref_problems(schema, cls)


# Keywords whose values are data, not subschemas: a "$ref" key inside is not a reference.
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})


def _refs(value: Any, path: tuple[Any, ...]) -> Iterable[tuple[tuple[Any, ...], str, Any]]:
    """Every ``(path, key, value)`` of the schema's ``$ref``, ``$id`` and ``id`` strings."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("$ref", "$id", "id") and isinstance(item, str):
                yield (*path, key), key, item
            elif key not in _DATA_KEYWORDS:
                yield from _refs(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _refs(item, (*path, i))


def _ref_problems(schema: dict[str, Any], cls: Any) -> list[tuple[tuple[Any, ...], str]]:
    """``$ref``s that cannot resolve: no retriever is given, so none ever will.

    Checked only when the schema has no nested ``$id`` (each would start its
    own base URI); otherwise the validator finds out at ``start`` and
    ``input_problems`` says so.
    """
    from referencing import Registry
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012, specification_with

    found = list(_refs(schema, ()))
    if any(key != "$ref" and len(path) > 1 for path, key, _ in found):
        return []
    try:
        dialect = schema.get("$schema") or cls.META_SCHEMA.get("$schema", "")
        resource = specification_with(str(dialect), default=DRAFT202012).create_resource(schema)
        resolver = Registry().resolver_with_root(resource)
    except Exception:  # the validator itself will say what is wrong, at start
        return []
    out: list[tuple[tuple[Any, ...], str]] = []
    for path, key, ref in found:
        if key != "$ref":
            continue
        try:
            resolver.lookup(ref)
        except Unresolvable:
            local = ref.startswith("#")
            why = "points at nothing in this schema" if local else "is not in this schema"
            tail = "" if local else " (remote $refs are never fetched)"
            out.append((path, f"invalid JSON Schema: $ref {_json(ref)} {why}{tail}"))
        except Exception:  # a lookup that breaks otherwise is the validator's to report
            continue
    return out


def input_problems(schema: dict[str, Any], value: Any) -> list[str]:
    """Every way ``value`` fails ``schema``: ``"$.a[0]: expected a string, got 3"``."""
    from jsonschema import validators
    from referencing.exceptions import Unresolvable

    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        errors = sorted(
            cls(schema).iter_errors(value), key=lambda e: list(map(str, e.absolute_path))
        )
    except Unresolvable as exc:  # a $ref parse_flow could not check (see _ref_problems)
        ref = getattr(exc, "ref", None)
        named = f"$ref {_json(ref)}" if isinstance(ref, str) else "a $ref"
        return [
            f"$: the input_schema cannot be applied: {named} resolves to no part of it"
            " (remote $refs are never fetched)"
        ]
    out: list[str] = []
    for error in errors:
        where = _path(error.absolute_path)
        for what in _explain(error):
            line = f"{where}: {what}"
            if line not in out:
                out.append(line)
    return out


def value_problem(schema: dict[str, Any], value: Any, what: str) -> str | None:
    """One message for every way ``value`` fails ``schema`` (None when it meets it):
    ``input of tool 'lookup' at $.id: expected a string, got 3``."""
    problems = input_problems(schema, value)
    if not problems:
        return None
    shown = "; ".join(problems[:MAX_PROBLEMS_SHOWN])
    more = len(problems) - MAX_PROBLEMS_SHOWN
    return f"{what} at {shown}" + (f" (and {more} more)" if more > 0 else "")


# --- values and types in JSON's words -------------------------------------------------

_TYPE_WORDS = {
    "null": "null",
    "boolean": "a boolean",
    "object": "an object",
    "array": "an array",
    "number": "a number",
    "string": "a string",
    "integer": "an integer",
}


def _json(value: Any, limit: int = 60) -> str:
    """``value`` spelled as JSON (``null``, ``true``, ``"x"``), cut when long."""
    import msgspec

    try:
        if isinstance(value, str) and len(value) > limit:
            head = msgspec.json.encode(value[:limit]).decode()
            return f'{head[:-1]}…" ({len(value):,} characters)'
        text = msgspec.json.encode(value).decode()
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
        return short(value, limit)  # not JSON: the input checks refuse it before this
    if len(text) > limit:
        return f"{text[:limit]}… ({len(text):,} characters of JSON)"
    return text


def _path(parts: Iterable[Any]) -> str:
    """``("items", 2, "a b")`` as ``$.items[2]["a b"]``."""
    out = ["$"]
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif isinstance(part, str) and part.isidentifier() and part.isascii():
            out.append(f".{part}")
        else:
            out.append(f"[{_json(part, 30)}]")
    return "".join(out)


def _got(value: Any) -> str:
    """What was found, for ``expected X, got Y``: a scalar as JSON, a container by kind."""
    if isinstance(value, dict):
        return "an empty object" if not value else "an object"
    if isinstance(value, list):
        return "an empty array" if not value else "an array"
    return _json(value)


def _types(expected: Any) -> str:
    names = [expected] if isinstance(expected, str) else list(expected)
    words = [_TYPE_WORDS.get(n, _json(n)) for n in names]
    if len(words) <= 2:
        return " or ".join(words)
    return ", ".join(words[:-1]) + " or " + words[-1]


def _names(names: list[Any], most: int = 10) -> str:
    shown = ", ".join(_json(n) for n in names[:most])
    return shown if len(names) <= most else f"{shown}, … ({len(names):,} values)"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, list, dict)) else 0


# --- one message per keyword -------------------------------------------------------------


def _quoted(text: str) -> str | None:
    """The string a validator message quotes with ``repr`` (``'name'``), else None."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None


_REQUIRED = re.compile(r"(.+) is a required property")
_DEPENDENCY = re.compile(r"(.+) is a dependency of (.+)")


def _missing(error: ValidationError) -> list[str]:
    # One error per missing property, named only in the validator's message.
    match = _REQUIRED.fullmatch(error.message)
    name = _quoted(match.group(1)) if match else None
    if name is None:
        return [_cleaned(error)]
    return [f"missing required property {_json(name)}"]


def _unexpected(error: ValidationError) -> list[str]:
    instance = error.instance if isinstance(error.instance, dict) else {}
    schema = error.schema if isinstance(error.schema, dict) else {}
    known = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extra = [
        k
        for k in instance
        if k not in known and not any(re.search(p, k) for p in patterns if isinstance(p, str))
    ]
    if error.validator == "unevaluatedProperties":
        # Which properties no subschema evaluated only the validator knows:
        # take the names its message quotes.
        extra = [k for k in instance if repr(k) in error.message] or extra
        return [f"property {_json(k)} is not allowed (unevaluated)" for k in extra] or [
            _cleaned(error)
        ]
    return [f"additional property {_json(k)} is not allowed" for k in extra] or [_cleaned(error)]


def _dependent(error: ValidationError) -> list[str]:
    match = _DEPENDENCY.fullmatch(error.message)
    if match is None:
        return [_cleaned(error)]  # a schema dependency: its own keywords speak
    name, trigger = _quoted(match.group(1)), _quoted(match.group(2))
    if name is None or trigger is None:
        return [_cleaned(error)]
    return [f"missing property {_json(name)}, required when {_json(trigger)} is present"]


def _bound(word: str, unit: Callable[[int], str] | None = None) -> Callable[[ValidationError], str]:
    def say(error: ValidationError) -> str:
        limit = error.validator_value
        if unit is not None:
            got = _size(error.instance)
            return f"expected {word} {unit(limit)}, got {unit(got)}"
        return f"expected a number {word} {_json(limit)}, got {_json(error.instance)}"

    return say


def _chars(n: int) -> str:
    return _count(n, "character", "characters")


def _items(n: int) -> str:
    return _count(n, "item", "items")


def _props(n: int) -> str:
    return _count(n, "property", "properties")


def _alternatives(error: ValidationError) -> str:
    keyword = error.validator
    if keyword == "oneOf" and not error.context:
        return f"matches more than one of the oneOf alternatives, got {_got(error.instance)}"
    # Alternatives that only differ in type (``anyOf: [{type: string}, {type: null}]``)
    # say which types they allow.
    types: list[Any] = []
    for sub in error.context or ():
        if sub.validator != "type" or sub.relative_path:
            break
        value = sub.validator_value
        types.extend([value] if isinstance(value, str) else value)
    else:
        if types:
            return f"expected {_types(dict.fromkeys(types))}, got {_got(error.instance)}"
    return f"matches none of the {keyword} alternatives, got {_got(error.instance)}"


_SAY: dict[str, Callable[[ValidationError], str]] = {
    "type": lambda e: f"expected {_types(e.validator_value)}, got {_got(e.instance)}",
    "enum": lambda e: (
        f"expected one of [{_names(e.validator_value)}], got {_got(e.instance)}"
        if isinstance(e.validator_value, list)
        else _cleaned(e)
    ),
    "const": lambda e: f"expected {_json(e.validator_value)}, got {_got(e.instance)}",
    "minimum": _bound(">="),
    "maximum": _bound("<="),
    "exclusiveMinimum": _bound(">"),
    "exclusiveMaximum": _bound("<"),
    "multipleOf": lambda e: (
        f"expected a multiple of {_json(e.validator_value)}, got {_json(e.instance)}"
    ),
    "minLength": lambda e: (
        f"expected at least {_chars(e.validator_value)}, got {_json(e.instance)}"
    ),
    "maxLength": lambda e: f"expected at most {_chars(e.validator_value)}, got {_json(e.instance)}",
    "pattern": lambda e: (
        f"expected a string matching the pattern {_json(e.validator_value)},"
        f" got {_json(e.instance)}"
    ),
    "format": lambda e: (
        f"expected a string in the format {_json(e.validator_value)}, got {_json(e.instance)}"
    ),
    "minItems": _bound("at least", _items),
    "maxItems": _bound("at most", _items),
    "uniqueItems": lambda e: "expected the items to be unique, got duplicates",
    "minProperties": _bound("at least", _props),
    "maxProperties": _bound("at most", _props),
    "contains": lambda e: (
        f"expected an array with an item matching the schema {_json(e.validator_value)}"
    ),
    "minContains": lambda e: (
        f"expected at least {_items(e.validator_value)} matching the 'contains' schema"
    ),
    "maxContains": lambda e: (
        f"expected at most {_items(e.validator_value)} matching the 'contains' schema"
    ),
    "anyOf": _alternatives,
    "oneOf": _alternatives,
    "not": lambda e: (
        f"must not match the schema {_json(e.validator_value)}, got {_got(e.instance)}"
    ),
}

_SAY_MANY: dict[str, Callable[[ValidationError], list[str]]] = {
    "required": _missing,
    "additionalProperties": _unexpected,
    "unevaluatedProperties": _unexpected,
    "dependentRequired": _dependent,
    "dependencies": _dependent,
}


def _explain(error: ValidationError) -> list[str]:
    keyword = error.validator
    if keyword is None:  # a ``false`` schema
        return [f"no value is allowed here, got {_got(error.instance)}"]
    if isinstance(keyword, str) and keyword in _SAY_MANY:
        return _SAY_MANY[keyword](error)
    say = _SAY.get(keyword) if isinstance(keyword, str) else None
    try:
        what = say(error) if say is not None else _cleaned(error)
    except (TypeError, ValueError):  # a schema the words do not fit: the validator's
        what = _cleaned(error)
    if "propertyNames" in error.absolute_schema_path:
        return [f"property name {_json(error.instance)}: {what}"]
    return [what]


def _cleaned(error: ValidationError) -> str:
    """The validator's own message, with the values it quotes spelled as JSON.

    It quotes the value (and often the keyword's own value) with ``repr``:
    each such quote, standing alone, becomes JSON (``None`` → ``null``,
    ``'x'`` → ``"x"``); the keyword is named after it.
    """
    message = str(error.message)
    for value in (error.instance, error.validator_value):
        if not isinstance(value, (str, list, dict, bool)) and value is not None:
            continue  # a number reads the same in both, and is too easily found inside others
        try:
            shown = repr(value)
        except Exception:  # pragma: no cover - input is JSON data by now
            continue
        if len(shown) > 2_000:
            continue
        alone = re.compile(rf"(?<![\w'\"]){re.escape(shown)}(?![\w'\"])")
        spelled = _got(value) if message.startswith(shown) else _json(value)
        found = alone.search(message)
        if found is not None:
            message = message[: found.start()] + spelled + message[found.end() :]
    return f"{message} ({error.validator})" if error.validator else message
