"""Expressions in specs: ``${...}`` templates holding JMESPath.

A string that is exactly one ``${...}`` yields the raw value; any other string
with ``${...}`` in it is interpolated as text; strings without any are
constants. Mappings and lists are templates when anything inside them is.
Conditions (``if``, ``until``) are bare JMESPath, with an optional ``${...}``
wrapper.

Every expression is compiled once, when the spec is parsed. The JMESPath
language itself is the ``jmespath`` package's; this module only finds the
``${`` ... ``}`` delimiters, works out statically which step results an
expression reads (so evaluation never copies the run's whole history), and
evaluates plain field chains (``steps.fetch.output.title``) without going
through the generic tree interpreter, which is the common case and several
times faster.

An expression can read only its context: ``input``, ``steps``, ``run`` and
the loop variables. This module must never do I/O.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol, cast

import jmespath
import msgspec
from jmespath import exceptions as jmes_errors
from jmespath import functions as jmes_functions

from .._data import DataError, check_data

__all__ = [
    "Cond",
    "Resolver",
    "Template",
    "TemplateError",
    "compile_cond",
    "compile_template",
    "find_expressions",
    "reads",
    "truthy",
]


class TemplateError(ValueError):
    """A template or expression does not compile; the message says why."""


class Resolver(Protocol):
    """What an expression can see. ``step`` returns a step's result record."""

    def root(self, name: str) -> Any: ...

    def step(self, step_id: str) -> Any: ...


_OPTIONS = jmespath.Options(custom_functions=jmes_functions.Functions())


def find_expressions(text: str) -> list[tuple[int, int]]:
    """Spans ``(start, end)`` of each ``${...}`` in ``text``, end exclusive.

    The closing brace is found by balancing braces outside JMESPath string
    literals, so ``${ {a: b} }`` (a multi-select hash) is one expression.
    """
    spans: list[tuple[int, int]] = []
    i = 0
    n = len(text)
    while True:
        start = text.find("${", i)
        if start < 0:
            return spans
        depth = 0
        j = start + 2
        quote = ""
        while j < n:
            ch = text[j]
            if quote:
                if ch == "\\":
                    j += 2
                    continue
                if ch == quote:
                    quote = ""
            elif ch in "'\"`":
                quote = ch
            elif ch == "{":
                depth += 1
            elif ch == "}":
                if depth == 0:
                    break
                depth -= 1
            j += 1
        if j >= n:
            raise TemplateError(f"unclosed '${{' at offset {start}")
        spans.append((start, j + 1))
        i = j + 1


def _flatten_fields(node: dict[str, Any]) -> list[str] | None:
    """The field names of a pure ``a.b.c`` chain, or None if it is anything else."""
    kind = node["type"]
    if kind == "field":
        return [node["value"]]
    if kind == "subexpression":
        names: list[str] = []
        for child in node["children"]:
            sub = _flatten_fields(child)
            if sub is None:
                return None
            names.extend(sub)
        return names
    return None


# Node types whose first child is evaluated against the current context and
# whose other children are evaluated against each element (or a piped value).
_RESCOPING = frozenset(
    {
        "subexpression",
        "index_expression",
        "projection",
        "value_projection",
        "filter_projection",
        "flatten",
        "pipe",
    }
)


def _step_refs(node: Any, refs: set[str], rooted: bool = True) -> bool:
    """Collect ids read as ``steps.<id>``; True if ``steps`` is read wholesale.

    Only ``steps`` read from the root context counts: inside a projection or
    a filter, ``steps`` is a field of the current element, not the run's steps.
    """
    if not isinstance(node, dict):
        return False
    kind = node.get("type")
    children = node.get("children", ())
    if kind == "field":
        return rooted and node.get("value") == "steps"
    if kind == "expref":
        return any(_step_refs(c, refs, False) for c in children)
    if kind in _RESCOPING and children:
        if kind == "subexpression" and rooted:
            names = _flatten_fields(node)
            head = children[0]
            if head.get("type") == "field" and head.get("value") == "steps":
                second = children[1] if len(children) > 1 else None
                if second is not None and second.get("type") == "field":
                    refs.add(second["value"])
                    return any(_step_refs(c, refs, False) for c in children[2:])
                if names is None and second is not None and second.get("type") == "subexpression":
                    inner = second["children"][0]
                    if inner.get("type") == "field":
                        refs.add(inner["value"])
                        return False
                return True
        wholesale = _step_refs(children[0], refs, rooted)
        for child in children[1:]:
            wholesale = _step_refs(child, refs, False) or wholesale
        return wholesale
    wholesale = False
    for child in children:
        wholesale = _step_refs(child, refs, rooted) or wholesale
    return wholesale


# The functions an expression may call, with their signatures (the standard
# set: ``_OPTIONS`` adds none).
_FUNCTIONS: dict[str, Any] = dict(jmes_functions.Functions().FUNCTION_TABLE)

# Nodes that continue a chain of names from their first child: the names read
# from the root are the leading fields (``steps.a.output[0]`` reads
# ``steps``, ``a``, ``output``).
_CHAINS = frozenset({"subexpression", "index_expression", "projection", "value_projection"})
_CHAINS_FIRST = frozenset({"filter_projection", "flatten"})


def _lead(node: Any) -> tuple[list[str], bool]:
    """The field names a node reads from its context before anything else, and
    whether the node is nothing but those names (so a chain may go on)."""
    if not isinstance(node, dict):
        return [], False
    kind = node.get("type")
    if kind == "field":
        return [str(node.get("value"))], True
    if kind == "current":
        return [], True
    children = node.get("children") or ()
    if kind == "subexpression":
        names: list[str] = []
        for child in children:
            more, whole = _lead(child)
            names.extend(more)
            if not whole:
                return names, False
        return names, True
    if (kind in _CHAINS or kind in _CHAINS_FIRST) and children:
        return _lead(children[0])[0], False
    return [], False


def _arity(name: str, count: int) -> str | None:
    signature = _FUNCTIONS[name]["signature"]
    variadic = bool(signature) and bool(signature[-1].get("variadic"))
    wanted = len(signature)
    if count == wanted or (variadic and count > wanted):
        return None
    plural = "" if wanted == 1 else "s"
    least = "at least " if variadic else ""
    return f"JMESPath function {name}() takes {least}{wanted} argument{plural}, got {count}"


def _argument_kinds(name: str, args: Any) -> str | None:
    """A problem when an argument's kind can never be right: ``&expr`` where the
    function wants a value, or a value where it wants ``&expr``."""
    signature = _FUNCTIONS[name]["signature"]
    for i, arg in enumerate(args):
        spec = signature[min(i, len(signature) - 1)] if signature else {}
        types = spec.get("types") or ()
        is_ref = isinstance(arg, dict) and arg.get("type") == "expref"
        if is_ref and types and "expref" not in types:
            return f"argument {i + 1} of {name}() is an expression reference (&...), not a value"
        if not is_ref and list(types) == ["expref"]:
            return f"argument {i + 1} of {name}() must be an expression reference (&field)"
    return None


def _walk(
    node: Any, rooted: bool, covered: bool, chains: list[tuple[str, ...]], problems: list[str]
) -> None:
    """Collect the chains of names read from the root context, and calls that
    always fail. ``rooted``: the node is evaluated against the root context
    (not inside a projection, a filter, after a pipe or in ``&expr``);
    ``covered``: its leading names were already collected."""
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    children = node.get("children") or ()
    if rooted and not covered and (kind == "field" or kind in _CHAINS or kind in _CHAINS_FIRST):
        names = _lead(node)[0]
        if names:
            chains.append(tuple(names))
            covered = True
    if kind == "function_expression":
        name = str(node.get("value"))
        if name not in _FUNCTIONS:
            match = difflib.get_close_matches(name, list(_FUNCTIONS), n=1)
            hint = f" (did you mean {match[0]}()?)" if match else ""
            problems.append(f"unknown JMESPath function {name}(){hint}")
        else:
            problem = _arity(name, len(children)) or _argument_kinds(name, children)
            if problem is not None:
                problems.append(problem)
    if kind == "expref":
        for child in children:
            _walk(child, False, False, chains, problems)
        return
    if kind in _RESCOPING and children:
        _walk(children[0], rooted, covered, chains, problems)
        for child in children[1:]:
            _walk(child, False, False, chains, problems)
        return
    for child in children:
        _walk(child, rooted, False, chains, problems)


def reads(source: str, cond: bool = False) -> tuple[list[tuple[str, ...]], list[str]]:
    """What the expressions in ``source`` read, as the spec alone shows it.

    Returns the chains of names each reads from its context (``${steps.a.output.x}``
    gives ``("steps", "a", "output", "x")``; a chain ends where something other
    than a name follows), and a message for each function call that fails
    whenever it is evaluated: an unknown function, a wrong number of
    arguments, ``&expr`` where a value is wanted or the reverse. ``cond``:
    ``source`` is a bare condition. Raises ``TemplateError`` if it does not compile.
    """
    if cond:
        text = source.strip()
        spans = find_expressions(text) if "${" in text else []
        if len(spans) == 1 and spans[0] == (0, len(text)):
            text = text[2:-1]
        bodies = [text]
    else:
        bodies = [source[start + 2 : end - 1] for start, end in find_expressions(source)]
    chains: list[tuple[str, ...]] = []
    problems: list[str] = []
    for body in bodies:
        parsed = _expr_for(body)._parsed.parsed
        _walk(parsed, True, False, chains, problems)
    return chains, problems


def _explain(exc: Exception) -> str:
    """A one-line reason from jmespath's error, with the column it points at."""
    position = getattr(exc, "lex_position", None)
    at = f" at column {position + 1}" if isinstance(position, int) else ""
    if isinstance(exc, jmes_errors.LexerError):
        return f"{exc.message}{at}"
    if isinstance(exc, jmes_errors.IncompleteExpressionError):
        return f"incomplete expression{at}"
    if isinstance(exc, jmes_errors.ParseError):
        token = getattr(exc, "token_value", None)
        return f"unexpected token {token!r}{at}"
    return str(exc).strip().splitlines()[0]


_STEP, _ROOT, _ALL_STEPS, _SEARCH = range(4)


class _Expr:
    """One compiled JMESPath expression."""

    __slots__ = ("_head", "_kind", "_parsed", "_rest", "refs", "source", "wholesale")

    def __init__(self, source: str) -> None:
        source = source.strip()
        if not source:
            raise TemplateError("empty expression")
        try:
            self._parsed = jmespath.compile(source)
        except jmes_errors.JMESPathError as exc:
            raise TemplateError(f"invalid JMESPath {source!r}: {_explain(exc)}") from None
        self.source = source
        refs: set[str] = set()
        self.wholesale = _step_refs(self._parsed.parsed, refs)
        self.refs = frozenset(refs)
        # A pure ``a.b.c`` chain is read directly, without JMESPath: ``_kind``
        # is _STEP (``steps.<id>.rest``), _ROOT (``<root>.rest``), _ALL_STEPS
        # (bare ``steps``) or _SEARCH (anything else).
        chain = _flatten_fields(cast(dict[str, Any], self._parsed.parsed))
        self._head = ""
        self._rest: tuple[str, ...] = ()
        if chain is None:
            self._kind = _SEARCH
        elif chain[0] == "steps":
            if len(chain) == 1:
                self._kind = _ALL_STEPS
            else:
                self._kind = _STEP
                self._head = chain[1]
                self._rest = tuple(chain[2:])
        else:
            self._kind = _ROOT
            self._head = chain[0]
            self._rest = tuple(chain[1:])

    def evaluate(self, resolver: Resolver) -> Any:
        kind = self._kind
        if kind == _STEP:
            value = resolver.step(self._head)
        elif kind == _ROOT:
            value = resolver.root(self._head)
        elif kind == _ALL_STEPS:
            return resolver.root("$all_steps")
        else:
            return self._search(resolver)
        for name in self._rest:
            if not isinstance(value, dict):
                return None
            value = value.get(name)
        return value

    def _search(self, resolver: Resolver) -> Any:
        context: dict[str, Any] = {}
        for name in _ROOTS:
            value = resolver.root(name)
            if value is not None:
                context[name] = value
        extra = resolver.root("$locals")
        if isinstance(extra, Mapping):
            context.update(extra)
        if self.wholesale:
            context["steps"] = resolver.root("$all_steps")
        else:
            context["steps"] = {ref: resolver.step(ref) for ref in self.refs}
        try:
            result = self._parsed.search(context, options=_OPTIONS)
        except jmes_errors.JMESPathError as exc:
            raise TemplateError(f"{self.source!r}: {exc}") from None
        except TypeError as exc:
            # jmespath orders a string and a number with Python's ``<``, which
            # raises: the expression fails as any other of a wrong type does.
            raise TemplateError(f"{self.source!r}: {exc}") from None
        # JMESPath's functions make new numbers (sum, floor, to_number): the
        # result of a search over data is not always data.
        try:
            check_data(result, "$", "result")
        except DataError as exc:
            raise TemplateError(f"{self.source!r}: {exc}") from None
        return result


_ROOTS = ("input", "run", "error", "fire_count")

# Compiled expressions are immutable, so one per source text is shared; parse
# compiles every expression twice (structure, then cross-references).
_CACHE: dict[str, _Expr] = {}
_CACHE_LIMIT = 200_000


def _expr_for(source: str) -> _Expr:
    expr = _CACHE.get(source)
    if expr is None:
        expr = _Expr(source)
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[source] = expr
    return expr


def _digest(source: Any) -> int:
    # A digest, not the built-in string hash: the same in every process.
    text = json.dumps(source, sort_keys=True, default=str).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big")


def truthy(value: Any) -> bool:
    """JMESPath truthiness: false, null and empty string/list/object are false."""
    if value is None or value is False:
        return False
    if isinstance(value, (str, list, dict, tuple)) and not value:
        return False
    return True


class Template:
    """A compiled template: evaluates to a JSON value against a resolver."""

    __slots__ = ("_eval", "constant", "refs", "source", "wholesale")

    def __init__(
        self,
        source: Any,
        evaluate: Callable[[Resolver], Any] | None,
        refs: frozenset[str],
        wholesale: bool,
    ) -> None:
        self.source = source
        self._eval = evaluate
        self.constant = evaluate is None
        self.refs = refs
        self.wholesale = wholesale

    def evaluate(self, resolver: Resolver) -> Any:
        if self._eval is None:
            return self.source
        return self._eval(resolver)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Template) and other.source == self.source

    def __hash__(self) -> int:
        return _digest(self.source)

    def __repr__(self) -> str:
        return f"Template({self.source!r})"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return msgspec.json.encode(value, order="sorted").decode()


def _compile(source: Any, exprs: list[_Expr]) -> Callable[[Resolver], Any] | None:
    if isinstance(source, str):
        spans = find_expressions(source)
        if not spans:
            return None
        if len(spans) == 1 and spans[0] == (0, len(source)):
            expr = _expr_for(source[2:-1])
            exprs.append(expr)
            return expr.evaluate
        parts: list[str | _Expr] = []
        pos = 0
        for start, end in spans:
            if start > pos:
                parts.append(source[pos:start])
            expr = _expr_for(source[start + 2 : end - 1])
            exprs.append(expr)
            parts.append(expr)
            pos = end
        if pos < len(source):
            parts.append(source[pos:])

        def interpolate(resolver: Resolver) -> str:
            return "".join(p if isinstance(p, str) else _text(p.evaluate(resolver)) for p in parts)

        return interpolate
    if isinstance(source, dict):
        items = [(k, _compile(v, exprs), v) for k, v in source.items()]
        if all(fn is None for _, fn, _ in items):
            return None

        def build_dict(resolver: Resolver) -> dict[str, Any]:
            out = {}  # a loop, not a comprehension: no nested frame per call
            for k, fn, v in items:
                out[k] = v if fn is None else fn(resolver)
            return out

        return build_dict
    if isinstance(source, (list, tuple)):
        elems = [(_compile(v, exprs), v) for v in source]
        if all(fn is None for fn, _ in elems):
            return None

        def build_list(resolver: Resolver) -> list[Any]:
            out = []
            for fn, v in elems:
                out.append(v if fn is None else fn(resolver))
            return out

        return build_list
    return None


def compile_template(source: Any) -> Template:
    """Compile a JSON value whose strings may hold ``${...}`` expressions."""
    exprs: list[_Expr] = []
    fn = _compile(source, exprs)
    refs = frozenset().union(*(e.refs for e in exprs)) if exprs else frozenset()
    return Template(source, fn, refs, any(e.wholesale for e in exprs))


class Cond:
    """A compiled condition: bare JMESPath (``${...}`` around it is allowed)."""

    __slots__ = ("_expr", "source")

    def __init__(self, source: str) -> None:
        text = source.strip()
        spans = find_expressions(text) if "${" in text else []
        if len(spans) == 1 and spans[0] == (0, len(text)):
            text = text[2:-1]
        self.source = source
        self._expr = _expr_for(text)

    @property
    def refs(self) -> frozenset[str]:
        return self._expr.refs

    def test(self, resolver: Resolver) -> bool:
        return truthy(self._expr.evaluate(resolver))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Cond) and other.source == self.source

    def __hash__(self) -> int:
        return _digest(self.source)

    def __repr__(self) -> str:
        return f"Cond({self.source!r})"


def compile_cond(source: str) -> Cond:
    return Cond(source)
