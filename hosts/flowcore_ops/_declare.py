"""What an operation of the catalogue declares, and what it is called with.

An ``Operation`` is declared once (``_catalogue``): its name, a one-line
summary, its msgspec input and output types, the access it needs, the
failures it may give, how it is reached over HTTP, and the words that name it
on the command line. The command line (``flowcore_cli``) and the HTTP API
(``flowcore_serve``) are built from these declarations; neither writes an
operation of its own.

An operation is called with a ``Context`` (the ``Host`` it acts on, the
``Principal`` asking, and where flow names are found) and its decoded input.
It fails with ``OperationError``, whose ``code`` is one of ``FAILURES``: each
failure says once what it becomes on HTTP (a status) and on the command line
(an exit code).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any, Final, Literal

import flowcore
from flowcore_handlers import Host, Registry

__all__ = [
    "ACCESS",
    "FAILURES",
    "Access",
    "Context",
    "Failure",
    "FlowSource",
    "Http",
    "Operation",
    "OperationError",
    "Principal",
    "allows",
]

Access = Literal["read", "write", "admin"]
ACCESS: Final[tuple[Access, ...]] = ("read", "write", "admin")
_RANK: Final[dict[Access, int]] = {"read": 0, "write": 1, "admin": 2}


def allows(held: Access, needed: Access) -> bool:
    """Does access ``held`` cover an operation that needs ``needed``?"""
    return _RANK[held] >= _RANK[needed]


@dataclass(frozen=True)
class Principal:
    """Who asks: a token's principal over HTTP, the operator on the command line.

    A run belongs to the principal that started it (its child runs too); an
    admin acts on every run. ``name`` None is the operator at the command line,
    whose runs belong to no principal."""

    name: str | None
    access: Access

    @classmethod
    def operator(cls) -> Principal:
        """The person at the command line: admin over every run of the host."""
        return cls(None, "admin")

    @property
    def admin(self) -> bool:
        return self.access == "admin"

    @property
    def writes(self) -> bool:
        return self.access in ("write", "admin")

    def owns(self, run_principal: str | None) -> bool:
        """May this principal see and act on a run started by ``run_principal``?"""
        return self.admin or (run_principal is not None and run_principal == self.name)


@dataclass(frozen=True)
class Failure:
    """One way an operation fails: its HTTP status and its command exit code.

    Exit 1 is an answer "no" that is no mistake of the caller (nothing to
    cancel, no pending call); exit 2 is bad input or a state that refuses it."""

    status: int
    exit: int
    meaning: str
    type: str | None = None  # the problem's type slug where it is not the failure's key

    @property
    def title(self) -> str:
        return HTTPStatus(self.status).phrase


FAILURES: Final[dict[str, Failure]] = {
    "unknown-run": Failure(404, 2, "no run has this id (or it is another principal's)"),
    "unknown-schedule": Failure(404, 2, "no schedule has this name"),
    "unknown-flow": Failure(422, 2, "the flow named is not one this surface can start"),
    "settled": Failure(409, 2, "the run has settled: it takes no more events"),
    "nothing-to-cancel": Failure(409, 1, "the cancel would change nothing"),
    "not-pending": Failure(409, 1, "no pending scheduled call has this id"),
    "no-open-question": Failure(409, 2, "the run has no open question with this key"),
    "ambiguous-question": Failure(422, 2, "a step with several open questions: give the key"),
    "not-an-option": Failure(422, 2, "the answer is not one of the question's options"),
    "run-exists": Failure(409, 2, "a run holds this id (with other options)", "cannot-start"),
    "cannot-start": Failure(422, 2, "the run cannot start: its spec, input or id is not valid"),
    "rejected": Failure(422, 2, "the host refused the request; the detail says why"),
    "invalid-request": Failure(422, 2, "a value of the request is not valid"),
    "invalid-cursor": Failure(422, 2, "a cursor this surface did not hand out"),
    "cannot-backfill": Failure(422, 2, "the backfill's window is not valid"),
    "diverged": Failure(409, 1, "the run's log does not replay against the new version"),
    "host-refuses": Failure(501, 2, "this host does not do this operation (specs/hosts.md)"),
    "unknown-update": Failure(422, 2, "the run's flow declares no update of this name"),
    "update-refused": Failure(
        422, 1, "the update was refused (its input, validator, a limit, or the run ending): `code`"
    ),
    "unknown-update-id": Failure(404, 2, "the run has no update with this id"),
    "unknown-query": Failure(422, 2, "the run's flow declares no query of this name"),
    "query-failed": Failure(422, 2, "the query's arguments or value failed: `code` says which"),
}


class OperationError(Exception):
    """An operation refused: ``code`` (a key of ``FAILURES``), a one-line
    ``detail``, and ``extra`` members a problem reply carries (``options``,
    ``open_questions``; ``code``: a refused update's or a failed query's own code)."""

    def __init__(self, code: str, detail: str, /, **extra: Any) -> None:
        if code not in FAILURES:
            raise ValueError(f"unknown failure code {code!r}")
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.extra = extra

    @property
    def failure(self) -> Failure:
        return FAILURES[self.code]

    @property
    def type(self) -> str:
        """The problem's type slug (``/problems/<type>``)."""
        return self.failure.type or self.code


# Where a flow named by a start, an upgrade or a schedule comes from: the
# command line reads a file; the HTTP API finds a flow id in its registry
# folder. Raises ``OperationError("unknown-flow")``.
FlowSource = Callable[[str], Path]


def _no_flows(name: str) -> Path:
    raise OperationError("unknown-flow", "this surface starts no flows by name")


@dataclass(frozen=True)
class Context:
    """What an operation is called with besides its input."""

    host: Host
    principal: Principal = field(default_factory=Principal.operator)
    flows: FlowSource = _no_flows
    flow_folders: tuple[Path, ...] = ()  # where a flow's subflows are found
    # The handler modules a server runs (name as ``tools_module_name`` gives it ->
    # its handlers): ``start`` and ``resume`` take only these. None (the command
    # line): any module the caller names.
    tools_modules: Mapping[str, Registry] | None = None
    # The flows this surface can start, with where each is (a server's registry folder).
    flow_list: Callable[[], list[tuple[flowcore.Flow, Path]]] = list


@dataclass(frozen=True)
class Http:
    """How an operation is reached over HTTP: ``path`` holds the input fields it
    names (``{run_id}``); on GET and DELETE the other fields are the query string,
    else the JSON body. ``media_type`` of a reply that is not JSON (NDJSON, SSE);
    ``stream``: the reply is sent as it is produced. ``body_field``: the JSON
    body is that input field's value itself (any JSON), not an object of fields;
    ``json_query``: query-string fields given as JSON text. ``running``: the
    status of a reply whose ``status`` says ``running`` (an update not ended
    when the wait did)."""

    method: Literal["GET", "POST", "DELETE"]
    path: str
    status: int = 200
    operation_id: str | None = None  # the OpenAPI operationId (default: the name)
    media_type: str = "application/json"
    stream: bool = False
    body_field: str | None = None
    json_query: tuple[str, ...] = ()
    running: int | None = None


@dataclass(frozen=True)
class Operation:
    """One operation of the catalogue (see the module's docstring)."""

    name: str  # dotted where it belongs to a group: "schedule.pause"
    summary: str
    input: type[Any]  # a msgspec Struct
    output: Any  # a msgspec type (None: nothing, HTTP 204 / empty)
    access: Access
    call: Callable[[Context, Any], Awaitable[Any]]
    failures: tuple[str, ...] = ()
    http: tuple[Http, ...] = ()
    command: tuple[str, ...] | None = None  # the words on the command line (None: none)
    arguments: tuple[str, ...] = ()  # input fields taken positionally on the command line

    def __post_init__(self) -> None:
        unknown = [code for code in self.failures if code not in FAILURES]
        if unknown:
            raise ValueError(f"operation {self.name}: unknown failure codes {unknown}")
