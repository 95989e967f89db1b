"""continue_as_new: start the run again from its first step, with a new input.

The step evaluates its input (the run's input when it names none) and ends
the run's incarnation: ``_ending.continue_as_new`` builds the
``continue-as-new`` effect, which carries the buffered signals and the
scheduled calls not yet due into the next incarnation, and the host starts
that one with ``flowcore.continue_run``. The step unwinds the whole
transition (``ContinueRequested``, caught where ``Exhausted`` is), so no
sibling branch starts after it.

A run that is winding down (compensations, ``on_budget_exhausted``'s steps)
cannot continue, nor can an incarnation that has neither waited for anything
nor taken a buffered signal since it began (it would loop at once, for
ever, on every host): the step fails ``continue-refused``. An input the flow's
``input_schema`` refuses, or over the size of an event, fails it
``invalid-input``. Nothing is sent to the host by the step itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._data import MAX_EVENT_BYTES, DataError, check_data, json_size
from .._outcome import FAIL, err
from .._spec import ContinueAsNewStep

if TYPE_CHECKING:
    from .._outcome import Outcome
    from .._state import StepFrame
    from .._txn import Txn

__all__ = ["ContinueRequested", "begin"]


class ContinueRequested(Exception):
    """A ``continue_as_new`` step ran: the transition ends the incarnation."""

    def __init__(self, key: str, input: Any) -> None:
        self.key = key
        self.input = input


def begin(t: Txn, frame: StepFrame, body: ContinueAsNewStep) -> Outcome:
    step = frame.step
    if t.tree.ending is not None or t.tree.exhausted is not None:
        why = "compensating" if t.tree.ending is not None else "running its budget's final steps"
        return (FAIL, err("continue-refused", f"step {step!r}: the run is {why}"))
    if t.starting is not None and sum(map(len, t.waiting.signals.values())) == t.starting:
        # Nothing came in since the incarnation began: the next would do the same.
        message = (
            f"step {step!r}: the incarnation has waited for nothing and taken no signal"
            " since it began, so the next would continue at once, for ever"
        )
        return (FAIL, err("continue-refused", message))
    if body.input is None:
        value = t.run.input
    else:
        value = body.input.evaluate(t.resolver(frame.env, frame.attempt))
    try:
        check_data(value, "$", "input")
    except DataError as exc:
        return (FAIL, err("invalid-input", f"step {step!r}: {exc}"))
    size = json_size(value)
    if size > MAX_EVENT_BYTES:
        message = f"step {step!r}: the input is {size:,} bytes as JSON, over {MAX_EVENT_BYTES:,}"
        return (FAIL, err("invalid-input", message))
    if t.flow.input_schema is not None:
        from .._validate import input_problems

        problems = input_problems(t.flow.input_schema, value)
        if problems:
            return (FAIL, err("invalid-input", f"step {step!r}: {'; '.join(problems)}"))
    raise ContinueRequested(t.key(frame), value)
