"""The local host: asyncio + SQLite, the embedded default.

``LocalHost`` is both the Python API (start runs, signal, answer, cancel,
wait, read events) and a worker (``work``) that executes effects, as one
object made of its roles, each its own class and module: the client
(``_client``, its reads in ``_reads``), the worker (``_worker``, running
handlers and the group commit in ``_execution``) and administration
(``_admin``: schedules and retention), on what they share (``_base``). Handlers
from a tools module run concurrently under a host-wide limit (sync handlers in
threads), timers fire when due (also after a restart), subflows become child
runs in the same database, and results are applied to runs in group commits:
every event that finished while the previous commit was running is applied in
the next transaction (see ``_commit``).

Crash safety rests on the order of writes: an effect is recorded as
dispatched to this worker in the same transaction that created it, before its
handler starts; its result and everything that follows from it is one later
transaction. After a crash, work whose worker is gone is recovered: readonly
and idempotent effects run again with the same key (the claim that runs them
again logs ``effect.redispatched``), uncertain ones are reported as
``effect-outcome-unknown``, and an effect dispatched too many times goes to
the dead letters and fails its step.

Before a run exists, ``start`` checks it: the handlers every flow it can
start needs must be in its tools module (unless the handlers were given as a
``registry``, or the module cannot be imported here: the worker then fails
the run saying so), and a rerun with the same id must have the same options.
A handler's exception keeps its traceback in the ``failures`` table, off the
wire. ``resume`` rewinds a failed run to just before the event that failed
it (``_resume`` says when that is faithful) and dispatches the work pending
there again. ``delete`` and ``prune`` remove whole run trees (``_prune``);
with ``retention_ms`` a worker prunes as it works, on the host's clock
(``clock``, which tests replace).

All database access happens on the event loop's thread (see ``_db``).
"""

from __future__ import annotations

from ._admin import LocalAdmin
from ._updates import LocalUpdates
from ._worker import LocalWorker

__all__ = ["LocalHost"]


class LocalHost(LocalUpdates, LocalAdmin, LocalWorker):
    """A flowcore host on one SQLite file. Use as ``async with LocalHost(...) as host``.

    Its methods come from its roles: the client's commands and reads
    (``LocalClient``, with updates and queries in ``LocalUpdates``),
    administration (``LocalAdmin``) and the worker (``LocalWorker``), all on the
    same database connection and event loop.
    """
