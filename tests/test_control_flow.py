"""Control flow: one or more unit tests per construct, asserting exact effects.

Every test drives one run by hand with ``tests.harness.Run`` and checks the
exact wire effects of each decision (or their idempotency keys) and the final
``settled`` status, output, error and report.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from flowcore import EventRejected, Usage
from tests.harness import Run

# --- helpers -------------------------------------------------------------------------

_ABSENT: Any = object()


def call(key: str, tool: str, input: Any = _ABSENT) -> dict[str, Any]:
    """The wire form of a call-tool effect."""
    out: dict[str, Any] = {"kind": "call-tool", "tool": tool}
    if input is not _ABSENT:
        out["input"] = input
    out["idempotencyKey"] = key
    return out


def sleep(key: str, until_ms: int) -> dict[str, Any]:
    return {"kind": "sleep", "untilMs": until_ms, "idempotencyKey": key}


def row(key: str, status: str, target: str = "a", effect: str = "call-tool") -> dict[str, Any]:
    """One entry of a settled report, on the wire."""
    return {"idempotencyKey": key, "effect": effect, "target": target, "status": status}


def error(type: str, message: str, retryable: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"type": type, "message": message}
    if retryable:
        out["retryable"] = True
    return out


def settled(
    status: str,
    report: list[dict[str, Any]],
    output: Any = None,
    err: dict[str, Any] | None = None,
    exhausted: str | None = None,
) -> dict[str, Any]:
    """The wire form of a settled effect (defaults are omitted on the wire)."""
    out: dict[str, Any] = {"kind": "settled", "status": status}
    if output is not None:
        out["output"] = output
    if err is not None:
        out["error"] = err
    if exhausted is not None:
        out["exhausted"] = exhausted
    if report:
        out["report"] = report
    return out


def rejected(run: Run, action: Any) -> EventRejected:
    """Run ``action``; it must be rejected and leave the run's state untouched."""
    before = run.state
    with pytest.raises(EventRejected) as info:
        action()
    assert run.state is before
    return info.value


# A fixed instant for cron tests: 2024-01-01T00:00:00Z in epoch milliseconds.
JAN_1_2024 = 1_704_067_200_000
MINUTE = 60_000


# --- switch ----------------------------------------------------------------------------

SWITCH = """
flow: t
tools: {a: {}, b: {}, c: {}}
steps:
  - id: pick
    switch:
      - if: "input.n > `5`"
        steps: [{id: big, call_tool: {tool: a, input: {n: "${input.n}"}}}]
      - if: "input.n > `1`"
        steps: [{id: mid, call_tool: {tool: b}}]
      - else: [{id: small, call_tool: {tool: c}}]
  - id: after
    call_tool: {tool: a, input: "${steps.pick.output}"}
output: "${steps.pick.output}"
"""


def test_switch_first_matching_case_wins() -> None:
    # n = 9 satisfies both conditions: only the first case runs.
    r = Run(SWITCH, {"n": 9})
    assert r.wire() == [call("r/big#1", "a", {"n": 9})]
    r.ok("r/big#1", "BIG")
    assert r.wire() == [call("r/after#1", "a", "BIG")]
    r.ok("r/after#1")
    assert r.wire() == [
        settled(
            "completed",
            [row("r/big#1", "succeeded"), row("r/after#1", "succeeded")],
            output="BIG",
        )
    ]


def test_switch_later_case_when_earlier_ones_do_not_match() -> None:
    r = Run(SWITCH, {"n": 3})
    assert r.wire() == [call("r/mid#1", "b")]
    r.ok("r/mid#1", "MID")
    assert r.wire() == [call("r/after#1", "a", "MID")]
    r.ok("r/after#1")
    assert r.settled is not None
    assert r.settled.status == "completed"
    assert r.settled.output == "MID"
    assert r.report() == {"r/mid#1": "succeeded", "r/after#1": "succeeded"}


def test_switch_else_runs_when_nothing_matches() -> None:
    r = Run(SWITCH, {"n": 0})
    assert r.wire() == [call("r/small#1", "c")]
    r.ok("r/small#1", "SMALL")
    assert r.wire() == [call("r/after#1", "a", "SMALL")]


def test_switch_without_match_outputs_null_and_flow_continues() -> None:
    spec = """
flow: t
tools: {a: {}}
steps:
  - id: pick
    switch:
      - if: "input.n > `5`"
        steps: [{id: big, call_tool: {tool: a}}]
  - id: after
    call_tool: {tool: a, input: "${steps.pick}"}
output: "${steps.pick}"
"""
    r = Run(spec, {"n": 0})
    # The switch ended at once; the next step sees it succeeded with a null output.
    assert r.wire() == [call("r/after#1", "a", {"status": "succeeded", "output": None})]
    r.ok("r/after#1")
    assert r.wire() == [
        settled(
            "completed",
            [row("r/after#1", "succeeded")],
            output={"status": "succeeded", "output": None},
        )
    ]


# --- parallel --------------------------------------------------------------------------


def parallel(mode: str, extra: str = "") -> str:
    return f"""
flow: t
tools: {{a: {{}}, b: {{}}, c: {{}}}}
steps:
  - id: p
    parallel:
      mode: {mode}{extra}
      branches:
        x: [{{id: x1, call_tool: {{tool: a}}}}, {{id: x2, call_tool: {{tool: a}}}}]
        y: [{{id: y1, call_tool: {{tool: b}}}}]
        z: [{{id: z1, call_tool: {{tool: c}}}}]
  - id: after
    call_tool: {{tool: a, input: "${{steps.p.output}}"}}
output: "${{steps.p.output}}"
"""


def test_parallel_all_starts_every_branch_in_declared_order_and_maps_outputs() -> None:
    r = Run(parallel("all"))
    assert r.wire() == [call("r/x1#1", "a"), call("r/y1#1", "b"), call("r/z1#1", "c")]
    r.ok("r/z1#1", "Z")
    assert r.wire() == []
    r.ok("r/x1#1", "X1")
    assert r.wire() == [call("r/x2#1", "a")]
    r.ok("r/y1#1", "Y")
    assert r.wire() == []
    r.ok("r/x2#1", "X2")
    # A branch's output is its last step's output; the map is keyed by branch name.
    assert r.wire() == [call("r/after#1", "a", {"x": "X2", "y": "Y", "z": "Z"})]
    r.ok("r/after#1")
    assert r.settled is not None
    assert r.settled.status == "completed"
    assert r.settled.output == {"x": "X2", "y": "Y", "z": "Z"}
    assert list(r.settled.output) == ["x", "y", "z"]  # declared order, not completion order


def test_parallel_all_first_failure_abandons_the_rest_and_fails() -> None:
    r = Run(parallel("all"))
    r.ok("r/y1#1", "Y")
    r.fail("r/x1#1", "broken")
    assert r.wire() == [
        settled(
            "failed",
            [
                row("r/x1#1", "failed"),
                row("r/y1#1", "succeeded", "b"),
                row("r/z1#1", "uncertain", "c"),
            ],
            err=error("broken", "broken happened"),
        )
    ]
    # x2 never started: it is not part of the report at all.
    assert "r/x2#1" not in r.report()


def test_parallel_all_abandoned_branch_late_result_is_accepted_and_ignored() -> None:
    spec = """
flow: t
tools: {a: {}, b: {}}
steps:
  - id: guard
    try:
      - id: p
        parallel:
          branches:
            x: [{id: x1, call_tool: {tool: a}}]
            y: [{id: y1, call_tool: {tool: b}}, {id: y2, call_tool: {tool: b}}]
    catch:
      - steps: [{id: handle, call_tool: {tool: a, input: "${error.type}"}}]
output: "${[steps.guard.output, steps.y1, steps.y2]}"
"""
    r = Run(spec)
    r.fail("r/x1#1", "broken")
    assert r.wire() == [call("r/handle#1", "a", "broken")]
    r.ok("r/y1#1", "late")  # accepted: no effect, not applied
    assert r.wire() == []
    rejected(r, lambda: r.ok("r/y1#1", "late again"))  # but only once
    r.ok("r/handle#1", "H")
    assert r.wire() == [
        settled(
            "completed",
            [
                row("r/x1#1", "failed"),
                row("r/y1#1", "succeeded", "b"),
                row("r/handle#1", "succeeded"),
            ],
            # y1 was abandoned while it ran (its late output is not recorded); y2 never ran
            output=["H", {"status": "cancelled", "output": None}, None],
        )
    ]


def test_parallel_all_settled_maps_status_and_output_or_error() -> None:
    r = Run(parallel("all_settled"))
    r.fail("r/y1#1", "bad", retryable=True)
    assert r.wire() == []
    r.ok("r/z1#1", "Z")
    r.ok("r/x1#1", "X1")
    assert r.wire() == [call("r/x2#1", "a")]
    r.fail("r/x2#1", "worse")
    expected = {
        "x": {
            "status": "failed",
            "error": {"type": "worse", "message": "worse happened", "retryable": False},
        },
        "y": {
            "status": "failed",
            "error": {"type": "bad", "message": "bad happened", "retryable": True},
        },
        "z": {"status": "succeeded", "output": "Z"},
    }
    assert r.wire() == [call("r/after#1", "a", expected)]
    r.ok("r/after#1")
    assert r.settled is not None
    assert r.settled.status == "completed"
    assert r.settled.output == expected


def test_parallel_race_first_success_wins_and_loser_late_result_is_ignored() -> None:
    r = Run(parallel("race"))
    r.ok("r/z1#1", "Z")
    assert r.wire() == [call("r/after#1", "a", {"z": "Z"})]
    r.ok("r/y1#1", "late")  # the loser's late result: accepted, nothing happens
    assert r.wire() == []
    rejected(r, lambda: r.ok("r/y1#1", "again"))
    r.ok("r/after#1")
    assert r.wire() == [
        settled(
            "completed",
            [
                row("r/x1#1", "uncertain"),
                row("r/y1#1", "succeeded", "b"),
                row("r/z1#1", "succeeded", "c"),
                row("r/after#1", "succeeded"),
            ],
            output={"z": "Z"},
        )
    ]


def test_parallel_race_first_to_finish_wins_even_when_it_fails() -> None:
    r = Run(parallel("race"))
    r.fail("r/y1#1", "bad")
    assert r.wire() == [
        settled(
            "failed",
            [
                row("r/x1#1", "uncertain"),
                row("r/y1#1", "failed", "b"),
                row("r/z1#1", "uncertain", "c"),
            ],
            err=error("bad", "bad happened"),
        )
    ]


def test_parallel_any_first_success_wins_after_failures() -> None:
    r = Run(parallel("any"))
    r.fail("r/y1#1", "bad")
    assert r.wire() == []  # a failure does not decide an `any`
    r.ok("r/z1#1", "Z")
    assert r.wire() == [call("r/after#1", "a", {"z": "Z"})]
    r.ok("r/after#1")
    assert r.settled is not None
    assert r.settled.output == {"z": "Z"}
    assert r.report() == {
        "r/x1#1": "uncertain",
        "r/y1#1": "failed",
        "r/z1#1": "succeeded",
        "r/after#1": "succeeded",
    }


def test_parallel_any_all_branches_failed() -> None:
    r = Run(parallel("any"))
    r.fail("r/y1#1", "bad")
    r.fail("r/z1#1", "worse")
    r.ok("r/x1#1")
    assert r.wire() == [call("r/x2#1", "a")]
    r.fail("r/x2#1", "x")
    assert r.wire() == [
        settled(
            "failed",
            [
                row("r/x1#1", "succeeded"),
                row("r/y1#1", "failed", "b"),
                row("r/z1#1", "failed", "c"),
                row("r/x2#1", "failed"),
            ],
            err=error("all-branches-failed", "every branch failed (x: x; y: bad; z: worse)"),
        )
    ]


def test_parallel_max_concurrency_starts_later_branches_in_declared_order() -> None:
    spec = """
flow: t
tools: {a: {}}
steps:
  - id: p
    parallel:
      max_concurrency: 2
      branches:
        b1: [{id: s1, call_tool: {tool: a}}]
        b2: [{id: s2, call_tool: {tool: a}}]
        b3: [{id: s3, call_tool: {tool: a}}]
        b4: [{id: s4, call_tool: {tool: a}}]
output: "${steps.p.output}"
"""
    r = Run(spec)
    assert r.keys() == ["r/s1#1", "r/s2#1"]
    r.ok("r/s2#1", 2)
    assert r.keys() == ["r/s3#1"]
    r.ok("r/s3#1", 3)
    assert r.keys() == ["r/s4#1"]  # b4 before anything else: declared order
    r.ok("r/s4#1", 4)
    assert r.keys() == []
    r.ok("r/s1#1", 1)
    assert r.settled is not None
    assert r.settled.output == {"b1": 1, "b2": 2, "b3": 3, "b4": 4}
    assert list(r.report()) == ["r/s1#1", "r/s2#1", "r/s3#1", "r/s4#1"]


def test_parallel_max_concurrency_waiting_branches_never_start_after_failure() -> None:
    r = Run(parallel("all", "\n      max_concurrency: 1"))
    assert r.keys() == ["r/x1#1"]
    r.ok("r/x1#1")
    assert r.keys() == ["r/x2#1"]
    r.ok("r/x2#1", "X")
    assert r.keys() == ["r/y1#1"]
    r.fail("r/y1#1", "bad")
    assert r.wire() == [
        settled(
            "failed",
            [row("r/x1#1", "succeeded"), row("r/x2#1", "succeeded"), row("r/y1#1", "failed", "b")],
            err=error("bad", "bad happened"),
        )
    ]


def test_parallel_max_concurrency_branch_that_ends_at_once_keeps_declared_order() -> None:
    spec = """
flow: t
tools: {a: {}}
steps:
  - id: p
    parallel:
      max_concurrency: 2
      branches:
        a: [{id: nothing, switch: [{if: "`false`", steps: [{id: never, call_tool: {tool: a}}]}]}]
        b: [{id: b1, call_tool: {tool: a}}]
        c: [{id: c1, call_tool: {tool: a}}]
        d: [{id: d1, call_tool: {tool: a}}]
"""
    r = Run(spec)
    assert r.wire() == [call("r/b1#1", "a"), call("r/c1#1", "a")]


def test_parallel_all_settled_includes_a_branch_that_ended_at_once() -> None:
    spec = """
flow: t
tools: {a: {}}
steps:
  - id: p
    parallel:
      mode: all_settled
      branches:
        a: [{id: nothing, switch: [{if: "`false`", steps: [{id: never, call_tool: {tool: a}}]}]}]
        b: [{id: b1, call_tool: {tool: a}}]
output: "${steps.p.output}"
"""
    r = Run(spec)
    assert r.wire() == [call("r/b1#1", "a")]
    r.ok("r/b1#1", "B")
    assert r.wire() == [
        settled(
            "completed",
            [row("r/b1#1", "succeeded")],
            output={
                "a": {"status": "succeeded", "output": None},
                "b": {"status": "succeeded", "output": "B"},
            },
        )
    ]


# --- for_each --------------------------------------------------------------------------

FOR_EACH = """
flow: t
tools: {a: {}}
steps:
  - id: each
    for_each:
      items: "${input.items}"
      as: svc
      index: i
      %s
      steps:
        - id: work
          call_tool: {tool: a, input: {svc: "${svc}", i: "${i}"}}
        - id: post
          call_tool: {tool: a, input: "${steps.work.output}"}
output: "${steps.each.output}"
"""


def test_for_each_as_index_and_outputs_in_item_order() -> None:
    r = Run(FOR_EACH % "", {"items": ["x", "y", "z"]})
    assert r.wire() == [
        call("r/each[0]/work#1", "a", {"svc": "x", "i": 0}),
        call("r/each[1]/work#1", "a", {"svc": "y", "i": 1}),
        call("r/each[2]/work#1", "a", {"svc": "z", "i": 2}),
    ]
    # `steps.work` inside an iteration reads that iteration's own result.
    r.ok("r/each[2]/work#1", "W2")
    assert r.wire() == [call("r/each[2]/post#1", "a", "W2")]
    r.ok("r/each[0]/work#1", "W0")
    assert r.wire() == [call("r/each[0]/post#1", "a", "W0")]
    r.ok("r/each[1]/work#1", "W1")
    assert r.wire() == [call("r/each[1]/post#1", "a", "W1")]
    r.ok("r/each[2]/post#1", "P2")
    r.ok("r/each[1]/post#1", "P1")
    assert r.wire() == []
    r.ok("r/each[0]/post#1", "P0")
    assert r.settled is not None
    assert r.settled.status == "completed"
    assert r.settled.output == ["P0", "P1", "P2"]  # item order, not completion order
    assert list(r.report()) == [
        "r/each[0]/work#1",
        "r/each[1]/work#1",
        "r/each[2]/work#1",
        "r/each[2]/post#1",
        "r/each[0]/post#1",
        "r/each[1]/post#1",
    ]


def test_for_each_max_concurrency_starts_next_item_when_one_finishes() -> None:
    r = Run(FOR_EACH % "max_concurrency: 2", {"items": ["x", "y", "z"]})
    assert r.keys() == ["r/each[0]/work#1", "r/each[1]/work#1"]
    r.ok("r/each[1]/work#1", "W1")
    assert r.keys() == ["r/each[1]/post#1"]  # the iteration goes on; no new item yet
    r.ok("r/each[1]/post#1", "P1")
    assert r.wire() == [call("r/each[2]/work#1", "a", {"svc": "z", "i": 2})]
    r.ok("r/each[2]/work#1", "W2")
    r.ok("r/each[2]/post#1", "P2")
    assert r.wire() == []
    r.ok("r/each[0]/work#1", "W0")
    r.ok("r/each[0]/post#1", "P0")
    assert r.settled is not None
    assert r.settled.output == ["P0", "P1", "P2"]


def test_for_each_empty_list_completes_at_once_with_empty_output() -> None:
    r = Run(FOR_EACH % "", {"items": []})
    assert r.wire() == [settled("completed", [], output=[])]
    assert r.settled is not None
    assert r.settled.output == []


@pytest.mark.parametrize(
    ("items", "shown"),
    [("nope", '"nope"'), ({"a": 1}, '{"a":1}'), (None, "null"), (7, "7")],
)
def test_for_each_items_not_a_list_is_an_expression_error(items: Any, shown: str) -> None:
    r = Run(FOR_EACH % "", {"items": items})
    assert r.wire() == [
        settled(
            "failed",
            [],
            err=error("expression-error", f"for_each 'each': items is not a list: {shown}"),
        )
    ]


def test_for_each_item_failure_abandons_other_items_and_fails() -> None:
    r = Run(FOR_EACH % "", {"items": ["x", "y"]})
    r.ok("r/each[0]/work#1", "W0")
    r.fail("r/each[1]/work#1", "down")
    assert r.wire() == [
        settled(
            "failed",
            [
                row("r/each[0]/work#1", "succeeded"),
                row("r/each[1]/work#1", "failed"),
                row("r/each[0]/post#1", "uncertain"),
            ],
            err=error("down", "down happened"),
        )
    ]


# --- repeat ----------------------------------------------------------------------------

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


# --- schedule / cancel_scheduled -------------------------------------------------------

SCHEDULE = """
flow: t
tools: {remind: {}, a: {}}
steps:
  - id: nudge
    schedule: {tool: remind, input: {who: "${input.who}"}, delay_ms: 5000%s}
  - id: work
    call_tool: {tool: a, input: "${steps.nudge.output}"}
output: "done"
"""


def test_schedule_completes_at_once_with_an_id_then_sleeps_then_calls() -> None:
    r = Run(SCHEDULE % "", {"who": "bob"}, now_ms=100)
    # The schedule step's output (its id) is available to the very next step.
    assert r.wire() == [sleep("r/nudge#1/delay", 5100), call("r/work#1", "a", "r/nudge#1")]
    r.fire("r/nudge#1/delay")
    assert r.wire() == [call("r/nudge#1/call", "remind", {"who": "bob"})]
    r.ok("r/nudge#1/call", "sent")
    assert r.wire() == []
    r.ok("r/work#1")
    assert r.wire() == [
        settled(
            "completed",
            [row("r/work#1", "succeeded"), row("r/nudge#1/call", "succeeded", "remind")],
            output="done",
        )
    ]


@pytest.mark.parametrize("how", ["failed", "unknown"])
def test_schedule_failure_of_the_scheduled_call_never_fails_the_flow(how: str) -> None:
    r = Run(SCHEDULE % "", {"who": "bob"})
    r.fire("r/nudge#1/delay")
    if how == "failed":
        r.fail("r/nudge#1/call", "smtp")
    else:
        r.unknown("r/nudge#1/call")
    assert r.wire() == []
    r.ok("r/work#1")
    assert r.wire() == [
        settled(
            "completed",
            [
                row("r/work#1", "succeeded"),
                row("r/nudge#1/call", "failed" if how == "failed" else "uncertain", "remind"),
            ],
            output="done",
        )
    ]


CANCEL_SCHEDULED = """
flow: t
tools: {remind: {}, a: {}}
steps:
  - id: nudge
    schedule: {tool: remind, delay_ms: 5000}
  - id: work
    call_tool: {tool: a}
  - id: stop
    cancel_scheduled: {id: "${steps.nudge.output}"}
  - id: again
    cancel_scheduled: {id: "${steps.nudge.output}"}
  - id: bogus
    cancel_scheduled: {id: "r/nope#1"}
output: "${[steps.stop.output, steps.again.output, steps.bogus.output]}"
"""


def test_cancel_scheduled_true_when_pending_false_when_cancelled_or_unknown() -> None:
    r = Run(CANCEL_SCHEDULED)
    assert r.wire() == [sleep("r/nudge#1/delay", 5000), call("r/work#1", "a")]
    r.ok("r/work#1")
    assert r.wire() == [settled("completed", [row("r/work#1", "succeeded")], [True, False, False])]
    rejected(r, lambda: r.fire("r/nudge#1/delay"))


def test_cancel_scheduled_false_when_already_ran() -> None:
    r = Run(CANCEL_SCHEDULED)
    r.fire("r/nudge#1/delay")
    assert r.wire() == [call("r/nudge#1/call", "remind")]
    r.ok("r/nudge#1/call")
    r.ok("r/work#1")
    assert r.settled is not None
    assert r.settled.output == [False, False, False]


def test_a_call_cancelled_in_the_decision_that_scheduled_it_never_reaches_the_host() -> None:
    spec = """
flow: t
tools: {remind: {}, a: {}}
steps:
  - id: nudge
    schedule: {tool: remind, delay_ms: 100}
  - id: stop
    cancel_scheduled: {id: "${steps.nudge.output}"}
  - id: work
    call_tool: {tool: a, input: "${steps.stop.output}"}
"""
    r = Run(spec)
    # The delay timer was emitted and taken back within one decision.
    assert r.wire() == [call("r/work#1", "a", True)]
    err = rejected(r, lambda: r.fire("r/nudge#1/delay"))
    assert err.reason == "duplicate timer-fired: r/nudge#1/delay is already taken back"
    r.ok("r/work#1")
    assert r.report() == {"r/work#1": "succeeded"}


def test_settled_run_cancels_pending_scheduled_calls() -> None:
    r = Run(SCHEDULE % "", {"who": "bob"})
    r.ok("r/work#1")
    assert r.wire() == [settled("completed", [row("r/work#1", "succeeded")], output="done")]
    err = rejected(r, lambda: r.fire("r/nudge#1/delay"))
    assert err.key == "r/nudge#1/delay"


def test_outlive_run_scheduled_call_is_waited_for_before_settling() -> None:
    r = Run(SCHEDULE % ", outlive_run: true", {"who": "bob"}, now_ms=100)
    r.ok("r/work#1")
    assert r.wire() == []  # the flow is done but the run waits for the scheduled call
    assert r.settled is None
    r.fire("r/nudge#1/delay")
    assert r.wire() == [call("r/nudge#1/call", "remind", {"who": "bob"})]
    r.fail("r/nudge#1/call", "smtp")
    assert r.wire() == [
        settled(
            "completed",
            [row("r/work#1", "succeeded"), row("r/nudge#1/call", "failed", "remind")],
            output="done",
        )
    ]


def test_cancel_does_not_wait_for_an_in_flight_detached_scheduled_call() -> None:
    r = Run(SCHEDULE % "", {"who": "bob"})
    r.fire("r/nudge#1/delay")
    r.cancel("stop")
    assert r.wire() == [
        settled(
            "cancelled",
            [row("r/work#1", "uncertain"), row("r/nudge#1/call", "uncertain", "remind")],
            err=error("cancelled", "stop"),
        )
    ]


def test_completion_does_not_wait_for_an_in_flight_detached_scheduled_call() -> None:
    r = Run(SCHEDULE % "", {"who": "bob"})
    r.fire("r/nudge#1/delay")
    r.ok("r/work#1")
    assert r.wire() == [
        settled(
            "completed",
            [row("r/work#1", "succeeded"), row("r/nudge#1/call", "uncertain", "remind")],
            output="done",
        )
    ]


# --- retry -----------------------------------------------------------------------------

RETRY = """
flow: t
tools: {a: {}}
steps:
  - id: flaky
    call_tool: {tool: a, input: {attempt: "${run.attempt}"}}
    retry: %s
output: "${steps.flaky.output}"
"""


def test_retry_new_keys_and_exponential_backoff_capped() -> None:
    policy = "{max_attempts: 4, initial_interval_ms: 1000, backoff: 3.0, max_interval_ms: 5000}"
    r = Run(RETRY % policy)
    assert r.wire() == [call("r/flaky#1", "a", {"attempt": 1})]
    r.fail("r/flaky#1", "x", retryable=True, at=10)
    assert r.wire() == [sleep("r/flaky#1/backoff", 10 + 1000)]
    r.fire("r/flaky#1/backoff")
    assert r.wire() == [call("r/flaky#2", "a", {"attempt": 2})]
    r.fail("r/flaky#2", "x", retryable=True, at=1100)
    assert r.wire() == [sleep("r/flaky#2/backoff", 1100 + 3000)]
    r.fire("r/flaky#2/backoff")
    assert r.wire() == [call("r/flaky#3", "a", {"attempt": 3})]
    r.fail("r/flaky#3", "x", retryable=True, at=5000)
    assert r.wire() == [sleep("r/flaky#3/backoff", 5000 + 5000)]  # 9000 capped at 5000
    r.fire("r/flaky#3/backoff")
    assert r.wire() == [call("r/flaky#4", "a", {"attempt": 4})]
    r.fail("r/flaky#4", "x", retryable=True)
    assert r.wire() == [
        settled(
            "failed",
            [
                row("r/flaky#1", "failed"),
                row("r/flaky#2", "failed"),
                row("r/flaky#3", "failed"),
                row("r/flaky#4", "failed"),
            ],
            err={
                **error("x", "x happened", retryable=True),
                "attempts": [error("x", "x happened", retryable=True)] * 4,
            },
        )
    ]


def test_retry_succeeds_on_a_later_attempt() -> None:
    r = Run(RETRY % "{max_attempts: 3, initial_interval_ms: 200}")
    r.fail("r/flaky#1", "x", retryable=True, at=0)
    r.fire("r/flaky#1/backoff")
    r.ok("r/flaky#2", "fine")
    assert r.wire() == [
        settled(
            "completed",
            [row("r/flaky#1", "failed"), row("r/flaky#2", "succeeded")],
            output="fine",
        )
    ]


def test_retry_default_retries_only_retryable_errors() -> None:
    r = Run(RETRY % "{max_attempts: 3}")
    r.fail("r/flaky#1", "x", retryable=False)
    assert r.wire() == [
        settled("failed", [row("r/flaky#1", "failed")], err=error("x", "x happened"))
    ]


def test_retry_errors_list_matches_by_type_regardless_of_retryable() -> None:
    r = Run(RETRY % "{max_attempts: 3, errors: [x]}")
    r.fail("r/flaky#1", "x", retryable=False, at=0)
    assert r.wire() == [sleep("r/flaky#1/backoff", 1000)]
    r.fire("r/flaky#1/backoff")
    r.fail("r/flaky#2", "y", retryable=True)  # not listed: retryable does not matter
    assert r.wire() == [
        settled(
            "failed",
            [row("r/flaky#1", "failed"), row("r/flaky#2", "failed")],
            err={
                **error("y", "y happened", retryable=True),
                "attempts": [error("x", "x happened"), error("y", "y happened", retryable=True)],
            },
        )
    ]


def test_retry_errors_star_retries_any_failure() -> None:
    r = Run(RETRY % "{max_attempts: 2, errors: ['*']}")
    r.fail("r/flaky#1", "whatever", retryable=False, at=0)
    assert r.wire() == [sleep("r/flaky#1/backoff", 1000)]


def _jitter_backoff(run_id: str) -> int:
    r = Run(RETRY % "{max_attempts: 3, initial_interval_ms: 1000, jitter: 0.5}", run_id=run_id)
    r.fail(f"{run_id}/flaky#1", "x", retryable=True, at=0)
    [effect] = r.wire()
    assert effect["kind"] == "sleep"
    assert effect["idempotencyKey"] == f"{run_id}/flaky#1/backoff"
    until: int = effect["untilMs"]
    return until


def test_retry_jitter_is_derived_from_the_key() -> None:
    first = _jitter_backoff("r")
    # Same key, same delay: two identical runs agree.
    assert _jitter_backoff("r") == first
    # Within bounds: the jitter takes away at most half of the 1000 ms interval.
    assert 500 <= first <= 1000
    # Derived from the key, not constant: another run id draws another delay.
    other = _jitter_backoff("other")
    assert 500 <= other <= 1000
    assert other != first
    # And it is the documented derivation: sha256 of the backoff key, no clock, no RNG.
    fraction = int.from_bytes(hashlib.sha256(b"r/flaky#1/backoff").digest()[:8], "big") / 2**64
    assert first == int(1000 * (1.0 - 0.5 * fraction))


def test_retry_star_never_reissues_an_uncertain_tool_after_unknown_outcome() -> None:
    spec = """
flow: t
tools: {pay: {}}
steps:
  - id: charge
    call_tool: {tool: pay}
    retry: {max_attempts: 3, errors: ['*']}
"""
    r = Run(spec)
    r.unknown("r/charge#1")
    assert r.wire() == [
        settled(
            "failed",
            [row("r/charge#1", "uncertain", "pay")],
            err=error(
                "outcome-unknown",
                "call-tool r/charge#1 may or may not have happened and is not safe to repeat",
            ),
        )
    ]


# --- timeouts --------------------------------------------------------------------------


def test_timeout_on_a_work_step_fails_with_timeout_and_late_result_is_ignored() -> None:
    spec = """
flow: t
tools: {a: {}, b: {}}
steps:
  - id: guard
    try:
      - id: slow
        call_tool: {tool: a}
        timeout_ms: 1000
    catch:
      - errors: [timeout]
        steps: [{id: handle, call_tool: {tool: b, input: "${error}"}}]
output: "${[steps.handle.output, steps.slow]}"
"""
    r = Run(spec, now_ms=100)
    assert r.wire() == [sleep("r/slow/timeout", 1100), call("r/slow#1", "a")]  # timer first
    r.fire("r/slow/timeout")
    assert r.wire() == [
        call(
            "r/handle#1",
            "b",
            {
                "type": "timeout",
                "message": "step 'slow' timed out after 1000 ms",
                "retryable": False,
            },
        )
    ]
    r.ok("r/slow#1", "late")  # accepted once, ignored
    assert r.wire() == []
    rejected(r, lambda: r.ok("r/slow#1", "late"))
    r.ok("r/handle#1", "H")
    failed_slow = {
        "status": "failed",
        "output": None,
        "error": {
            "type": "timeout",
            "message": "step 'slow' timed out after 1000 ms",
            "retryable": False,
        },
    }
    assert r.wire() == [
        settled(
            "completed",
            [row("r/slow#1", "succeeded"), row("r/handle#1", "succeeded", "b")],
            output=["H", failed_slow],  # the late output never replaced the failure
        )
    ]


def test_timeout_timer_of_a_finished_step_is_accepted_and_ignored() -> None:
    spec = """
flow: t
tools: {a: {}}
steps:
  - id: quick
    call_tool: {tool: a}
    timeout_ms: 1000
  - id: next
    call_tool: {tool: a}
"""
    r = Run(spec)
    r.ok("r/quick#1", at=10)
    assert r.wire() == [call("r/next#1", "a")]
    r.fire("r/quick/timeout")
    assert r.wire() == []
    r.ok("r/next#1")
    assert r.settled is not None
    assert r.settled.status == "completed"


def test_timeout_on_a_parallel_abandons_pending_branches() -> None:
    spec = """
flow: t
tools: {a: {}, b: {}}
steps:
  - id: guard
    try:
      - id: both
        timeout_ms: 1000
        parallel:
          branches:
            x: [{id: x1, call_tool: {tool: a}}]
            y: [{id: y1, call_tool: {tool: b}}, {id: y2, call_tool: {tool: b}}]
    catch:
      - errors: ['*']
        steps: [{id: handle, call_tool: {tool: b, input: "${error.type}"}}]
output: "${steps.handle.output}"
"""
    r = Run(spec)
    assert r.wire() == [sleep("r/both/timeout", 1000), call("r/x1#1", "a"), call("r/y1#1", "b")]
    r.ok("r/y1#1", "Y1")
    assert r.wire() == [call("r/y2#1", "b")]
    r.fire("r/both/timeout")
    assert r.wire() == [call("r/handle#1", "b", "timeout")]
    r.ok("r/x1#1", "late")
    r.fail("r/y2#1", "late")
    assert r.wire() == []
    r.ok("r/handle#1", "H")
    assert r.wire() == [
        settled(
            "completed",
            [
                row("r/x1#1", "succeeded"),
                row("r/y1#1", "succeeded", "b"),
                row("r/y2#1", "failed", "b"),
                row("r/handle#1", "succeeded", "b"),
            ],
            output="H",
        )
    ]


def test_timeout_on_a_try_fails_the_step_with_timeout() -> None:
    spec = """
flow: t
tools: {a: {}}
steps:
  - id: both
    timeout_ms: 1000
    try:
      - {id: x1, call_tool: {tool: a}}
      - {id: x2, call_tool: {tool: a}}
"""
    r = Run(spec)
    assert r.wire() == [sleep("r/both/timeout", 1000), call("r/x1#1", "a")]
    r.ok("r/x1#1")
    assert r.wire() == [call("r/x2#1", "a")]
    r.fire("r/both/timeout")
    assert r.wire() == [
        settled(
            "failed",
            [row("r/x1#1", "succeeded"), row("r/x2#1", "uncertain")],
            err=error("timeout", "step 'both' timed out after 1000 ms"),
        )
    ]


def test_timeout_on_a_try_that_finishes_in_time_is_dropped() -> None:
    spec = """
flow: t
tools: {a: {}}
steps:
  - id: both
    timeout_ms: 1000
    try:
      - {id: x1, call_tool: {tool: a}}
output: "${steps.both.output}"
"""
    r = Run(spec)
    r.ok("r/x1#1", "X", at=999)
    assert r.wire() == [settled("completed", [row("r/x1#1", "succeeded")], output="X")]


# --- try / catch -----------------------------------------------------------------------

TRY = """
flow: t
budget: {steps: %d}
tools: {a: {}, b: {}}
steps:
  - id: guard
    try:
      - id: risky
        call_tool: {tool: a}
      - id: risky2
        call_tool: {tool: a}
    catch:
      - errors: [bad, worse]
        steps: [{id: h1, call_tool: {tool: b, input: "first ${error.type}: ${error.message}"}}]
      - errors: ['*']
        steps: [{id: h2, call_tool: {tool: b, input: "${error}"}}]
  - id: after
    call_tool: {tool: a, input: "${steps.guard}"}
"""


def test_try_catch_by_type_error_visible_in_catch_steps() -> None:
    r = Run(TRY % 100)
    r.fail("r/risky#1", "worse")
    assert r.wire() == [call("r/h1#1", "b", "first worse: worse happened")]
    r.ok("r/h1#1", "H1")
    # The try step succeeds with the catch list's output.
    assert r.wire() == [call("r/after#1", "a", {"status": "succeeded", "output": "H1"})]
    r.ok("r/after#1")
    assert r.report() == {
        "r/risky#1": "failed",
        "r/h1#1": "succeeded",
        "r/after#1": "succeeded",
    }


def test_try_catch_star_catches_other_types() -> None:
    r = Run(TRY % 100)
    r.ok("r/risky#1")
    r.fail("r/risky2#1", "odd", retryable=True)
    assert r.wire() == [
        call("r/h2#1", "b", {"type": "odd", "message": "odd happened", "retryable": True})
    ]


def test_try_catch_uncaught_type_propagates() -> None:
    spec = """
flow: t
tools: {a: {}, b: {}}
steps:
  - id: guard
    try:
      - id: risky
        call_tool: {tool: a}
    catch:
      - errors: [bad]
        steps: [{id: h1, call_tool: {tool: b}}]
  - id: after
    call_tool: {tool: a}
"""
    r = Run(spec)
    r.fail("r/risky#1", "other")
    assert r.wire() == [
        settled("failed", [row("r/risky#1", "failed")], err=error("other", "other happened"))
    ]


def test_try_catch_failure_inside_the_handler_propagates() -> None:
    spec = """
flow: t
tools: {a: {}, b: {}}
steps:
  - id: guard
    try:
      - id: risky
        call_tool: {tool: a}
    catch:
      - errors: [bad]
        steps: [{id: h1, call_tool: {tool: b}}]
"""
    r = Run(spec)
    r.fail("r/risky#1", "bad")
    assert r.keys() == ["r/h1#1"]
    r.fail("r/h1#1", "bad")  # not caught again by the same try
    assert r.wire() == [
        settled(
            "failed",
            [row("r/risky#1", "failed"), row("r/h1#1", "failed", "b")],
            err=error("bad", "bad happened"),
        )
    ]


def test_try_error_visible_in_nested_steps_of_the_catch() -> None:
    spec = """
flow: t
tools: {a: {}, b: {}}
steps:
  - id: each
    for_each:
      items: [1, 2]
      steps:
        - id: guard
          try:
            - {id: risky, call_tool: {tool: a, input: "${item}"}}
          catch:
            - steps:
                - id: sw
                  switch:
                    - if: "error.type == 'bad'"
                      steps: [{id: h, call_tool: {tool: b, input: "${error.type} ${item}"}}]
output: "${steps.each.output}"
"""
    r = Run(spec)
    r.fail("r/each[1]/risky#1", "bad")
    assert r.wire() == [call("r/each[1]/h#1", "b", "bad 2")]
    r.fail("r/each[0]/risky#1", "meh")  # caught; the switch inside matches nothing
    assert r.wire() == []
    r.ok("r/each[1]/h#1", "H")
    assert r.settled is not None
    assert r.settled.output == [None, "H"]


def test_try_budget_exhaustion_is_not_catchable() -> None:
    r = Run(TRY % 100)
    r.ok("r/risky#1", usage=Usage(steps=200))
    assert r.wire() == [
        settled(
            "budget-exhausted",
            [row("r/risky#1", "succeeded")],
            err=error("budget-exhausted", "step budget exhausted"),
            exhausted="steps",
        )
    ]


def test_try_budget_exhaustion_on_issue_is_not_catchable() -> None:
    r = Run(TRY % 1)
    r.ok("r/risky#1")  # issuing risky2 would be the second step of a one-step budget
    assert r.wire() == [
        settled(
            "budget-exhausted",
            [row("r/risky#1", "succeeded")],
            err=error("budget-exhausted", "step budget exhausted"),
            exhausted="steps",
        )
    ]


def test_try_cancellation_is_not_catchable() -> None:
    r = Run(TRY % 100)
    r.cancel("user")
    assert r.wire() == [
        settled("cancelled", [row("r/risky#1", "uncertain")], err=error("cancelled", "user"))
    ]


# --- compensate ------------------------------------------------------------------------

SAGA = """
flow: t
tools: {book: {}, undo: {}, pay: {}}
steps:
  - id: hotel
    call_tool: {tool: book, input: hotel}
    compensate: [{id: undo_hotel, call_tool: {tool: undo, input: "${steps.hotel.output}"}}]
  - id: flight
    call_tool: {tool: book, input: flight}
    compensate: [{id: undo_flight, call_tool: {tool: undo, input: "${steps.flight.output}"}}]
  - id: car
    call_tool: {tool: book, input: car}
  - id: charge
    call_tool: {tool: pay}
output: "ok"
"""


def test_compensate_on_failure_in_reverse_order_before_settling() -> None:
    r = Run(SAGA)
    r.ok("r/hotel#1", "H")
    r.ok("r/flight#1", "F")
    r.ok("r/car#1", "C")
    r.fail("r/charge#1", "declined")
    assert r.wire() == [call("r/undo_flight#1", "undo", "F")]
    r.ok("r/undo_flight#1")
    assert r.wire() == [call("r/undo_hotel#1", "undo", "H")]
    r.ok("r/undo_hotel#1")
    assert r.wire() == [
        settled(
            "failed",
            [
                row("r/hotel#1", "succeeded", "book"),
                row("r/flight#1", "succeeded", "book"),
                row("r/car#1", "succeeded", "book"),
                row("r/charge#1", "failed", "pay"),
                row("r/undo_flight#1", "succeeded", "undo"),
                row("r/undo_hotel#1", "succeeded", "undo"),
            ],
            err=error("declined", "declined happened"),
        )
    ]


def test_compensate_on_cancel_and_pending_work_abandoned() -> None:
    r = Run(SAGA)
    r.ok("r/hotel#1", "H")
    r.ok("r/flight#1", "F")
    r.cancel("stop")
    assert r.wire() == [call("r/undo_flight#1", "undo", "F")]
    r.ok("r/undo_flight#1")
    assert r.wire() == [call("r/undo_hotel#1", "undo", "H")]
    r.ok("r/undo_hotel#1")
    assert r.wire() == [
        settled(
            "cancelled",
            [
                row("r/hotel#1", "succeeded", "book"),
                row("r/flight#1", "succeeded", "book"),
                row("r/car#1", "uncertain", "book"),
                row("r/undo_flight#1", "succeeded", "undo"),
                row("r/undo_hotel#1", "succeeded", "undo"),
            ],
            err=error("cancelled", "stop"),
        )
    ]


def test_compensate_not_run_on_success() -> None:
    r = Run(SAGA)
    for key in ("r/hotel#1", "r/flight#1", "r/car#1"):
        r.ok(key)
    r.ok("r/charge#1")
    assert r.wire() == [
        settled(
            "completed",
            [
                row("r/hotel#1", "succeeded", "book"),
                row("r/flight#1", "succeeded", "book"),
                row("r/car#1", "succeeded", "book"),
                row("r/charge#1", "succeeded", "pay"),
            ],
            output="ok",
        )
    ]


def test_compensate_follows_completion_order_not_declaration_order() -> None:
    spec = """
flow: t
tools: {book: {}, undo: {}, pay: {}}
steps:
  - id: p
    parallel:
      branches:
        a: [{id: A, call_tool: {tool: book}, compensate: [{id: undo_a, call_tool: {tool: undo}}]}]
        b: [{id: B, call_tool: {tool: book}, compensate: [{id: undo_b, call_tool: {tool: undo}}]}]
  - id: charge
    call_tool: {tool: pay}
"""
    r = Run(spec)
    r.ok("r/B#1")
    r.ok("r/A#1")  # A completed last: it is compensated first
    r.fail("r/charge#1", "declined")
    assert r.wire() == [call("r/undo_a#1", "undo")]
    r.fail("r/undo_a#1", "stuck")  # a failed compensation does not stop the others
    assert r.wire() == [call("r/undo_b#1", "undo")]
    r.ok("r/undo_b#1")
    assert r.wire() == [
        settled(
            "failed",
            [
                row("r/A#1", "succeeded", "book"),
                row("r/B#1", "succeeded", "book"),
                row("r/charge#1", "failed", "pay"),
                row("r/undo_a#1", "failed", "undo"),
                row("r/undo_b#1", "succeeded", "undo"),
            ],
            err=error("declined", "declined happened"),  # the original error
        )
    ]


# --- cancel ----------------------------------------------------------------------------


def test_cancel_abandons_every_kind_of_pending_wait_and_settles() -> None:
    spec = """
flow: t
tools: {a: {}}
steps:
  - id: p
    parallel:
      branches:
        x: [{id: x1, call_tool: {tool: a}}]
        y: [{id: q, ask_human: {question: "ok?", options: [yes, no], timeout_ms: 100}}]
        z: [{id: w, await_signal: {signal: go}}]
        s: [{id: nap, sleep: {for_ms: 50}}]
"""
    r = Run(spec)
    assert r.wire() == [
        call("r/x1#1", "a"),
        {
            "kind": "ask-human",
            "question": "ok?",
            "options": ["yes", "no"],
            "idempotencyKey": "r/q#1",
        },
        sleep("r/q#1/timeout", 100),
        {"kind": "await-signal", "signal": "go", "idempotencyKey": "r/w#1"},
        sleep("r/nap#1", 50),
    ]
    r.cancel("enough")
    # Only work effects are reported; pending work is uncertain.
    assert r.wire() == [
        settled("cancelled", [row("r/x1#1", "uncertain")], err=error("cancelled", "enough"))
    ]
    rejected(r, lambda: r.ok("r/x1#1"))
    rejected(r, lambda: r.answer("r/q#1", "yes"))
    rejected(r, lambda: r.signal("go"))
    rejected(r, lambda: r.fire("r/nap#1"))
    rejected(r, lambda: r.cancel("again"))


# --- unknown outcome -------------------------------------------------------------------

UNKNOWN = """
flow: t
tools:
  ro: {class: readonly}
  idem: {class: idempotent}
  unc: {class: uncertain}
  plain: {}
  fix: {}
steps:
  - id: guard
    try:
      - id: s
        call_tool: {tool: %s, input: {x: 1}}
    catch:
      - errors: [outcome-unknown]
        steps: [{id: reconcile, call_tool: {tool: fix, input: "${error.type}"}}]
output: "${steps.guard.output}"
"""


@pytest.mark.parametrize("tool", ["ro", "idem"])
def test_unknown_outcome_reissues_safe_tools_with_the_same_key(tool: str) -> None:
    r = Run(UNKNOWN % tool)
    assert r.wire() == [call("r/s#1", tool, {"x": 1})]
    r.unknown("r/s#1")
    assert r.wire() == [call("r/s#1", tool, {"x": 1})]  # same key: the tool deduplicates
    r.ok("r/s#1", "fine")
    assert r.wire() == [settled("completed", [row("r/s#1", "succeeded", tool)], output="fine")]


@pytest.mark.parametrize("tool", ["ro", "idem"])
def test_unknown_outcome_reissue_is_bounded_then_outcome_unknown(tool: str) -> None:
    r = Run(UNKNOWN % tool)
    r.unknown("r/s#1")
    assert r.keys() == ["r/s#1"]
    r.unknown("r/s#1")
    assert r.keys() == ["r/s#1"]  # three issues in all (DEFAULT_UNKNOWN_REISSUES)
    r.unknown("r/s#1")
    assert r.wire() == [call("r/reconcile#1", "fix", "outcome-unknown")]
    r.ok("r/reconcile#1", "R")
    assert r.wire() == [
        settled(
            "completed",
            [row("r/s#1", "uncertain", tool), row("r/reconcile#1", "succeeded", "fix")],
            output="R",
        )
    ]


@pytest.mark.parametrize("tool", ["unc", "plain"])
def test_unknown_outcome_uncertain_tool_fails_and_is_catchable(tool: str) -> None:
    r = Run(UNKNOWN % tool)
    r.unknown("r/s#1")
    assert r.wire() == [call("r/reconcile#1", "fix", "outcome-unknown")]
    r.ok("r/reconcile#1", "R")
    assert r.wire() == [
        settled(
            "completed",
            [row("r/s#1", "uncertain", tool), row("r/reconcile#1", "succeeded", "fix")],
            output="R",
        )
    ]


def test_unknown_outcome_uncaught_fails_the_run() -> None:
    spec = """
flow: t
tools: {pay: {}}
steps:
  - id: charge
    call_tool: {tool: pay}
"""
    r = Run(spec)
    r.unknown("r/charge#1")
    assert r.wire() == [
        settled(
            "failed",
            [row("r/charge#1", "uncertain", "pay")],
            err=error(
                "outcome-unknown",
                "call-tool r/charge#1 may or may not have happened and is not safe to repeat",
            ),
        )
    ]


# --- teams -----------------------------------------------------------------------------

TEAM = """
flow: t
budget: {steps: 20}
teams:
  rev:
    mode: %s
    members:
      - {member: sec, agent: sec-bot, instructions: "be strict"}
      - {member: style, agent: style-bot}
      - {member: final, agent: boss}
steps:
  - id: review
    run_team: {team: rev, prompt: "Review ${input.pr}; security said ${members.sec || 'nothing'}"}
  - id: other
    run_team: {team: ghost, prompt: "hi ${input.pr}"}
output: "${steps.review.output}"
"""


def agent(
    key: str, agent_id: str, prompt: str, member: str, steps_left: int, instructions: str = ""
) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "run-agent", "agentId": agent_id, "prompt": prompt}
    if instructions:
        out["instructions"] = instructions
    out.update({"member": member, "idempotencyKey": key, "budgetRemaining": {"steps": steps_left}})
    return out


def test_team_sequential_one_member_at_a_time_with_earlier_outputs() -> None:
    r = Run(TEAM % "sequential", {"pr": 7})
    assert r.wire() == [
        agent(
            "r/review/sec#1", "sec-bot", "Review 7; security said nothing", "sec", 19, "be strict"
        )
    ]
    r.ok("r/review/sec#1", "LGTM")
    assert r.wire() == [
        agent("r/review/style#1", "style-bot", "Review 7; security said LGTM", "style", 18)
    ]
    r.ok("r/review/style#1", "tidy")
    assert r.wire() == [
        agent("r/review/final#1", "boss", "Review 7; security said LGTM", "final", 17)
    ]
    r.ok("r/review/final#1", "ship")
    # An undeclared team goes to the host as one run-team effect.
    assert r.wire() == [
        {"kind": "run-team", "teamId": "ghost", "prompt": "hi 7", "idempotencyKey": "r/other#1"}
    ]
    r.ok("r/other#1")
    assert r.wire() == [
        settled(
            "completed",
            [
                row("r/review/sec#1", "succeeded", "sec-bot", "run-agent"),
                row("r/review/style#1", "succeeded", "style-bot", "run-agent"),
                row("r/review/final#1", "succeeded", "boss", "run-agent"),
                row("r/other#1", "succeeded", "ghost", "run-team"),
            ],
            output={"sec": "LGTM", "style": "tidy", "final": "ship"},
        )
    ]


def test_team_parallel_all_members_at_once_output_by_member() -> None:
    r = Run(TEAM % "parallel", {"pr": 7})
    prompt = "Review 7; security said nothing"
    assert r.wire() == [
        agent("r/review/sec#1", "sec-bot", prompt, "sec", 19, "be strict"),
        agent("r/review/style#1", "style-bot", prompt, "style", 18),
        agent("r/review/final#1", "boss", prompt, "final", 17),
    ]
    r.ok("r/review/final#1", "F")
    r.ok("r/review/sec#1", "S")
    assert r.wire() == []
    r.ok("r/review/style#1", "T")
    assert r.keys() == ["r/other#1"]
    r.ok("r/other#1")
    assert r.settled is not None
    assert r.settled.output == {"sec": "S", "style": "T", "final": "F"}
    assert list(r.settled.output) == ["sec", "style", "final"]  # declared member order


def test_team_parallel_member_failure_fails_the_step_and_abandons_others() -> None:
    r = Run(TEAM % "parallel", {"pr": 7})
    r.fail("r/review/style#1", "refused")
    assert r.wire() == [
        settled(
            "failed",
            [
                row("r/review/sec#1", "uncertain", "sec-bot", "run-agent"),
                row("r/review/style#1", "failed", "style-bot", "run-agent"),
                row("r/review/final#1", "uncertain", "boss", "run-agent"),
            ],
            err=error("refused", "refused happened"),
        )
    ]


# --- limits.max_concurrency ------------------------------------------------------------

LIMITED = """
flow: t
limits: {max_concurrency: 2}
tools: {a: {}}
steps:
  - id: p
    parallel:
      branches:
        x: [{id: x1, call_tool: {tool: a}}%s]
        y: [{id: y1, call_tool: {tool: a}}]
        z: [{id: z1, call_tool: {tool: a}}]
        w: [{id: w1, call_tool: {tool: a}}]
output: "${steps.p.output}"
"""


def test_limits_max_concurrency_holds_work_and_releases_it_in_order() -> None:
    r = Run(LIMITED % "")
    assert r.keys() == ["r/x1#1", "r/y1#1"]
    r.ok("r/y1#1", "Y")
    assert r.keys() == ["r/z1#1"]
    r.ok("r/x1#1", "X")
    assert r.keys() == ["r/w1#1"]
    r.ok("r/z1#1", "Z")
    assert r.keys() == []
    r.ok("r/w1#1", "W")
    assert r.wire() == [
        settled(
            "completed",
            [
                row("r/x1#1", "succeeded"),
                row("r/y1#1", "succeeded"),
                row("r/z1#1", "succeeded"),
                row("r/w1#1", "succeeded"),
            ],
            output={"x": "X", "y": "Y", "z": "Z", "w": "W"},
        )
    ]


def test_limits_max_concurrency_new_work_does_not_jump_held_work() -> None:
    r = Run(LIMITED % ", {id: x2, call_tool: {tool: a}}")
    assert r.keys() == ["r/x1#1", "r/y1#1"]
    r.ok("r/y1#1", "Y")
    assert r.keys() == ["r/z1#1"]
    r.ok("r/x1#1")
    assert r.keys() == ["r/w1#1"]  # held since the start: it goes before x2
    r.ok("r/z1#1", "Z")
    assert r.keys() == ["r/x2#1"]


def test_limits_max_concurrency_held_work_is_not_started_on_failure() -> None:
    r = Run(LIMITED % "")
    r.fail("r/x1#1", "down")
    assert r.wire() == [
        settled(
            "failed",
            [
                row("r/x1#1", "failed"),
                row("r/y1#1", "uncertain"),
                row("r/z1#1", "not-started"),
                row("r/w1#1", "not-started"),
            ],
            err=error("down", "down happened"),
        )
    ]


def test_limits_max_concurrency_counts_work_across_separate_branches_and_loops() -> None:
    spec = """
flow: t
limits: {max_concurrency: 1}
tools: {a: {}}
steps:
  - id: p
    parallel:
      branches:
        one:
          - id: each
            for_each: {items: [1, 2], steps: [{id: w, call_tool: {tool: a, input: "${item}"}}]}
        two: [{id: solo, call_tool: {tool: a}}]
"""
    r = Run(spec)
    assert r.wire() == [call("r/each[0]/w#1", "a", 1)]
    r.ok("r/each[0]/w#1")
    assert r.wire() == [call("r/each[1]/w#1", "a", 2)]
    r.ok("r/each[1]/w#1")
    assert r.wire() == [call("r/solo#1", "a")]
    r.ok("r/solo#1")
    assert r.settled is not None
    assert r.settled.status == "completed"


# --- the settled report ----------------------------------------------------------------


def test_settled_report_lists_every_work_effect_in_invocation_order() -> None:
    spec = """
flow: t
limits: {max_concurrency: 2}
tools: {a: {}, b: {}}
steps:
  - id: first
    call_tool: {tool: a}
  - id: guard
    try: [{id: oops, call_tool: {tool: b}}]
    catch: [{steps: [{id: fine, run_agent: {agent: helper, prompt: "fix ${error.type}"}}]}]
  - id: p
    parallel:
      branches:
        x: [{id: px, call_tool: {tool: a}}]
        y: [{id: py, call_tool: {tool: b}}]
        z: [{id: pz, call_tool: {tool: a}}]
"""
    r = Run(spec)
    r.ok("r/first#1")
    r.fail("r/oops#1", "nope")
    assert r.wire() == [
        {
            "kind": "run-agent",
            "agentId": "helper",
            "prompt": "fix nope",
            "idempotencyKey": "r/fine#1",
            "budgetRemaining": {"steps": 997},
        }
    ]
    r.ok("r/fine#1")
    assert r.keys() == ["r/px#1", "r/py#1"]  # pz is held by the concurrency limit
    r.cancel("done")
    assert r.wire() == [
        settled(
            "cancelled",
            [
                row("r/first#1", "succeeded"),
                row("r/oops#1", "failed", "b"),
                row("r/fine#1", "succeeded", "helper", "run-agent"),
                row("r/px#1", "uncertain"),
                row("r/py#1", "uncertain", "b"),
                row("r/pz#1", "not-started"),
            ],
            err=error("cancelled", "done"),
        )
    ]


# --- combinations ----------------------------------------------------------------------


def test_combination_timeout_inside_parallel_inside_retry() -> None:
    spec = """
flow: t
tools: {a: {}, b: {}}
steps:
  - id: outer
    retry: {max_attempts: 2, initial_interval_ms: 100, errors: [timeout]}
    parallel:
      branches:
        fast: [{id: f, call_tool: {tool: a}}]
        slow: [{id: s, call_tool: {tool: b}, timeout_ms: 1000}]
output: "${steps.outer.output}"
"""
    r = Run(spec)
    assert r.wire() == [call("r/f#1", "a"), sleep("r/s/timeout", 1000), call("r/s#1", "b")]
    r.ok("r/f#1", "F")
    assert r.wire() == []
    r.fire("r/s/timeout")
    assert r.wire() == [sleep("r/outer#1/backoff", 1100)]
    r.ok("r/s#1", "late")  # the timed-out attempt's result: accepted, ignored
    assert r.wire() == []
    r.fire("r/outer#1/backoff")
    # The second attempt's children get keys of their own.
    assert r.wire() == [
        call("r/outer#2/f#1", "a"),
        sleep("r/outer#2/s/timeout", 2100),
        call("r/outer#2/s#1", "b"),
    ]
    r.ok("r/outer#2/s#1", "S2", at=1500)
    r.ok("r/outer#2/f#1", "F2")
    assert r.wire() == [
        settled(
            "completed",
            [
                row("r/f#1", "succeeded"),
                row("r/s#1", "succeeded", "b"),
                row("r/outer#2/f#1", "succeeded"),
                row("r/outer#2/s#1", "succeeded", "b"),
            ],
            output={"fast": "F2", "slow": "S2"},
        )
    ]


def test_combination_race_whose_loser_succeeds_late() -> None:
    spec = """
flow: t
tools: {a: {}, b: {}}
steps:
  - id: r1
    parallel:
      mode: race
      branches:
        quick: [{id: q, call_tool: {tool: a}}]
        slow: [{id: s, call_tool: {tool: b}}]
  - id: next
    call_tool: {tool: a, input: "${steps.r1.output}"}
output: "${[steps.r1.output, steps.s]}"
"""
    r = Run(spec)
    r.ok("r/q#1", "Q")
    assert r.wire() == [call("r/next#1", "a", {"quick": "Q"})]
    r.ok("r/s#1", "S")
    assert r.wire() == []
    err = rejected(r, lambda: r.ok("r/s#1", "S"))
    assert err.key == "r/s#1"
    r.ok("r/next#1")
    assert r.wire() == [
        settled(
            "completed",
            [
                row("r/q#1", "succeeded"),
                row("r/s#1", "succeeded", "b"),
                row("r/next#1", "succeeded"),
            ],
            # the loser was abandoned while it ran; its late output is not recorded
            output=[{"quick": "Q"}, {"status": "cancelled", "output": None}],
        )
    ]


def test_combination_compensation_after_failure_inside_for_each() -> None:
    spec = """
flow: t
tools: {a: {}, undo: {}}
steps:
  - id: each
    for_each:
      items: "${input}"
      steps:
        - id: book
          call_tool: {tool: a, input: "${item}"}
          compensate:
            - id: unbook
              call_tool:
                tool: undo
                input: {item: "${item}", idx: "${index}", out: "${steps.book.output}"}
"""
    r = Run(spec, ["a", "b", "c"])
    assert r.keys() == ["r/each[0]/book#1", "r/each[1]/book#1", "r/each[2]/book#1"]
    r.ok("r/each[1]/book#1", "B")
    r.ok("r/each[0]/book#1", "A")
    r.fail("r/each[2]/book#1", "full")
    # Reverse completion order: [0] completed last, so it is undone first; each
    # compensation sees its own iteration's variables and results.
    assert r.wire() == [call("r/each[0]/unbook#1", "undo", {"item": "a", "idx": 0, "out": "A"})]
    r.ok("r/each[0]/unbook#1")
    assert r.wire() == [call("r/each[1]/unbook#1", "undo", {"item": "b", "idx": 1, "out": "B"})]
    r.ok("r/each[1]/unbook#1")
    assert r.wire() == [
        settled(
            "failed",
            [
                row("r/each[0]/book#1", "succeeded"),
                row("r/each[1]/book#1", "succeeded"),
                row("r/each[2]/book#1", "failed"),
                row("r/each[0]/unbook#1", "succeeded", "undo"),
                row("r/each[1]/unbook#1", "succeeded", "undo"),
            ],
            err=error("full", "full happened"),
        )
    ]


def test_combination_cancel_during_backoff() -> None:
    spec = """
flow: t
tools: {a: {}, undo: {}}
steps:
  - id: setup
    call_tool: {tool: a}
    compensate: [{id: teardown, call_tool: {tool: undo}}]
  - id: flaky
    call_tool: {tool: a}
    retry: {max_attempts: 3, initial_interval_ms: 1000}
"""
    r = Run(spec)
    r.ok("r/setup#1", at=0)
    r.fail("r/flaky#1", "x", retryable=True, at=10)
    assert r.wire() == [sleep("r/flaky#1/backoff", 1010)]
    r.cancel("bye", at=20)
    assert r.wire() == [call("r/teardown#1", "undo")]
    r.fire("r/flaky#1/backoff")  # the abandoned backoff timer: accepted, no new attempt
    assert r.wire() == []
    r.ok("r/teardown#1")
    assert r.wire() == [
        settled(
            "cancelled",
            [
                row("r/setup#1", "succeeded"),
                row("r/flaky#1", "failed"),
                row("r/teardown#1", "succeeded", "undo"),
            ],
            err=error("cancelled", "bye"),
        )
    ]
    rejected(r, lambda: r.fire("r/flaky#1/backoff"))


def test_combination_cancel_during_backoff_settles_at_once_without_compensations() -> None:
    r = Run(RETRY % "{max_attempts: 3, initial_interval_ms: 1000}")
    r.fail("r/flaky#1", "x", retryable=True, at=0)
    assert r.keys() == ["r/flaky#1/backoff"]
    r.cancel("bye")
    assert r.wire() == [
        settled("cancelled", [row("r/flaky#1", "failed")], err=error("cancelled", "bye"))
    ]
    rejected(r, lambda: r.fire("r/flaky#1/backoff"))


def test_combination_budget_exhausted_in_the_middle_of_a_parallel() -> None:
    spec = """
flow: t
budget: {steps: 4}
tools: {a: {}}
steps:
  - id: p
    parallel:
      branches:
        x:
          - {id: x1, call_tool: {tool: a}}
          - {id: x2, call_tool: {tool: a}}
          - {id: x3, call_tool: {tool: a}}
        y: [{id: y1, call_tool: {tool: a}}, {id: y2, call_tool: {tool: a}}]
"""
    r = Run(spec)
    assert r.keys() == ["r/x1#1", "r/y1#1"]
    r.ok("r/x1#1")
    assert r.keys() == ["r/x2#1"]
    r.ok("r/y1#1")
    assert r.keys() == ["r/y2#1"]  # the fourth and last step of the budget
    r.ok("r/x2#1")  # x3 would be the fifth
    assert r.wire() == [
        settled(
            "budget-exhausted",
            [
                row("r/x1#1", "succeeded"),
                row("r/y1#1", "succeeded"),
                row("r/x2#1", "succeeded"),
                row("r/y2#1", "uncertain"),
            ],
            err=error("budget-exhausted", "step budget exhausted"),
            exhausted="steps",
        )
    ]
    assert r.settled is not None
    assert r.settled.exhausted == "steps"
    rejected(r, lambda: r.ok("r/y2#1"))


def test_combination_budget_exhausted_decision_holds_only_settled() -> None:
    spec = """
flow: t
budget: {steps: 4}
tools: {a: {}}
steps:
  - id: first
    call_tool: {tool: a}
  - id: p
    parallel:
      branches:
        x: [{id: x1, call_tool: {tool: a}, timeout_ms: 500}]
        y: [{id: y1, call_tool: {tool: a}}]
        z: [{id: z1, call_tool: {tool: a}}]
        w: [{id: w1, call_tool: {tool: a}}]
"""
    r = Run(spec)
    assert r.keys() == ["r/first#1"]
    r.ok("r/first#1")
    # x1, y1 and z1 fit the budget but w1 does not: the decision holds only
    # `settled`, the timer and calls emitted before it never reach the host.
    assert r.wire() == [
        settled(
            "budget-exhausted",
            [
                row("r/first#1", "succeeded"),
                row("r/x1#1", "not-started"),
                row("r/y1#1", "not-started"),
                row("r/z1#1", "not-started"),
            ],
            err=error("budget-exhausted", "step budget exhausted"),
            exhausted="steps",
        )
    ]
