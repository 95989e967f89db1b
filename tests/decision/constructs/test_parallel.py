"""``parallel`` in each mode (all, all_settled, race, any) and its ``max_concurrency``.

Each test drives one run by hand with ``tests.harness.Run`` and checks the
exact wire effects of each decision (or their idempotency keys) and the final
``settled`` status, output, error and report; ``helpers`` holds their wire forms.
"""

from __future__ import annotations

from tests.harness import Run

from .helpers import call, error, rejected, row, settled


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
