"""The step results store: recent map plus frozen dicts, and loop scopes that end.

Results live in a small persistent map of recent ones in front of a stack of
frozen dicts merged like a binary counter (``flowcore.decision.results``). A finished
for_each iteration or repeat fire deletes its results and variables unless a
recorded compensation will still run in it.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import flowcore
from flowcore import persist
from flowcore.decision.results import GONE, ResultStore
from tests.harness import Run

# --- the store alone, against a dict -----------------------------------------------------

_NAMES = st.sampled_from([f"s{i}" for i in range(40)])
_OPS = st.lists(
    st.tuples(_NAMES, st.one_of(st.none(), st.integers(0, 9).map(lambda v: {"output": v}))),
    max_size=400,
)


@given(ops=_OPS, rewrite=st.booleans())
def test_store_agrees_with_a_dict(ops: list[tuple[str, Any]], rewrite: bool) -> None:
    """Writes (a record) and deletions (None) in any order read back like a dict.

    Old versions stay readable as they were: each is checked again at the end.
    A name written twice must be put with ``rewrite`` (the interpreter knows
    when); with it set, deletions look past the recent map.
    """
    model: dict[str, Any] = {}
    store = ResultStore()
    versions: list[tuple[ResultStore, dict[str, Any]]] = []
    for name, record in ops:
        if record is None:
            model.pop(name, None)
            store = store.delete(name)
        else:
            store = store.put(name, record, rewrite=rewrite or name in model)
            model[name] = record
        versions.append((store, dict(model)))
        assert store.live() == model
    for version, expected in versions:
        assert version.live() == expected
        for i in range(40):
            assert version.get(f"s{i}") == expected.get(f"s{i}")
    # Merges keep O(log n) dicts, and the oldest never holds deletion marks.
    assert len(store.segments) <= max(1, len(ops)).bit_length() + 1
    if store.segments:
        assert GONE not in store.segments[-1].values()
    # A store equals any other holding the same results, whatever its layout.
    assert ResultStore.of(model) == store


def test_take_reads_and_deletes_many_results_at_once() -> None:
    store = ResultStore()
    for i in range(200):
        store = store.put(f"n{i}", {"output": i})
    for few in ([f"n{i}" for i in range(10)], [f"n{i}" for i in range(150)]):  # both paths
        records, rest = store.take(few)
        assert records == [{"output": int(n[1:])} for n in few]
        assert set(rest.live()) == {f"n{i}" for i in range(200)} - set(few)
        assert len(store.live()) == 200  # the old store is unchanged
    with pytest.raises(KeyError):
        store.take(["missing"])


# --- loop scopes ---------------------------------------------------------------------------

FOR_EACH = """
flow: t
tools: {a: {}}
steps:
  - id: each
    for_each:
      items: "${input.items}"
      max_concurrency: 3
      steps:
        - id: work
          call_tool: {tool: a, input: "${item}"}
        - id: check
          switch:
            - if: "${steps.work.output == 'odd'}"
              steps: [{id: inner, call_tool: {tool: a, input: "${steps.work.output}"}}]
        - id: post
          call_tool: {tool: a, input: "${steps.work.output}"}
  - id: after
    call_tool: {tool: a, input: {seen: "${keys(steps)}", n: "${length(steps.each.output)}"}}
output: "${steps.each.output}"
"""


def _live(run: Run) -> dict[str, Any]:
    return run.state.results.live()


def test_finished_iterations_forget_their_results_and_variables() -> None:
    n = 300  # several merges of the recent map
    r = Run(FOR_EACH, {"items": list(range(n))})
    biggest = 0
    for i in range(n):
        r.ok(f"r/each[{i}]/work#1", "odd" if i % 2 else "even")
        if i % 2:
            r.ok(f"r/each[{i}]/inner#1", "I")
        r.ok(f"r/each[{i}]/post#1", f"P{i}")
        live = _live(r)
        # One output per finished iteration (running ones have no results yet).
        if i < n - 1:
            assert sorted(live) == sorted(f"each[{j}]/$output" for j in range(i + 1))
        biggest = max(biggest, len(r.state.tree.envs))
    assert biggest <= 4  # the root and at most three running iterations
    (effect,) = r.effects
    # The iterations' results are gone: only the loop's own result is seen.
    assert flowcore.effect_to_wire(effect)["input"] == {"seen": ["each"], "n": n}
    assert list(_live(r)) == ["each"]  # the outputs went into the for_each's own result
    assert _live(r)["each"]["output"] == [f"P{i}" for i in range(n)]
    r.ok("r/after#1", "A")
    assert r.settled is not None and r.settled.output == [f"P{i}" for i in range(n)]


REPEAT_SAGA = """
flow: t
tools: {a: {}, undo: {}, pay: {}}
steps:
  - id: rec
    repeat:
      every_ms: 10
      max_fires: 3
      steps:
        - id: book
          call_tool: {tool: a, input: "${fire_count}"}
          compensate:
            - {id: unbook, call_tool: {tool: undo, input: "${steps.book.output}"}}
  - id: charge
    call_tool: {tool: pay}
"""


def test_a_scope_with_a_recorded_compensation_is_kept_until_it_runs() -> None:
    r = Run(REPEAT_SAGA)
    for fire in (1, 2, 3):
        r.fire(f"r/rec[{fire}]/tick")
        r.ok(f"r/rec[{fire}]/book#1", f"B{fire}")
    assert {"rec[1]/book", "rec[2]/book", "rec[3]/book"} <= set(_live(r))
    r.fail("r/charge#1", "declined")
    # Each compensation reads its own fire's result.
    for fire in (3, 2, 1):
        assert r.wire() == [
            {
                "kind": "call-tool",
                "tool": "undo",
                "input": f"B{fire}",
                "idempotencyKey": f"r/rec[{fire}]/unbook#1",
            }
        ]
        r.ok(f"r/rec[{fire}]/unbook#1")
    assert r.settled is not None and r.settled.status == "failed"


# --- restoring without the report ---------------------------------------------------------

SEQ = """
flow: t
tools: {a: {}}
steps:
  - {id: one, call_tool: {tool: a}}
  - {id: two, call_tool: {tool: a}}
  - {id: three, call_tool: {tool: a}}
"""


def test_restored_without_the_report_settling_asks_for_it() -> None:
    r = Run(SEQ)
    rows: list[Any] = []
    results: dict[str, Any] = {}

    def store() -> None:
        changes = persist.state_changes(r.state)
        rows.extend(changes.report)
        results.update(changes.results)

    store()
    r.ok("r/one#1", 1)
    store()
    r.ok("r/two#1", 2)
    store()
    hot = persist.encode_hot(r.state)
    partial = persist.restore_state(hot, results.items(), r.flow, report=None)
    done = flowcore.EffectSucceeded(idempotency_key="r/three#1", output=3, at_ms=9)
    # flowcore.advance refuses a partial state, naming what to call instead ...
    with pytest.raises(TypeError, match=r"flowcore\.persist\.advance"):
        flowcore.advance(partial, done)
    with pytest.raises(ValueError, match="without its report rows"):
        flowcore.encode_state(partial)
    # ... persist.advance loads the rows because settling reads them ...
    loaded: list[int] = []

    def load() -> list[Any]:
        loaded.append(len(rows))
        return rows

    (settled,) = persist.advance(partial, done, load).effects
    assert loaded == [2]
    assert isinstance(settled, flowcore.Settled)
    assert [e.idempotency_key for e in settled.report] == ["r/one#1", "r/two#1", "r/three#1"]
    (again,) = r.send(done)
    assert isinstance(again, flowcore.Settled) and settled.report == again.report


def test_rows_added_after_a_partial_restore_come_out_of_state_changes() -> None:
    r = Run(SEQ)
    r.ok("r/one#1", 1)
    hot = persist.encode_hot(r.state)
    partial = persist.restore_state(hot, [], r.flow, report=None)
    event = flowcore.EffectSucceeded(idempotency_key="r/two#1", output=2, at_ms=5)

    def load() -> list[Any]:
        raise AssertionError("this transition does not read the report")

    moved = persist.advance(partial, event, load)
    assert [row.key for row in persist.state_changes(moved.state).report] == ["r/two#1"]
    assert moved.effects == r.send(event)


def test_a_very_long_report_is_freed_without_exhausting_the_c_stack() -> None:
    """Dropping a chain of 300k report links must not recurse once per link.

    Links are tracked by the garbage collector, whose dealloc trashcan frees
    a long chain iteratively; an untracked (``gc=False``) link crashed here.
    """
    from flowcore.decision.state import ReportLink, ReportRow

    row = ReportRow("r/k#1", 0, "call-tool", "t", "succeeded")
    link = None
    for _ in range(300_000):
        link = ReportLink((row,), link)
    del link


@given(n=st.integers(0, 300), head=st.integers(0, 300))
def test_report_chunks_keep_every_row_in_order(n: int, head: int) -> None:
    from flowcore.decision.state import REPORT_CHUNK, ReportRow, add_report_row, iter_report

    rows = [ReportRow(f"r/k#{i}", i, "call-tool", "t", "succeeded") for i in range(n)]
    link = None
    versions = []
    for row in rows:
        link = add_report_row(link, row)
        versions.append(link)
    assert list(iter_report(link)) == rows[::-1]
    # Older versions are unchanged by later additions.
    for i, version in enumerate(versions[: min(head, n)]):
        assert list(iter_report(version)) == rows[: i + 1][::-1]
    chunks = 0
    while link is not None:
        assert 1 <= len(link.rows) <= REPORT_CHUNK
        chunks += 1
        link = link.rest
    assert chunks == -(-n // REPORT_CHUNK)


def _retried_in_loop(chain: int) -> str:
    ys = ", ".join(f"{{id: y{k}, call_tool: {{tool: a}}}}" for k in range(chain))
    return f"""
flow: t
tools: {{a: {{}}}}
budget: {{steps: 100000}}
steps:
  - id: each
    for_each:
      items: "${{input.items}}"
      max_concurrency: 1
      steps:
        - id: p
          parallel:
            branches:
              x: [{{id: x1, call_tool: {{tool: a}}}}]
              y: [{ys}]
          retry: {{max_attempts: 2, initial_interval_ms: 10, errors: ['*']}}
        - id: post
          call_tool: {{tool: a, input: "${{steps.x1.output}}"}}
output: "${{steps.each.output}}"
"""


def test_a_result_written_twice_is_deleted_without_the_older_value_showing_through() -> None:
    """A retried composite's children record into the same scope again.

    The older value may already sit in a frozen dict while the newer one is
    in the recent map: deleting the scope must then mark the name deleted, not
    just drop it from the recent map (``ResultStore.rewrites`` says to look). A
    chain of 70 steps answered after the first write and before the second
    puts the older value in a dict and leaves the newer one in the recent map.
    """
    chain, n = 70, 3
    r = Run(_retried_in_loop(chain), {"items": list(range(n))})
    assert not r.state.results.rewrites
    for i in range(n):
        r.ok(f"r/each[{i}]/x1#1", f"A{i}")
        for k in range(chain - 1):
            r.ok(f"r/each[{i}]/y{k}#1")
        r.fail(f"r/each[{i}]/y{chain - 1}#1")
        r.fire(f"r/each[{i}]/p#1/backoff")
        assert any(f"each[{i}]/x1" in segment for segment in r.state.results.segments)
        for k in range(chain):
            r.ok(f"r/each[{i}]/p#2/y{k}#1")
        r.ok(f"r/each[{i}]/p#2/x1#1", f"B{i}")  # each[i]/x1 written a second time
        assert r.state.results.rewrites
        assert f"each[{i}]/x1" in r.state.results.recent  # the newer value, in front of the older
        (post,) = r.effects
        assert flowcore.effect_to_wire(post)["input"] == f"B{i}"  # the newer value
        r.ok(f"r/each[{i}]/post#1", f"P{i}")
        if i < n - 1:
            assert sorted(_live(r)) == sorted(f"each[{j}]/$output" for j in range(i + 1))
    assert r.settled is not None and r.settled.output == [f"P{i}" for i in range(n)]
    # A snapshot holds each name once: the restored store starts without the flag.
    back = flowcore.decode_state(flowcore.encode_state(r.state), r.flow)
    assert back == r.state and not back.results.rewrites
