"""The error hierarchy: one base, one class per way things go wrong.

Split in the h11 manner: ``SpecError`` (the flow author wrote something wrong),
``WireError`` (a host sent bytes or a dict that is not a valid event),
``EventRejected`` (a well-formed event that cannot apply to this run),
``SnapshotMismatch`` (a state decoded against the wrong flow) and
``ReplayDivergence`` (a recorded log disagrees with the interpreter).
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = [
    "EventRejected",
    "FlowcoreError",
    "InputError",
    "MetadataError",
    "Problem",
    "QueryError",
    "ReplayDivergence",
    "RunIdError",
    "SnapshotMismatch",
    "SpecError",
    "UpdateRefused",
    "WireError",
]


class FlowcoreError(Exception):
    """Base of every error flowcore raises on purpose."""


@attrs.frozen
class Problem:
    """One thing wrong with a spec.

    ``path`` is the location inside the document (``steps[3].call_tool.tool``);
    ``line`` and ``column`` are 1-based and present when the spec was text.
    """

    path: str
    message: str
    source: str = "<spec>"
    line: int | None = None
    column: int | None = None

    @property
    def location(self) -> str:
        if self.line is None:
            return f"{self.source}:{self.path or '$'}"
        return f"{self.source}:{self.line}:{self.column}"

    def __str__(self) -> str:
        where = self.location
        if self.line is not None:
            where = f"{where} ({self.path or '$'})"
        return f"{where}: {self.message}"


class SpecError(FlowcoreError, ValueError):
    """A flow spec is invalid. ``problems`` lists every problem found at once."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        n = len(self.problems)
        super().__init__(f"{n} problem{'s' if n != 1 else ''} in flow spec:\n{lines}")


class WireError(FlowcoreError, ValueError):
    """A wire value (event dict, encoded bytes) is malformed.

    ``path`` names the bad field (``$.error.type``), when one can be named.
    """

    def __init__(self, message: str, path: str = "$") -> None:
        self.path = path
        super().__init__(message)


class EventRejected(FlowcoreError):
    """A valid event that cannot apply to the run; the state is unchanged."""

    def __init__(self, reason: str, key: str | None = None) -> None:
        self.reason = reason
        self.key = key
        super().__init__(reason if key is None else f"{reason} [{key}]")


class UpdateRefused(EventRejected):
    """An update the run will not take (language.md §16); nothing was written.

    ``code``: ``unknown-update`` (no such name), ``bad-input`` (the input fails
    the update's ``input_schema`` or is not data), ``validator`` (its validator
    is falsy or fails to evaluate), ``limit`` (``max_running_updates`` run, or
    ``max_updates`` were taken in this incarnation) or ``ending`` (the run is
    winding down, has settled or continued as new). ``update``: the name.
    """

    def __init__(self, code: str, update: str, reason: str) -> None:
        self.code = code
        self.update = update
        super().__init__(reason)


class QueryError(FlowcoreError):
    """A query that cannot be answered: ``code`` is ``unknown-query``,
    ``bad-args`` (the args fail its ``args_schema`` or are not data) or
    ``expression-error`` (its value fails to evaluate); ``query``: the name."""

    def __init__(self, code: str, query: str, message: str) -> None:
        self.code = code
        self.query = query
        self.message = message
        super().__init__(message)


class RunIdError(FlowcoreError, ValueError):
    """A run id a caller chose cannot name a run started from outside (``check_run_id``)."""

    def __init__(self, run_id: object, message: str) -> None:
        self.run_id = run_id
        super().__init__(message)


class InputError(FlowcoreError, ValueError):
    """The run's input does not match the flow's ``input_schema``."""

    def __init__(self, flow_id: str, problems: list[str]) -> None:
        self.problems = tuple(problems)
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"input rejected by the input_schema of flow {flow_id!r}:\n{lines}")


class MetadataError(InputError):
    """Run metadata given at start names an undeclared field or has a wrong type."""

    def __init__(self, flow_id: str, problems: list[str]) -> None:
        self.problems = tuple(problems)
        lines = "\n".join(f"  {p}" for p in problems)
        ValueError.__init__(self, f"metadata rejected by flow {flow_id!r}:\n{lines}")


class SnapshotMismatch(FlowcoreError, ValueError):
    """A snapshot was decoded against a flow other than the one it pins."""


class ReplayDivergence(FlowcoreError):
    """A recorded log disagrees with what the interpreter derives from it."""

    def __init__(self, index: int, expected: Any, actual: Any, message: str = "") -> None:
        self.index = index
        self.expected = expected
        self.actual = actual
        text = message or "replay diverged"
        super().__init__(f"{text} at index {index}: expected {expected!r}, got {actual!r}")
