"""Spec versions by hash, for workers that run pinned runs (a passthrough module).

A run pins its spec by hash (``Flow.spec_hash``). A worker that runs it needs
that exact text, whichever versions were deployed since: a ``SpecRegistry``
holds every version it was given, side by side (``specs/v1/order.yaml``,
``specs/v2/order.yaml``), indexed by hash. It is built from folders (every
``*.yaml``, ``*.yml`` and ``*.json`` under them, recursively) or from texts
(``from_texts``, ``add``: specs kept in a store).

A lookup that misses rescans the folders, at most once per ``rescan_s``
seconds, so a version deployed while the worker runs is found without a
restart. A file that cannot be read or is not a valid flow spec is skipped
and reported in ``problems`` (the latest scan's); nothing a file holds makes
a lookup raise anything but ``SpecNotDeployed``.

Workflow code calls ``lookup``: this module is passed through the sandbox
(``PASSTHROUGH_MODULES``), so every run of the process shares the registry
the worker installed (``install``). Reading files from a workflow is safe
here because the answer is content-addressed: a hash names one text, so a
lookup either returns exactly what any replay would get, or raises, which
fails the workflow task (retried) without recording anything in its history.

It never imports temporalio.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import flowcore
from flowcore import Flow

__all__ = [
    "SpecNotDeployed",
    "SpecProblem",
    "SpecRegistry",
    "install",
    "installed",
    "lookup",
]

SUFFIXES = (".yaml", ".yml", ".json")
RESCAN_S = 5.0


class SpecNotDeployed(LookupError):
    """No spec with ``spec_hash`` (of flow ``flow_id``) is known to this worker.

    ``folders`` are the folders searched (empty for a registry of texts, or
    when no registry is installed).
    """

    def __init__(self, spec_hash: str, flow_id: str, folders: tuple[str, ...], why: str) -> None:
        self.spec_hash = spec_hash
        self.flow_id = flow_id
        self.folders = folders
        super().__init__(why)


@dataclass(frozen=True)
class SpecProblem:
    """A file under a registry's folders that was skipped, and why."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True)
class _Entry:
    text: str
    flow: Flow
    source: str


class SpecRegistry:
    """Flow specs by ``spec_hash``; see the module docstring.

    ``folders``: scanned now and again on a miss (at most once per
    ``rescan_s`` seconds of ``clock``). Texts added with ``add`` stay.
    """

    def __init__(
        self,
        folders: Iterable[str | Path] | str | Path = (),
        *,
        rescan_s: float = RESCAN_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(folders, (str, Path)):
            folders = (folders,)
        self.folders: tuple[Path, ...] = tuple(Path(f) for f in folders)
        self.rescan_s = rescan_s
        self._clock = clock
        self._lock = threading.Lock()  # workflow activations run on several threads
        self._added: dict[str, _Entry] = {}
        self._scanned: dict[str, _Entry] = {}
        # What each file held when last parsed: (mtime_ns, size) -> entry or problem.
        self._files: dict[Path, tuple[tuple[int, int], _Entry | SpecProblem]] = {}
        self._problems: tuple[SpecProblem, ...] = ()
        self._last_scan: float | None = None
        if self.folders:
            self.scan()

    @classmethod
    def from_texts(cls, texts: Iterable[str], *, rescan_s: float = RESCAN_S) -> SpecRegistry:
        """A registry of these spec texts (no folders). Raises ``flowcore.SpecError``."""
        registry = cls(rescan_s=rescan_s)
        for i, text in enumerate(texts):
            registry.add(text, source=f"<text {i}>")
        return registry

    def add(self, text: str, source: str = "<text>") -> Flow:
        """Add one spec text; its flow. Raises ``flowcore.SpecError`` for an invalid one."""
        flow = flowcore.parse_flow(text, source_name=source)
        with self._lock:
            self._added.setdefault(flow.spec_hash, _Entry(text, flow, source))
        return flow

    @property
    def problems(self) -> tuple[SpecProblem, ...]:
        """The files the latest scan skipped, with why."""
        return self._problems

    def __len__(self) -> int:
        with self._lock:
            return len(self._added.keys() | self._scanned.keys())

    def hashes(self, flow_id: str | None = None) -> list[tuple[str, int, str]]:
        """``(flow_id, version, spec_hash)`` of every spec held (of ``flow_id`` if given)."""
        with self._lock:
            entries = {**self._scanned, **self._added}
        return sorted(
            (e.flow.id, e.flow.version, h)
            for h, e in entries.items()
            if flow_id is None or e.flow.id == flow_id
        )

    def scan(self) -> int:
        """Read the folders now; how many specs they hold. Never raises for a file."""
        files: dict[Path, tuple[tuple[int, int], _Entry | SpecProblem]] = {}
        scanned: dict[str, _Entry] = {}
        problems: list[SpecProblem] = []
        for folder in self.folders:
            for path in _spec_files(folder, problems):
                found = self._read(path)
                if found is None:
                    continue
                files[path] = found
                what = found[1]
                if isinstance(what, SpecProblem):
                    problems.append(what)
                else:
                    scanned.setdefault(what.flow.spec_hash, what)
        with self._lock:
            self._files = files
            self._scanned = scanned
            self._problems = tuple(problems)
            self._last_scan = self._clock()
        return len(scanned)

    def _read(self, path: Path) -> tuple[tuple[int, int], _Entry | SpecProblem] | None:
        """``path`` parsed (reusing the last parse of an unchanged file), or None if gone."""
        try:
            stat = path.stat()
        except OSError:
            return None  # removed while scanning
        stamp = (stat.st_mtime_ns, stat.st_size)
        known = self._files.get(path)
        if known is not None and known[0] == stamp:
            return known
        try:
            text = path.read_bytes().decode("utf-8")
            flow = flowcore.parse_flow(text, source_name=str(path))
        except flowcore.SpecError as exc:
            first = exc.problems[0] if exc.problems else None
            more = len(exc.problems) - 1
            message = f"not a valid flow spec: {first.message if first else exc}" + (
                f" (and {more} more)" if more > 0 else ""
            )
            return stamp, SpecProblem(str(path), message)
        except UnicodeDecodeError as exc:
            return stamp, SpecProblem(str(path), f"not UTF-8 (byte {exc.start})")
        except OSError as exc:
            return stamp, SpecProblem(str(path), f"cannot be read: {exc.strerror or exc}")
        except Exception as exc:  # a file must never break a lookup
            return stamp, SpecProblem(str(path), f"cannot be read: {type(exc).__name__}: {exc}")
        return stamp, _Entry(text, flow, str(path))

    def _entry(self, spec_hash: str) -> _Entry | None:
        with self._lock:
            return self._added.get(spec_hash) or self._scanned.get(spec_hash)

    def get(self, spec_hash: str) -> str | None:
        """The spec text with ``spec_hash``, or None; a miss rescans (see ``rescan_s``)."""
        entry = self._lookup(spec_hash)
        return None if entry is None else entry.text

    def flow(self, spec_hash: str) -> Flow | None:
        """The parsed flow with ``spec_hash``, or None; a miss rescans like ``get``."""
        entry = self._lookup(spec_hash)
        return None if entry is None else entry.flow

    def _lookup(self, spec_hash: str) -> _Entry | None:
        entry = self._entry(spec_hash)
        if entry is not None or not self.folders:
            return entry
        with self._lock:
            last = self._last_scan
            due = last is None or self._clock() - last >= self.rescan_s
        if due:
            self.scan()
            entry = self._entry(spec_hash)
        return entry

    def lookup(self, spec_hash: str, flow_id: str) -> str:
        """The text of spec ``spec_hash`` of flow ``flow_id``; else ``SpecNotDeployed``."""
        entry = self._lookup(spec_hash)
        folders = tuple(str(f) for f in self.folders)
        if entry is None:
            held = [v for f, v, _ in self.hashes(flow_id) if f == flow_id]
            versions = (
                f"it holds version(s) {', '.join(map(str, held))} of that flow"
                if held
                else "it holds no version of that flow"
            )
            raise SpecNotDeployed(
                spec_hash,
                flow_id,
                folders,
                f"spec {spec_hash[:12]} of flow {flow_id!r} is not deployed on this worker"
                f" ({_searched(folders)}; {versions}): deploy that version's spec file there",
            )
        if entry.flow.id != flow_id:
            raise SpecNotDeployed(
                spec_hash,
                flow_id,
                folders,
                f"spec {spec_hash[:12]} is a spec of flow {entry.flow.id!r} ({entry.source}),"
                f" not of flow {flow_id!r}",
            )
        return entry.text


def _searched(folders: tuple[str, ...]) -> str:
    if not folders:
        return "its registry has no folder, only the texts it was given"
    return "searched " + ", ".join(folders)


def _spec_files(folder: Path, problems: list[SpecProblem]) -> list[Path]:
    """The spec files under ``folder``, in a stable order (a missing folder is a problem)."""
    if not folder.is_dir():
        problems.append(SpecProblem(str(folder), "is not a folder"))
        return []
    try:
        return sorted(p for p in folder.rglob("*") if p.suffix in SUFFIXES and p.is_file())
    except OSError as exc:
        problems.append(SpecProblem(str(folder), f"cannot be listed: {exc.strerror or exc}"))
        return []


# --- the worker's registry (shared by every workflow run of the process) ----------------

_installed: SpecRegistry | None = None


def install(registry: SpecRegistry | None) -> None:
    """Make ``registry`` the one ``lookup`` uses in this process (None: none)."""
    global _installed
    _installed = registry


def installed() -> SpecRegistry | None:
    """The registry ``install`` made current, or None."""
    return _installed


def lookup(spec_hash: str, flow_id: str) -> str:
    """The text of spec ``spec_hash`` of flow ``flow_id`` from the installed registry.

    Raises ``SpecNotDeployed`` naming the hash (its first 12 characters), the
    flow id and the folders searched, also when no registry is installed.
    """
    registry = _installed
    if registry is None:
        raise SpecNotDeployed(
            spec_hash,
            flow_id,
            (),
            f"spec {spec_hash[:12]} of flow {flow_id!r} is not deployed on this worker: it has"
            " no spec registry (start it with --specs DIR, or new_worker(..., specs=...))",
        )
    return registry.lookup(spec_hash, flow_id)
