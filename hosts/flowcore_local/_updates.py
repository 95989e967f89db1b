"""Updates and queries on the local host (specs/language.md §16, specs/local.md).

An update is checked with ``flowcore.validate_update`` inside the transaction
that would log it: a refusal raises ``flowcore.UpdateRefused`` and the
transaction writes nothing. Accepted, its ``update-requested`` event is applied
and logged like a signal; its handler's work is dispatched like any other.
The outcome lives in the run's state (``flowcore.update_of``), saved with it:
``update_result`` and a repeated update id read it there, after a restart too.
A caller that waits wakes on each commit of this process (another process's
commit is seen on the next ``poll_ms`` tick), never in a loop without a sleep.

``update_with_start`` and ``signal_with_start`` do the start and the event in
one transaction. Queries read the state and write nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import flowcore
from flowcore_handlers import UnknownUpdate, UpdateOutcome, safe_text

from ._client import ON_CONFLICT, LocalClient, _check_signal_key
from ._flows import declared_signals, reachable_flows
from ._store import Applied, HostError, LocalRunSettled, Store, contract_status

__all__ = ["LocalUnknownUpdate", "LocalUpdates"]

# The longest ``timeout_s`` a wait takes (a day): a longer one is refused.
MAX_TIMEOUT_S = 86_400.0


class LocalUnknownUpdate(HostError, UnknownUpdate):
    """The run knows no update with this id (``flowcore_handlers.UnknownUpdate``)."""


def _check_timeout(timeout_s: float | None) -> None:
    if timeout_s is None:
        return
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, int | float)
        or not 0 <= timeout_s <= MAX_TIMEOUT_S
    ):
        raise HostError(
            f"timeout_s must be a number of seconds from 0 to {MAX_TIMEOUT_S:,.0f} or None,"
            f" not {safe_text(repr(timeout_s), 60)}"
        )


class LocalUpdates(LocalClient):
    """The update and query commands of the local host."""

    # --- updates ------------------------------------------------------------------

    def _requested(
        self, run_id: str, name: str, input: Any, update_id: str | None, principal: str | None
    ) -> flowcore.UpdateRequested:
        """The event, checked as the wire checks it (``HostError`` naming the field)."""
        event = flowcore.UpdateRequested(
            update_id=self.ids(16) if update_id is None else update_id,
            name=name,
            input=input,
            principal=principal,
            at_ms=self.now(),
        )
        try:
            flowcore.check_event(event)
        except flowcore.FlowcoreError as exc:
            raise HostError(
                f"update {safe_text(repr(name), 100)} of run {run_id!r}: {exc}"
            ) from None
        return event

    @staticmethod
    def _request(
        store: Store, run_id: str, event: flowcore.UpdateRequested, now: int
    ) -> tuple[list[Applied], int]:
        """Deliver ``event`` inside the open transaction: nothing for an update id
        the run knows; refused (``UpdateRefused``, ``LocalRunSettled``) with
        nothing written. The applied events, and the incarnation that holds the update."""
        row = store.run_row(run_id)
        state = store.state(run_id)
        if flowcore.update_of(state, event.update_id) is not None:
            return [], state.incarnation  # the same request again: its outcome is the answer
        if row.status != "running":
            raise LocalRunSettled(
                run_id,
                contract_status(row.status),
                f"run {run_id!r} has settled ({row.status}): it takes no update",
            )
        flowcore.validate_update(state, event.name, event.input, event.principal)
        applied = store.apply(run_id, event, now)
        if applied.rejected is not None:
            raise HostError(applied.rejected)
        return [applied, *store.take_extra()], state.incarnation

    async def update(
        self,
        run_id: str,
        name: str,
        input: Any = None,
        update_id: str | None = None,
        *,
        wait: bool = True,
        timeout_s: float | None = None,
        principal: str | None = None,
    ) -> UpdateOutcome:
        """Ask the run for update ``name`` with ``input``; its outcome
        (``flowcore_handlers.RunCommands.update``).

        Checked and logged in one transaction: a refusal (unknown name, input
        failing the schema, a falsy validator, a limit, a run ending) raises
        ``flowcore.UpdateRefused`` and writes nothing. An ``update_id`` the run
        knows runs nothing again and answers its outcome. ``wait``: until the
        handler ends (a worker must run the run's work), or ``timeout_s``
        seconds, after which the outcome is ``running``."""
        _check_timeout(timeout_s)
        event = self._requested(run_id, name, input, update_id, principal)
        now = event.at_ms

        def requesting() -> tuple[list[Applied], int]:
            with self.store.tx():
                return self._request(self.store, run_id, event, now)

        applied, incarnation = await self._db(requesting)
        self._after(applied)
        return await self._awaited(
            run_id, event.update_id, wait, timeout_s, incarnation, event.name
        )

    async def update_result(
        self, run_id: str, update_id: str, *, wait: bool = False, timeout_s: float | None = None
    ) -> UpdateOutcome:
        """The outcome of update ``update_id`` of the run, waited for with ``wait``
        (at most ``timeout_s`` seconds). ``LocalUnknownUpdate`` for an id the
        run's current incarnation does not know."""
        _check_timeout(timeout_s)
        return await self._awaited(run_id, update_id, wait, timeout_s, None)

    async def updates(self, run_id: str) -> list[UpdateOutcome]:
        """The updates of the run's current incarnation, in the order they were
        taken, read from its state (``LocalUnknownRun``)."""

        def reading() -> list[UpdateOutcome]:
            self.store.run_row(run_id)
            views = flowcore.updates_of(self.store.state(run_id))
            return [UpdateOutcome.of(run_id, view) for view in views]

        return await self._db(reading)

    async def _awaited(
        self,
        run_id: str,
        update_id: str,
        wait: bool,
        timeout_s: float | None,
        incarnation: int | None,
        name: str = "",
    ) -> UpdateOutcome:
        """The update's outcome now, or (``wait``) once it is not running or the
        timeout passed. ``incarnation``: the one the update (``name``) was accepted
        in; an update that the run's continue-as-new dropped is answered as abandoned."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s

        def reading() -> tuple[flowcore.UpdateView | None, int]:
            self.store.run_row(run_id)
            state = self.store.state(run_id)
            return flowcore.update_of(state, update_id), state.incarnation

        while True:
            committed = self._committed  # taken before reading: no commit slips between
            found, now_incarnation = await self._db(reading)
            if found is None:
                if incarnation is not None and now_incarnation != incarnation:
                    return UpdateOutcome(
                        run_id=run_id,
                        update_id=update_id,
                        name=name,
                        status="failed",
                        error=flowcore.ErrorInfo(
                            type="update-abandoned",
                            message="the run continued as new before the update ended",
                        ),
                    )
                raise LocalUnknownUpdate(
                    run_id, update_id, f"run {run_id!r} has no update {update_id!r}"
                )
            incarnation, name = now_incarnation, found.name
            if not wait or found.status != "running":
                return UpdateOutcome.of(run_id, found)
            pause = self.poll_ms / 1000
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return UpdateOutcome.of(run_id, found)
                pause = min(pause, left)
            try:
                await asyncio.wait_for(committed.wait(), pause)
            except TimeoutError:
                pass

    # --- queries ------------------------------------------------------------------

    async def query(self, run_id: str, name: str, args: Any = None) -> Any:
        """The value of the run's query ``name`` with ``args`` (running or settled);
        ``flowcore.QueryError`` as the core raises it. Nothing is written."""

        def reading() -> Any:
            self.store.run_row(run_id)
            return flowcore.query(self.store.state(run_id), name, args)

        return await self._db(reading)

    # --- start and deliver --------------------------------------------------------

    async def update_with_start(
        self,
        spec: str | Path,
        input: Any,
        run_id: str,
        name: str,
        update_input: Any = None,
        update_id: str | None = None,
        *,
        wait: bool = True,
        timeout_s: float | None = None,
        on_conflict: str = "use-existing",
        principal: str | None = None,
        tools: str | None = None,
        flows: Iterable[str | Path] = (),
        budget: flowcore.Budget | None = None,
        metadata: Mapping[str, Any] | None = None,
        priority: int | None = None,
    ) -> UpdateOutcome:
        """Start run ``run_id`` of ``spec`` if no run has the id, and deliver update
        ``name``: one transaction, so a refused update starts no run either.
        ``on_conflict`` ``"use-existing"`` (the default) delivers the update to the
        run that holds the id; ``"refuse"`` refuses any run holding it ("already
        exists"). Then as ``update``."""
        _check_timeout(timeout_s)
        starting = self._starting_for(
            spec, input, run_id, on_conflict, tools, flows, budget, principal, metadata, priority
        )
        event = self._requested(run_id, name, update_input, update_id, principal)
        now = event.at_ms

        def requesting() -> tuple[list[Applied], int]:
            store = self.store
            with store.tx():
                started = starting()
                applied, incarnation = self._request(store, run_id, event, now)
                return [started, *applied], incarnation

        applied, incarnation = await self._db(requesting)
        self._after(applied)
        return await self._awaited(
            run_id, event.update_id, wait, timeout_s, incarnation, event.name
        )

    async def signal_with_start(
        self,
        spec: str | Path,
        input: Any,
        run_id: str,
        name: str,
        payload: Any = None,
        key: str | None = None,
        *,
        on_conflict: str = "use-existing",
        principal: str | None = None,
        tools: str | None = None,
        flows: Iterable[str | Path] = (),
        budget: flowcore.Budget | None = None,
        metadata: Mapping[str, Any] | None = None,
        priority: int | None = None,
    ) -> str:
        """Start run ``run_id`` of ``spec`` if no run has the id, and send it signal
        ``name`` (``signal``'s checks), in one transaction; the run id. A signal no
        step of the flow waits for is refused, and no run is started then."""
        _check_signal_key(key)
        starting = self._starting_for(
            spec, input, run_id, on_conflict, tools, flows, budget, principal, metadata, priority
        )
        now = self.now()
        event = flowcore.SignalReceived(signal=name, payload=payload, at_ms=now, key=key)

        def sending() -> list[Applied]:
            store = self.store
            with store.tx():
                started = starting()
                row = store.run_row(run_id)
                if row.status != "running":
                    raise LocalRunSettled(
                        run_id,
                        contract_status(row.status),
                        f"run {run_id!r} has settled ({row.status}): it takes no signal",
                    )
                names = declared_signals(reachable_flows(store, store.flow_by_hash(row.spec_hash)))
                if name not in names:
                    listed = ", ".join(repr(n) for n in sorted(names))
                    raise HostError(
                        f"run {run_id!r} never waits for signal {safe_text(repr(name), 200)}: "
                        + (
                            f"its flow and subflows declare {listed}"
                            if names
                            else "it declares no signals"
                        )
                    )
                applied = store.apply(run_id, event, now)
                if applied.rejected is not None:
                    raise HostError(applied.rejected)
                return [started, applied, *store.take_extra()]

        self._after(await self._db(sending))
        return run_id

    def _starting_for(
        self,
        spec: str | Path,
        input: Any,
        run_id: str,
        on_conflict: str,
        tools: str | None,
        flows: Iterable[str | Path],
        budget: flowcore.Budget | None,
        principal: str | None,
        metadata: Mapping[str, Any] | None,
        priority: int | None,
    ) -> Callable[[], Applied]:
        """The start of a start-and-deliver (``_starting``), checked before any write.
        ``"refuse"`` refuses a run that holds the id whatever its options: the
        event would go to a run the caller did not mean."""
        if not isinstance(run_id, str):
            raise HostError(f"run_id must be text, not {type(run_id).__name__}")
        if on_conflict not in ON_CONFLICT:
            raise HostError(
                f"on_conflict must be one of {', '.join(ON_CONFLICT)},"
                f" not {safe_text(repr(on_conflict), 60)}"
            )
        starting = self._starting(
            spec,
            input,
            run_id,
            tools=tools,
            flows=flows,
            budget=budget,
            principal=principal,
            metadata=metadata,
            priority=priority,
            dedup_key=None,
            on_conflict="use-existing",
        )

        def started() -> Applied:
            if on_conflict == "refuse" and self.store.existing(run_id) is not None:
                raise HostError(f"cannot start run {run_id!r}: run {run_id!r} already exists")
            return starting()

        return started
