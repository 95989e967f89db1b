"""The client side of the Temporal host: start runs, signal, answer, cancel, read logs.

``TemporalHost`` wraps a ``temporalio.client.Client``. A flowcore run is one
``flowcore`` workflow whose workflow id is the run id. Everything a user can
get wrong (a server that cannot be reached, an unknown run, a rejected
answer, a bad spec) raises ``TemporalHostError`` with one clear line.

``TemporalHost`` is made of its roles, each a class of its own module, as
Temporal's SDK separates them: commands (``_client.TemporalClient``), reads
(``_reads.TemporalReads``: ``history_to_log`` turns a run's Temporal history
into flowcore's log records by replaying it locally through the workflow), and
administration (``_admin.TemporalAdmin``: schedules, retention), over what they
share (``_host_base.TemporalBase``: the client, errors, talking to one run).
This module only puts them together; it adds nothing of its own.
"""

from __future__ import annotations

from ._admin import TemporalAdmin
from ._client import TemporalClient
from ._host_base import (
    NoSignalWait,
    TemporalRefusal,
    TemporalRunSettled,
    TemporalUnavailable,
    TemporalUnknownRun,
    TemporalUnknownSchedule,
    collect_flows,
    connect,
    records_from_wire,
)
from ._host_base import _wire_budget as _wire_budget
from ._reads import history_to_log
from ._types import TemporalHostError

__all__ = [
    "NoSignalWait",
    "TemporalHost",
    "TemporalHostError",
    "TemporalRefusal",
    "TemporalRunSettled",
    "TemporalUnavailable",
    "TemporalUnknownRun",
    "TemporalUnknownSchedule",
    "collect_flows",
    "connect",
    "history_to_log",
    "records_from_wire",
]


class TemporalHost(TemporalClient, TemporalAdmin):
    """flowcore runs on a Temporal cluster, through one client.

    ``async with await TemporalHost.connect("localhost:7233") as host: ...``
    """
