"""``run_team``: sequential and parallel members, and a failing member.

Each test drives one run by hand with ``tests.harness.Run`` and checks the
exact wire effects of each decision (or their idempotency keys) and the final
``settled`` status, output, error and report; ``helpers`` holds their wire forms.
"""

from __future__ import annotations

from typing import Any

from tests.harness import Run

from .helpers import error, row, settled

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
        {
            "kind": "run-team",
            "teamId": "ghost",
            "prompt": "hi 7",
            "idempotencyKey": "r/other#1",
            "budgetRemaining": {"steps": 16},
        }
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
    # Members at once share the steps left: a third of what remains each, never
    # more than what the others have not taken (17 left, 12 held: 5).
    assert r.wire() == [
        agent("r/review/sec#1", "sec-bot", prompt, "sec", 6, "be strict"),
        agent("r/review/style#1", "style-bot", prompt, "style", 6),
        agent("r/review/final#1", "boss", prompt, "final", 5),
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
