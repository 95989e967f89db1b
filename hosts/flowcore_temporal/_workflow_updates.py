"""A flow's own updates and queries (``updates:`` and ``queries:`` of its spec) as
Temporal's: one dynamic update handler and one dynamic query handler, each
taking every name the workflow's fixed handlers do not.

An update ``approve`` sent to the workflow (its arguments: the input, and the
principal as an optional second) is checked by the validator with
``flowcore.validate_update`` on the run's state: refused, Temporal rejects it
and nothing reaches the history (``update-refused``, details
``{code, update}``). Accepted, the handler feeds ``update-requested`` (the
update id is Temporal's) into the interpreter and waits until the run's state
says the update ended: its reply is the handler's result, its error an
``ApplicationError`` of the error's type and message with the whole reply in
its details (``{"flowcoreUpdate": UpdateView}``), so the client tells it from
a refusal. An update id the state knows already runs nothing: the handler
answers what the state says (Temporal itself deduplicates ids within one of
its runs; the state does it across the Temporal runs of one incarnation).

A query ``decision`` is ``flowcore.query`` on the run's state, running or
closed (Temporal replays a closed workflow to answer it); its failure is an
error whose message begins with the ``QueryError`` code.

Nothing here changes how an older history replays: both handlers act only on
updates and queries a history made before them never holds.

This module runs inside Temporal's workflow sandbox: it must never do I/O,
read the system clock or draw a random number.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    import msgspec

import flowcore
from flowcore import EventRejected, UpdateRequested

from ._types import SWITCHING_ERROR, UPDATE_REFUSED_ERROR, UPDATES_QUERY, clip, flow_name
from ._workflow_base import _MESSAGE_CHARS, _decode, _parse, _Refused
from ._workflow_handlers import WorkflowHandlers


def _refused(name: str, code: str, reason: str) -> ApplicationError:
    return ApplicationError(
        clip(reason, _MESSAGE_CHARS),
        {"code": code, "update": name},
        type=UPDATE_REFUSED_ERROR,
        non_retryable=True,
    )


class WorkflowUpdates(WorkflowHandlers):
    """The flow's declared updates and queries (see the module docstring)."""

    @workflow.update(dynamic=True)
    async def _on_update(self, name: str, args: Sequence[RawValue]) -> Any:
        update_id = _update_id()
        wanted = flow_name(name)
        # An update-with-start comes in the run's first workflow task, maybe
        # before the run has started: checked once it has.
        await workflow.wait_condition(lambda: self._state is not None)
        assert self._state is not None
        if flowcore.update_of(self._state, update_id) is None:
            input, principal = self._update_args(wanted, args)
            self._validate_update(wanted, input, principal)
            event = UpdateRequested(
                update_id=update_id,
                name=wanted,
                input=input,
                principal=principal,
                at_ms=self._now(),
            )
            try:
                self._apply(event)
            except EventRejected as exc:  # (validated just now: not expected)
                raise _refused(wanted, "rejected", str(exc)) from None
        await workflow.wait_condition(
            lambda: not self._update_running(update_id) or self._switching
        )
        view = flowcore.update_of(self._state, update_id)
        assert view is not None
        if view.status == "running":
            # The run goes over to a new Temporal run and waits for this
            # handler: the update goes on in the state, and the same id sent
            # again to the new Temporal run answers it there.
            raise ApplicationError(
                f"run {self._run_id} is continuing as new; send update {update_id!r} again",
                type=SWITCHING_ERROR,
                non_retryable=True,
            )
        if view.status == "completed":
            return view.output
        error = view.error
        assert error is not None
        raise ApplicationError(
            clip(error.message, _MESSAGE_CHARS),
            {"flowcoreUpdate": msgspec.to_builtins(view)},
            type=error.type,
            non_retryable=True,
        )

    @_on_update.validator
    def _check_update(self, name: str, args: Sequence[RawValue]) -> None:
        self._refuse_while_switching()
        state = self._state if self._state is not None else self._first_state()
        if state is None:
            return  # checked by the handler once the run has started
        if flowcore.update_of(state, _update_id()) is not None:
            return  # a repeated id: the handler answers the first
        wanted = flow_name(name)
        input, principal = self._update_args(wanted, args)
        self._validate_update(wanted, input, principal, state)

    def _first_state(self) -> flowcore.State | None:
        """The state a new run will start in, for the validator of an update that
        comes with the start (update-with-start: Temporal validates it before
        the run's coroutine has run): ``flowcore.start`` is pure, and what it
        returns here is thrown away. None for a run that does not simply start
        (carried over, continued, forked, scheduled) or cannot: the handler
        checks the update once the run has its state."""
        args = self._args
        if self._refusal is not None or args.snapshot is not None or args.continued is not None:
            return None
        if args.fork is not None or args.schedule is not None or not args.spec:
            return None
        try:
            flow = _parse(args.spec, args.source_name)
            return flowcore.start(
                flow,
                args.input,
                self._run_id,
                now_ms=self._now(),
                budget=flowcore.budget_from_wire(args.budget),
                depth=args.depth,
                metadata=args.metadata,
            ).state
        except (flowcore.FlowcoreError, ValueError):
            return None  # the start fails: so does the run, and the update with it

    def _update_running(self, update_id: str) -> bool:
        assert self._state is not None
        view = flowcore.update_of(self._state, update_id)
        return view is not None and view.status == "running"

    def _update_args(self, name: str, args: Sequence[RawValue]) -> tuple[Any, str | None]:
        """The update's input and principal, decoded; else an ``update-refused`` error."""
        try:
            if len(args) > 2:
                raise _Refused(
                    f"an update carries an input and a principal at most, got {len(args)} arguments"
                )
            input = _decode(args[0], "the input") if args else None
            principal = _decode(args[1], "the principal") if len(args) > 1 else None
            if principal is not None and not isinstance(principal, str):
                raise _Refused(f"the principal must be a string, got {type(principal).__name__}")
            flowcore.check_event(
                UpdateRequested(
                    update_id=_update_id(), name=name, input=input, principal=principal, at_ms=0
                )
            )
        except (_Refused, flowcore.DataError, EventRejected) as exc:
            raise _refused(name, "bad-input", f"update {name!r} refused: {exc}") from None
        return input, principal

    def _validate_update(
        self, name: str, input: Any, principal: str | None, state: flowcore.State | None = None
    ) -> None:
        state = state if state is not None else self._state
        assert state is not None
        try:
            flowcore.validate_update(state, name, input, principal)
        except flowcore.UpdateRefused as exc:
            raise _refused(name, exc.code, str(exc)) from None

    # --- queries -------------------------------------------------------------------------

    @workflow.query(dynamic=True)
    def _on_query(self, name: str, args: Sequence[RawValue]) -> Any:
        wanted = flow_name(name)
        if self._state is None:
            raise ApplicationError(f"run {self._run_id} has not started yet", type="not-started")
        try:
            if len(args) > 1:
                raise _Refused(f"a query takes its args as one value, got {len(args)} arguments")
            value = _decode(args[0], "the args") if args else None
        except _Refused as exc:
            raise ApplicationError(f"bad-args: query {wanted!r}: {exc}", type="bad-args") from None
        try:
            return flowcore.query(self._state, wanted, value)
        except flowcore.QueryError as exc:
            raise ApplicationError(f"{exc.code}: {exc}", type=exc.code) from None

    @workflow.query(name=UPDATES_QUERY)
    def updates(self, update_id: str | None = None) -> list[dict[str, Any]]:
        """The updates of the run's incarnation (the one ``update_id``, or none), as
        wire objects, in the order they were taken."""
        if self._state is None:
            return []
        views = flowcore.updates_of(self._state)
        found: list[dict[str, Any]] = msgspec.to_builtins(
            [v for v in views if update_id in (None, v.update_id)]
        )
        return found


def _update_id() -> str:
    info = workflow.current_update_info()
    assert info is not None  # (only called inside an update's validator or handler)
    return info.id
