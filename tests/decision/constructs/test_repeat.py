"""``repeat``: ``every_ms`` and ``cron`` fires, ``until``, ``max_fires``, a failing body.

Each test drives one run by hand with ``tests.harness.Run`` and checks the
exact wire effects of each decision (or their idempotency keys) and the final
``settled`` status, output, error and report; ``helpers`` holds their wire forms.
"""

from __future__ import annotations

from tests.harness import Run

from .helpers import call, error, row, settled, sleep

# A fixed instant for cron tests: 2024-01-01T00:00:00Z in epoch milliseconds.
JAN_1_2024 = 1_704_067_200_000
MINUTE = 60_000


REPEAT = """
flow: t
tools: {a: {}}
steps:
  - id: rec
    repeat:
      %s
      steps:
        - id: check
          call_tool: {tool: a, input: {n: "${fire_count}"}}
output: "${steps.rec.output}"
"""


def test_repeat_every_ms_first_fire_after_one_interval_and_max_fires() -> None:
    r = Run(REPEAT % "every_ms: 1000\n      max_fires: 3", now_ms=500)
    assert r.wire() == [sleep("r/rec[1]/tick", 1500)]
    r.fire("r/rec[1]/tick")
    assert r.wire() == [call("r/rec[1]/check#1", "a", {"n": 1})]
    r.ok("r/rec[1]/check#1", "c1", at=1700)
    assert r.wire() == [sleep("r/rec[2]/tick", 2500)]  # on the cadence, not 1700 + 1000
    r.fire("r/rec[2]/tick", at=2600)
    assert r.wire() == [call("r/rec[2]/check#1", "a", {"n": 2})]
    r.ok("r/rec[2]/check#1", "c2")
    assert r.wire() == [sleep("r/rec[3]/tick", 3500)]
    r.fire("r/rec[3]/tick")
    assert r.wire() == [call("r/rec[3]/check#1", "a", {"n": 3})]
    r.ok("r/rec[3]/check#1", "c3")
    assert r.wire() == [
        settled(
            "completed",
            [
                row("r/rec[1]/check#1", "succeeded"),
                row("r/rec[2]/check#1", "succeeded"),
                row("r/rec[3]/check#1", "succeeded"),
            ],
            output="c3",  # the last fire's output
        )
    ]


def test_repeat_every_ms_overrun_does_not_arm_a_tick_in_the_past() -> None:
    r = Run(REPEAT % "every_ms: 1000\n      max_fires: 5", now_ms=0)
    r.fire("r/rec[1]/tick")
    r.ok("r/rec[1]/check#1", "slow", at=5500)
    [effect] = r.wire()
    assert effect["kind"] == "sleep"
    assert effect["idempotencyKey"] == "r/rec[2]/tick"
    assert effect["untilMs"] in (6000, 6500)


def test_repeat_until_checked_after_each_fire() -> None:
    r = Run(REPEAT % 'every_ms: 1000\n      until: "steps.check.output.done"', now_ms=0)
    assert r.wire() == [sleep("r/rec[1]/tick", 1000)]
    r.fire("r/rec[1]/tick")
    r.ok("r/rec[1]/check#1", {"done": False})
    assert r.wire() == [sleep("r/rec[2]/tick", 2000)]
    r.fire("r/rec[2]/tick")
    assert r.wire() == [call("r/rec[2]/check#1", "a", {"n": 2})]
    r.ok("r/rec[2]/check#1", {"done": True})
    assert r.wire() == [
        settled(
            "completed",
            [row("r/rec[1]/check#1", "succeeded"), row("r/rec[2]/check#1", "succeeded")],
            output={"done": True},
        )
    ]


def test_repeat_fire_count_visible_to_until_and_body() -> None:
    r = Run(REPEAT % 'every_ms: 100\n      until: "fire_count >= `2`"')
    r.fire("r/rec[1]/tick")
    assert r.wire() == [call("r/rec[1]/check#1", "a", {"n": 1})]
    r.ok("r/rec[1]/check#1", "one")
    assert r.wire() == [sleep("r/rec[2]/tick", 200)]
    r.fire("r/rec[2]/tick")
    assert r.wire() == [call("r/rec[2]/check#1", "a", {"n": 2})]
    r.ok("r/rec[2]/check#1", "two")
    assert r.settled is not None
    assert r.settled.status == "completed"
    assert r.settled.output == "two"


def test_repeat_cron_fires_at_next_cron_times_after_reported_time() -> None:
    r = Run(REPEAT % 'cron: "*/15 * * * *"\n      max_fires: 3', now_ms=JAN_1_2024 + MINUTE)
    assert r.wire() == [sleep("r/rec[1]/tick", JAN_1_2024 + 15 * MINUTE)]
    r.fire("r/rec[1]/tick", at=JAN_1_2024 + 15 * MINUTE + 5000)
    assert r.wire() == [call("r/rec[1]/check#1", "a", {"n": 1})]
    # The body finishes after 00:30 has passed: the next fire is 00:45, not 00:30.
    r.ok("r/rec[1]/check#1", "c1", at=JAN_1_2024 + 31 * MINUTE)
    assert r.wire() == [sleep("r/rec[2]/tick", JAN_1_2024 + 45 * MINUTE)]
    r.fire("r/rec[2]/tick")
    r.ok("r/rec[2]/check#1", "c2", at=JAN_1_2024 + 46 * MINUTE)
    assert r.wire() == [sleep("r/rec[3]/tick", JAN_1_2024 + 60 * MINUTE)]
    r.fire("r/rec[3]/tick")
    r.ok("r/rec[3]/check#1", "c3")
    assert r.settled is not None
    assert r.settled.output == "c3"
    assert list(r.report()) == ["r/rec[1]/check#1", "r/rec[2]/check#1", "r/rec[3]/check#1"]


def test_repeat_cron_started_exactly_on_a_cron_time_waits_for_the_next_one() -> None:
    r = Run(REPEAT % 'cron: "0 * * * *"\n      max_fires: 1', now_ms=JAN_1_2024)
    assert r.wire() == [sleep("r/rec[1]/tick", JAN_1_2024 + 60 * MINUTE)]


def test_repeat_body_failure_fails_the_repeat() -> None:
    r = Run(REPEAT % "every_ms: 1000")
    r.fire("r/rec[1]/tick")
    r.fail("r/rec[1]/check#1", "down")
    assert r.wire() == [
        settled("failed", [row("r/rec[1]/check#1", "failed")], err=error("down", "down happened"))
    ]
