"""``for_each``: items in order, ``max_concurrency``, empty and bad lists, a failing item.

Each test drives one run by hand with ``tests.harness.Run`` and checks the
exact wire effects of each decision (or their idempotency keys) and the final
``settled`` status, output, error and report; ``helpers`` holds their wire forms.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.harness import Run

from .helpers import call, error, row, settled

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
