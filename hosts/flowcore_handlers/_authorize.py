"""The hosts' authorization hook: ``LocalHost(authorize=fn)``, and on Temporal
``new_worker(..., authorize=fn)``.

Before a worker runs the handler of a work effect (``call-tool``,
``run-agent``, ``run-team``), it asks ``fn(principal, effect)`` (sync or
``async``) whether the run's principal may have it done. A refusal fails the
effect with ``unauthorized`` and the handler is never run; the error's
``details`` say who was refused what and why, so the run's log shows it.

The hook fails closed: one that raises anything but ``Unauthorized``, or
returns something that is neither an allowance nor a refusal, refuses.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

from flowcore import CallTool, EffectFailed, ErrorInfo, RunAgent, RunTeam, effect_to_wire

from ._checked import safe_text

__all__ = ["Authorize", "Unauthorized", "refusal", "refused_event"]

Verdict = bool | str | None
Authorize = Callable[[str | None, CallTool | RunAgent | RunTeam], Verdict | Awaitable[Verdict]]
"""``fn(principal, effect)``: ``None`` or ``True`` allows; ``False``, a reason
(text) or raising ``Unauthorized`` refuses."""


class Unauthorized(Exception):
    """Raised by an authorize hook to refuse the effect, with the reason why."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason


async def refusal(
    authorize: Authorize, principal: str | None, effect: CallTool | RunAgent | RunTeam
) -> tuple[str, str | None] | None:
    """None when ``authorize`` allows ``effect``; else the reason it refused, and
    the traceback of what it raised when that was not ``Unauthorized``."""
    from . import format_traceback

    try:
        verdict = authorize(principal, effect)
        if inspect.isawaitable(verdict):
            verdict = await verdict
    except Unauthorized as exc:
        return exc.reason or "refused", None
    except Exception as exc:
        why = f"the authorize hook raised {type(exc).__name__}: {safe_text(exc, 200)}"
        return why, format_traceback(exc)
    if verdict is None or verdict is True:
        return None
    if verdict is False:
        return "refused", None
    if isinstance(verdict, str):
        return verdict or "refused", None
    got = safe_text(repr(verdict), 60)
    return f"the authorize hook returned {got}, not None, True, False or a reason", None


def refused_event(
    effect: CallTool | RunAgent | RunTeam, principal: str | None, reason: str, at_ms: int
) -> EffectFailed:
    """``effect-failed`` with ``unauthorized``: who was refused what, and why."""
    kind = effect_to_wire(effect)["kind"]
    if isinstance(effect, CallTool):
        target = effect.tool
    elif isinstance(effect, RunAgent):
        target = effect.agent_id
    else:
        target = effect.team_id
    who = "no principal" if principal is None else f"principal {principal!r}"
    reason = safe_text(reason, 500)
    error = ErrorInfo(
        type="unauthorized",
        message=f"{who} may not {kind} {target!r}: {reason}",
        details={"principal": principal, "effect": kind, "target": target, "reason": reason},
    )
    return EffectFailed(idempotency_key=effect.idempotency_key, error=error, at_ms=at_ms)
