"""Incremental persistence: the public face of ``flowcore.decision.persist``.

``encode_hot``, ``state_changes``, ``restore_state`` and ``advance`` with
``load_report``: the one entry both hosts advance runs through.
"""

from .decision.persist import (
    ReportRow,
    Resolution,
    StateChanges,
    advance,
    decode_resolution,
    decode_row,
    encode_hot,
    encode_resolution,
    encode_row,
    restore_state,
    state_changes,
)
from .decision.persist import (
    with_report as with_report,
)

__all__ = [
    "ReportRow",
    "Resolution",
    "StateChanges",
    "advance",
    "decode_resolution",
    "decode_row",
    "encode_hot",
    "encode_resolution",
    "encode_row",
    "restore_state",
    "state_changes",
]
