"""The catalogue's declarations hold together: every operation of the ``Host``
contract is reached by one, each route's path names fields of its input, each
failure is declared with its status and exit code, and specs/operations.md lists
exactly the catalogue."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import msgspec
import pytest

from flowcore_handlers import Host
from flowcore_ops import CATALOGUE, FAILURES, Operation, OperationError, operation

ROOT = Path(__file__).resolve().parents[2]


def _fields(op: Operation) -> set[str]:
    return {f.name for f in msgspec.structs.fields(op.input)}


@pytest.mark.parametrize("op", CATALOGUE, ids=lambda op: op.name)
def test_each_declaration_names_fields_its_input_has(op: Operation) -> None:
    fields = _fields(op)
    for route in op.http:
        named = set(re.findall(r"{(\w+)}", route.path))
        assert named <= fields, (op.name, route.path, named - fields)
        if route.method in ("GET", "DELETE") and not route.stream:
            # The rest of the input is the query string: flat values only.
            for f in msgspec.structs.fields(op.input):
                assert not (isinstance(f.type, type) and issubclass(f.type, msgspec.Struct))
    assert set(op.arguments) <= fields, (op.name, set(op.arguments) - fields)
    assert set(op.failures) <= set(FAILURES)
    assert inspect.iscoroutinefunction(op.call)


def test_names_routes_and_commands_are_unique() -> None:
    names = [op.name for op in CATALOGUE]
    assert len(names) == len(set(names))
    routes = [(r.method, r.path) for op in CATALOGUE for r in op.http]
    assert len(routes) == len(set(routes))
    ids = [r.operation_id or op.name for op in CATALOGUE for r in op.http]
    assert len(ids) == len(set(ids))
    words = [op.command for op in CATALOGUE if op.command is not None]
    assert len(words) == len(set(words))


def test_every_operation_of_the_host_contract_is_in_the_catalogue() -> None:
    contract = {
        name
        for name, member in inspect.getmembers(Host)
        if not name.startswith("_") and callable(member)
    }
    called: set[str] = set()
    for module in {inspect.getmodule(op.call) for op in CATALOGUE}:
        assert module is not None
        called |= set(re.findall(r"ctx\.host\.(\w+)\(", inspect.getsource(module)))
    # Reached by the operations only as a part of others (a run's summary, the
    # clock), or by a surface itself (metadata is in every summary).
    missing = contract - called - {"metadata"}
    assert not missing, f"no catalogue operation calls {sorted(missing)}"


def test_a_failure_says_its_status_and_exit_code() -> None:
    for code, failure in FAILURES.items():
        assert 400 <= failure.status < 600, code
        assert failure.exit in (1, 2), code
        assert failure.title  # the status's phrase
    error = OperationError("run-exists", "run 'x' already exists")
    assert (error.type, error.failure.status, error.failure.exit) == ("cannot-start", 409, 2)
    with pytest.raises(ValueError, match="unknown failure code 'nope'"):
        OperationError("nope", "x")
    with pytest.raises(KeyError, match="no operation 'nope'; there are: start"):
        operation("nope")


def test_specs_operations_lists_the_catalogue() -> None:
    text = (ROOT / "specs" / "operations.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([a-z.-]+)` \| (read|write|admin) \|", text, re.MULTILINE)
    assert rows == [(op.name, op.access) for op in CATALOGUE]
