"""The local host's durable overhead, side by side with LangGraph and DBOS.

One run of this script, one machine, the same no-op tool, fsync on for all
three (SQLite WAL with synchronous=FULL):

* per-step durable overhead of a 1,000-step sequential flow: the flowcore
  local host (sync and async no-op handler, both durability modes); LangGraph
  with ``SqliteSaver`` (a one-node loop that checkpoints every super-step);
  DBOS with its SQLite system database (a workflow of 1,000 steps); and two
  floors timed the same way: fsync'd single-row commits, and fsync'd commits
  of the pages a flowcore step writes. Targets (ratios in one run): flowcore
  within 1.5x the single-row floor, >= 3x faster than LangGraph, >= 8x
  faster than DBOS.
* throughput with 100 runs active at once, in one process (sync and async
  handler) and in one against two ``flowcore worker`` processes (targets:
  3x the commit before the log-as-journal store, two workers >= 1.6x one).
* time to resume a run with a 100k-event history versus a 1k-event one
  (target <= 1.5x): open the database, load the run, and get its next effect
  running (its handler called).

Each measurement runs in its own subprocess (DBOS is a process-wide
singleton). LangGraph and DBOS come from the ``bench`` extra:
``pip install -e '.[bench]'``.

``--against REV`` also measures the two throughput figures (100 runs at once
in one process, and one against two ``flowcore worker`` processes) with the
code of the git revision REV, and prints each beside this tree's with the
ratio this/REV. REV's ``flowcore`` and ``hosts`` are exported to a temporary
directory that its measurements import first (``PYTHONPATH``); the two trees
are measured in turn, round after round, and each figure is the median of its
rounds. ``--only-throughput`` skips the sequential and resume measurements.

``--store postgres`` measures the PostgreSQL store instead, on a throwaway
server started as the tests start theirs (``tests/pg_server.py``; the
installed PostgreSQL binaries and psycopg): the sequential flow's per-step
cost against the server's floor (single-row commits, ``synchronous_commit``
on) and DBOS's on the same server; and 100 runs x 100 steps with 1, 2 and 4
``flowcore worker`` processes, each beside the CPU (user + system) every
worker process and the server used, and how many of the machine's cores
that kept busy.

Run: ``python benchmarks/bench_local_host.py [--steps N] [--repeat K]
[--skip-resume] [--only-throughput] [--against REV] [--store postgres]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict
from urllib.parse import quote, urlencode

#: The repository holding this script: the tree ``--against`` compares with REV.
REPO = Path(__file__).resolve().parent.parent


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
    db: Path | str, steps: int, durability: Any = "power-loss", registry: Any = None
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


def wal_frames(db: Path, steps: int) -> float:
    """WAL frames (pages) written per step of the sequential flow: what each
    step's fsync'd commit carries (the WAL is not checkpointed in between)."""
    from flowcore_local import LocalHost

    spec = json.dumps(sequential_spec(steps))
    wal = db.with_name(db.name + "-wal")

    async def main() -> float:
        async with LocalHost(db, registry=flowcore_async_registry()) as host:
            host.store.register_flow(spec, "<bench>", 0)
            rid = await host.start(spec, {}, "r")
            before = wal.stat().st_size
            await host.work(until_settled=rid)
            return (wal.stat().st_size - before) / (4096 + 24) / steps

    return asyncio.run(main())


def bench_throughput(db: Path, runs: int, steps: int, registry: Any = None) -> float:
    from flowcore_local import LocalHost

    spec = json.dumps(sequential_spec(steps, "thr"))

    async def main() -> float:
        # Only the arguments every revision's LocalHost takes (older ones had
        # ``durable=``): ``--against`` runs this with another commit's host.
        # The default durability is fsync per commit (``power-loss``) in all.
        handlers = registry if registry is not None else flowcore_registry()
        async with LocalHost(db, registry=handlers) as host:
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


def bench_workers(
    db: Path | str,
    workers: int,
    runs: int = 100,
    steps: int = 100,
    handler: str = "sync",
    durability: str | None = None,
    where: Path | None = None,
) -> list[float]:
    """Durable steps/s of ``workers`` ``flowcore worker`` processes on one database
    holding ``runs`` runs of ``steps`` steps, started before the clock starts:
    [from the processes' start to their end, from the first event the workers
    applied to the last (the log's own times: the processes' start and exit
    left out), the seconds from the start to the end, the CPU seconds (user +
    system) the PostgreSQL server used meanwhile (0 for a SQLite file), then
    each worker process's CPU seconds (user + system, from ``wait4``)].
    ``handler``: the no-op tool as a ``sync`` or an ``async`` function.
    ``durability``: the workers' ``--durability`` (None: the default, fsync'd).
    ``db``: a SQLite file, or a PostgreSQL URL with the tools written to ``where``."""
    from flowcore_local import LocalHost

    tools = (db.parent if isinstance(db, Path) else where or Path.cwd()) / "bench_tools.py"
    source = WORKER_TOOLS if handler == "sync" else WORKER_TOOLS.replace("def ", "async def ")
    tools.write_text(source)
    spec = json.dumps(sequential_spec(steps, "par"))

    async def prepare() -> None:
        async with LocalHost(db, str(tools)) as host:
            for i in range(runs):
                await host.start(spec, {}, f"r{i}")

    asyncio.run(prepare())
    # The flowcore_cli first on the path: a compared revision's, through
    # PYTHONPATH. -P keeps the working directory off sys.path, where a
    # checkout's own packages would shadow it.
    command = [sys.executable, "-P", "-m", "flowcore_cli", "worker", "--until-idle"]
    command += ["--db", str(db), "--tools", str(tools)]
    if durability is not None:
        command += ["--durability", durability]
    server_before = 0.0 if isinstance(db, Path) else server_cpu(db)
    t0 = time.perf_counter()
    procs = [subprocess.Popen(command, stdout=subprocess.DEVNULL) for _ in range(workers)]
    cpu: list[float] = []
    for proc in procs:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"a worker exited with {proc.returncode}")
        cpu.append(usage.ru_utime + usage.ru_stime)
    elapsed = time.perf_counter() - t0
    # The workers' server processes end as their connections close: a moment
    # for the server to reap them (their time then counts as its own).
    server = 0.0
    if not isinstance(db, Path):
        time.sleep(0.5)
        server = server_cpu(db) - server_before

    async def check() -> None:
        async with LocalHost(db) as host:
            left = await host.runs("running")
            assert not left, f"{len(left)} runs still running"

    asyncio.run(check())
    sql = "SELECT MIN(at), MAX(at), COUNT(*) FROM log WHERE type = 'event.reported'"
    if isinstance(db, Path):
        with contextlib.closing(sqlite3.connect(db)) as conn:
            first, last, events = conn.execute(sql).fetchone()
    else:
        import psycopg

        with psycopg.connect(db) as pg:
            row = pg.execute(sql).fetchone()
            assert row is not None
            first, last, events = row
    assert events == runs * steps, events
    rates = [runs * steps / elapsed, events / max((last - first) / 1000, 0.001)]
    return [*rates, elapsed, server, *cpu]


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


def bench_dbos(db: Path, steps: int, url: str | None = None) -> float:
    """DBOS's 1,000-step workflow on its SQLite system database ``db``, or on the
    PostgreSQL database ``url`` (a SQLAlchemy URL)."""
    import logging

    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.WARNING)
    DBOS(
        config={
            "name": "bench",
            "system_database_url": url or f"sqlite:///{db}",
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
    mode = "(PostgreSQL)"
    if url is None:
        with sqlite3.connect(db) as conn:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    t0 = time.perf_counter()
    assert flow(steps) == steps * (steps - 1) // 2
    elapsed = time.perf_counter() - t0
    DBOS.destroy()
    print(f"# dbos journal_mode={mode}", file=sys.stderr)
    return elapsed


# --- the driver ------------------------------------------------------------------------


def child(system: str, steps: int, tree: Path | None, pg: str | None = None) -> None:
    if tree is not None:
        check_imports(tree)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        value: float | list[float]
        if pg is not None:
            value = pg_child(system, steps, pg, Path(tmp))
        elif system == "floor":
            value = commit_floor(db, steps)
        elif system == "step-floor":
            value = commit_floor(db, steps, pages=STEP_PAGES)
        elif system == "flowcore":
            value = bench_flowcore(db, steps)
        elif system == "flowcore-crash":  # the process-crash durability mode
            value = bench_flowcore(db, steps, "process-crash")
        elif system == "flowcore-async-crash":  # what a step costs but its fsync
            value = bench_flowcore(db, steps, "process-crash", flowcore_async_registry())
        elif system == "flowcore-async":  # an async handler: no thread hop
            value = bench_flowcore(db, steps, registry=flowcore_async_registry())
        elif system == "langgraph":
            value = bench_langgraph(db, steps)
        elif system == "dbos":
            value = bench_dbos(db, steps)
        elif system == "wal-frames":
            value = wal_frames(db, steps)
        elif system == "throughput":
            value = bench_throughput(db, 100, steps)
        elif system == "throughput-async":
            value = bench_throughput(db, 100, steps, flowcore_async_registry())
        elif system.startswith("workers-"):  # workers-N-sync, workers-N-async[-crash]
            _, workers, handler, *crash = system.split("-")
            durability = "process-crash" if crash else None
            value = bench_workers(db, int(workers), handler=handler, durability=durability)
        elif system.startswith("resume-"):
            prepare_resume(db, int(system.split("-")[1]))
            value = bench_resume(db)
        else:
            raise SystemExit(f"unknown system {system}")
    print(json.dumps(value))


#: The pages (WAL frames) a sequential step's commit writes: its log records,
#: its run's row and its outbox rows are in three b-trees (the figure the
#: script prints as "WAL frames per sequential step" is about 4).
STEP_PAGES = 4


def commit_floor(db: Path, commits: int, pages: int = 1) -> float:
    """Seconds for ``commits`` fsync'd SQLite transactions, one after the other,
    each writing one small row into each of ``pages`` tables (a page each).

    A sequential step needs one durable commit before its next effect may
    run (the dispatch must be on disk first), so ``pages=1`` is a floor under
    the per-step figure of any SQLite host on this disk, and ``STEP_PAGES``
    the floor of a commit holding what a flowcore step writes. It is measured
    as the flows are (the whole run's time, so its slow commits count as
    theirs do) in each round next to them.
    """
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    for table in range(pages):
        conn.execute(f"CREATE TABLE t{table} (a INTEGER PRIMARY KEY, b BLOB)")
    t0 = time.perf_counter()
    for _ in range(commits):
        conn.execute("BEGIN IMMEDIATE")
        for table in range(pages):
            conn.execute(f"INSERT INTO t{table} (b) VALUES (?)", (b"x" * 200,))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed


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


# --- another revision's code -----------------------------------------------------------

#: What the measurements import; with ``--against`` each must come from the tree measured.
PACKAGES = ("flowcore", "flowcore_local", "flowcore_handlers", "flowcore_cli")


@dataclass(frozen=True)
class Tree:
    """Code to measure: ``root`` holds its ``flowcore/`` and ``hosts/``."""

    label: str
    root: Path

    def env(self) -> dict[str, str]:
        """The environment of a process that imports this tree's packages first
        (the editable install is a ``.pth`` path list, which PYTHONPATH precedes)."""
        paths = [str(self.root), str(self.root / "hosts")]
        if os.environ.get("PYTHONPATH"):
            paths.append(os.environ["PYTHONPATH"])
        return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


@contextlib.contextmanager
def exported(rev: str) -> Iterator[Tree]:
    """The tree of ``rev`` (its ``flowcore`` and ``hosts``) in a temporary
    directory, removed on exit; labelled with its short commit hash."""
    git = ["git", "-C", str(REPO)]
    parsed = subprocess.run(
        [*git, "rev-parse", "--verify", "--quiet", "--short", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if parsed.returncode != 0:
        raise SystemExit(f"--against: {rev!r} is not a commit of the repository at {REPO}")
    commit = parsed.stdout.strip()
    with tempfile.TemporaryDirectory(prefix=f"bench-{commit}-") as tmp:
        archive = subprocess.run(
            [*git, "archive", commit, "flowcore", "hosts"],
            capture_output=True,
            check=False,
        )
        if archive.returncode != 0:
            raise SystemExit(f"cannot export {rev}:\n{archive.stderr.decode().strip()}")
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        yield Tree(commit, Path(tmp))


def check_imports(root: Path) -> None:
    """Fail unless every one of ``PACKAGES`` is found under ``root``: a figure
    labelled with a revision must be that revision's code. The worker processes
    resolve them on the same path (same interpreter and environment, -P)."""
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
        if origin is None or not origin.is_relative_to(root.resolve()):
            raise SystemExit(f"{name} is imported from {origin}, not from the tree at {root}")


def measure(system: str, steps: int, tree: Tree | None = None, pg: str | None = None) -> Any:
    """``system``'s figure, from a child process; with ``tree``, that tree's code;
    with ``pg``, on the PostgreSQL server of that URL."""
    command = [sys.executable, __file__, "--child", system, "--steps", str(steps)]
    if tree is not None:
        command += ["--tree", str(tree.root)]
    if pg is not None:
        command += ["--pg", pg]
    out = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=False,
        env=tree.env() if tree is not None else None,
    )
    if out.returncode != 0:
        where = f" with {tree.label}" if tree is not None else ""
        raise SystemExit(f"{system}{where} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def medians(
    system: str, steps: int, trees: Sequence[Tree | None], repeat: int, pg: str | None = None
) -> list[Any]:
    """The median of ``repeat`` measurements of ``system`` for each of ``trees``,
    taken in turn (each tree once per round), so that the drift of a noisy
    machine falls on all of them alike. A measurement of several figures (a
    list) gives the median of each."""
    runs: list[list[Any]] = [[] for _ in trees]
    for _ in range(repeat):
        for values, tree in zip(runs, trees, strict=True):
            values.append(measure(system, steps, tree, pg))
    return [
        [statistics.median(figure) for figure in zip(*values, strict=True)]
        if isinstance(values[0], list)
        else statistics.median(values)
        for values in runs
    ]


def beside(values: Sequence[float], trees: Sequence[Tree | None], unit: str = "") -> str:
    """The first figure, then each other tree's with the ratio first/other."""
    text = f"{values[0]:,.0f}{unit}"
    others = [
        f"{tree.label}: {value:,.0f}; {values[0] / value:.2f}x"
        for value, tree in zip(values[1:], trees[1:], strict=True)
        if tree is not None
    ]
    return text + (f" ({'; '.join(others)})" if others else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--child")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-resume", action="store_true")
    parser.add_argument(
        "--only-throughput",
        action="store_true",
        help="only the throughput figures (no sequential flow, no resume)",
    )
    parser.add_argument(
        "--against",
        metavar="REV",
        help="also measure the throughput figures with the code of this git revision",
    )
    parser.add_argument(
        "--store",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="postgres: the PostgreSQL figures, on a throwaway server (tests/pg_server.py)",
    )
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--pg", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.tree, args.pg)
        return
    if args.store == "postgres":
        if args.against:
            raise SystemExit("--against measures the SQLite store only")
        report_postgres(args)
        return
    with contextlib.ExitStack() as stack:
        trees: list[Tree | None] = [None]
        if args.against:
            trees = [Tree("this tree", REPO), stack.enter_context(exported(args.against))]
        report(args, trees)


def report(args: argparse.Namespace, trees: Sequence[Tree | None]) -> None:
    if not args.only_throughput:
        sequential(args.steps, args.repeat)
    against = trees[-1]
    if against is not None:
        print(
            f"against {args.against} ({against.label}): this tree and {against.label}"
            f" measured in turn, {args.repeat} round(s), medians"
        )
    frames = medians("wal-frames", 300, trees, 1)
    print(
        "WAL frames per sequential step (300 steps): "
        + ", ".join(
            f"{tree.label if tree else 'this tree'}: {value:.2f}"
            for value, tree in zip(frames, trees, strict=True)
        )
    )
    throughput = medians("throughput", 100, trees, args.repeat)
    print(
        "throughput, 100 runs x 100 steps at once: " + beside(throughput, trees, " durable steps/s")
    )
    throughput = medians("throughput-async", 100, trees, args.repeat)
    print(
        "  the same with an async no-op handler: " + beside(throughput, trees, " durable steps/s")
    )
    for handler in ("sync", "async"):
        one = medians(f"workers-1-{handler}", 0, trees, args.repeat)
        two = medians(f"workers-2-{handler}", 0, trees, args.repeat)
        print(f"flowcore worker processes on one database, 100 runs x 100 steps, {handler} no-op:")
        for figure, how in enumerate(("process start to exit", "first event to last")):
            pair = [[o[figure], t[figure]] for o, t in zip(one, two, strict=True)]
            scaling = f"2 vs 1: {pair[0][1] / pair[0][0]:.2f}x"
            if against is not None:
                scaling += f" ({against.label}: {pair[1][1] / pair[1][0]:.2f}x)"
            print(
                f"  {how}: 1 worker {beside([p[0] for p in pair], trees, ' steps/s')},"
                f" 2 workers {beside([p[1] for p in pair], trees, ' steps/s')}; {scaling}"
            )
    # Without an fsync per commit, which each worker makes holding SQLite's
    # one write lock: what the two processes scale to when that is not waited for.
    one, two = (medians(f"workers-{n}-async-crash", 0, trees[:1], args.repeat)[0] for n in (1, 2))
    print(
        "  the same in the process-crash mode (this tree), first event to last:"
        f" 1 worker {one[1]:,.0f} steps/s, 2 workers {two[1]:,.0f} steps/s;"
        f" 2 vs 1: {two[1] / one[1]:.2f}x"
    )
    if not (args.skip_resume or args.only_throughput):
        small = statistics.median(measure("resume-500", 0) for _ in range(args.repeat))
        large = statistics.median(measure("resume-50000", 0) for _ in range(args.repeat))
        print(
            f"resume: 1k-event history {small * 1000:.1f} ms, 100k-event history "
            f"{large * 1000:.1f} ms, ratio {large / small:.2f}x"
        )


SEQUENTIAL = {
    "floor": "fsync'd single-row commits",
    "step-floor": f"fsync'd commits of {STEP_PAGES} pages (what a step writes)",
    "flowcore": "flowcore",
    "flowcore-async": "flowcore, async no-op handler (on the loop, no thread hop)",
    "flowcore-crash": "flowcore, durability process-crash (no fsync per commit)",
    "flowcore-async-crash": "flowcore, async handler, durability process-crash",
    "langgraph": "LangGraph + SqliteSaver",
    "dbos": "DBOS on SQLite",
}


def sequential(steps: int, repeat: int) -> None:
    """The per-step overhead of a sequential flow: flowcore, LangGraph, DBOS, and
    the floor, each measured once per round, in turn; each ratio is the median of
    the rounds' ratios (a slow moment of the machine falls on one round)."""
    times: dict[str, list[float]] = {system: [] for system in SEQUENTIAL}
    for _ in range(repeat):
        for system, values in times.items():
            values.append(measure(system, steps) / steps * 1000)

    def ratio(system: str, to: str) -> float:
        return statistics.median(a / b for a, b in zip(times[system], times[to], strict=True))

    hop = thread_round_trip()
    print(f"sequential flow of {steps} steps, fsync on, {repeat} rounds, medians")
    print(f"(a no-op's round trip from the event loop to a thread: {hop * 1000:.3f} ms)")
    print(f"{'':<60}{'ms/step':>9}{'vs floor':>10}{'vs flowcore async':>19}")
    for system, label in SEQUENTIAL.items():
        print(
            f"{label:<60}{statistics.median(times[system]):>9.3f}"
            f"{ratio(system, 'floor'):>9.2f}x{ratio(system, 'flowcore-async'):>18.2f}x"
        )
    # The comparisons' targets as ratios to the floor of the same rounds: a
    # peer's ratio to the floor, divided by the factor flowcore must beat it
    # by. Under 1.00x, no host that makes one fsync'd commit per step (the
    # dispatch on disk before the handler runs) can meet it.
    for system, factor in (("langgraph", 3), ("dbos", 8)):
        print(
            f"{factor}x faster than {SEQUENTIAL[system]} is"
            f" {ratio(system, 'floor') / factor:.2f}x the floor"
            f" (flowcore, async handler: {ratio('flowcore-async', 'floor'):.2f}x)"
        )


# --- PostgreSQL (--store postgres) -----------------------------------------------------


def with_query(url: str, **params: str) -> str:
    """``url`` with ``params`` added to its query string."""
    return url + ("&" if "?" in url else "?") + urlencode(params, quote_via=quote)


def pg_schema(server: str, name: str) -> str:
    """A new, empty schema ``name`` on the server at ``server``, as the URL of a
    host whose tables go into it."""
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        conn.execute(f'CREATE SCHEMA "{name}"')
    return with_query(server, options=f"-csearch_path={name}")


def pg_floor(url: str, commits: int) -> float:
    """Seconds for ``commits`` transactions of one single-row insert each, one
    after the other, ``synchronous_commit`` on (each commit waits for the
    server's WAL flush): the floor under a durable step on this server, as
    ``commit_floor`` is on a SQLite file."""
    import psycopg

    with psycopg.connect(url) as conn:
        conn.execute("SET synchronous_commit = on")
        conn.execute("CREATE TABLE floor (a BIGSERIAL PRIMARY KEY, b BYTEA)")
        conn.commit()
        t0 = time.perf_counter()
        for _ in range(commits):
            conn.execute("INSERT INTO floor (b) VALUES (%s)", (b"x" * 200,))
            conn.commit()
        return time.perf_counter() - t0


def _cpu_fields(pid: str) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command's name (state first)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def server_cpu(url: str) -> float:
    """CPU seconds (user + system) the PostgreSQL server at ``url`` has used:
    its postmaster's own and its reaped children's, and each live child's
    (``/proc``; the server on this machine)."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        postmaster = _cpu_fields(str(row[0]))[1]
        ticks = 0
        fields = _cpu_fields(postmaster)
        ticks += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or pid == postmaster:
                continue
            try:
                fields = _cpu_fields(pid)
            except OSError:
                continue  # ended meanwhile
            if fields[1] == postmaster:
                ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def pg_child(system: str, steps: int, server: str, tmp: Path) -> float | list[float]:
    """``system``'s figure on the PostgreSQL server ``server`` (a URL), in a new
    schema (DBOS: a new database) of its own."""
    name = f"bench_{os.getpid()}"
    if system == "dbos":
        import psycopg

        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        at = server.replace("/postgres?", f"/{name}?", 1)
        return bench_dbos(
            tmp / "unused.db", steps, at.replace("postgresql://", "postgresql+psycopg://", 1)
        )
    db = pg_schema(server, name)
    if system == "pg-floor":
        return pg_floor(db, steps)
    if system == "flowcore":
        return bench_flowcore(db, steps)
    if system == "flowcore-async":
        return bench_flowcore(db, steps, registry=flowcore_async_registry())
    if system.startswith("workers-"):  # workers-N-sync, workers-N-async
        _, workers, handler = system.split("-")
        return bench_workers(db, int(workers), handler=handler, where=tmp)
    raise SystemExit(f"unknown system {system} on PostgreSQL")


PG_SEQUENTIAL = {
    "pg-floor": "single-row commits, synchronous_commit on",
    "flowcore": "flowcore",
    "flowcore-async": "flowcore, async no-op handler",
    "dbos": "DBOS on the same server",
}


def report_postgres(args: argparse.Namespace) -> None:
    """The PostgreSQL figures: a throwaway server started as the tests start
    theirs (``tests/pg_server.py``: Unix socket, ``fsync`` and
    ``synchronous_commit`` on), stopped and removed at the end."""
    sys.path.insert(0, str(REPO))
    import pytest

    from tests.pg_server import throwaway_server

    try:
        with throwaway_server() as server:
            url = server.url()
            print(f"PostgreSQL: a throwaway server on this machine ({os.cpu_count()} cores)")
            if not args.only_throughput:
                sequential_pg(args.steps, args.repeat, url)
            workers_pg(args.repeat, url)
    except pytest.skip.Exception as e:
        raise SystemExit(f"--store postgres: {e.msg}") from None


def sequential_pg(steps: int, repeat: int, url: str) -> None:
    """Per-step cost of the sequential flow on PostgreSQL against the server's
    own floor, and DBOS's on the same server; each ratio the median of the
    rounds' ratios."""
    times: dict[str, list[float]] = {system: [] for system in PG_SEQUENTIAL}
    for _ in range(repeat):
        for system, values in times.items():
            values.append(measure(system, steps, pg=url) / steps * 1000)

    def ratio(system: str, to: str) -> float:
        return statistics.median(a / b for a, b in zip(times[system], times[to], strict=True))

    print(f"sequential flow of {steps} steps, synchronous_commit on, {repeat} rounds, medians")
    print(f"{'':<50}{'ms/step':>9}{'vs floor':>10}{'vs flowcore':>13}")
    for system, label in PG_SEQUENTIAL.items():
        print(
            f"{label:<50}{statistics.median(times[system]):>9.3f}"
            f"{ratio(system, 'pg-floor'):>9.2f}x{ratio(system, 'flowcore'):>12.2f}x"
        )
    print(
        f"DBOS / flowcore per step: {ratio('dbos', 'flowcore'):.2f}x"
        f" (async handler: {ratio('dbos', 'flowcore-async'):.2f}x)"
    )


def workers_pg(repeat: int, url: str) -> None:
    """Throughput of 1, 2 and 4 ``flowcore worker`` processes on one PostgreSQL
    database, with the CPU each process and the server used: their sum over
    the wall time is how many of the machine's cores were busy."""
    print(
        "flowcore worker processes on one PostgreSQL database, 100 runs x 100 steps,"
        f" sync no-op, {repeat} round(s), medians"
    )
    base: list[float] = []
    for n in (1, 2, 4):
        figures = medians(f"workers-{n}-sync", 0, [None], repeat, pg=url)[0]
        wall, events, elapsed, server, *cpu = figures
        if not base:
            base = [wall, events]
        busy = (sum(cpu) + server) / elapsed
        print(
            f"  {n} worker{'s' if n > 1 else ' '}: {wall:,.0f} steps/s start to exit"
            f" ({wall / base[0]:.2f}x one), {events:,.0f} first event to last"
            f" ({events / base[1]:.2f}x); {elapsed:.1f} s; CPU s: workers "
            + " ".join(f"{c:.1f}" for c in cpu)
            + f", server {server:.1f}; {busy:.2f} of {os.cpu_count()} cores busy"
        )


if __name__ == "__main__":
    main()
