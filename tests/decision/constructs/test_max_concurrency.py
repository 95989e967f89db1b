"""``limits.max_concurrency``: work held and released in order across the whole run.

Each test drives one run by hand with ``tests.harness.Run`` and checks the
exact wire effects of each decision (or their idempotency keys) and the final
``settled`` status, output, error and report; ``helpers`` holds their wire forms.
"""

from __future__ import annotations

from tests.harness import Run

from .helpers import call, error, row, settled

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
