"""The local host's client: the commands a person or program sends to runs.

Start (checked before anything is written), resume, fork, upgrade, signal
(by run, or by key to every run waiting for it), answer, cancel, and the
scheduled calls of a run (list, add, cancel, run now). Each is one
transaction; what it commits goes to this process's worker at once
(``_after``) and to other workers on their next round. The reads are
``_reads``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import flowcore
from flowcore import MAX_BUDGET_AMOUNT as MAX_AMOUNT
from flowcore import MAX_DURATION_MS as MAX_MS
from flowcore import MAX_NAME_CHARS, CancelRequested, Event, HumanAnswered, SignalReceived
from flowcore_handlers import RegistryError, missing_handlers, safe_text, tools_module_name
from flowcore_handlers._limits import LimitError, check_dedup_key, check_priority

from ._base import _spec_source, _spec_text
from ._flows import declared_signals, reachable_flows
from ._reads import LocalReads
from ._resume import Rewind, plan_rewind
from ._scheduled import ScheduledRow, list_scheduled
from ._store import (
    Applied,
    HostError,
    LocalRunSettled,
    NoSignalWait,
    NothingToCancel,
    Store,
    contract_status,
)


def _checked_budget(budget: Any) -> flowcore.Budget | None:
    """``budget`` as ``start`` takes it, or a HostError naming the bad limit."""
    if budget is None:
        return None
    if not isinstance(budget, flowcore.Budget):
        raise HostError(f"budget must be a flowcore.Budget or None, not {type(budget).__name__}")
    for attr, limit in (
        ("steps", MAX_AMOUNT),
        ("cost_minor_units", MAX_AMOUNT),
        ("wall_clock_ms", MAX_MS),
    ):
        value = getattr(budget, attr)
        if value is not None and (type(value) is not int or not 0 <= value <= limit):
            raise HostError(
                f"budget.{attr} must be an integer from 0 to {limit:,} or None,"
                f" not {safe_text(repr(value), 60)}"
            )
    return budget


def _may_change(call: flowcore.ScheduledCall, event: Event) -> bool:
    """Whether a cancel or run-now can change ``call``: a pending one, or (cancel)
    a recurring one whose firing is out, which then has no firing after it."""
    if call.status == "pending":
        return True
    recurring = call.every_ms is not None or call.cron is not None
    return (
        isinstance(event, flowcore.ScheduledCancelRequested)
        and call.status == "running"
        and recurring
        and not call.replays
    )


def _relative(key: str, run_id: str) -> str:
    """A key as the run names it (``decide#1`` for ``r-1/decide#1``), read with ``parse_key``."""
    try:
        info = flowcore.parse_key(key, run_id)
    except ValueError:
        return key
    if info.attempt is None or info.role is not flowcore.KeyRole.EFFECT:
        return key
    return f"{info.path}#{info.attempt}"


def _check_signal_key(key: object) -> None:
    if key is not None and (not isinstance(key, str) or not 0 < len(key) <= MAX_NAME_CHARS):
        raise HostError(f"a signal key must be text of 1 to {MAX_NAME_CHARS} characters")


ON_CONFLICT = ("refuse", "use-existing")


def _spec_texts(spec: str | Path, flows: Iterable[str | Path]) -> list[tuple[str, str, bool]]:
    """The texts ``start`` registers: (text, source, came from a directory), the run's first."""
    texts: list[tuple[str, str, bool]] = []  # (text, source, came from a directory)
    texts.append((*_spec_source(spec), False))
    for extra in flows:
        path = Path(extra)
        if path.is_dir():
            for file in sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml")):
                try:
                    texts.append((_spec_text(file), str(file), True))
                except HostError:
                    continue  # a directory may hold files that are not flows
        else:
            texts.append((_spec_text(path), str(path), False))
    return texts


class LocalClient(LocalReads):
    """The commands of the local host, with its reads (``LocalReads``)."""

    if TYPE_CHECKING:  # from the worker (``_execution``)

        def _after(self, applied: Iterable[Applied]) -> None: ...

    # --- the API ----------------------------------------------------------------------

    async def start(
        self,
        spec: str | Path,
        input: Any = None,
        run_id: str | None = None,
        *,
        tools: str | None = None,
        flows: Iterable[str | Path] = (),
        budget: flowcore.Budget | None = None,
        principal: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        priority: int | None = None,
        dedup_key: str | None = None,
        on_conflict: str = "refuse",
    ) -> str:
        """Start a run of ``spec``; idempotent by ``run_id``. Returns the run id.

        ``spec``: a ``pathlib.Path`` to a spec file, or the spec's text; a
        one-line string that names an existing file is read as that file (one
        ending in ``.yaml``, ``.yml`` or ``.json`` that names none is refused
        with ``HostError``, not parsed as YAML).

        ``run_id``: the id to give the run (default: ``<flow id>-<random hex>``).
        It may not hold ``/`` or ``#``, which name child runs
        (``flowcore.RunIdError``, before anything is written).
        ``on_conflict``: what a ``run_id`` that exists with other start options
        gets: ``"refuse"`` (the default: ``HostError``) or ``"use-existing"``
        (that run's id is returned and nothing is written; read its status
        with ``run``).

        ``metadata``: initial values of the fields the flow declares under
        ``metadata`` (``flowcore.MetadataError`` names an undeclared field or a
        value of the wrong type; nothing is written then).

        ``flows`` are more spec files (or directories of them) that subflows may
        name; ``tools`` the run's tools module (default: the host's; a ``.py``
        path is stored absolute); ``budget`` caps the run below its spec's;
        ``principal`` records who started it (its child runs inherit it).
        ``priority``: 1 (first) to 5 (last), default 3; workers claim waiting
        work of higher-priority runs first, and child runs inherit it.
        ``dedup_key``: while a run started with this key is running, starting
        again returns that run's id and starts nothing; once it has settled,
        the key starts a new run. Returns the run id.

        Refused with ``HostError`` before anything is written: a run whose flow,
        or a subflow it can start that the host has, calls a tool, agent or
        team its tools module has no handler for; and (``on_conflict``
        ``"refuse"``) a run id that exists with another input, spec, tools
        module or budget (a ``tools`` or ``budget`` of None is not compared).
        The same options again change nothing.
        """
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
            dedup_key=dedup_key,
            on_conflict=on_conflict,
        )

        def started() -> Applied:
            with self.store.tx():
                return starting()

        applied = await self._db(started)
        self._after([applied])
        return applied.run_id

    def _starting(
        self,
        spec: str | Path,
        input: Any,
        run_id: str | None,
        *,
        tools: str | None,
        flows: Iterable[str | Path],
        budget: flowcore.Budget | None,
        principal: str | None,
        metadata: Mapping[str, Any] | None,
        priority: int | None,
        dedup_key: str | None,
        on_conflict: str,
    ) -> Callable[[], Applied]:
        """``start``'s checks done before any write, and its writes, to call inside
        a transaction (``update_with_start`` adds its event to the same one)."""
        if run_id is not None:
            flowcore.check_run_id(run_id)
        if on_conflict not in ON_CONFLICT:
            raise HostError(
                f"on_conflict must be one of {', '.join(ON_CONFLICT)},"
                f" not {safe_text(repr(on_conflict), 60)}"
            )
        texts = _spec_texts(spec, flows)
        tools = tools_module_name(tools) or self.tools
        budget = _checked_budget(budget)
        try:
            priority = check_priority(priority)
            dedup_key = check_dedup_key(dedup_key)
        except LimitError as exc:
            raise HostError(str(exc)) from None
        registry = self._checkable(tools)
        now = self.now()

        def starting() -> Applied:
            store = self.store
            if on_conflict == "use-existing" and run_id is not None:
                if store.existing(run_id) is not None:  # that run is the answer
                    return Applied(run_id)
            flow = store.register_flow(texts[0][0], texts[0][1], now)
            for text, source, scanned in texts[1:]:
                try:
                    store.register_flow(text, source, now)
                except flowcore.SpecError:
                    if scanned:
                        continue  # a directory may hold files that are not flows
                    raise
            rid = run_id or f"{flow.id}-{self.ids(4)}"
            if dedup_key is not None and store.existing(rid) is None:
                same = store.deduplicated(dedup_key)
                if same is not None:  # that run is the answer: nothing is written
                    return Applied(same)
            if registry is not None and store.existing(rid) is None:
                missing = missing_handlers(registry, reachable_flows(store, flow))
                if missing:  # raised inside the transaction: nothing stays written
                    raise HostError(f"cannot start run {rid!r}: {self._lacks(tools, missing)}")
            _, applied = store.start_run(
                flow,
                input,
                rid,
                now,
                tools,
                budget=budget,
                principal=principal,
                metadata=None if metadata is None else dict(metadata),
                priority=priority,
                dedup_key=dedup_key,
            )
            applied.run_id = rid
            return applied

        return starting

    async def resume(self, run_id: str, tools: str | None = None) -> None:
        """Retry a failed run from its failed step (as DBOS ``workflow resume`` does).

        The run is rewound to just before the event that failed it: its state
        is rebuilt by replaying its log up to there, the records from that
        event on move to the ``log_archive`` table, the run is ``running``
        again, and the work pending at that point is dispatched again (a
        worker runs it) with ``tools`` as the run's tools module when given.
        Steps that succeeded keep their results and are not run again; a
        failed child run that failed the run is resumed with it. Refused with
        ``HostError`` saying why where a rewind would not be faithful (see
        ``flowcore_local._resume``), and when the tools module lacks a handler
        the run needs or cannot be imported.
        """
        name = tools_module_name(tools)
        now = self.now()
        row = await self.run(run_id)
        use = name or row.tools
        if use not in self._supplied:
            try:
                self._registry(use)  # imported before the transaction, not while it holds the lock
            except RegistryError as exc:
                raise HostError(f"cannot resume run {run_id!r}: {exc}") from None

        def resuming() -> list[Applied]:
            store = self.store
            with store.tx():
                chain: list[Rewind] = []
                plan: Rewind | None = plan_rewind(store, run_id, now)
                while plan is not None:
                    chain.append(plan)
                    plan = plan.child
                for rewind in chain:
                    self._check_resumed(store, rewind, name or rewind.tools)
                return [
                    store.rewind(
                        rewind.run_id,
                        rewind.flow,
                        rewind.records,
                        rewind.cut,
                        rewind.pending,
                        now,
                        name or rewind.tools,
                        rewind.key,
                        rewind.child is not None,
                    )
                    for rewind in chain
                ]

        self._after(await self._db(resuming))

    async def fork(
        self,
        run_id: str,
        *,
        at: int | None = None,
        from_step: str | None = None,
        new_run_id: str | None = None,
        tools: str | None = None,
        cancel_source: bool = False,
    ) -> str:
        """Fork ``run_id`` as a new run with its history up to a point; the new run's id.

        The point is ``at`` (a log index: the fork takes the records before
        it) or ``from_step`` (the step and everything after it run again); see
        ``flowcore.fork``. The new run (``new_run_id``, default
        ``{run_id}-fork-{point}``) is written in one transaction: its row, its
        log (its ``run.started`` records ``forkedFrom``), its state and the
        outbox rows of the work open at the point, which a worker dispatches
        under the fork's keys. Results received before the point are reused,
        never run again. ``tools``: the fork's tools module (default: the
        source's). ``cancel_source``: cancel the source in the same
        transaction if it is running (a reset, as Temporal's).

        Forking again with the same point and id returns the same run.
        Refused with ``ForkError`` for a bad point or step, with
        ``flowcore.RunIdError`` for a ``new_run_id`` holding ``/`` or ``#``, and
        with ``HostError`` for a child run (fork its root), a run id that exists
        otherwise, and a tools module that lacks a handler the run needs.
        """
        if new_run_id is not None:
            flowcore.check_run_id(new_run_id)  # a fork is a root run: no child's id
        name = tools_module_name(tools)
        now = self.now()
        row = await self.run(run_id)
        use = name or row.tools
        if use not in self._supplied:
            try:
                self._registry(use)  # imported before the transaction, not while it holds the lock
            except RegistryError as exc:
                raise HostError(f"cannot fork run {run_id!r}: {exc}") from None

        def forking() -> tuple[str, list[Applied]]:
            store = self.store
            with store.tx():
                source = store.run_row(run_id)
                if source.parent_run is not None:
                    raise HostError(
                        f"cannot fork run {run_id!r}: it is a child run of"
                        f" {source.parent_run!r}; fork its root run"
                    )
                flow = store.flow_by_hash(source.spec_hash)
                records = store.log_records(run_id)
                point = flowcore.fork_point(records, flow, at=at, from_step=from_step)
                rid = new_run_id or f"{run_id}-fork-{point}"
                if store.existing(rid) is not None:
                    if store.forked_from(rid) == {"runId": run_id, "index": point}:
                        return rid, []  # the same fork again
                    raise HostError(f"cannot fork run {run_id!r}: run {rid!r} already exists")
                try:
                    made = flowcore.fork(records, flow, rid, at=point)
                except flowcore.ForkError:
                    raise
                except flowcore.FlowcoreError as exc:  # (a stored log replays)
                    raise HostError(
                        f"cannot fork run {run_id!r}: its log does not replay"
                        f" ({safe_text(str(exc), 300)})"
                    ) from None
                if use not in self._supplied:
                    missing = missing_handlers(self._registry(use), reachable_flows(store, flow))
                    if missing:
                        raise HostError(f"cannot fork run {run_id!r}: {self._lacks(use, missing)}")
                budget = store.existing(run_id)
                assert budget is not None
                applied = [store.fork_run(source, made, now, use, budget[3])]
                if cancel_source and source.status == "running":
                    event = CancelRequested(reason=f"reset: forked as {rid}", at_ms=now)
                    applied.append(store.apply(run_id, event, now))
                    applied.extend(store.take_extra())
                return rid, applied

        rid, applied = await self._db(forking)
        self._after(applied)
        return rid

    async def upgrade(
        self, run_id: str, spec: str | Path, *, dry_run: bool = False
    ) -> flowcore.Upgrade:
        """Move running run ``run_id`` to the flow version ``spec`` (a path, or spec text).

        The run's log is replayed against the new spec (``flowcore.upgrade``);
        if it replays, the spec is stored and the run pinned to it in one
        transaction that also writes its new state, so a worker processing
        the run meanwhile goes on from the new state: work in flight, timers,
        questions and signal waits stay as they are (the new version waits for
        the same effects under the same keys). ``dry_run``: check everything,
        write nothing. A run on that spec already is left alone
        (``Upgrade.changed`` false).

        Refused with ``flowcore.UpgradeRefused`` when the log does not replay
        against the new spec (``reason`` ``diverged``: ``index``, ``expected``,
        ``actual``) or the spec is another flow's (``other-flow``), with
        ``flowcore.SpecError`` for an invalid spec, and with ``HostError`` for
        an unknown run or an unreadable spec file, a run that is not running, and a
        tools module that lacks a handler the new spec needs.
        """
        text, source = _spec_source(spec)
        flow = flowcore.parse_flow(text, source_name=source)  # SpecError: nothing is written
        row = await self.run(run_id)
        registry = self._checkable(row.tools)
        now = self.now()

        def moving() -> flowcore.Upgrade:
            store = self.store
            with store.tx():  # the write lock: no event of the run commits meanwhile
                current = store.run_row(run_id)
                if current.status != "running":
                    raise LocalRunSettled(
                        run_id,
                        contract_status(current.status),
                        f"cannot move run {run_id!r} to another version: it is {current.status},"
                        " and only a running run moves",
                    )
                records = store.log_records(run_id)
                made = flowcore.upgrade(records, flow, pinned=current.spec_hash)
                if not made.changed:
                    return made
                if registry is not None:
                    missing = missing_handlers(registry, reachable_flows(store, flow))
                    if missing:
                        raise HostError(
                            f"cannot move run {run_id!r}: {self._lacks(current.tools, missing)}"
                        )
                if dry_run:
                    return made
                store.register_flow(text, source, now)
                store.move_run(run_id, flow, records, now)
                return made

        return await self._db(moving)

    def _check_resumed(self, store: Store, rewind: Rewind, tools: str | None) -> None:
        if tools in self._supplied:
            return
        try:
            registry = self._registry(tools)
        except RegistryError as exc:
            raise HostError(f"cannot resume run {rewind.run_id!r}: {exc}") from None
        missing = missing_handlers(registry, reachable_flows(store, rewind.flow))
        if missing:
            raise HostError(f"cannot resume run {rewind.run_id!r}: {self._lacks(tools, missing)}")

    async def _apply_now(self, run_id: str, event: Event) -> Applied:
        def applying() -> list[Applied]:
            store = self.store
            with store.tx():
                row = store.run_row(run_id)
                applied = store.apply(run_id, event, self.now())
                if applied.rejected is not None:
                    if row.status != "running":
                        status = contract_status(row.status)
                        raise LocalRunSettled(run_id, status, applied.rejected)
                    raise HostError(applied.rejected)
                return [applied, *store.take_extra()]

        applied = await self._db(applying)
        self._after(applied)
        return applied[0]

    async def signal(
        self, run_id: str, name: str, payload: Any = None, key: str | None = None
    ) -> None:
        """Send the run a signal (buffered if it does not wait for it yet).

        With ``key`` only a wait with that ``key`` takes it (buffered for one
        until then, like any signal). A name no ``await_signal`` step of the
        run's flow, or of a subflow it can start, waits for is refused, listing
        the names that are.
        """
        _check_signal_key(key)

        def declared() -> set[str]:
            store = self.store
            row = store.run_row(run_id)
            return declared_signals(reachable_flows(store, store.flow_by_hash(row.spec_hash)))

        names = await self._db(declared)
        if name not in names:
            listed = ", ".join(repr(n) for n in sorted(names))
            raise HostError(
                f"run {run_id!r} never waits for signal {safe_text(repr(name), 200)}: "
                + (f"its flow and subflows declare {listed}" if names else "it declares no signals")
            )
        await self._apply_now(
            run_id, SignalReceived(signal=name, payload=payload, at_ms=self.now(), key=key)
        )

    async def signal_key(self, name: str, key: str, payload: Any = None) -> list[str]:
        """Send signal ``name`` with ``key`` to every running run that waits for it
        with that key (``await_signal.key``), in one transaction; returns their
        ids, sorted. Raises ``NoSignalWait`` (a ``HostError``) when no run waits
        for it: nothing is buffered then.
        """
        _check_signal_key(key)
        now = self.now()

        def sending() -> tuple[list[str], list[Applied]]:
            store = self.store
            with store.tx():
                runs = store.signal_waits(name, key)
                out: list[Applied] = []
                for run_id in runs:
                    event = SignalReceived(signal=name, payload=payload, at_ms=now, key=key)
                    applied = store.apply(run_id, event, now)
                    if applied.rejected is not None:
                        raise HostError(f"run {run_id!r} refused the signal: {applied.rejected}")
                    out += [applied, *store.take_extra()]
                return runs, out

        runs, applied = await self._db(sending)
        if not runs:
            raise NoSignalWait(
                f"no running run waits for signal {safe_text(repr(name), 200)}"
                f" with key {safe_text(repr(key), 200)}"
            )
        self._after(applied)
        return runs

    async def answer(
        self, run_id: str, key: str, answer: Any, principal: str | None = None
    ) -> None:
        """Answer an open question of the run (``principal``: who answers, when
        known; the ``human-answered`` event records it, and a denied approval's
        error names it).

        ``key`` is the question's key (``r-1/decide#1``), the key relative to
        the run (``decide#1``), or a step id (``decide``) with exactly one open
        question. A key that is no open question goes to the interpreter as it
        is (a late answer is recorded); when it refuses it, the ``HostError``
        lists the open questions' keys.
        """

        def resolving() -> tuple[str | None, list[str]]:
            store = self.store
            store.run_row(run_id)
            questions = flowcore.waiting_for(store.state(run_id)).questions
            keys = [q.key for q in questions]
            relative = [_relative(k, run_id) for k in keys]
            if key in keys:
                return key, relative
            if key in relative:
                return keys[relative.index(key)], relative
            of_step = [q.key for q in questions if q.step == key]
            if len(of_step) > 1:
                listed = ", ".join(_relative(k, run_id) for k in of_step)
                raise HostError(
                    f"step {key!r} of run {run_id!r} has {len(of_step)} open questions"
                    f" ({listed}): give the key of the one to answer"
                )
            return (of_step[0] if of_step else None), relative

        found, open_keys = await self._db(resolving)
        if found is not None:
            event = HumanAnswered(
                idempotency_key=found, answer=answer, at_ms=self.now(), principal=principal
            )
            await self._apply_now(run_id, event)
            return
        try:
            flowcore.parse_key(key, run_id)
            target = key
        except ValueError:
            target = f"{run_id}/{key}"  # maybe a relative key of a question answered already
            try:
                flowcore.parse_key(target, run_id)
            except ValueError:
                target = key
        try:
            event = HumanAnswered(
                idempotency_key=target, answer=answer, at_ms=self.now(), principal=principal
            )
            await self._apply_now(run_id, event)
        except HostError as exc:
            listed = ", ".join(open_keys) if open_keys else "none"
            message = f"{exc} (open questions of run {run_id!r}: {listed})"
            if isinstance(exc, LocalRunSettled):
                raise LocalRunSettled(run_id, exc.status, message) from None
            raise HostError(message) from None

    async def cancel(self, run_id: str, reason: str = "") -> None:
        """Cancel the run: pending work is abandoned, compensations run, it settles cancelled.

        A cancel that would change nothing is refused with ``NothingToCancel``
        (a ``HostError``) and writes nothing: the run has settled, or it is
        compensating after an earlier cancel or failure.
        """
        row = await self.run(run_id)
        if row.status != "running":
            raise NothingToCancel(
                run_id, f"run {run_id!r} has settled ({row.status}): nothing to cancel"
            )
        try:
            await self._apply_now(run_id, flowcore.CancelRequested(reason=reason, at_ms=self.now()))
        except HostError as exc:
            current = await self.run(run_id)
            if current.status != "running":
                raise NothingToCancel(
                    run_id, f"run {run_id!r} has settled ({current.status}): nothing to cancel"
                ) from None
            if "compensating" in str(exc):
                raise NothingToCancel(run_id, f"run {run_id!r}: {exc}: nothing to cancel") from None
            raise

    # --- scheduled calls -----------------------------------------------------------

    async def scheduled(
        self, run_id: str | None = None, tool: str | None = None, status: str | None = None
    ) -> list[ScheduledRow]:
        """The scheduled calls of every run (or of ``run_id``), pending and finished.

        Finished calls stay listed as long as ``scheduled_retention`` keeps them.
        """

        def listing() -> list[ScheduledRow]:
            if run_id is not None:
                self.store.run_row(run_id)  # an unknown run is an error, not an empty list
            return list_scheduled(self.store.conn, run_id, tool, status)

        return await self._db(listing)

    def _schedule_id(self, run_id: str, schedule_id: str) -> str:
        """A schedule id as the run spells it: ``nudge#1`` and ``~scheduled-1`` are relative."""
        if schedule_id.startswith(run_id + "/"):
            return schedule_id
        return f"{run_id}/{schedule_id}"

    async def _scheduled_event(self, run_id: str, sid: str, event: Event) -> bool:
        """Apply a cancel or run-now of scheduled call ``sid`` if it is pending (True);
        else write nothing (False). The check and the write are one transaction."""

        def applying() -> list[Applied]:
            store = self.store
            with store.tx():
                row = store.run_row(run_id)
                if row.status != "running":
                    return []  # a settled run has no pending call
                calls = flowcore.scheduled_calls(store.state(run_id), [sid])
                if not calls or not _may_change(calls[0], event):
                    return []  # unknown, issued or finished: nothing to do, nothing logged
                applied = store.apply(run_id, event, self.now())
                if applied.rejected is not None:
                    raise HostError(applied.rejected)
                return [applied, *store.take_extra()]

        applied = await self._db(applying)
        if not applied:
            return False
        self._after(applied)
        assert applied[0].scheduled is not None
        return applied[0].scheduled.done

    async def cancel_scheduled(self, run_id: str, schedule_id: str) -> bool:
        """Cancel a pending scheduled call: True if it was pending, False if it was not
        (unknown, already issued or finished), and then nothing is written; never an
        error for the id (an unknown run is a ``HostError``)."""
        sid = self._schedule_id(run_id, schedule_id)
        event = flowcore.ScheduledCancelRequested(schedule_id=sid, at_ms=self.now())
        return await self._scheduled_event(run_id, sid, event)

    async def run_scheduled_now(self, run_id: str, schedule_id: str) -> bool:
        """Issue a pending scheduled call now: True if it was pending, else False
        (nothing is written then)."""
        sid = self._schedule_id(run_id, schedule_id)
        event = flowcore.ScheduledRunNowRequested(schedule_id=sid, at_ms=self.now())
        return await self._scheduled_event(run_id, sid, event)

    async def add_scheduled(
        self,
        run_id: str,
        tool: str,
        input: Any = None,
        delay_ms: int = 0,
        *,
        request: str | None = None,
        every_ms: int | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        count: int | None = None,
        until_ms: int | None = None,
    ) -> str:
        """Schedule a call to a tool the run's flow declares ``schedulable``; its id.

        Refused (``HostError`` naming the schedulable tools) for any other tool,
        and for a run that has settled or is ending. ``request``: the asker's
        name for this request (a handler's context gives ``<key>#<n>``), kept
        in the log: the id derives from it, and the same request again
        schedules nothing and answers the same id. A recurring call gives
        ``every_ms`` or ``cron`` (in ``timezone``), at most ``count`` firings,
        none after ``until_ms``; a bad recurrence is refused naming the field.
        """
        row = await self.run(run_id)
        if row.status != "running":
            raise LocalRunSettled(
                run_id,
                contract_status(row.status),
                f"run {run_id!r} has settled ({row.status}): no call can be scheduled",
            )
        if type(delay_ms) is not int or not 0 <= delay_ms <= MAX_MS:
            raise HostError(f"delay must be an integer from 0 to {MAX_MS:,} ms, not {delay_ms!r}")
        for name, value in (("every_ms", every_ms), ("count", count), ("until_ms", until_ms)):
            if value is not None and (type(value) is not int or value < 0):
                raise HostError(f"{name} must be an integer >= 0, not {value!r}")
        event = flowcore.ScheduledAddRequested(
            tool=tool,
            input=input,
            delay_ms=delay_ms,
            at_ms=self.now(),
            request=request,
            every_ms=every_ms,
            cron=cron,
            timezone=timezone,
            count=count,
            until_ms=until_ms,
        )
        try:
            flowcore.check_event(event)
        except flowcore.FlowcoreError as exc:
            raise HostError(str(exc)) from None
        applied = await self._apply_now(run_id, event)
        assert applied.scheduled is not None
        return applied.scheduled.id

    async def replay_scheduled(
        self, run_id: str, schedule_id: str, *, request: str | None = None
    ) -> None:
        """Issue a finished scheduled call again (same tool and input) as a new attempt.

        Refused (``HostError`` with the reason) for an unknown id, a call still
        pending or out, or a settled run. ``request``: the same request again
        replays nothing (a retried HTTP call replays once).
        """
        row = await self.run(run_id)
        if row.status != "running":
            raise LocalRunSettled(
                run_id,
                contract_status(row.status),
                f"run {run_id!r} has settled ({row.status}): no call can be replayed",
            )
        sid = self._schedule_id(run_id, schedule_id)
        event = flowcore.ScheduledReplayRequested(
            schedule_id=sid, at_ms=self.now(), request=request
        )
        try:
            flowcore.check_event(event)
        except flowcore.FlowcoreError as exc:
            raise HostError(str(exc)) from None
        await self._apply_now(run_id, event)
