"""flowcore's catalogue of operations: each operation a person or program does to
runs, declared once (name, msgspec input and output, access, failures, HTTP
route, command words), from which the command line and the HTTP API are built.

``CATALOGUE`` lists them; ``Context`` is what one is called with (a ``Host``,
the ``Principal`` asking, where flows are found); ``OperationError`` is how
one fails, its ``code`` a key of ``FAILURES`` (an HTTP status and an exit
code). specs/operations.md describes each.
"""

from ._catalogue import BY_NAME, CATALOGUE, NDJSON, SSE, operation
from ._declare import (
    ACCESS,
    FAILURES,
    Access,
    Context,
    Failure,
    FlowSource,
    Http,
    Operation,
    OperationError,
    Principal,
    allows,
)

__all__ = [
    "ACCESS",
    "BY_NAME",
    "CATALOGUE",
    "FAILURES",
    "NDJSON",
    "SSE",
    "Access",
    "Context",
    "Failure",
    "FlowSource",
    "Http",
    "Operation",
    "OperationError",
    "Principal",
    "allows",
    "operation",
]
