"""The local host's administration: schedules and retention.

Schedules (``_schedules``): add from a spec or one by one, list, show,
pause, resume, trigger, backfill, delete. Retention (``_prune``,
``_scheduled``): delete a run tree, prune the trees settled before a time,
vacuum the file, trim finished scheduled calls, and the worker's periodic
prune (``retention_ms``, ``_retain``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import flowcore
from flowcore_handlers import missing_handlers, safe_text, tools_module_name

from . import _prune, _schedules
from ._base import HostBase, _spec_source, log
from ._flows import reachable_flows
from ._prune import Deleted
from ._scheduled import trim
from ._store import Applied, HostError, RunRow, Store

RETENTION_EVERY_MS = 60_000  # how often (host clock) a worker with a retention prunes


class LocalAdmin(HostBase):
    """Schedules and retention of the local host."""

    if TYPE_CHECKING:  # from the client and the worker

        async def run(self, run_id: str) -> RunRow: ...

        async def cancel(self, run_id: str, reason: str = "") -> None: ...

        async def work(
            self,
            stop: asyncio.Event | None = None,
            until_settled: str | None = None,
            *,
            only: str | None = None,
            on_settled: Callable[[RunRow], Any] | None = None,
            on_pruned: Callable[[Deleted], Any] | None = None,
            on_records: Callable[[list[flowcore.Record]], Any] | None = None,
        ) -> None: ...

        def _after(self, applied: Iterable[Applied]) -> None: ...

    async def trim_scheduled(self) -> int:
        """Apply ``scheduled_retention`` now (the worker does, as it works); rows dropped."""
        now = self.now()

        def trimming() -> int:
            with self.store.tx():
                return trim(self.store.conn, now, self.scheduled_retention)

        return await self._db(trimming)

    # --- deleting runs (``_prune``) -------------------------------------------------

    async def delete(
        self, run_id: str, force: bool = False, *, timeout: float | None = None
    ) -> Deleted:
        """Delete the run and its child runs, every row of them, in one transaction.

        Refused with ``HostError`` (nothing deleted): an unknown run; a child
        run whose parent is still running; a tree with a run still running,
        unless ``force``. ``force`` cancels the running runs of the tree as
        ``cancel`` does (their compensations run and are recorded), waits
        until every run of the tree has settled — working the tree itself
        when this host is not working already — and then deletes it;
        ``timeout`` (seconds) bounds that wait, after which the runs are left
        cancelling, not deleted (``HostError``).
        """
        active = await self._db(_prune.active_runs, self.store, run_id)
        cancelled: list[str] = []
        if active:
            if not force:
                raise _prune.refusal(run_id, active)
            cancelled = await self._cancel_tree(active)
            await self._settle_tree(run_id, timeout)
        deleted = await self._db(_prune.delete_tree, self.store, run_id)
        deleted.cancelled = cancelled
        return deleted

    async def _cancel_tree(self, active: list[str]) -> list[str]:
        """Cancel the topmost running runs of a tree (a cancel reaches their children)."""
        cancelled = []
        for run_id in active:
            row = await self.run(run_id)
            if row.status != "running" or row.parent_run in cancelled:
                continue  # settled meanwhile, or cancelled with its parent
            try:
                await self.cancel(run_id, "cancelled to be deleted")
            except HostError:
                continue  # compensating already (a cancel was requested before)
            cancelled.append(run_id)
        return cancelled

    async def _settle_tree(self, run_id: str, timeout: float | None) -> None:
        """Wait until no run of ``run_id``'s tree is running, working it if nobody here is."""
        deadline = None if timeout is None else time.monotonic() + timeout
        stop = asyncio.Event()
        worker = None
        if not self.store.dispatching:
            worker = asyncio.create_task(self.work(stop, only=run_id))
        try:
            while active := await self._db(_prune.active_runs, self.store, run_id):
                if deadline is not None and time.monotonic() > deadline:
                    raise HostError(
                        f"cannot delete run {run_id!r}: it was cancelled and has not settled"
                        f" within {timeout:g} s (running: {_prune.listed(active)}), so it is"
                        " not deleted; delete it once it settles"
                    )
                if worker is not None and worker.done():
                    worker.result()  # the worker failed: say why
                    worker = None
                await asyncio.sleep(self.poll_ms / 1000)
        finally:
            stop.set()
            if worker is not None:
                await worker

    async def prune(
        self,
        settled_before_ms: int,
        statuses: Iterable[str] | None = None,
        *,
        dry_run: bool = False,
    ) -> Deleted:
        """Delete the root runs that settled before ``settled_before_ms``, with their trees.

        ``statuses``: only roots that settled so (default: every settled
        status). A tree with a run still running, or one that settled at or
        after the cutoff, is kept whole. Trees go a batch per transaction
        (never one split between two). ``dry_run``: delete nothing, count
        what would go.
        """
        if type(settled_before_ms) is not int:
            raise HostError(
                "settled_before_ms must be an integer (epoch milliseconds),"
                f" not {safe_text(repr(settled_before_ms), 60)}"
            )
        chosen = _prune.checked_statuses(statuses)
        store = self.store
        roots = await self._db(_prune.prunable_roots, store, settled_before_ms, chosen)
        total = Deleted(dry_run=dry_run)
        for start in range(0, len(roots), _prune.PRUNE_BATCH):
            batch = roots[start : start + _prune.PRUNE_BATCH]
            total.add(
                await self._db(_prune.prune_batch, store, batch, settled_before_ms, chosen, dry_run)
            )
            await asyncio.sleep(0)  # a worker's handlers and commits go on between batches
        return total

    async def vacuum(self) -> tuple[int, int]:
        """``VACUUM`` the database file: its size in bytes (with the WAL) before and after."""
        return await self._db(_prune.vacuum, self.store, self.db_path)

    async def _retain(self) -> None:
        """Prune what the retention lets go, at most once a minute of the host's clock."""
        if self.retention_ms is None or self.store.only is not None:
            return
        now = self.now()
        if self._next_prune is not None and now < self._next_prune:
            return
        self._next_prune = now + RETENTION_EVERY_MS
        try:
            pruned = await self.prune(now - self.retention_ms)
        except Exception as exc:  # the database (locked, full): the worker goes on
            why = f"{type(exc).__name__}: {safe_text(exc, 200)}"
            log.warning("flowcore: pruning failed (%s); trying again in a minute", why)
            return
        if pruned.runs:
            log.info(
                "flowcore: pruned %d run(s) settled more than %d ms ago",
                len(pruned.runs),
                self.retention_ms,
            )
            if self._on_pruned is not None:
                try:
                    self._on_pruned(pruned)
                except Exception as exc:  # the caller's code: say so, keep working
                    why = f"{type(exc).__name__}: {safe_text(exc, 200)}"
                    log.warning("flowcore: on_pruned raised: %s", why)

    # --- schedules ---------------------------------------------------------------------

    async def add_schedules(
        self, spec: str | Path, *, tools: str | None = None, owner: str | None = None
    ) -> list[str]:
        """Register the schedules ``spec`` declares (its ``schedules:``); returns their names.

        A schedule already in the database gets the new definition and keeps
        its history (progress, runs, recent actions); see ``add_schedule``.
        ``owner``: the principal every run the schedules start belongs to (None:
        no one's, the admins'). Refused with ``HostError`` when the spec declares none.
        """
        text, source = _spec_source(spec)
        return await self._put_schedules(text, source, None, tools, owner)

    async def add_schedule(
        self,
        spec: str | Path,
        name: str,
        definition: Mapping[str, Any],
        *,
        tools: str | None = None,
        owner: str | None = None,
    ) -> str:
        """Add (or redefine) the schedule ``name`` starting runs of ``spec``'s flow
        (runs that belong to ``owner``, as with ``add_schedules``).

        ``definition`` has the keys of a spec's ``schedules:`` entry (``cron``,
        ``timezone``, ``every``, ``offset``, ``input``, ``overlap``,
        ``catchup_window``, ``jitter``, ``paused``, ``note``, ``limit``); a bad
        one is refused with ``HostError`` naming every problem. A redefined
        schedule keeps its progress, runs and actions; its ``paused``/``note``
        and ``limit`` change only where the definition changes them.
        """
        text, source = _spec_source(spec)
        names = await self._put_schedules(text, source, (name, definition), tools, owner)
        return names[0]

    async def _put_schedules(
        self,
        text: str,
        source: str,
        one: tuple[str, Mapping[str, Any]] | None,
        tools: str | None,
        owner: str | None = None,
    ) -> list[str]:
        tools = tools_module_name(tools) or self.tools
        registry = self._checkable(tools)
        now = self.now()

        def putting() -> list[str]:
            store = self.store
            with store.tx():
                flow = store.register_flow(text, source, now)
                if one is None:
                    found = list(flow.schedules.values())
                    if not found:
                        raise HostError(f"{source}: the spec declares no schedules")
                else:
                    found = [_schedules.checked(one[0], one[1], flow.id)]
                if registry is not None:
                    missing = missing_handlers(registry, reachable_flows(store, flow))
                    if missing:
                        names = ", ".join(repr(s.name) for s in found)
                        raise HostError(
                            f"cannot add schedule {names}: {self._lacks(tools, missing)}"
                        )
                for schedule in found:
                    _schedules.put(store, schedule, flow, tools, one is None, now, owner)
                return [s.name for s in found]

        return await self._db(putting)

    async def schedules(self) -> list[dict[str, Any]]:
        """Every schedule, by name, as ``schedule`` describes it (without its actions)."""

        def listing() -> list[dict[str, Any]]:
            store = self.store
            return [_schedules.describe(store, row) for row in _schedules.all_rows(store)]

        return await self._db(listing)

    async def schedule_names(self) -> list[str]:
        """The schedules' names, in order."""
        return await self._db(lambda: [row.name for row in _schedules.all_rows(self.store)])

    async def schedule(self, name: str, next_slots: int = 5) -> dict[str, Any]:
        """The schedule: its definition, state, next slots and recent actions (oldest first)."""

        def showing() -> dict[str, Any]:
            store = self.store
            row = _schedules.get(store, name)
            info = _schedules.describe(store, row, next_slots)
            info["actions"] = _schedules.actions_of(store, name)
            return info

        return await self._db(showing)

    async def pause_schedule(self, name: str, note: str = "") -> None:
        """Start nothing more until resumed (slots while paused are never started)."""
        now = self.now()
        await self._schedule_tx(lambda store: _schedules.set_paused(store, name, True, note, now))

    async def resume_schedule(self, name: str, note: str = "") -> None:
        """Start again, from the slots after now."""
        now = self.now()
        await self._schedule_tx(lambda store: _schedules.set_paused(store, name, False, note, now))

    async def delete_schedule(self, name: str) -> None:
        """Forget the schedule and its actions (the runs it started stay)."""
        await self._schedule_tx(lambda store: _schedules.delete(store, name))

    async def _schedule_tx(self, fn: Callable[[Store], None]) -> None:
        def changing() -> None:
            store = self.store
            with store.tx():
                fn(store)

        await self._db(changing)
        if self._wake is not None:
            self._wake.set()

    async def trigger_schedule(self, name: str) -> str:
        """Start a run of the schedule now, outside its cadence, whatever runs;
        its id is ``<name>@trigger-<n>`` and ``schedule.at`` is now. Returns the id."""
        now = self.now()

        def triggering() -> tuple[str, list[Applied]]:
            store = self.store
            with store.tx():
                return _schedules.trigger_now(store, name, now)

        run_id, applied = await self._db(triggering)
        self._after(applied)
        return run_id

    async def backfill_schedule(
        self, name: str, start_ms: int, end_ms: int
    ) -> list[dict[str, Any]]:
        """Start the schedule's slots from ``start_ms`` through ``end_ms`` (epoch ms).

        Each slot's run has the slot's own id, so a slot is started once however
        often it is backfilled (or was started by the cadence). The overlap
        policy applies between the slots as between any (with ``skip`` only the
        first starts while it runs); the catch-up window and limit do not.
        Returns the actions recorded, oldest first.
        """
        now = self.now()

        def filling() -> tuple[list[dict[str, Any]], list[Applied]]:
            store = self.store
            with store.tx():
                return _schedules.backfill_range(store, name, start_ms, end_ms, now)

        actions, applied = await self._db(filling)
        self._after(applied)
        return actions
