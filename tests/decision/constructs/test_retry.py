"""``retry``: new keys per attempt, backoff and jitter, which errors are retried.

Each test drives one run by hand with ``tests.harness.Run`` and checks the
exact wire effects of each decision (or their idempotency keys) and the final
``settled`` status, output, error and report; ``helpers`` holds their wire forms.
"""

from __future__ import annotations

import hashlib

from tests.harness import Run

from .helpers import call, error, row, settled, sleep

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
