"""continue_as_new: start the run again from its first step, with a new input.

The step evaluates its input (the run's input when it names none) and ends
the run's incarnation: ``ending.continue_as_new`` builds the
``continue-as-new`` effect, which carries the buffered signals and the
scheduled calls not yet due into the next incarnation, and the host starts
that one with ``flowcore.continue_run``. The step stops the whole
transition (``Txn.stop`` with a ``halt.ContinueRequested``, handled where an
``Exhausted`` is: ``ending.halted``), so no sibling branch starts after it.

A run that is winding down (compensations, ``on_budget_exhausted``'s steps)
cannot continue, nor can an update's handler (as in Temporal, only the main
steps may): the step fails ``continue-refused``. An incarnation that
has neither waited for anything nor taken a buffered signal since it began
is *idle*; it may continue (the next one may take another way, on
``run.incarnation`` or its new input), but only ``limits.max_idle_incarnations``
idle ones in a row: the one past the bound fails ``continue-refused`` (a run
that could only loop at once, for ever, on every host). The count travels on
the effect (``idle_incarnations``) and starts again at 0 after an incarnation
that waited. An input the flow's ``input_schema`` refuses, or over the size
of an event, fails it ``invalid-input``. Nothing is sent to the host by the
step itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._data import MAX_EVENT_BYTES, DataError, check_data, json_size
from ...language.spec import ContinueAsNewStep
from .. import keys
from ..halt import ContinueRequested
from ..outcome import Failed, err

if TYPE_CHECKING:
    from ..outcome import Outcome
    from ..state import StepFrame
    from ..txn import Txn

__all__ = ["begin"]


def begin(t: Txn, frame: StepFrame, body: ContinueAsNewStep) -> Outcome | None:
    """Fail the step ``continue-refused`` or ``invalid-input``, or stop the
    transition: the run continues as new (None: nothing is handed up)."""
    step = frame.step
    if frame.prefix.startswith(keys.UPDATE_SCOPE):
        message = (
            f"step {step!r}: an update's handler cannot continue the run as new"
            " (the update would be abandoned by its own step); the flow's own steps can"
        )
        return Failed(err("continue-refused", message))
    if t.tree.ending is not None or t.tree.exhausted is not None:
        why = "compensating" if t.tree.ending is not None else "running its budget's final steps"
        return Failed(err("continue-refused", f"step {step!r}: the run is {why}"))
    idle = 0
    w = t.waiting
    buffered = sum(map(len, w.signals.values()))
    if t.semantics >= 3:  # keyed signals carried over count too (level 3)
        buffered += sum(map(len, w.keyed_signals.values()))
    if t.starting is not None and buffered == t.starting:
        # Nothing came in since the incarnation began: idle. The next may end
        # otherwise (it reads another run.incarnation), but a bound stops a
        # run that would continue at once for ever.
        if t.semantics < 3:  # before level 3 no idle incarnation may continue
            message = (
                f"step {step!r}: the incarnation has waited for nothing and taken no signal"
                " since it began, so the next would continue at once, for ever"
            )
            return Failed(err("continue-refused", message))
        idle = t.idle + 1
        bound = t.flow.limits.max_idle_incarnations
        if idle > bound:
            times = "once" if t.idle == 1 else f"{t.idle} times"
            message = (
                f"step {step!r}: the run has continued {times} in a row from incarnations"
                " that waited for nothing and took no signal, and this one has not waited"
                f" either: limits.max_idle_incarnations is {bound}; raise it if the run"
                " ends after more of them"
            )
            return Failed(err("continue-refused", message))
    if body.input is None:
        value = t.run.input
    else:
        value = body.input.evaluate(t.resolver(frame.env, frame.attempt))
    try:
        check_data(value, "$", "input")
    except DataError as exc:
        return Failed(err("invalid-input", f"step {step!r}: {exc}"))
    size = json_size(value)
    if size > MAX_EVENT_BYTES:
        message = f"step {step!r}: the input is {size:,} bytes as JSON, over {MAX_EVENT_BYTES:,}"
        return Failed(err("invalid-input", message))
    if t.flow.input_schema is not None:
        from ...language.validate import input_problems

        problems = input_problems(t.flow.input_schema, value)
        if problems:
            return Failed(err("invalid-input", f"step {step!r}: {'; '.join(problems)}"))
    t.stop(ContinueRequested(t.key(frame), value, idle))
    return None
