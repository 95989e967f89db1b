"""The local host's durable overhead, side by side with LangGraph and DBOS.

One run of this script, one machine, the same no-op tool, fsync on for all
three (SQLite WAL with synchronous=FULL):

* per-step durable overhead of a 1,000-step sequential flow: the flowcore
  local host; LangGraph with ``SqliteSaver`` (a one-node loop that checkpoints
  every super-step); DBOS with its SQLite system database (a workflow of
  1,000 steps). Targets: flowcore <= 0.3 ms/step, >= 3x faster than
  LangGraph, >= 7x faster than DBOS.
* throughput with 100 runs active at once (target >= 10,000 durable steps/s).
* time to resume a run with a 100k-event history versus a 1k-event one
  (target <= 1.5x): open the database, load the run, and get its next effect
  running (its handler called).

Each measurement runs in its own subprocess (DBOS is a process-wide
singleton). LangGraph and DBOS come from the ``bench`` extra:
``pip install -e '.[bench]'``.

Run: ``python benchmarks/bench_local_host.py [--steps N] [--repeat K]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TypedDict


def noop(x: Any) -> Any:
    return x


# --- flowcore ------------------------------------------------------------------------


def sequential_spec(steps: int, name: str = "seq") -> dict[str, Any]:
    return {
        "flow": name,
        "tools": {"noop": {"class": "idempotent"}},
        "budget": {"steps": steps * 2 + 10},
        "steps": [{"id": f"s{i}", "call_tool": {"tool": "noop", "input": i}} for i in range(steps)],
    }


def flowcore_async_registry() -> Any:
    """The no-op as an ``async`` handler: it runs on the event loop, no thread hop."""
    from flowcore_handlers import Registry

    async def tool(effect: Any) -> Any:
        return noop(effect.input)

    return Registry(tools={"noop": tool})


def flowcore_registry() -> Any:
    from flowcore_handlers import Registry

    return Registry(tools={"noop": lambda effect: noop(effect.input)})


def bench_flowcore(
    db: Path, steps: int, durability: Any = "power-loss", registry: Any = None
) -> float:
    from flowcore_local import LocalHost

    spec = json.dumps(sequential_spec(steps))

    async def main() -> float:
        handlers = registry if registry is not None else flowcore_registry()
        async with LocalHost(db, registry=handlers, durability=durability) as host:
            # Parsing the spec is not part of the per-step cost (LangGraph's
            # graph and DBOS's workflow are built before their clocks start).
            host.store.register_flow(spec, "<bench>", 0)
            t0 = time.perf_counter()
            rid = await host.start(spec, {}, "r")
            await host.work(until_settled=rid)
            elapsed = time.perf_counter() - t0
            assert (await host.run(rid)).status == "completed"
            return elapsed

    return asyncio.run(main())


def bench_throughput(db: Path, runs: int, steps: int) -> float:
    from flowcore_local import LocalHost

    spec = json.dumps(sequential_spec(steps, "thr"))

    async def main() -> float:
        async with LocalHost(db, registry=flowcore_registry(), durability="power-loss") as host:
            ids = [await host.start(spec, {}, f"r{i}") for i in range(runs)]
            stop = asyncio.Event()

            async def watch() -> None:
                while await host.runs("running"):
                    await asyncio.sleep(0.05)
                stop.set()

            t0 = time.perf_counter()
            watcher = asyncio.create_task(watch())
            await host.work(stop)
            elapsed = time.perf_counter() - t0
            await watcher
            for rid in ids:
                assert (await host.run(rid)).status == "completed"
            return runs * steps / elapsed

    return asyncio.run(main())


WORKER_TOOLS = """\
def noop(effect):
    return effect.input

TOOLS = {"noop": noop}
"""


def bench_workers(db: Path, workers: int, runs: int = 100, steps: int = 100) -> float:
    """Durable steps/s of ``workers`` ``flowcore worker`` processes on one database
    holding ``runs`` runs of ``steps`` steps, started before the clock starts."""
    from flowcore_local import LocalHost

    tools = db.with_name("bench_tools.py")
    tools.write_text(WORKER_TOOLS)
    spec = json.dumps(sequential_spec(steps, "par"))

    async def prepare() -> None:
        async with LocalHost(db, str(tools)) as host:
            for i in range(runs):
                await host.start(spec, {}, f"r{i}")

    asyncio.run(prepare())
    command = [str(Path(sys.executable).with_name("flowcore")), "worker", "--until-idle"]
    command += ["--db", str(db), "--tools", str(tools)]
    t0 = time.perf_counter()
    procs = [subprocess.Popen(command, stdout=subprocess.DEVNULL) for _ in range(workers)]
    for proc in procs:
        if proc.wait() != 0:
            raise SystemExit(f"a worker exited with {proc.returncode}")
    elapsed = time.perf_counter() - t0

    async def check() -> None:
        async with LocalHost(db) as host:
            left = await host.runs("running")
            assert not left, f"{len(left)} runs still running"

    asyncio.run(check())
    return runs * steps / elapsed


def prepare_resume(db: Path, fires: int) -> None:
    """A run whose history has about ``2 * fires`` events, left waiting for a signal."""
    from flowcore_local import LocalHost

    spec = json.dumps(
        {
            "flow": "resume",
            "tools": {"noop": {"class": "idempotent"}},
            "budget": {"steps": fires + 10},
            "steps": [
                {
                    "id": "rec",
                    "repeat": {
                        "every_ms": 1,
                        "max_fires": fires,
                        "steps": [{"id": "ping", "call_tool": {"tool": "noop", "input": 1}}],
                    },
                },
                {"id": "go", "await_signal": {"signal": "go"}},
                {"id": "last", "call_tool": {"tool": "noop", "input": "last"}},
            ],
        }
    )

    async def main() -> None:
        async with LocalHost(db, registry=flowcore_registry(), durability="process-crash") as host:
            rid = await host.start(spec, {}, "r")
            stop = asyncio.Event()

            async def until_waiting() -> None:
                while not (await host.show(rid))["waitingFor"]:
                    await asyncio.sleep(0.05)
                stop.set()

            watcher = asyncio.create_task(until_waiting())
            await host.work(stop)
            await watcher

    asyncio.run(main())


def bench_resume(db: Path) -> float:
    """Seconds from opening the database to the resumed run's next effect running.

    The run's state is loaded from the database (as after a restart) when the
    signal it waits for arrives; the clock stops when the handler of the
    effect that follows is called. The run then settles (not timed: settling
    reads the run's whole report, once).
    """
    from flowcore_handlers import Registry
    from flowcore_local import LocalHost

    reached: list[float] = []

    def tool(effect: Any) -> Any:
        if effect.input == "last" and not reached:
            reached.append(time.perf_counter())
        return noop(effect.input)

    async def main() -> float:
        t0 = time.perf_counter()
        async with LocalHost(
            db, registry=Registry(tools={"noop": tool}), durability="power-loss"
        ) as host:
            await host.signal("r", "go")
            await host.work(until_settled="r")
            assert (await host.run("r")).status == "completed"
            return reached[0] - t0

    return asyncio.run(main())


# --- LangGraph -----------------------------------------------------------------------


class GraphState(TypedDict):
    i: int


def bench_langgraph(db: Path, steps: int) -> float:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, StateGraph

    def step(state: GraphState) -> GraphState:
        return {"i": noop(state["i"]) + 1}

    def route(state: GraphState) -> str:
        return END if state["i"] >= steps else "step"

    graph = StateGraph(GraphState)
    graph.add_node("step", step)
    graph.set_entry_point("step")
    graph.add_conditional_edges("step", route)
    conn = sqlite3.connect(db, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    app = graph.compile(checkpointer=SqliteSaver(conn))
    t0 = time.perf_counter()
    final = app.invoke(
        {"i": 0},
        {"configurable": {"thread_id": "t"}, "recursion_limit": steps + 10},
        durability="sync",
    )
    elapsed = time.perf_counter() - t0
    assert final["i"] == steps
    return elapsed


# --- DBOS ----------------------------------------------------------------------------


def bench_dbos(db: Path, steps: int) -> float:
    import logging

    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.WARNING)
    DBOS(
        config={
            "name": "bench",
            "system_database_url": f"sqlite:///{db}",
            "log_level": "WARNING",
        }
    )

    @DBOS.step()
    def step(i: int) -> int:
        return int(noop(i))

    @DBOS.workflow()
    def flow(n: int) -> int:
        total = 0
        for i in range(n):
            total += step(i)
        return total

    DBOS.launch()
    with sqlite3.connect(db) as conn:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    t0 = time.perf_counter()
    assert flow(steps) == steps * (steps - 1) // 2
    elapsed = time.perf_counter() - t0
    DBOS.destroy()
    print(f"# dbos journal_mode={mode}", file=sys.stderr)
    return elapsed


# --- the driver ------------------------------------------------------------------------


def child(system: str, steps: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        if system == "flowcore":
            value = bench_flowcore(db, steps)
        elif system == "flowcore-crash":  # the process-crash durability mode
            value = bench_flowcore(db, steps, "process-crash")
        elif system == "flowcore-async":  # an async handler: no thread hop
            value = bench_flowcore(db, steps, registry=flowcore_async_registry())
        elif system == "langgraph":
            value = bench_langgraph(db, steps)
        elif system == "dbos":
            value = bench_dbos(db, steps)
        elif system == "throughput":
            value = bench_throughput(db, 100, steps)
        elif system.startswith("workers-"):
            value = bench_workers(db, int(system.split("-")[1]))
        elif system.startswith("resume-"):
            prepare_resume(db, int(system.split("-")[1]))
            value = bench_resume(db)
        else:
            raise SystemExit(f"unknown system {system}")
    print(json.dumps(value))


def commit_floor(directory: Path, commits: int = 300) -> float:
    """Median seconds of one fsync'd SQLite commit of a single small row.

    A sequential step needs one durable commit before its next effect may
    run (the dispatch must be on disk first), so this is a floor under the
    per-step figure of any SQLite host on this disk.
    """
    conn = sqlite3.connect(directory / "floor.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE t (a INTEGER PRIMARY KEY, b BLOB)")
    times = []
    for _ in range(commits):
        conn.execute("BEGIN")
        conn.execute("INSERT INTO t (b) VALUES (?)", (b"x" * 200,))
        t0 = time.perf_counter()
        conn.execute("COMMIT")
        times.append(time.perf_counter() - t0)
    conn.close()
    return statistics.median(times)


def thread_round_trip(calls: int = 2000) -> float:
    """Median seconds for an event loop to run a no-op in a thread and resume.

    A sync handler costs at least this per step on top of the commit.
    """

    async def main() -> float:
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            await asyncio.to_thread(noop, None)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    return asyncio.run(main())


def measure(system: str, steps: int) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--child", system, "--steps", str(steps)],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{system} failed:\n{out.stderr}")
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--child")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-resume", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps)
        return
    steps = args.steps
    per_step: dict[str, float] = {}
    for system in ("flowcore", "langgraph", "dbos", "flowcore-async", "flowcore-crash"):
        runs = [measure(system, steps) / steps * 1000 for _ in range(args.repeat)]
        per_step[system] = statistics.median(runs)
    with tempfile.TemporaryDirectory() as tmp:
        floor = commit_floor(Path(tmp))
    print(f"sequential flow of {steps} steps, fsync on, median of {args.repeat} runs")
    print(f"(one fsync'd SQLite commit of a single row on this disk: {floor * 1000:.3f} ms;")
    hop = thread_round_trip()
    print(f" a no-op's round trip from the event loop to a thread: {hop * 1000:.3f} ms)")
    print(f"{'system':<16}{'ms/step':>10}{'vs flowcore':>14}")
    notes = {
        "flowcore-async": "flowcore with an async no-op handler (on the loop, no thread hop)",
        "flowcore-crash": "flowcore, durability process-crash (no fsync per commit)",
    }
    for system, value in per_step.items():
        ratio = value / per_step["flowcore"]
        if system in notes:
            print(f"{notes[system]}: {value:.3f} ms/step, {ratio:.2f}x flowcore's")
            continue
        print(f"{system:<16}{value:>10.3f}{ratio:>13.1f}x")
    throughput = statistics.median(measure("throughput", 100) for _ in range(args.repeat))
    print(f"throughput, 100 runs x 100 steps at once: {throughput:,.0f} durable steps/s")
    one = statistics.median(measure("workers-1", 0) for _ in range(args.repeat))
    two = statistics.median(measure("workers-2", 0) for _ in range(args.repeat))
    print(
        f"worker processes on one database (100 runs x 100 steps, process start included):"
        f" 1 worker {one:,.0f} steps/s, 2 workers {two:,.0f} steps/s, ratio {two / one:.2f}x"
    )
    if not args.skip_resume:
        small = statistics.median(measure("resume-500", 0) for _ in range(args.repeat))
        large = statistics.median(measure("resume-50000", 0) for _ in range(args.repeat))
        print(
            f"resume: 1k-event history {small * 1000:.1f} ms, 100k-event history "
            f"{large * 1000:.1f} ms, ratio {large / small:.2f}x"
        )


if __name__ == "__main__":
    main()
