"""run_team: a declared team's members as run-agent effects, or one run-team effect.

A team the spec declares runs here: members in declared order, one at a time
(``sequential``: later members see earlier outputs as ``members``) or all at
once (``parallel``). The step's output maps members to outputs; the first
member failure fails the step and abandons the others. A team the spec does
not declare is the host's: one ``run-team`` effect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from ...language.expr import TemplateError
from ...language.spec import RunTeamStep
from .. import keys
from ..outcome import Failed, Ok, err
from ..state import Pending, StepFrame, TeamProgress
from ..wire import RunTeam
from .leaf import as_text, run_agent

if TYPE_CHECKING:
    from ..outcome import Outcome
    from ..txn import Txn

__all__ = ["begin", "member_done"]


def begin(t: Txn, frame: StepFrame, body: RunTeamStep) -> Outcome | None:
    team = t.flow.teams.get(body.team)
    if team is None:
        r = t.resolver(frame.env, frame.attempt)
        key = t.key(frame)
        t.set_frame(frame, key=key)
        prompt = as_text(body.prompt.evaluate(r))
        t.emit_work(
            frame.id, RunTeam(team_id=body.team, prompt=prompt, idempotency_key=key), body.team
        )
        return None
    frame = t.set_frame(frame, progress=TeamProgress())
    if team.mode == "parallel":
        for i in range(len(team.members)):
            frame = _emit_member(t, frame, body, i)
            if t.halt is not None:
                return None
    else:
        _emit_member(t, frame, body, 0)
    return None


def _emit_member(t: Txn, frame: StepFrame, body: RunTeamStep, index: int) -> StepFrame:
    member = t.flow.teams[body.team].members[index]
    prog = frame.progress
    assert isinstance(prog, TeamProgress)
    key = keys.member_key(t.key_run, frame.id, member.member, frame.attempt)
    frame = t.set_frame(
        frame,
        progress=msgspec.structs.replace(prog, next=index + 1, running=(*prog.running, key)),
    )
    r = t.resolver(frame.env, frame.attempt, {"members": dict(prog.outputs)})
    effect = run_agent(r, member.agent, body.prompt, member.instructions, member.member, key)
    t.emit_work(frame.id, effect, member.agent, member.member)
    return frame


def member_done(t: Txn, frame: StepFrame, entry: Pending, key: str, out: Outcome) -> Outcome | None:
    """A member's run-agent ended. Returns the step's outcome once it is decided."""
    body = t.step_of(frame).body
    assert isinstance(body, RunTeamStep)
    team = t.flow.teams[body.team]
    prog = frame.progress
    assert isinstance(prog, TeamProgress)
    running = tuple(k for k in prog.running if k != key)
    if type(out) is Failed:
        for other in running:
            t.drop_key(other)
        # Re-read: members' calls being cancelled may now be waited for by it.
        t.set_frame(t.frame(frame.id), progress=msgspec.structs.replace(prog, running=()))
        return out
    # In the members' order, however their answers interleaved (as the output).
    ended = {**prog.outputs, entry.member: out.value}
    outputs = {m.member: ended[m.member] for m in team.members if m.member in ended}
    frame = t.set_frame(
        frame, progress=msgspec.structs.replace(prog, running=running, outputs=outputs)
    )
    if len(outputs) == len(team.members):
        return Ok({m.member: outputs[m.member] for m in team.members})
    if team.mode == "sequential" and not running:
        try:
            _emit_member(t, frame, body, prog.next)
        except TemplateError as exc:
            return Failed(err("expression-error", f"team {body.team!r}: {exc}"))
    return None
