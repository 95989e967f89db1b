"""fail: end the step, and what holds it, with an error the flow makes.

The step fails at once with ``{type, message, details, retryable}`` from its
templates. The failure travels as any other (language.md §9.1): a ``try``
may catch it by its type, a ``retry`` may retry it, otherwise it fails the
run. Nothing is sent to the host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._data import MAX_NAME_CHARS, short
from ...language.spec import FailStep
from ..outcome import Failed, err
from ..wire import ErrorInfo
from .leaf import as_text

if TYPE_CHECKING:
    from ..outcome import Outcome
    from ..state import StepFrame
    from ..txn import Txn

__all__ = ["begin"]


def begin(t: Txn, frame: StepFrame, body: FailStep) -> Outcome:
    resolve = t.resolver(frame.env, frame.attempt)
    kind = body.type.evaluate(resolve)
    if not isinstance(kind, str) or not kind or len(kind) > MAX_NAME_CHARS:
        why = f"fail.type must be a non-empty text of at most {MAX_NAME_CHARS} characters"
        return Failed(err("expression-error", f"step {frame.step!r}: {why}, got {short(kind)}"))
    message = as_text(body.message.evaluate(resolve))
    details = None if body.details is None else body.details.evaluate(resolve)
    error = ErrorInfo(type=kind, message=message, retryable=body.retryable, details=details)
    return Failed(error)
