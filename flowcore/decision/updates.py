"""Updates: a caller's request that runs a declared handler beside the flow's steps.

An ``update-requested`` event is checked first, writing nothing (``check``):
a known update id is a plain ``EventRejected``; anything else the run will
not take is an ``UpdateRefused`` with its code. An accepted update is
numbered (``UpdateRec.seq``: 1, 2, ... per incarnation) and its handler
starts at once as one more list at the root of the tree (``ListKind.UPDATE``,
frames under ``~update-<seq>/``), in a scope of its own nested in the
top-level one (``update`` is a variable of that scope). Its steps interleave
with the flow's as parallel branches do.

When the handler's list ends (``ending.root_done`` hands it here:
``handler_done``) the update ends ``completed`` with its reply or ``failed``
with the handler's error, its scope is dropped, and the reply joins the
decision's ``replies``; a run whose own steps have ended waits for its
running updates before it settles ``completed``. A run that fails, is
cancelled, runs out of budget or continues as new abandons them
(``abandon_running``): each ends ``failed`` with ``update-abandoned``.

This module must never do I/O, read a clock or draw a random number.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import msgspec

from .._data import MAX_EVENT_BYTES, DataError, check_data, json_size, short
from .._errors import EventRejected, UpdateRefused
from ..language.expr import TemplateError
from . import keys
from .outcome import Failed, Ok, Outcome, err
from .state import Env, ListKind, SeqFrame, State, UpdateRec
from .update_wire import UpdateReply, UpdateView
from .wire import ErrorInfo, UpdateRequested

if TYPE_CHECKING:
    from .txn import Txn

__all__ = [
    "ABANDONED",
    "abandon_running",
    "accept",
    "check",
    "handler_done",
    "update_of",
    "updates_of",
]

ABANDONED: Final = "update-abandoned"
"""The error type of an update whose run stopped before its handler ended."""

_replace = msgspec.structs.replace


def update_of(state: State, update_id: str) -> UpdateView | None:
    """What ``state`` knows of the update ``update_id`` (None: not taken in this incarnation)."""
    rec = state.tree.updates.get(update_id)
    return None if rec is None else _view(update_id, rec)


def updates_of(state: State) -> tuple[UpdateView, ...]:
    """Every update the incarnation took, in the order they were requested."""
    ordered = sorted(state.tree.updates.items(), key=lambda item: item[1].seq)
    return tuple(_view(uid, rec) for uid, rec in ordered)


def _view(update_id: str, rec: UpdateRec) -> UpdateView:
    return UpdateView(
        update_id=update_id,
        name=rec.name,
        seq=rec.seq,
        status=rec.status,
        output=rec.output,
        error=rec.error,
        principal=rec.principal,
    )


def _taken(update_id: str, rec: UpdateRec) -> EventRejected:
    return EventRejected(
        f"update id {update_id!r} was already taken (update {rec.name!r}, now {rec.status})"
    )


def check_ended(state: State, event: UpdateRequested) -> EventRejected:
    """Why an update cannot apply to a settled or continued ``state``."""
    rec = state.tree.updates.get(event.update_id)
    if rec is not None:
        return _taken(event.update_id, rec)
    why = (
        f"has settled ({state.settled.status})"
        if state.settled is not None
        else "continued as new: send the update to its new incarnation"
    )
    return UpdateRefused("ending", event.name, f"update {event.name!r} refused: the run {why}")


def check(t: Txn, update_id: str | None, name: str, input: Any, principal: str | None) -> None:
    """Raise unless the running run ``t`` would take the update; writes nothing.
    ``update_id`` None: any id not taken yet."""
    if update_id is not None:
        rec = t.tree.updates.get(update_id)
        if rec is not None:
            raise _taken(update_id, rec)
        if not update_id.isprintable():
            raise EventRejected(f"update id {short(update_id)} is not printable text")
    decl = t.flow.updates.get(name) if isinstance(name, str) else None
    if decl is None:
        known = ", ".join(sorted(t.flow.updates)) or "none"
        raise UpdateRefused(
            "unknown-update",
            str(name),
            f"no update {short(name)} in flow {t.flow.id!r} (declared: {known})",
        )
    tree = t.tree
    if tree.ending is not None or tree.exhausted is not None:
        why = "its steps have ended" if tree.ending is not None else "its budget ran out"
        raise UpdateRefused("ending", name, f"update {name!r} refused: the run is ending ({why})")
    try:
        check_data(input, "$.input", "update input")
    except DataError as exc:
        raise UpdateRefused("bad-input", name, f"update {name!r}: {exc}") from None
    if decl.input_schema is not None:
        from ..language.validate import input_problems

        problems = input_problems(decl.input_schema, input)
        if problems:
            listed = "; ".join(problems[:10])
            raise UpdateRefused(
                "bad-input", name, f"update {name!r}: the input fails its input_schema: {listed}"
            )
    if decl.validator is not None:
        extra = {"update": _context(update_id or "", name, input, principal)}
        try:
            ok = decl.validator.test(t.resolver("", extra=extra))
        except TemplateError as exc:
            raise UpdateRefused(
                "validator", name, f"update {name!r}: its validator failed to evaluate: {exc}"
            ) from None
        if not ok:
            raise UpdateRefused(
                "validator",
                name,
                f"update {name!r} refused by its validator {decl.validator.source!r}",
            )
    limits = t.flow.limits
    running = sum(1 for r in tree.updates.values() if r.status == "running")
    if running >= limits.max_running_updates:
        raise UpdateRefused(
            "limit",
            name,
            f"update {name!r} refused: {running} updates are running"
            f" (limits.max_running_updates is {limits.max_running_updates})",
        )
    if len(tree.updates) >= limits.max_updates:
        raise UpdateRefused(
            "limit",
            name,
            f"update {name!r} refused: this incarnation took {len(tree.updates)} updates"
            f" (limits.max_updates); continue as new for more",
        )


def _context(update_id: str, name: str, input: Any, principal: str | None) -> dict[str, Any]:
    return {"id": update_id, "name": name, "input": input, "principal": principal}


def accept(t: Txn, ev: UpdateRequested) -> None:
    """Take the update ``ev`` asks for (``check`` first) and start its handler."""
    check(t, ev.update_id, ev.name, ev.input, ev.principal)
    seq = len(t.tree.updates) + 1
    rec = UpdateRec(ev.name, seq, principal=ev.principal)
    t.tree = _replace(t.tree, updates=t.tree.updates.set(ev.update_id, rec))
    t.check_clock()
    if t.halt is not None:
        return  # the budget ran out: the update is abandoned as the run settles
    scope = keys.update_scope(seq)
    context = _context(ev.update_id, ev.name, ev.input, ev.principal)
    t.set_env(scope, Env(parent="", scope=scope, vars={"update": context}))
    list_id = keys.update_list(seq)
    out = t.start_list(list_id, None, scope, scope, "", ListKind.UPDATE, seq, ev.update_id)
    if out is not None:
        _ended(t, ev.update_id, out)


def handler_done(t: Txn, child: SeqFrame, out: Outcome) -> None:
    """The handler's list ended: the update ends; a run that waited for it may settle."""
    _ended(t, child.branch, out)
    if t.tree.ending is not None:
        t.above.maybe_finish(t)


def _ended(t: Txn, update_id: str, out: Outcome) -> None:
    rec = t.tree.updates[update_id]
    scope = keys.update_scope(rec.seq)
    if type(out) is Ok:
        decl = t.flow.updates[rec.name]
        value = out.value
        if decl.reply is not None:
            try:
                value = decl.reply.evaluate(t.resolver(scope))
            except TemplateError as exc:
                out = Failed(err("expression-error", f"update {rec.name!r} reply: {exc}"))
        if type(out) is Ok:
            size = json_size(value)
            if size > MAX_EVENT_BYTES:
                message = (
                    f"update {rec.name!r} reply: {size:,} bytes as JSON,"
                    f" over the limit of {MAX_EVENT_BYTES:,}"
                )
                out = Failed(err("output-too-large", message))
            else:
                out = Ok(value)
    _finish(t, update_id, rec, out)


def _finish(t: Txn, update_id: str, rec: UpdateRec, out: Outcome) -> None:
    """Record how the update ended, drop its scope, and reply."""
    if type(out) is Ok:
        rec = _replace(rec, status="completed", output=out.value)
        reply = UpdateReply(
            update_id=update_id, name=rec.name, status="completed", output=out.value
        )
    else:
        assert isinstance(out, Failed)
        error: ErrorInfo = out.error
        rec = _replace(rec, status="failed", error=error)
        reply = UpdateReply(update_id=update_id, name=rec.name, status="failed", error=error)
    t.tree = _replace(t.tree, updates=t.tree.updates.set(update_id, rec))
    _drop_scope(t, rec)
    t.replies.append(reply)


def _drop_scope(t: Txn, rec: UpdateRec) -> None:
    """The handler's results and variables go (those a recorded compensation will
    run in stay, as a loop iteration's do)."""
    scope = keys.update_scope(rec.seq)
    link = t.tree.compensations
    while link is not None:
        env = t.envs.get(link.env)
        if env is None or env.scope.startswith(scope):
            return
        link = link.rest
    for step_id in t.flow.updates[rec.name].scoped:
        t.forget(scope + step_id)
    if scope in t.envs:
        t.envs = t.envs.delete(scope)


def abandon_running(t: Txn, why: str) -> None:
    """The run stops before the running updates end: each ends ``failed``
    (``update-abandoned``, ``why``), its work abandoned with the rest."""
    running = sorted(
        ((rec.seq, uid, rec) for uid, rec in t.tree.updates.items() if rec.status == "running"),
    )
    for seq, uid, rec in running:
        t.abandon_frame(keys.update_list(seq))
        _finish(t, uid, rec, Failed(err(ABANDONED, why)))
