"""JSON Schema checks for ``input_schema`` (the ``jsonschema`` package).

Pure: schemas are checked and applied in memory; remote ``$ref`` retrieval is
never attempted (the validator is given no retriever).
"""

from __future__ import annotations

from typing import Any

__all__ = ["input_problems", "schema_problems"]


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
    return []


def input_problems(schema: dict[str, Any], value: Any) -> list[str]:
    """Every way ``value`` fails ``schema``, each naming the path (``$.a[0]``)."""
    from jsonschema import validators

    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    out: list[str] = []
    for error in sorted(cls(schema).iter_errors(value), key=lambda e: list(map(str, e.path))):
        path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.path)
        out.append(f"{path}: {error.message}")
    return out
