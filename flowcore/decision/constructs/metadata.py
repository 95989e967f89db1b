"""set_metadata: change the run's metadata fields (``State.metadata``).

Each field's template is evaluated in the step's context and checked
against the field's declared type; a wrong type fails the step with an
``expression-error`` and changes nothing. A null value clears the field.
The step's output is the mapping of the fields it set. Nothing is sent to
the host and no budget is spent: hosts read the metadata from the state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...language.metadata import value_problem
from ...language.spec import SetMetadataStep
from ..outcome import Failed, Ok, err

if TYPE_CHECKING:
    from ..outcome import Outcome
    from ..state import StepFrame
    from ..txn import Txn

__all__ = ["begin"]


def begin(t: Txn, frame: StepFrame, body: SetMetadataStep) -> Outcome:
    resolve = t.resolver(frame.env, frame.attempt)
    values: dict[str, Any] = {}
    for name, template in body.fields.items():
        value = template.evaluate(resolve)
        kind = t.flow.metadata[name]
        problem = value_problem(kind, value)
        if problem is not None:
            why = f"set_metadata.{name} ({kind}) {problem}"
            return Failed(err("expression-error", f"step {frame.step!r}: {why}"))
        values[name] = value
    current = dict(t.metadata or {})
    for name, value in values.items():
        if value is None:
            current.pop(name, None)
        else:
            current[name] = value
    if current != (t.metadata or {}):
        t.metadata = current or None
    return Ok(values)
