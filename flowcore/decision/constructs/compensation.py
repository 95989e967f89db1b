"""Compensation (saga): steps that undo a completed step when the run fails or is cancelled.

A step with ``compensate`` steps that succeeds pushes a link on the
compensation stack (``Txn.push_compensation``). When the run winds down
after a failure or a cancel, the stack runs newest first, each link's steps
in the scope of the step it undoes; the run settles once the stack is empty
(see ``ending``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from .. import keys
from ..state import ListKind

if TYPE_CHECKING:
    from ..txn import Txn

__all__ = ["run_next"]


def run_next(t: Txn) -> bool:
    """Run compensations from the top of the stack until one waits; False once none is left."""
    while t.tree.compensations is not None:
        link = t.tree.compensations
        t.tree = msgspec.structs.replace(t.tree, compensations=link.rest)
        out = t.start_list(
            keys.compensation_list(link.prefix, link.step),
            None,
            link.env,
            link.prefix,
            link.step,
            ListKind.COMPENSATION,
        )
        if out is None:
            return True
    return False
