"""The conformance vectors in specs/conformance/: fresh, complete, and replaying as declared.

Every case's log replays against its flow (in NDJSON and in MessagePack) to
exactly what its ``expect.json`` says: the final status, or the index of the
divergence, the torn tail's offset, the corruption. Snapshots taken after any
of the first ten events and replayed with the tail give the same state as a
full replay. The committed files are regenerated in memory and compared, so
they cannot go stale. (Playing them on each host: ``test_hosts.py``.)
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pytest

import flowcore
from flowcore import Flow
from flowcore.log.records import LogCorrupt, decode_log, encode_records
from flowcore.log.replay import ReplayReport, replay

REPO = Path(__file__).resolve().parents[2]
DIR = REPO / "specs" / "conformance"
GENERATOR = REPO / "scripts" / "gen_conformance.py"
REGENERATE = "run `python scripts/gen_conformance.py` and commit the result"

CASES = sorted(p.name for p in DIR.iterdir() if p.is_dir())


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_conformance", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_conformance"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _load(case: str) -> tuple[Flow, bytes, dict[str, Any]]:
    folder = DIR / case
    flow = flowcore.parse_flow((folder / "flow.yaml").read_bytes(), source_name="flow.yaml")
    expect = json.loads((folder / "expect.json").read_text(encoding="utf-8"))
    return flow, (folder / "log.ndjson").read_bytes(), expect


def _check(report: ReplayReport, expect: dict[str, Any]) -> None:
    found = report.divergence.index if report.divergence is not None else None
    assert found == expect["divergenceIndex"]
    assert report.ok == expect["replays"]
    assert report.status == expect["status"]
    assert report.spec_matches == expect["specMatches"]
    assert report.last_index == expect["lastIndex"]
    assert len(report.unrecorded) == expect["unrecorded"]
    if report.state is not None:  # the run's metadata as it ended (absent: none)
        assert (report.state.metadata or {}) == expect.get("metadata", {})
        views = [msgspec.to_builtins(v) for v in flowcore.updates_of(report.state)]
        assert views == expect.get("updates", [])  # the updates taken (absent: none)
        for asked in expect.get("queries", []):  # the flow's queries of the final state
            try:
                value = flowcore.query(report.state, asked["name"], asked["args"])
            except flowcore.QueryError as exc:
                assert exc.code == asked["error"], asked
            else:
                assert "error" not in asked and value == asked["value"], asked


def test_the_committed_vectors_are_up_to_date() -> None:
    files = _generator().build_all()
    committed = {
        str(p.relative_to(DIR)): p.read_bytes() for p in sorted(DIR.rglob("*")) if p.is_file()
    }
    assert sorted(committed) == sorted(files), f"files differ: {REGENERATE}"
    stale = [name for name, data in files.items() if committed[name] != data]
    assert stale == [], f"stale: {stale}: {REGENERATE}"


def test_there_are_enough_cases_each_with_its_files() -> None:
    assert len(CASES) >= 40
    for case in CASES:
        names = {p.name for p in (DIR / case).iterdir()}
        assert {"flow.yaml", "log.ndjson", "README.md", "expect.json"} <= names, case
        about = (DIR / case / "README.md").read_text(encoding="utf-8").strip().splitlines()
        assert about[0] == f"# {case}" and about[-1], case
    divergent = [c for c in CASES if _load(c)[2].get("divergenceIndex") is not None]
    assert len(divergent) >= 8


@pytest.mark.parametrize("case", CASES)
def test_the_vector_replays_as_declared(case: str) -> None:
    flow, log, expect = _load(case)
    if expect.get("error") == "corrupt":
        with pytest.raises(LogCorrupt) as info:
            replay(log, flow)
        assert (info.value.offset, info.value.line) == (expect["offset"], expect["line"])
        return
    report = replay(log, flow, raise_on_divergence=False)
    _check(report, expect)
    torn = expect["tornOffset"]
    assert (report.torn.offset if report.torn is not None else None) == torn
    if report.divergence is not None:
        with pytest.raises(flowcore.ReplayDivergence) as raised:
            replay(log, flow)
        assert raised.value.index == expect["divergenceIndex"]
    if torn is None:
        # The same records as MessagePack replay to the same result.
        packed = encode_records(decode_log(log).records, "msgpack")
        again = replay(packed, flow, raise_on_divergence=False)
        _check(again, expect)
        assert again.trajectory == report.trajectory


def _replays_to_its_end(case: str) -> bool:
    expect = json.loads((DIR / case / "expect.json").read_text(encoding="utf-8"))
    return expect.get("error") != "corrupt" and expect.get("divergenceIndex") is None


@pytest.mark.parametrize("case", [c for c in CASES if _replays_to_its_end(c)])
def test_replay_ends_in_the_state_advance_reaches(case: str) -> None:
    """Replay folds answered work in place (``_interp.Fold``); ``advance`` event by event
    must reach the very same state, journal of the last event included."""
    flow, log, _ = _load(case)
    read = decode_log(log)
    report = replay(log, flow)
    started = read.records[0].data
    state = flowcore.start(
        flow,
        started["input"],
        run_id=read.records[0].run_id,
        now_ms=read.records[0].at,
        budget=flowcore.budget_from_wire(started.get("budget")),
        depth=started.get("depth", 0),
        metadata=started.get("metadata"),
    ).state
    for record in read.records:
        if record.type == "event.reported":
            state = flowcore.advance(state, flowcore.event_from_wire(record.data)).state
        elif record.type == "run.started" and state.tree.continued is not None:
            # The next incarnation, as every host starts it.
            continued = state.tree.continued
            state = flowcore.continue_run(
                flow, continued, record.run_id, record.at, state.run.depth
            ).state
    assert report.state == state
    assert report.state is not None and report.state.journal == state.journal
    assert flowcore.encode_state(report.state) == flowcore.encode_state(state)


def _event_lines(lines: list[bytes]) -> list[int]:
    return [i for i, line in enumerate(lines) if b'"type":"event.' in line]


@pytest.mark.parametrize("case", CASES)
def test_snapshot_every_k_events_plus_the_tail_equals_a_full_replay(case: str) -> None:
    flow, log, expect = _load(case)
    if expect.get("error") == "corrupt":
        pytest.skip("a corrupt log does not replay")
    full = replay(log, flow, raise_on_divergence=False)
    lines = log.splitlines(keepends=True)
    events = _event_lines(lines)
    for k in range(1, 11):
        cut = events[k - 1] if k <= len(events) else len(lines)
        head = replay(b"".join(lines[:cut]), flow, raise_on_divergence=False)
        assert head.state is not None, (case, k)
        if head.divergence is not None:  # it diverges before the snapshot point
            assert full.divergence is not None
            assert head.divergence.index == full.divergence.index
            continue
        snapshot = flowcore.encode_state(
            flowcore.decode_state(flowcore.encode_state(head.state), flow)
        )
        tail = replay(b"".join(lines[cut:]), flow, snapshot=snapshot, raise_on_divergence=False)
        assert tail.state is not None and full.state is not None
        assert flowcore.encode_state(tail.state) == flowcore.encode_state(full.state), (case, k)
        found = tail.divergence.index if tail.divergence is not None else None
        if not expect["specMatches"] and found is None and full.divergence is not None:
            # The log ends inside a decision and diverges only because another
            # spec replays it; a tail read from a snapshot of the new spec
            # cannot know that spec differs (a snapshot is pinned to its
            # flow), so for it the log was cut, as with its own spec.
            assert full.divergence.expected is None, (case, k)
            assert full.divergence.index == full.last_index + 1, (case, k)
            assert tail.unrecorded, (case, k)
            continue
        assert found == expect["divergenceIndex"], (case, k)


def _vector_events() -> list[dict[str, Any]]:
    out = []
    for case in CASES:
        for line in (DIR / case / "log.ndjson").read_bytes().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # the torn and the corrupt lines
    return out


def test_the_vectors_cover_every_construct_event_limit_and_class() -> None:
    records = _vector_events()
    events = {r["data"]["kind"] for r in records if r["type"] == "event.reported"}
    assert events == {
        "effect-succeeded",
        "effect-failed",
        "effect-outcome-unknown",
        "human-answered",
        "timer-fired",
        "signal-received",
        "subflow-settled",
        "cancel-requested",
        "scheduled-cancel-requested",
        "scheduled-run-now-requested",
        "scheduled-add-requested",
        "scheduled-replay-requested",
        "update-requested",
    }
    effects = {r["data"]["kind"] for r in records if r["type"] == "effect.emitted"}
    assert effects == {
        "run-agent",
        "run-team",
        "call-tool",
        "ask-human",
        "sleep",
        "await-signal",
        "run-subflow",
        "settled",
        "signal-run",
        "continue-as-new",
    }
    assert {r["type"] for r in records} == {
        "run.started",
        "event.reported",
        "event.rejected",
        "effect.emitted",
        "run.settled",
        "scheduled.changed",
    }
    settled = [r["data"] for r in records if r["type"] == "run.settled"]
    assert {s["status"] for s in settled} == {
        "completed",
        "failed",
        "cancelled",
        "budget-exhausted",
    }
    assert {s.get("exhausted") for s in settled} >= {"steps", "cost", "wall-clock"}
    kinds: set[str] = set()
    features: set[str] = set()
    classes_unknown: set[str] = set()
    for case in CASES:
        flow = flowcore.parse_flow((DIR / case / "flow.yaml").read_bytes())
        for step in flow.by_id.values():
            kinds.add(step.kind)
            if step.retry is not None:
                features.add("retry")
            if step.timeout_ms is not None:
                features.add("timeout")
            if step.compensate:
                features.add("compensate")
        if flow.output is not None:
            features.add("output")
        if flow.teams:
            features.add("teams")
        if flow.limits.max_concurrency is not None:
            features.add("max_concurrency")
        if flow.input_schema is not None:
            features.add("input_schema")
        if flow.metadata:
            features.add("metadata")
        if flow.updates:
            features.add("updates")
        if flow.queries:
            features.add("queries")
        log = (DIR / case / "log.ndjson").read_bytes()
        if b"effect-outcome-unknown" in log and "unknown-" in case:
            for decl_name, decl in flow.tools.items():
                if f'"tool":"{decl_name}"'.encode() in log:
                    classes_unknown.add(decl.exec_class)
    assert kinds == {
        "call_tool",
        "run_agent",
        "run_team",
        "ask_human",
        "sleep",
        "await_signal",
        "run_subflow",
        "switch",
        "parallel",
        "for_each",
        "repeat",
        "schedule",
        "cancel_scheduled",
        "fail",
        "continue_as_new",
        "try",
        "signal_run",
        "set_metadata",
    }
    assert features == {
        "retry",
        "timeout",
        "compensate",
        "output",
        "teams",
        "max_concurrency",
        "input_schema",
        "metadata",
        "updates",
        "queries",
    }
    assert classes_unknown == {"readonly", "idempotent", "uncertain"}
    for name in ("signal-buffered", "compensation-on-failure", "compensation-on-cancel", "cancel"):
        assert name in CASES
