"""Deleting runs from the local host's database: one run tree, or every old one.

A run is deleted with its whole tree (its child runs, theirs, ...), never in
part: every row of every run of the tree — the tables of ``_db.RUN_TABLES``,
then the ``runs`` rows — goes in one transaction, so a crash in the middle
leaves the tree whole, and a stored spec (``flows``) goes with the last run
that referred to it. What may be deleted is checked inside that same
transaction:

- no run of the tree is ``running`` (``LocalHost.delete`` with ``force``
  cancels them and waits for them to settle first; this module never cancels);
- the tree's root is not the child of a running run (that parent still owns
  it: delete the parent's tree once it settles).

``prune`` deletes root runs that settled before a time, each with its tree,
a batch of trees per transaction. This module never touches another run's
rows, and never runs ``VACUUM`` by itself (``vacuum`` is the operator's call).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import flowcore
from flowcore_handlers import Deleted

from ._db import FLOW_REFERENCES, RUN_TABLES, Connection
from ._flows import reachable_flows
from ._store import HostError, LocalUnknownRun, Store

__all__ = [
    "PRUNE_BATCH",
    "SETTLED",
    "Deleted",
    "active_runs",
    "checked_statuses",
    "delete_tree",
    "prunable_roots",
    "prune_batch",
    "listed",
    "refusal",
    "tree",
    "vacuum",
]

SETTLED = ("completed", "failed", "cancelled", "budget-exhausted")
PRUNE_BATCH = 100  # root runs (with their trees) per transaction of a prune

# The run ``?`` and every run below it. UNION (not UNION ALL) stops at a run
# seen before, whatever the rows say. A child's depth is its parent's plus
# one: this order lists parents first, the run ``?`` first of all.
_TREE = (
    "WITH RECURSIVE tree(id) AS (SELECT ? UNION SELECT r.run_id FROM runs r"
    " JOIN tree ON r.parent_run = tree.id)"
    " SELECT r.run_id, r.parent_run, r.status, r.updated_ms, r.spec_hash"
    " FROM tree JOIN runs r ON r.run_id = tree.id ORDER BY r.depth, r.created_ms, r.run_id"
)
_CHUNK = 500  # ids per statement: SQLite takes at most 32,766 parameters


def _delete_in(conn: Connection, table: str, column: str, ids: list[str]) -> int:
    """Delete the rows of ``table`` whose ``column`` is one of ``ids``; how many."""
    deleted = 0
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        sql = f"DELETE FROM {table} WHERE {column} IN ({marks})"
        deleted += max(conn.execute(sql, chunk).rowcount, 0)
    return deleted


@dataclass(frozen=True)
class Node:
    """One run of a tree, as deleting it needs it."""

    run_id: str
    parent_run: str | None
    status: str
    updated_ms: int
    spec_hash: str


class _Rollback(Exception):
    """Raised inside a dry run's transaction to undo it."""


def tree(store: Store, run_id: str) -> list[Node]:
    """``run_id`` and every run below it, parents first (empty: no such run)."""
    return [Node(*row) for row in store.conn.execute(_TREE, (run_id,))]


def _known_tree(store: Store, run_id: str) -> list[Node]:
    nodes = tree(store, run_id)
    if not nodes:
        raise LocalUnknownRun(run_id, f"no run {run_id!r} in the database")
    parent = nodes[0].parent_run
    if parent is not None:
        row = store.conn.execute("SELECT status FROM runs WHERE run_id = ?", (parent,)).fetchone()
        if row is not None and row[0] == "running":
            raise HostError(
                f"cannot delete run {run_id!r}: it is a child run of {parent!r}, which is still"
                f" running; a child run goes with its parent's tree: delete {parent!r} once"
                " it settles"
            )
    return nodes


def active_runs(store: Store, run_id: str) -> list[str]:
    """The runs of ``run_id``'s tree that have not settled, parents first.

    Raises ``HostError`` for an unknown run and for a child run whose parent
    is running (which is never deleted, forced or not).
    """
    return [n.run_id for n in _known_tree(store, run_id) if n.status == "running"]


def listed(run_ids: list[str], most: int = 5) -> str:
    shown = ", ".join(repr(r) for r in run_ids[:most])
    more = len(run_ids) - most
    return shown + (f" and {more} more" if more > 0 else "")


def refusal(run_id: str, active: list[str]) -> HostError:
    """The error for a delete of a tree with runs still running."""
    which = "it is" if active == [run_id] else f"runs of its tree are ({listed(active)})"
    return HostError(
        f"cannot delete run {run_id!r}: {which} still running; cancel it and delete it once"
        " it settles, or force the delete (--force), which does both"
    )


def delete_tree(store: Store, run_id: str) -> Deleted:
    """Delete ``run_id`` and its child runs, in a transaction of its own.

    Refused (``HostError``, nothing deleted) for an unknown run, a child run
    of a running run, and a tree with a run still running.
    """
    result = Deleted()

    def deleting() -> None:
        nodes = _known_tree(store, run_id)
        active = [n.run_id for n in nodes if n.status == "running"]
        if active:
            raise refusal(run_id, active)
        result.roots.append(run_id)
        result.runs.extend(n.run_id for n in nodes)
        result.rows.update(_remove(store, nodes))

    _in_tx(store, deleting, dry_run=False)
    return result


def _in_tx(store: Store, body: Callable[[], None], dry_run: bool) -> None:
    """Run ``body`` in a transaction; committed, or (``dry_run``) rolled back."""
    try:
        with store.tx():
            body()
            if dry_run:
                raise _Rollback
    except _Rollback:
        pass


def _remove(store: Store, nodes: list[Node]) -> dict[str, int]:
    """Delete the rows of ``nodes`` (whole trees) in the open transaction; rows per table."""
    conn = store.conn
    ids = [n.run_id for n in nodes]
    rows: dict[str, int] = {}
    for table, column in RUN_TABLES.items():
        rows[table] = _delete_in(conn, table, column, ids)
    rows["runs"] = _delete_in(conn, "runs", "run_id", ids)
    rows["flows"] = _drop_specs(store, _used_specs(store, {n.spec_hash for n in nodes}))
    store.forget([n.run_id for n in nodes])
    return {table: n for table, n in rows.items() if n}


def _reachable(store: Store, spec_hash: str) -> set[str]:
    """The specs a run of ``spec_hash`` could start as subflows, itself included."""
    try:
        flow = store.flow_by_hash(spec_hash)
    except (HostError, flowcore.FlowcoreError):
        return {spec_hash}  # a spec this flowcore cannot read starts nothing here
    return {spec_hash} | {f.spec_hash for f in reachable_flows(store, flow)}


def _used_specs(store: Store, spec_hashes: set[str]) -> set[str]:
    """The specs deleted runs used: their own, and those they could start as subflows
    (a child run deleted before them left its spec to them)."""
    return set().union(*(_reachable(store, h) for h in spec_hashes))


def _drop_specs(store: Store, candidates: set[str]) -> int:
    """Delete the specs among ``candidates`` that nothing needs any more.

    A spec stays while a row of ``FLOW_REFERENCES`` names it (a run of it is
    left), and while a flow they name can start it as a subflow (the newest
    spec of a flow id is the one a subflow step starts; a running run, or a
    failed one that is resumed, would fail that step with ``unknown-flow``).
    """
    conn = store.conn

    def referred(spec_hash: str) -> bool:
        return any(
            conn.execute(f"SELECT 1 FROM {t} WHERE {c} = ? LIMIT 1", (spec_hash,)).fetchone()
            for t, c in FLOW_REFERENCES
        )

    unused = [spec_hash for spec_hash in sorted(candidates) if not referred(spec_hash)]
    if not unused:
        return 0
    needed: set[str] = set()
    for table, column in FLOW_REFERENCES:
        for (spec_hash,) in conn.execute(f"SELECT DISTINCT {column} FROM {table}"):
            if spec_hash not in needed:
                needed |= _reachable(store, spec_hash)
    gone = [h for h in unused if h not in needed]
    return _delete_in(conn, "flows", "spec_hash", gone)


def checked_statuses(statuses: Iterable[str] | None) -> tuple[str, ...]:
    """``statuses`` as a prune takes them (None: every settled status), or a HostError."""
    if statuses is None:
        return SETTLED
    if isinstance(statuses, str):
        statuses = (statuses,)
    chosen = tuple(statuses)
    for status in chosen:
        if status not in SETTLED:
            raise HostError(
                f"cannot prune runs with status {status!r}: a status is one of"
                f" {', '.join(SETTLED)} (running runs are never pruned)"
            )
    return chosen


def prunable_roots(store: Store, settled_before_ms: int, statuses: tuple[str, ...]) -> list[str]:
    """Root runs with one of ``statuses`` settled before ``settled_before_ms``, oldest first.

    A read, outside any transaction: ``prune_batch`` checks each again.
    """
    if not statuses:
        return []
    marks = ",".join("?" * len(statuses))
    return [
        run_id
        for (run_id,) in store.conn.execute(
            f"SELECT run_id FROM runs WHERE parent_run IS NULL AND status IN ({marks})"
            " AND updated_ms < ? ORDER BY updated_ms, run_id",
            (*statuses, settled_before_ms),
        )
    ]


def prune_batch(
    store: Store,
    roots: list[str],
    settled_before_ms: int,
    statuses: tuple[str, ...],
    dry_run: bool = False,
) -> Deleted:
    """Delete the trees of ``roots`` that may still be pruned, in one transaction.

    A tree is pruned when its root is a root run with one of ``statuses`` and
    every run of the tree settled before ``settled_before_ms`` (a run resumed,
    or a child still compensating, since ``prunable_roots`` keeps its tree).
    """
    result = Deleted(dry_run=dry_run)

    def pruning() -> None:
        doomed: list[Node] = []
        for root in roots:
            nodes = tree(store, root)
            if (
                nodes
                and nodes[0].parent_run is None
                and nodes[0].status in statuses
                and all(n.status != "running" and n.updated_ms < settled_before_ms for n in nodes)
            ):
                result.roots.append(root)
                doomed.extend(nodes)
        if doomed:
            result.runs.extend(n.run_id for n in doomed)
            result.rows.update(_remove(store, doomed))

    _in_tx(store, pruning, dry_run)
    return result


def vacuum(store: Store, path: Path | str) -> tuple[int, int]:
    """``VACUUM`` the database and checkpoint its WAL; its size (file and WAL) before and after.

    On PostgreSQL: ``VACUUM FULL`` of flowcore's tables (each rewritten, holding
    its lock meanwhile, as SQLite's ``VACUUM`` holds the file), and their size
    with their indexes and TOAST before and after.
    """
    if store.db.name == "postgresql":
        return _vacuum_pg(store)
    path = Path(path)

    def size() -> int:
        return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())

    before = size()
    store.conn.execute("VACUUM")
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return before, size()


_PG_TABLES = (
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = current_schema() AND c.relkind = 'r' ORDER BY c.relname"
)


def _vacuum_pg(store: Store) -> tuple[int, int]:
    conn = store.conn
    tables = [name for (name,) in conn.execute(_PG_TABLES).fetchall()]

    def size() -> int:
        return sum(
            int(conn.execute("SELECT pg_total_relation_size(?::regclass)", (t,)).fetchone()[0])
            for t in tables
        )

    before = size()
    for table in tables:
        conn.execute(f'VACUUM FULL "{table}"')
    return before, size()
