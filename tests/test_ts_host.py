"""The reference TypeScript host (hosts/ts): it type-checks strictly and plays the vectors.

``tsc`` checks the sources with ``--strict``; the compiled conformance script
then plays every vector of specs/conformance through ``flowcore decide
--stdio`` (this environment's console script) and must agree with every
recorded effect. Its typed union must carry the fields of the effect schema.
Needs Node (skipped, saying so, without it) and the compiler that
``make hosts/ts/node_modules/.installed`` installs from package-lock.json.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flowcore import encode_records, update_reply_to_wire
from flowcore.testing import Simulator, Update

REPO = Path(__file__).resolve().parents[1]
TS = REPO / "hosts" / "ts"
TSC = TS / "node_modules" / ".bin" / "tsc"
VECTORS = REPO / "specs" / "conformance"
FLOWCORE = Path(sys.executable).parent / "flowcore"
NODE = shutil.which("node")
NPM = shutil.which("npm")
TIMEOUT_S = 600  # generous: compiling and playing on a loaded machine

pytestmark = pytest.mark.skipif(
    NODE is None or NPM is None, reason="node and npm are not installed (needed for hosts/ts)"
)


def _tsc(*args: str) -> subprocess.CompletedProcess[str]:
    assert TSC.exists(), (
        f"{TSC.relative_to(REPO)} is missing: run `make hosts/ts/node_modules/.installed`"
    )
    return subprocess.run(
        [str(TSC), *args], capture_output=True, text=True, timeout=TIMEOUT_S, cwd=TS
    )


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ts-host")
    done = _tsc("-p", ".", "--outDir", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def _conformance(compiled: Path, vectors: Path) -> subprocess.CompletedProcess[str]:
    assert NODE is not None
    return subprocess.run(
        [NODE, str(compiled / "conformance.js"), "--flowcore", str(FLOWCORE)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "FLOWCORE_VECTORS": str(vectors)},
    )


def _playable(vectors: Path) -> list[str]:
    out = []
    for folder in sorted(p for p in vectors.iterdir() if p.is_dir()):
        expect = json.loads((folder / "expect.json").read_text(encoding="utf-8"))
        if expect.get("error") is None and expect.get("divergenceIndex") is None:
            out.append(folder.name)
    return out


def test_the_sources_type_check_strictly() -> None:
    config = json.loads((TS / "tsconfig.json").read_text(encoding="utf-8"))
    assert config["compilerOptions"]["strict"] is True
    done = _tsc("--strict", "--noEmit", "-p", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_ts_host_plays_every_non_divergent_vector(compiled: Path) -> None:
    done = _conformance(compiled, VECTORS)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    playable = _playable(VECTORS)
    assert len(playable) >= 40
    lines = done.stdout.splitlines()
    assert sorted(line.split()[1].rstrip(":") for line in lines if line.startswith("ok ")) == (
        playable
    )
    skipped = len([p for p in VECTORS.iterdir() if p.is_dir()]) - len(playable)
    assert lines[-1] == f"played {len(playable)}, skipped {skipped}, failed 0"


def test_a_vector_the_host_does_not_reproduce_fails_the_run(compiled: Path, tmp_path: Path) -> None:
    """Guard against a check that passes whatever decide answers: an edited recorded
    effect in a vector that claims to replay must fail the script."""
    case = tmp_path / "sequence-call-tool"
    shutil.copytree(VECTORS / "sequence-call-tool", case)
    log = (case / "log.ndjson").read_text(encoding="utf-8")
    edited = log.replace('"input":{"name":"Ada"}', '"input":{"name":"Bob"}', 1)
    assert edited != log
    (case / "log.ndjson").write_text(edited, encoding="utf-8")
    done = _conformance(compiled, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL sequence-call-tool: record 3:" in done.stdout
    assert done.stdout.splitlines()[-1] == "played 1, skipped 0, failed 1"


def test_the_typed_effect_union_has_the_fields_of_the_effect_schema() -> None:
    source = (TS / "src" / "flowEffect.ts").read_text(encoding="utf-8")
    interfaces = {
        m.group(1): set(re.findall(r"^\s+readonly (\w+)\??:", m.group(2), re.M))
        for m in re.finditer(r"^export interface (\w+) \{\n(.*?)^\}", source, re.M | re.S)
    }
    schema = json.loads((REPO / "specs/schema/effects.json").read_text(encoding="utf-8"))
    mapping = schema["discriminator"]["mapping"]
    union = re.search(r"export type FlowEffect =(.*?);", source, re.S)
    assert union is not None
    assert sorted(re.findall(r"\| (\w+)", union.group(1))) == sorted(
        ref.rsplit("/", 1)[1] for ref in mapping.values()
    )
    for kind, ref in mapping.items():
        name = ref.rsplit("/", 1)[1]
        fields = set(schema["$defs"][name]["properties"])
        assert interfaces[name] == fields, kind
    events = json.loads((REPO / "specs/schema/events.json").read_text(encoding="utf-8"))
    block = source[source.index("export type FlowEvent =") : source.index("export type EventKind")]
    assert sorted(re.findall(r'kind: "([a-z-]+)"', block)) == sorted(
        events["discriminator"]["mapping"]
    )


def _interfaces(source: str) -> dict[str, set[str]]:
    return {
        m.group(1): set(re.findall(r"^\s+readonly (\w+)\??:", m.group(2), re.M))
        for m in re.finditer(r"^export interface (\w+) \{\n(.*?)^\}", source, re.M | re.S)
    }


def test_the_decide_types_carry_what_the_decide_schemas_say() -> None:
    """Every op, reply field and error type of `flowcore decide --stdio` (its
    schemas) is typed in flowEffect.ts: a new one is a type error in the host."""
    source = (TS / "src" / "flowEffect.ts").read_text(encoding="utf-8")
    interfaces = _interfaces(source)
    requests = json.loads((REPO / "specs/schema/decide-requests.json").read_text(encoding="utf-8"))
    ops = set(re.findall(r'^\s+readonly op: "([a-z-]+)";', source, re.M))
    assert set(requests["discriminator"]["mapping"]) <= ops
    assert {"start", "advance", "query", "check-update"} <= ops
    for name in ("StartRequest", "AdvanceRequest"):
        fields = set(requests["$defs"][name]["properties"])
        assert fields <= interfaces[name], (name, fields - interfaces[name])
    replies = json.loads((REPO / "specs/schema/decide-replies.json").read_text(encoding="utf-8"))
    decided = set(replies["$defs"]["Decided"]["properties"])
    assert decided <= interfaces["Decided"], decided - interfaces["Decided"]
    assert "replies" in interfaces["Decided"]
    body = replies["$defs"]["ErrorBody"]["properties"]
    assert set(body) <= interfaces["DecideError"]
    union = re.search(r"export type DecideErrorType =(.*?);", source, re.S)
    assert union is not None
    typed = set(re.findall(r'\| "([a-z-]+)"', union.group(1)))
    assert set(body["type"]["enum"]) <= typed
    assert {"update-refused", "query-failed"} <= typed
    assert interfaces["UpdateReply"] == {"updateId", "name", "status", "output", "error"}


def test_the_ts_host_serves_an_update_and_a_query(compiled: Path) -> None:
    """Through the typed client: a refusal with its code, check-update, the
    update-requested event, a repeated id looked up, the reply on the decision
    that ends the update, and queries (hosts/ts/src/updates.ts)."""
    assert NODE is not None
    done = subprocess.run(
        [NODE, str(compiled / "updates.js"), "--flowcore", str(FLOWCORE)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "updates: ok"
    assert len([line for line in lines if line.startswith("ok ")]) == 7


UPDATE_FLOW = """
flow: expense
metadata: {decision: string}
updates:
  approve:
    input_schema: {type: object, properties: {by: {type: string}}, required: [by]}
    steps:
      - {id: decide, ask_human: {question: "Approve?", options: ["yes", "no"]}}
      - {id: note, set_metadata: {decision: "${steps.decide.answer}"}}
    reply: "${ {decision: steps.decide.answer, by: update.input.by} }"
queries:
  decision:
    value: "${ {decision: metadata.decision, status: status} }"
steps:
  - {id: wait, sleep: {for_ms: 100}}
"""


def _update_vector(folder: Path, reply: Any = None) -> None:
    """A vector of a run that takes an update, recorded by the simulator."""

    t = Simulator(humans="yes", updates=[Update("approve", {"by": "bob"}, "req-1", at_ms=5)]).run(
        UPDATE_FLOW, None, run_id="r-1"
    )
    folder.mkdir(parents=True)
    (folder / "flow.yaml").write_text(UPDATE_FLOW, encoding="utf-8")
    (folder / "log.ndjson").write_bytes(encode_records(t.log_of()))
    replies = [update_reply_to_wire(r) for r in t.replies]
    if reply is not None:
        replies[0] = {**replies[0], "output": reply}
    expect = {
        "divergenceIndex": None,
        "status": t.status,
        "tornOffset": None,
        "unrecorded": 0,
        "metadata": {"decision": "yes"},
        "replies": replies,
        "queries": [{"name": "decision", "value": {"decision": "yes", "status": "completed"}}],
    }
    (folder / "expect.json").write_text(json.dumps(expect), encoding="utf-8")


def test_the_player_checks_a_vectors_update_replies_and_queries(
    compiled: Path, tmp_path: Path
) -> None:
    _update_vector(tmp_path / "good" / "update-approve")
    done = _conformance(compiled, tmp_path / "good")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok   update-approve: " in done.stdout and "1 update reply" in done.stdout
    _update_vector(tmp_path / "bad" / "update-approve", reply={"decision": "no"})
    done = _conformance(compiled, tmp_path / "bad")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL update-approve: the update replies are" in done.stdout


def test_the_player_checks_the_updates_and_queries_a_vector_expects(
    compiled: Path, tmp_path: Path
) -> None:
    """Guard against checks that pass whatever decide answers: an edited update
    view, or a query expected to fail that answers, fails the vector."""
    edits: tuple[tuple[str, dict[str, Any]], ...] = (
        ("updates", {"status": "failed"}),
        ("queries", {"error": "bad-args"}),
    )
    for n, (field, change) in enumerate(edits):
        case = tmp_path / str(n) / "update-reply"
        shutil.copytree(VECTORS / "update-reply", case)
        expect = json.loads((case / "expect.json").read_text(encoding="utf-8"))
        expect[field][0].update(change)
        (case / "expect.json").write_text(json.dumps(expect), encoding="utf-8")
        done = _conformance(compiled, tmp_path / str(n))
        assert done.returncode == 1, done.stdout + done.stderr
        wanted = ("update u-1 is", "query decision answers")[n]
        assert f"FAIL update-reply: {wanted}" in done.stdout, done.stdout
