"""flowcore.schedules, the pure model: slots, jitter, the decision, the spec section."""

from __future__ import annotations

import datetime as dt
import itertools
import subprocess
import sys
import zoneinfo
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import flowcore
from flowcore.schedules import (
    DEFAULT_CATCHUP_WINDOW_MS,
    MAX_SKIPS_LISTED,
    Buffer,
    CancelOther,
    Overlap,
    Progress,
    Schedule,
    ScheduleError,
    Skip,
    Start,
    backfill,
    backfill_slots,
    check_schedule,
    decide,
    due_ms,
    iso_ms,
    jitter_ms,
    parse_schedule,
    run_id_for,
    slot_input,
    slots_after,
    trigger,
)

MIN = 60_000
HOUR = 60 * MIN
DAY = 24 * HOUR
T0 = 1_796_083_200_000  # 2026-12-01T00:00:00Z


def at(text: str) -> int:
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(moment.timestamp() * 1000)


def sched(**definition: Any) -> Schedule:
    return parse_schedule("nightly", definition, "report")


# --- definitions ----------------------------------------------------------------------


def test_a_definition_reads_back_from_its_own_definition() -> None:
    s = sched(
        cron="0 7 * * *",
        timezone="Europe/Paris",
        every="1h",
        offset="15m",
        input={"day": "${schedule.at}"},
        overlap="buffer_one",
        catchup_window="10m",
        jitter="30s",
        paused=True,
        note="quiet",
        limit=3,
    )
    assert s.every_ms == HOUR and s.offset_ms == 15 * MIN and s.jitter_ms == 30_000
    assert s.overlap is Overlap.BUFFER_ONE and s.catchup_window_ms == 10 * MIN
    again = parse_schedule("nightly", s.definition(), "report")
    assert again == s


def test_every_problem_of_a_definition_is_named() -> None:
    with pytest.raises(ScheduleError) as caught:
        sched(
            cron="61 * * * *",
            timezone="Mars/Olympus",
            overlap="buffer_on",
            catchup="1m",
            jitter="soon",
            limit=-1,
            input={"x": "${steps.a.output}"},
        )
    text = str(caught.value)
    assert "nightly.timezone: unknown time zone 'Mars/Olympus'" in text
    assert "overlap 'buffer_on' is not one of" in text and "(did you mean 'buffer_one'?)" in text
    assert "unknown key 'catchup' (did you mean 'catchup_window'?)" in text
    assert "nightly.cron:" in text and "nightly.jitter:" in text and "nightly.limit:" in text
    assert "can read only 'schedule'" in text
    _, problems = check_schedule("x", {}, "f")
    assert problems == [((), "a schedule needs 'cron', 'every' or both")]
    _, problems = check_schedule("a/b", {"every": "1m"}, "f")
    assert "is not valid" in problems[0][1]
    _, problems = check_schedule("x", {"every": "1h", "offset": "2h"}, "f")
    assert problems == [(("offset",), "the offset (7200000 ms) must be shorter than 'every'")]


SPEC = """\
flow: report
steps:
  - {id: hold, await_signal: {signal: done}}
schedules:
  nightly:
    cron: "0 7 * * *"
    timezone: Europe/Paris
    input: {day: "${schedule.at}"}
  hourly: {every: 1h, offset: 15m, overlap: allow_all}
"""


def test_a_spec_declares_schedules_for_its_flow() -> None:
    flow = flowcore.parse_flow(SPEC)
    assert sorted(flow.schedules) == ["hourly", "nightly"]
    assert flow.schedules["nightly"].flow_id == "report"
    assert flow.schedules["nightly"].timezone == "Europe/Paris"
    assert flow.schedules["hourly"].overlap is Overlap.ALLOW_ALL
    assert flowcore.parse_flow(SPEC.split("schedules:")[0]).schedules == {}


def test_schedule_problems_in_a_spec_are_located() -> None:
    bad = SPEC.replace("Europe/Paris", "Europe/Pariss").replace("allow_all", "allow_al")
    bad += "  weekly: {cron: '0 7 * * 8'}\n  never: {note: hi}\n  typo: {every: 1m, jiter: 1s}\n"
    with pytest.raises(flowcore.SpecError) as caught:
        flowcore.parse_flow(bad, source_name="r.yaml")
    shown = [(p.path, p.line, p.message) for p in caught.value.problems]
    assert shown[0][:2] == ("schedules.nightly.timezone", 7)
    assert "unknown time zone 'Europe/Pariss'" in shown[0][2]
    assert shown[1][:2] == ("schedules.hourly.overlap", 9)
    assert "(did you mean 'allow_all'?)" in shown[1][2]
    assert shown[2][:2] == ("schedules.weekly.cron", 10)
    assert shown[3] == ("schedules.never", 11, "a schedule needs 'cron', 'every' or both")
    assert shown[4][:2] == ("schedules.typo.jiter", 12)
    assert "did you mean 'jitter'" in shown[4][2]
    with pytest.raises(flowcore.SpecError, match="expected a mapping of schedule name"):
        flowcore.parse_flow(SPEC.split("schedules:")[0] + "schedules: [1]\n")


# --- slots ----------------------------------------------------------------------------

zones = st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe"])
crons = st.sampled_from(["0 7 * * *", "*/30 * * * *", "30 2 * * *", "15 9 * * 1-5", "0 0 1 * *"])
instants = st.integers(min_value=0, max_value=4_000_000_000_000)


@given(cron=crons, zone=zones, after=instants)
def test_cron_slots_increase_and_lie_on_the_cron_in_the_zone(
    cron: str, zone: str, after: int
) -> None:
    s = sched(cron=cron, timezone=zone)
    slots = slots_after(s, after, 6)
    assert slots[0] > after and all(a < b for a, b in itertools.pairwise(slots))
    minute, hour = cron.split()[:2]
    for slot in slots:
        local = dt.datetime.fromtimestamp(slot / 1000, zoneinfo.ZoneInfo(zone))
        assert slot % MIN == 0
        if minute.isdigit() and hour.isdigit():
            # A fixed time, or the first instant after a spring-forward gap that skipped it.
            gap = local.utcoffset() != (local - dt.timedelta(hours=3)).utcoffset()
            assert (local.hour, local.minute) == (int(hour), int(minute)) or gap
        elif minute.startswith("*/"):
            assert local.minute % 30 == 0


@given(
    every=st.integers(min_value=1, max_value=10 * DAY),
    offset=st.integers(min_value=0, max_value=10 * DAY),
    after=instants,
)
def test_interval_slots_are_epoch_plus_offset_plus_multiples(
    every: int, offset: int, after: int
) -> None:
    offset %= every
    s = sched(every=every, offset=offset) if offset else sched(every=every)
    slots = slots_after(s, after, 5)
    assert slots[0] > after >= slots[0] - every
    for a, b in itertools.pairwise(slots):
        assert b - a == every
    assert all((slot - offset) % every == 0 for slot in slots)


@given(after=instants)
def test_cron_and_every_together_give_the_union_of_their_slots(after: int) -> None:
    both = sched(cron="0 7 * * *", timezone="Europe/Paris", every="5h", offset="1h")
    slots = slots_after(both, after, 12)
    end = slots[-1]
    cron = [x for x in slots_after(sched(cron="0 7 * * *", timezone="Europe/Paris"), after, 12)]
    every = slots_after(sched(every="5h", offset="1h"), after, 12)
    expected = sorted({x for x in cron + every if x <= end})
    assert slots == expected


def test_daylight_saving_time_as_cron_does_it() -> None:
    # Europe/Paris, 2026-03-29: 02:00 jumps to 03:00; 2026-10-25: 03:00 falls back to 02:00.
    spring = sched(cron="30 2 * * *", timezone="Europe/Paris")
    slots = [iso_ms(x) for x in slots_after(spring, at("2026-03-27T12:00:00Z"), 3)]
    assert slots == ["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]
    fall = [iso_ms(x) for x in slots_after(spring, at("2026-10-24T12:00:00Z"), 2)]
    assert fall == ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]  # once, the first 02:30
    halves = sched(cron="*/30 * * * *", timezone="Europe/Paris")
    both = [iso_ms(x) for x in slots_after(halves, at("2026-10-24T23:45:00Z"), 6)]
    # 02:00 and 02:30 local fire in both occurrences of the repeated hour.
    assert both == [
        "2026-10-25T00:00:00Z",
        "2026-10-25T00:30:00Z",
        "2026-10-25T01:00:00Z",
        "2026-10-25T01:30:00Z",
        "2026-10-25T02:00:00Z",
        "2026-10-25T02:30:00Z",
    ]


def test_the_run_id_and_input_come_from_the_slot() -> None:
    s = sched(
        cron="0 7 * * *",
        input={
            "day": "${schedule.at}",
            "ms": "${schedule.at_ms}",
            "line": "report ${schedule.name} at ${schedule.at}",
            "joined": "${join('/', [schedule.name, schedule.at])}",
        },
    )
    slot = at("2026-12-02T07:00:00Z")
    assert run_id_for("nightly", slot) == "nightly@2026-12-02T07:00:00Z"
    assert run_id_for("nightly", slot + 250) == "nightly@2026-12-02T07:00:00.250Z"
    assert slot_input(s, slot) == {
        "day": "2026-12-02T07:00:00Z",
        "ms": slot,
        "line": "report nightly at 2026-12-02T07:00:00Z",
        "joined": "nightly/2026-12-02T07:00:00Z",
    }
    key = flowcore.parse_key(f"{run_id_for('nightly', slot)}/step#1")
    assert key.run_id == "nightly@2026-12-02T07:00:00Z"


# --- jitter ---------------------------------------------------------------------------


@given(jitter=st.integers(min_value=1, max_value=DAY), slot=instants)
def test_jitter_lies_in_its_bounds(jitter: int, slot: int) -> None:
    s = sched(every="1m", jitter=jitter)
    assert 0 <= jitter_ms(s, slot) < jitter
    assert due_ms(s, slot) == slot + jitter_ms(s, slot)
    assert jitter_ms(sched(every="1m"), slot) == 0


def test_jitter_is_the_same_in_every_process() -> None:
    s = sched(every="1m", jitter="1h")
    slots = slots_after(s, T0, 5)
    here = [jitter_ms(s, x) for x in slots]
    code = (
        "from flowcore.schedules import parse_schedule, jitter_ms, slots_after\n"
        "s = parse_schedule('nightly', {'every': '1m', 'jitter': '1h'}, 'report')\n"
        f"print([jitter_ms(s, x) for x in slots_after(s, {T0}, 5)])\n"
    )
    for seed in ("0", "1", "12345"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        )
        assert out.stdout.strip() == str(here)
    assert here == [268727, 2860798, 221109, 1935228, 2377290]
    assert len(set(here)) == 5


# --- decisions ------------------------------------------------------------------------


def kinds(actions: tuple[Any, ...]) -> list[tuple[str, str]]:
    out = []
    for a in actions:
        name = type(a).__name__
        out.append((name, iso_ms(a.slot_ms)[11:16]))
    return out


def test_catch_up_window_boundaries() -> None:
    s = sched(every="1h", catchup_window="10m")
    slot = T0 + HOUR
    on_edge = decide(s, Progress(T0), slot + 10 * MIN)
    assert [type(a) for a in on_edge.actions] == [Start]
    late = decide(s, Progress(T0), slot + 10 * MIN + 1)
    assert late.actions == (Skip(slot, "outside catch-up window"),)
    assert late.progress.considered_ms == slot
    assert decide(s, Progress(T0), slot - 1).actions == ()
    assert sched(every="1h").catchup_window_ms == DEFAULT_CATCHUP_WINDOW_MS


def test_after_downtime_old_slots_are_skipped_and_a_long_gap_is_summed_up() -> None:
    s = sched(every="1m", catchup_window="3m")
    now = T0 + 10 * DAY + 30_000
    decision = decide(s, Progress(T0), now)
    old = [a for a in decision.actions if isinstance(a, Skip) and "window" in a.why]
    starts = [a for a in decision.actions if isinstance(a, Start)]
    assert len(old) == MAX_SKIPS_LISTED + 1
    assert old[-1].through_ms is not None and old[0].through_ms is None
    # The window (3m back from 00:00:30) holds the last three slots: with "skip" the
    # first starts and the two after it are skipped while it runs.
    assert [iso_ms(a.slot_ms) for a in starts] == ["2026-12-10T23:58:00Z"]
    assert [getattr(a, "why", None) for a in decision.actions[-2:]] == [
        "the previous run is still running"
    ] * 2
    assert decision.progress.considered_ms == T0 + 10 * DAY


@given(
    steps=st.lists(st.integers(min_value=0, max_value=3 * HOUR), min_size=1, max_size=30),
    window=st.integers(min_value=1, max_value=2 * HOUR),
    jitter=st.integers(min_value=0, max_value=10 * MIN),
)
def test_every_slot_is_decided_exactly_once_in_order(
    steps: list[int], window: int, jitter: int
) -> None:
    s = sched(every="7m", catchup_window=window, jitter=jitter, overlap="allow_all")
    progress = Progress(T0)
    now = T0
    decided: list[tuple[int, int | None]] = []
    for step in steps:
        now += step
        while True:
            decision = decide(s, progress, now)
            for action in decision.actions:
                assert isinstance(action, Start | Skip)
                if isinstance(action, Start):
                    assert action.run_id == run_id_for("nightly", action.slot_ms)
                    assert now - due_ms(s, action.slot_ms) <= window
                    assert due_ms(s, action.slot_ms) <= now
                decided.append((action.slot_ms, getattr(action, "through_ms", None)))
            progress = decision.progress
            if not decision.more:
                break
    covered: list[int] = []
    for slot, through in decided:
        covered.append(slot)
        if through is not None:
            covered.extend(x for x in slots_after(s, slot, 10_000) if x <= through)
    expected = [x for x in slots_after(s, T0, 10_000) if x <= progress.considered_ms]
    assert covered == expected
    nxt = slots_after(s, progress.considered_ms, 1)[0]
    assert due_ms(s, nxt) > now


def test_overlap_policies() -> None:
    running = ("nightly@2026-12-01T00:00:00Z",)
    first, second = T0 + HOUR, T0 + 2 * HOUR
    now = second

    def run(overlap: str, buffered: int | None = None) -> Any:
        s = sched(every="1h", overlap=overlap, catchup_window="2h")
        return decide(s, Progress(T0, buffered), now, running)

    skip = run("skip")
    assert skip.actions == (
        Skip(first, "the previous run is still running"),
        Skip(second, "the previous run is still running"),
    )
    one = run("buffer_one")
    assert one.actions[0] == Buffer(first)
    assert isinstance(one.actions[1], Skip) and one.progress.buffered_ms == first
    assert kinds(run("allow_all").actions) == [("Start", "01:00"), ("Start", "02:00")]
    other = run("cancel_other")
    assert other.actions[0] == CancelOther(first, running)
    assert other.actions[1] == Buffer(first)
    assert other.actions[2] == CancelOther(second, running)
    assert other.actions[3] == Skip(first, "replaced by a newer slot")
    assert other.progress.buffered_ms == second
    # Once nothing runs, the buffered slot starts first, then what is due.
    s = sched(every="1h", overlap="buffer_one", catchup_window="2h")
    drained = decide(s, Progress(second, first), second + 1)
    assert drained.actions == (Start(first, run_id_for("nightly", first), None),)
    assert drained.progress.buffered_ms is None


def test_pause_and_limit_decide_nothing() -> None:
    s = sched(every="1h", catchup_window="2h", limit=2, overlap="allow_all")
    decision = decide(s, Progress(T0, None, 2), T0 + 3 * HOUR)
    assert kinds(decision.actions) == [("Start", "01:00"), ("Start", "02:00")]
    assert decision.progress.remaining == 0
    assert decide(s, decision.progress, T0 + 9 * HOUR).actions == ()
    paused = sched(every="1h", paused=True, note="holiday")
    assert decide(paused, Progress(T0), T0 + 3 * HOUR).actions == ()


def test_trigger_and_backfill() -> None:
    s = sched(every="1h", input="${schedule.at}")
    started = trigger(s, 3, T0 + 5)
    assert started == Start(T0 + 5, "nightly@trigger-3", "2026-12-01T00:00:00.005Z")
    slots = backfill_slots(s, T0, T0 + 3 * HOUR)
    assert len(slots) == 4
    actions, buffered = backfill(s, slots, done=[T0 + HOUR])
    assert kinds(actions) == [
        ("Start", "00:00"),
        ("Skip", "01:00"),
        ("Skip", "02:00"),
        ("Skip", "03:00"),
    ]
    assert "exists already" in actions[1].why and buffered is None  # type: ignore[union-attr]
    all_of = backfill(sched(every="1h", overlap="allow_all"), slots)[0]
    assert [type(a) for a in all_of] == [Start] * 4
    with pytest.raises(ValueError, match="before it starts"):
        backfill_slots(s, T0 + HOUR, T0)
    with pytest.raises(ValueError, match="no slot"):
        backfill_slots(s, T0 + 1, T0 + 2)
    with pytest.raises(ValueError, match="in parts"):
        backfill_slots(sched(every="1s"), T0, T0 + DAY)
