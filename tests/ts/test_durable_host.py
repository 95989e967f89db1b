"""The TypeScript host (hosts/ts) as a durable host: its store, its timers, its
recovery after a SIGKILL, its supervised decide process, its generated types.

Every test drives the compiled package with Node: the conformance vectors
played through the host (hostConformance.js), a service killed with SIGKILL
in the middle of a run (twice) and started again on the same store, the
in-process checks (test/checks.js), and the generator's ``--check``. A kill
waits for the host's own marker in the store (the dispatch of the work it
kills), never for a time. Needs Node (skipped, saying so, without it) and
``make hosts/ts/node_modules/.installed``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

REPO = Path(__file__).resolve().parents[2]
TS = REPO / "hosts" / "ts"
TSC = TS / "node_modules" / ".bin" / "tsc"
FLOWCORE = Path(sys.executable).parent / "flowcore"
NODE = shutil.which("node")
TIMEOUT_S = 600  # generous: compiling and playing on a loaded machine, never a measurement

pytestmark = pytest.mark.skipif(
    NODE is None or shutil.which("npm") is None,
    reason="node and npm are not installed (needed for hosts/ts)",
)

CRASH_FLOW = """
flow: crash
tools: {fetch: {class: idempotent}, charge: {}}
steps:
  - {id: fetch, call_tool: {tool: fetch, input: {order: "${input.order}"}}}
  - id: pay
    try:
      - {id: charge, call_tool: {tool: charge, input: {amount: 5}}}
    catch:
      - errors: [outcome-unknown]
        steps:
          - {id: check, ask_human: {question: "Was the card charged?", options: ["yes", "no"]}}
  - {id: nap, sleep: {for_ms: 10}}
output: "${ {fetched: steps.fetch.output, reconciled: steps.check.answer} }"
"""

# Each handler notes its call, then holds (never answers) while its hold file exists.
HANDLERS = """
const fs = require("node:fs");
const path = require("node:path");
const here = __dirname;
function note(line) {
  const fd = fs.openSync(path.join(here, "calls.log"), "a");
  fs.writeSync(fd, line + "\\n");
  fs.fsyncSync(fd);
  fs.closeSync(fd);
}
function held(name) {
  return fs.existsSync(path.join(here, "hold-" + name));
}
exports.register = (registry) => {
  registry.flow("crash", fs.readFileSync(path.join(here, "crash.yaml"), "utf8"));
  registry.tool("fetch", (input, ctx) => {
    note(`fetch ${ctx.idempotencyKey} ${ctx.recovery}`);
    return held("fetch") ? new Promise(() => {}) : { order: input.order, items: 2 };
  });  // no class here: the flow's tools: declares fetch idempotent and charge uncertain
  registry.tool("charge", (input, ctx) => {
    note(`charge ${ctx.idempotencyKey} ${ctx.recovery}`);
    return held("charge") ? new Promise(() => {}) : { charged: input.amount };
  });
};
"""


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


def _node(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    assert NODE is not None
    return subprocess.run([NODE, *args], capture_output=True, text=True, timeout=TIMEOUT_S, **kw)


def test_the_package_could_be_published() -> None:
    package = json.loads((TS / "package.json").read_text(encoding="utf-8"))
    assert package["name"] and package["version"]
    assert package["main"] == "./dist/index.js" and package["types"] == "./dist/index.d.ts"
    assert package["exports"]["."] == {"types": "./dist/index.d.ts", "default": "./dist/index.js"}
    assert package["bin"] == {"flowcore-ts-host": "./dist/cli.js"}
    assert "json-schema-to-typescript" in package["devDependencies"]
    lock = json.loads((TS / "package-lock.json").read_text(encoding="utf-8"))
    assert "node_modules/json-schema-to-typescript" in lock["packages"]
    assert (TS / "README.md").is_file()
    config = json.loads((TS / "tsconfig.json").read_text(encoding="utf-8"))
    assert config["compilerOptions"]["strict"] is True
    assert config["compilerOptions"]["declaration"] is True


def test_the_generated_types_are_those_of_the_schemas(tmp_path: Path) -> None:
    done = _node(str(TS / "scripts" / "gen-types.mjs"), "--check", cwd=TS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "up to date" in done.stdout
    # A schema that changes makes the check fail: run it on a copy with an edited schema.
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "specs" / "schema", copy / "specs" / "schema")
    shutil.copytree(TS / "src" / "schema", copy / "hosts" / "ts" / "src" / "schema")
    (copy / "hosts" / "ts" / "scripts").mkdir(parents=True)
    shutil.copy(TS / "scripts" / "gen-types.mjs", copy / "hosts" / "ts" / "scripts")
    (copy / "hosts" / "ts" / "node_modules").symlink_to(TS / "node_modules")
    events = copy / "specs" / "schema" / "events.json"
    schema = json.loads(events.read_text(encoding="utf-8"))
    schema["$defs"]["TimerFired"]["properties"]["late"] = {"type": "boolean"}
    events.write_text(json.dumps(schema), encoding="utf-8")
    gen = copy / "hosts" / "ts" / "scripts" / "gen-types.mjs"
    done = _node(str(gen), "--check", cwd=copy / "hosts" / "ts")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "stale" in done.stderr and "src/schema/events.ts" in done.stderr


def test_the_conformance_vectors_play_through_the_host(compiled: Path, tmp_path: Path) -> None:
    """Its own store (a directory per vector), its own timers (a clock moved to
    each event's time), its handlers and its API: the log it writes is the
    vector's, record for record (less the optional event.rejected records: a
    rejection recorded there must be refused by the host, writing nothing)."""
    done = _node(
        str(compiled / "hostConformance.js"),
        "--flowcore",
        str(FLOWCORE),
        "--store",
        str(tmp_path),
        "--vectors",
        str(REPO / "specs" / "conformance"),
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    lines = done.stdout.splitlines()
    played = [line.split()[1].rstrip(":") for line in lines if line.startswith("ok ")]
    assert len(played) >= 65, lines
    for case in (
        "sequence-call-tool",
        "ask-human-timeout",
        "continue-as-new",
        "repeat-every",
        "rejected-events",
        "compensation-on-cancel",
        "unknown-uncertain",  # the host closed while the call runs, its recovery reports it
    ):
        assert case in played
    assert lines[-1].startswith(f"played {len(played)}, skipped ") and lines[-1].endswith(
        ", failed 0"
    )


def test_the_in_process_checks_pass(compiled: Path, tmp_path: Path) -> None:
    """A killed decide process is started again and the run goes on; refusals
    are typed (DecideRefused, RunRefused, UnknownRun, RegistryError,
    DecideProcessError); a timer fires on the real clock; a crash between a
    decision's log records and its snapshot (with a torn line) is taken again
    to the same bytes; work lost again and again goes to dead-letter; a child
    run reports to its parent, and one that cannot start fails its step; a
    call's execution class is its flow's (tools registered without one: after
    a crash the flow's uncertain call is reported unknown and never run again,
    its idempotent one runs again under its key), and a registration that
    states a class is refused."""
    done = _node(
        str(compiled / "test" / "checks.js"),
        "--flowcore",
        str(FLOWCORE),
        "--store",
        str(tmp_path / "store"),
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert done.stdout.splitlines()[-1] == "checks: ok"
    assert len([line for line in done.stdout.splitlines() if line.startswith("ok ")]) == 22


class Service:
    """``flowcore-ts-host serve`` on a store, on a free port."""

    def __init__(self, compiled: Path, store: Path, handlers: Path) -> None:
        assert NODE is not None
        self.proc = subprocess.Popen(
            [
                NODE,
                str(compiled / "cli.js"),
                "serve",
                "--store",
                str(store),
                "--handlers",
                str(handlers),
                "--port",
                "0",
                "--flowcore",
                str(FLOWCORE),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("listening on "), line + self._stderr()
        self.url = line.split()[-1]

    def _stderr(self) -> str:
        self.proc.kill()
        assert self.proc.stderr is not None
        return self.proc.stderr.read()

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
            return json.loads(reply.read())

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=TIMEOUT_S)
        self.close()

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=TIMEOUT_S)
        assert self.proc.stderr is not None
        err = self.proc.stderr.read()
        self.close()
        return err

    def close(self) -> None:
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def services() -> Iterator[list[Service]]:
    started: list[Service] = []
    yield started
    for service in started:
        if service.proc.poll() is None:
            service.kill()


def _wait_for(what: str, found: Any) -> None:
    """Wait for a marker the host writes; the deadline only ends a broken test."""
    deadline = time.monotonic() + TIMEOUT_S
    while not found():
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.02)


def _dispatched(store: Path, run: str, tool: str) -> bool:
    path = store / "runs" / quote(run, safe="") / "dispatch.ndjson"
    if not path.exists():
        return False
    return any(f"/{tool}#1" in json.loads(line)["key"] for line in path.read_text().splitlines())


def _calls(folder: Path) -> list[str]:
    path = folder / "calls.log"
    return path.read_text().splitlines() if path.exists() else []


def test_a_run_survives_sigkill_of_the_node_process(
    compiled: Path, tmp_path: Path, services: list[Service]
) -> None:
    """Killed while a call its flow declares idempotent runs (registered with
    no class), the host runs it again with the same key (effect.redispatched
    in the log); killed while a call its flow leaves uncertain
    runs, it never runs that call again and reports effect-outcome-unknown,
    which the flow catches with a question. Nothing acknowledged is lost, and
    ``flowcore replay`` replays the log the TypeScript host wrote."""
    (tmp_path / "crash.yaml").write_text(CRASH_FLOW, encoding="utf-8")
    handlers = tmp_path / "handlers.js"
    handlers.write_text(HANDLERS, encoding="utf-8")
    store = tmp_path / "store"
    (tmp_path / "hold-fetch").touch()
    (tmp_path / "hold-charge").touch()

    first = Service(compiled, store, handlers)
    services.append(first)
    assert first.call(
        "POST", "/runs", {"flow": "crash", "input": {"order": "o-1"}, "runId": "c-1"}
    ) == {"runId": "c-1"}
    _wait_for(
        "fetch dispatched and called",
        lambda: _dispatched(store, "c-1", "fetch") and _calls(tmp_path),
    )
    first.kill()

    (tmp_path / "hold-fetch").unlink()
    second = Service(compiled, store, handlers)
    services.append(second)
    _wait_for(
        "charge dispatched and called",
        lambda: _dispatched(store, "c-1", "charge") and len(_calls(tmp_path)) == 3,
    )
    second.kill()

    (tmp_path / "hold-charge").unlink()
    third = Service(compiled, store, handlers)
    services.append(third)
    view = third.call("GET", "/runs/c-1")
    assert view["status"] == "running"
    [question] = view["questions"]
    assert question["question"] == "Was the card charged?"
    third.call("POST", "/runs/c-1/answers", {"key": question["key"], "answer": "no"})
    done = third.call("GET", "/runs/c-1?wait=settled")
    assert done["status"] == "completed"
    assert done["output"] == {"fetched": {"order": "o-1", "items": 2}, "reconciled": "no"}
    third.stop()

    fetch_key, charge_key = "c-1/fetch#1", "c-1/charge#1"
    assert _calls(tmp_path) == [
        f"fetch {fetch_key} 0",
        f"fetch {fetch_key} 1",
        f"charge {charge_key} 0",
    ]
    log = store / "runs" / "c-1" / "log.ndjson"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["index"] for r in records] == list(range(len(records)))
    redispatched = [r["data"] for r in records if r["type"] == "effect.redispatched"]
    assert redispatched == [{"idempotencyKey": fetch_key, "recovery": 1}]
    reported = [r["data"] for r in records if r["type"] == "event.reported"]
    assert {"kind": "effect-outcome-unknown", "idempotencyKey": charge_key} == {
        k: v for k, v in reported[1].items() if k != "atMs"
    }
    assert records[-1]["type"] == "run.settled"
    replay = subprocess.run(
        [str(FLOWCORE), "replay", str(log), "--spec", str(tmp_path / "crash.yaml"), "--json"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert replay.returncode == 0, replay.stdout + replay.stderr
    # The command reads the store without a process running.
    listed = _node(str(compiled / "cli.js"), "runs", "--store", str(store))
    assert listed.returncode == 0 and listed.stdout == "c-1\tcrash\tcompleted\n", listed
    shown = _node(str(compiled / "cli.js"), "show", "c-1", "--store", str(store))
    assert shown.returncode == 0, shown.stderr
    assert "effect.redispatched" in shown.stdout and str(log) in shown.stdout
    for bad in (["serve", "--store", str(store)], ["show", "--store", str(store)], ["nope"]):
        refused = _node(str(compiled / "cli.js"), *bad)
        assert refused.returncode == 2 and "usage:" in refused.stderr, (bad, refused)
        assert "    at " not in refused.stderr  # a message, never a stack trace


def test_the_worked_example_starts_a_flow_answers_it_and_shows_its_result(
    compiled: Path, tmp_path: Path
) -> None:
    """examples/expense built as a user builds it, against the package by its
    name (node_modules/flowcore-ts-host), and driven over HTTP: a claim is
    started, its question answered on the page, its result shown."""
    assert NODE is not None
    _installed(compiled, tmp_path)
    app = tmp_path / "app"
    example = TS / "examples" / "expense"
    shutil.copytree(example / "src", app / "src")
    shutil.copy(example / "expense.yaml", app)
    built = _tsc(
        "--strict",
        "--target",
        "ES2022",
        "--module",
        "commonjs",
        "--types",
        "node",
        "--typeRoots",
        str(TS / "node_modules" / "@types"),
        "--rootDir",
        str(app / "src"),
        "--outDir",
        str(app / "dist"),
        str(app / "src" / "server.ts"),
    )
    assert built.returncode == 0, built.stdout + built.stderr
    env = {
        **os.environ,
        "PORT": "0",
        "STORE": str(tmp_path / "data"),
        "FLOWCORE": str(FLOWCORE),
    }
    proc = subprocess.Popen(
        [NODE, str(app / "dist" / "server.js")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("expense service on "), line
        url = line.split()[-1]

        def call(method: str, path: str, data: bytes | None = None) -> bytes:
            request = urllib.request.Request(url + path, data=data, method=method)
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
                body: bytes = reply.read()
                return body

        claim = {"flow": "expense", "input": {"employee": "ada", "amount": 120}, "runId": "cl-1"}
        assert json.loads(call("POST", "/runs", json.dumps(claim).encode())) == {"runId": "cl-1"}
        # The question comes once the limit lookup has been answered (a decision later).
        _wait_for("the question", lambda: json.loads(call("GET", "/runs/cl-1"))["questions"])
        [question] = json.loads(call("GET", "/runs/cl-1"))["questions"]
        assert question["question"] == "Pay ada 120 (their limit is 500)?"
        assert "Pay ada 120" in call("GET", "/").decode()
        form = f"run=cl-1&key={quote(question['key'], safe='')}&answer=approve".encode()
        call("POST", "/ui/answer", form)  # the page's button; the redirect is followed
        done = json.loads(call("GET", "/runs/cl-1?wait=settled"))
        assert done["status"] == "completed"
        assert done["output"] == {
            "decision": "approve",
            "payment": {"paid": 120, "reference": "cl-1/pay#1"},
        }
        assert "&#34;paid&#34;:120" in call("GET", "/").decode()
        logged = (tmp_path / "data" / "runs" / "cl-1" / "log.ndjson").read_bytes()
        assert call("GET", "/runs/cl-1/log") == logged  # the log, as flowcore replay reads it

        def refused(method: str, path: str, data: bytes | None) -> tuple[int, Any]:
            with pytest.raises(urllib.error.HTTPError) as caught:
                call(method, path, data)
            return caught.value.code, json.loads(caught.value.read())["error"]["type"]

        bad_input = {"flow": "expense", "input": {"employee": "ada"}}
        assert refused("POST", "/runs", json.dumps(bad_input).encode()) == (422, "bad-input")
        assert refused("POST", "/runs", b'{"flow": "nope"}') == (404, "unknown-flow")
        assert refused("POST", "/runs", b"{not json") == (400, "bad-request")
        assert refused("GET", "/runs/nope", None) == (404, "unknown-run")
        answer = json.dumps({"key": question["key"], "answer": "approve"}).encode()
        assert refused("POST", "/runs/cl-1/answers", answer) == (409, "refused")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=TIMEOUT_S)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    replay = subprocess.run(
        [
            str(FLOWCORE),
            "replay",
            str(tmp_path / "data" / "runs" / "cl-1" / "log.ndjson"),
            "--spec",
            str(example / "expense.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert replay.returncode == 0, replay.stdout + replay.stderr


def _installed(compiled: Path, where: Path) -> None:
    """The package as `npm install` leaves it: node_modules/flowcore-ts-host."""
    package = where / "node_modules" / "flowcore-ts-host"
    package.mkdir(parents=True)
    shutil.copy(TS / "package.json", package)
    (package / "dist").symlink_to(compiled)


def test_the_readme_service_survives_a_kill_as_it_says(
    compiled: Path, tmp_path: Path, services: list[Service]
) -> None:
    """hosts/ts/README.md followed as written: its service.js started, a run
    started, the process killed while the run waits, a new one started on the
    same data/, the question answered, the run completed, its log replayed."""
    readme = (TS / "README.md").read_text(encoding="utf-8")
    service = readme.split("```js\n", 1)[1].split("```", 1)[0]
    _installed(compiled, tmp_path)
    (tmp_path / "service.js").write_text(service, encoding="utf-8")
    flow = service.split("const FLOW = `", 1)[1].split("`;", 1)[0].replace("\\${", "${")
    (tmp_path / "refund.yaml").write_text(flow, encoding="utf-8")
    env = {
        **os.environ,
        "PORT": "0",
        "PATH": f"{FLOWCORE.parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }

    def start() -> Service:
        assert NODE is not None
        running = Service.__new__(Service)
        running.proc = subprocess.Popen(
            [NODE, "service.js"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert running.proc.stdout is not None
        line = running.proc.stdout.readline()
        assert line.startswith("listening on "), line + running._stderr()
        running.url = line.split()[-1]
        services.append(running)
        return running

    first = start()
    first.call("POST", "/runs", {"flow": "refund", "input": {"order": "o-1"}, "runId": "r-1"})
    _wait_for("the question", lambda: first.call("GET", "/runs/r-1")["questions"])
    assert first.call("GET", "/runs/r-1")["questions"][0]["key"] == "r-1/ok#1"
    first.kill()
    second = start()
    second.call("POST", "/runs/r-1/answers", {"key": "r-1/ok#1", "answer": "yes"})
    done = second.call("GET", "/runs/r-1?wait=settled")
    assert done["status"] == "completed"
    assert done["output"] == {"refunded": "o-1", "key": "r-1/refund#1"}
    second.stop()
    replay = subprocess.run(
        [str(FLOWCORE), "replay", "data/runs/r-1/log.ndjson", "--spec", "refund.yaml"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=tmp_path,
    )
    assert replay.returncode == 0, replay.stdout + replay.stderr
