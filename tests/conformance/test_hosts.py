"""Every host plays the conformance vectors: the same events must give the same effects.

For each host and each vector of ``specs/conformance/``, the recorded run is
played again on that host, every event reaching the run the way that host
gets events (``play_sim``, ``play_local``, ``play_temporal`` say how), from
the host-neutral plan of ``vectors.py``. The host must record the recorded
start, the recorded effects in order and the recorded events, and settle
where the log settles. The simulator and the local host run on a clock the
player drives, so they must match exactly; Temporal reads a real (faster)
clock, so ``untilMs`` of ``sleep``, ``budgetRemaining.wallClockMs`` and the
events' ``atMs`` are left out for it.

Skipped, each with its reason: logs no host can produce (divergent, torn, cut,
corrupt), and per host the events that host never produces — on all three an
event that arrives after a timer was due (each fires timers on time); on
Temporal timers too close together to order in real time, and a late result of
work a run of decision level 2 stopped waiting for (Temporal cancels that
activity); on the local host an unknown outcome of readonly, idempotent or
subflow work and a start with a parent's budget or depth (``LocalHost.start``
takes neither); on the simulator a start at depth > 0 and a cancel reason other
than its own. ``refusals.py`` pins what each host refuses, vector by vector with
the reason; a player that refuses one more, or plays one it refused, fails
``test_each_host_refuses_exactly_the_pinned_vectors``.
Rejected events are not sent, except on the local host, where the rejected
answers, signals, cancels and scheduled-call events go through its API and
must be refused.

The local host plays them on each of its stores: ``local`` on a SQLite file,
``local-postgres`` on PostgreSQL (``play_local_pg``).

Test ids read ``test_vector[<host>-<vector>]``; ``-k local`` plays one host.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import flowcore

from . import play_local, play_local_pg, play_sim, play_temporal, refusals, vectors
from .vectors import Outcome, Plan, Player

PLANS = vectors.plans()
CASES = sorted(PLANS) or ["none"]
PLAYERS: dict[str, Player] = {
    play_sim.NAME: play_sim,
    play_local.NAME: play_local,
    play_local_pg.NAME: play_local_pg,
    play_temporal.NAME: play_temporal,
}
TEMPORALIO = "the Temporal host tests need temporalio (.[dev])"


@functools.cache
def why_not(host: str, case: str) -> str | None:
    """Why ``host`` cannot play ``case``, or None."""
    plan = PLANS[case]
    if isinstance(plan, str):
        return plan
    return PLAYERS[host].refuse(plan)


def played(host: str) -> list[str]:
    return [case for case in sorted(PLANS) if why_not(host, case) is None]


@pytest.fixture(scope="module")
def temporal_outcomes(
    request: pytest.FixtureRequest,
    temporal_address: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Outcome]:
    """The selected vectors Temporal can play, played a few at a time on the dev server."""
    wanted = {
        item.callspec.params["case"]
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and item.originalname == "test_vector"
        and item.callspec.params.get("host") == play_temporal.NAME
    }
    plans = [p for c, p in sorted(PLANS.items()) if c in wanted and isinstance(p, Plan)]
    plans = [p for p in plans if play_temporal.refuse(p) is None]
    workdir = tmp_path_factory.mktemp("temporal-conformance")
    return asyncio.run(play_temporal.play_all(plans, workdir, temporal_address))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("host", list(PLAYERS))
def test_vector(host: str, case: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if case not in PLANS:
        pytest.skip("no conformance vectors in specs/conformance yet")
    reason = why_not(host, case)
    if reason is not None:
        pytest.skip(f"{host}: {case}: {reason}")
    plan = PLANS[case]
    assert isinstance(plan, Plan)
    player = PLAYERS[host]
    if host == play_temporal.NAME:
        pytest.importorskip("temporalio", reason=TEMPORALIO)
        outcome = request.getfixturevalue("temporal_outcomes")[case]
    elif host == play_local_pg.NAME:  # a schema of the PostgreSQL server of the session
        outcome = asyncio.run(player.play(plan, tmp_path, request.getfixturevalue("pg_url")))
    else:
        outcome = asyncio.run(player.play(plan, tmp_path))
    vectors.check_outcome(plan, outcome, clock=player.CLOCK)


def refused_by(refuse: Callable[[Plan], str | None]) -> dict[str, str]:
    """Every vector a player with this ``refuse`` does not play, with the reason."""
    found = {c: plan if isinstance(plan, str) else refuse(plan) for c, plan in PLANS.items()}
    return {c: why for c, why in found.items() if why is not None}


@pytest.mark.parametrize("host", list(PLAYERS))
def test_each_host_refuses_exactly_the_pinned_vectors(host: str) -> None:
    """A player that starts refusing a vector, or plays one it used to refuse, fails here
    until ``refusals.py`` says so (with the reason the player gives)."""
    if not PLANS:
        pytest.skip("no conformance vectors in specs/conformance yet")
    pinned = {**refusals.UNPLAYABLE, **refusals.REFUSED[host]}
    assert refused_by(PLAYERS[host].refuse) == pinned
    assert len(played(host)) == len(PLANS) - len(pinned)


def test_a_player_that_refuses_one_more_vector_breaks_the_pin() -> None:
    """Guard against a pin that holds whatever the players do (a bound on how many are
    played let a host refuse a fifth of the vectors more without a word)."""
    if "sequence-call-tool" not in PLANS:
        pytest.skip("no sequence-call-tool vector")
    pinned = {**refusals.UNPLAYABLE, **refusals.REFUSED[play_local.NAME]}

    def refuse(plan: Plan) -> str | None:
        return "refused" if plan.name == "sequence-call-tool" else play_local.refuse(plan)

    assert refused_by(refuse) == {**pinned, "sequence-call-tool": "refused"}
    assert refused_by(play_local.refuse) == pinned


def test_every_faithful_log_is_played_by_some_host() -> None:
    """A log that no host plays is one no host could record: divergent, torn, cut or
    corrupt, or with an event that comes after a timer was due (every host fires timers
    when they are due; such a log exists to be replayed, as budget-wall-clock-late-event)."""
    faithful = [c for c, plan in PLANS.items() if isinstance(plan, Plan) and plan.late is None]
    unplayed = {c: {h: why_not(h, c) for h in PLAYERS} for c in faithful}
    assert {c: why for c, why in unplayed.items() if all(why.values())} == {}


@pytest.mark.parametrize("host", [play_sim.NAME, play_local.NAME])
def test_a_host_that_does_otherwise_fails_the_check(host: str, tmp_path: Path) -> None:
    """Guard against a check that passes whatever the host does: a handler that answers
    the first call with another output must make the vector fail."""
    plan = vectors.plan_vector(vectors.VECTORS / "sequence-call-tool")
    first = plan.turns[0].key
    plan.work[first][0].output = {"changed": True}
    outcome = asyncio.run(PLAYERS[host].play(plan, tmp_path))
    with pytest.raises(AssertionError):
        vectors.check_outcome(plan, outcome, clock=PLAYERS[host].CLOCK)


def _outcome_with_events(plan: Plan, events: list[dict[str, Any]]) -> Outcome:
    records = [
        flowcore.Record(type="event.reported", index=i + 1, run_id=plan.run_id, at=0, data=e)
        for i, e in enumerate(events)
    ]
    return Outcome(records=records)


def test_the_temporal_player_tells_a_machine_that_fell_behind_from_a_divergence() -> None:
    """On a busy machine the sleep vector's first timer is handled seconds late: on its
    faster clock the run then reads a time past the second sleep's fixed instant, never
    sets that timer and settles (the player used to wait 30 s for the event and fail).
    The times the workflow read explain that; events on time explain nothing."""
    if "sleep" not in PLANS or not isinstance(PLANS["sleep"], Plan):
        pytest.skip("no sleep vector")
    plan = PLANS["sleep"]
    timing = play_temporal.prepare(plan)
    assert timing.scale > 1.0 and timing.late_s == play_temporal.LATE_S
    nap = plan.turns[0].event
    behind_ms = int(3 * timing.late_s * 1000 * timing.scale)  # three times what it tolerates
    late = _outcome_with_events(plan, [dict(nap, atMs=nap["atMs"] + behind_ms)])
    assert play_temporal.lateness(plan, late) == [behind_ms]
    assert play_temporal.fell_behind(plan, late)
    on_time = _outcome_with_events(plan, [nap])
    assert not play_temporal.fell_behind(plan, on_time)
    assert not play_temporal.fell_behind(plan, Outcome())
    # Played again, the clock is slow enough to absorb twice that lag, or as slow as a
    # play may go (the second sleep then lasts SLOWEST_FIRE_MS of real time).
    slower = play_temporal.prepare(plan, late_s=2 * behind_ms / timing.scale / 1000)
    fired = max(t.until - t.at for t in plan.timers.values() if t.fired)
    assert fired / play_temporal.SLOWEST_FIRE_MS <= slower.scale < timing.scale
    a_bit_slower = play_temporal.prepare(plan, late_s=2 * timing.late_s)
    assert slower.scale <= a_bit_slower.scale < timing.scale
    assert play_temporal._tolerates(plan, a_bit_slower.scale, a_bit_slower.late_s)
