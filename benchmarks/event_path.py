"""The path of one event through ``flowcore.advance``: the calls it makes and the files it crosses.

    python benchmarks/event_path.py [--all-moves]

Builds, with the public API only (``parse_flow``, ``start``, ``advance``), a run
of a ``for_each`` over two items whose body is a ``try``/``catch`` around a
``call_tool`` step with a ``retry``, then a ``set_metadata`` step, then the
flow's output. It drives the run (the first item's call fails once and is
retried after its backoff timer; the first item then succeeds) to where the
second item's call succeeding is the next event, and traces that one
``advance(state, event)`` with ``sys.setprofile`` (Python calls only). That
event goes through the transaction, the constructs (the call's retry, the
``try``, the ``for_each``), the propagation of each ending to its parent, the
next sequential step and the run's ending (``settled``).

The same (state, event) is advanced once untraced first, so what is traced is
a warm process's decision (no import, no first-use cache fill); ``advance``
never mutates its input, so both calls do the same work.

Printed: the number of calls and of distinct functions (in the package, and in
all); the package's files in first-seen order with the calls into each; the
libraries called (by top-level module); the path as a sequence of visits to
the package's files (a visit ends when the code moves to another of the
package's files, by a call or by a return; a library's code counts as its
caller's file), its repeated stretches compressed to ``[A > B]x3``; and for
each file the number of separate visits, how often the path comes back to it.

It uses only the public API and prints file names relative to the ``flowcore``
package directory, so the same script measures any layout of the package: run
it with the tree to measure first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import flowcore
from flowcore import Decision, EffectFailed, EffectSucceeded, ErrorInfo, TimerFired

FLOW = """
flow: event-path
tools: {fetch: {class: readonly}}
metadata: {stage: string}
steps:
  - id: per
    for_each:
      items: "${input.items}"
      steps:
        - id: guarded
          try:
            - id: get
              call_tool: {tool: fetch, input: {item: "${item}", index: "${index}"}}
              retry: {max_attempts: 3, initial_interval_ms: 100}
          catch:
            - steps:
                - id: fallback
                  call_tool: {tool: fetch, input: {item: "${item}", error: "${error.type}"}}
  - id: mark
    set_metadata: {stage: "fetched"}
output: "${steps.per.output}"
"""

PACKAGE = Path(flowcore.__file__).resolve().parent
STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()


def key_of(decision: Decision, kind: str, contains: str) -> str:
    """The idempotency key of the decision's effect of ``kind`` whose key holds ``contains``."""
    for effect in decision.effects:
        key = getattr(effect, "idempotency_key", "")
        if type(effect).__name__ == kind and contains in key:
            return str(key)
    found = [(type(e).__name__, getattr(e, "idempotency_key", "")) for e in decision.effects]
    raise SystemExit(f"no {kind} effect with {contains!r} among {found}")


def drive() -> tuple[Decision, EffectSucceeded]:
    """The run just before the traced event, and that event."""
    flow = flowcore.parse_flow(FLOW)
    d = flowcore.start(flow, {"items": ["a", "b"]}, run_id="r-1", now_ms=0)
    first, second = key_of(d, "CallTool", "[0]/"), key_of(d, "CallTool", "[1]/")
    error = ErrorInfo(type="http-503", message="unavailable", retryable=True)
    d = flowcore.advance(d.state, EffectFailed(idempotency_key=first, error=error, at_ms=5))
    backoff = key_of(d, "Sleep", "backoff")
    d = flowcore.advance(d.state, TimerFired(idempotency_key=backoff, at_ms=200))
    retried = key_of(d, "CallTool", "[0]/")
    d = flowcore.advance(d.state, EffectSucceeded(idempotency_key=retried, output="A", at_ms=210))
    return d, EffectSucceeded(idempotency_key=second, output="B", at_ms=220)


def where(code_file: str) -> str:
    """A file in the package relative to it; anything else as ``<module>``."""
    path = Path(code_file)
    if path.is_relative_to(PACKAGE):
        return str(path.relative_to(PACKAGE))
    return ""


def folder(file: str) -> str:
    """The folder of one of the package's files (``.`` for the package's own top)."""
    parent = str(Path(file).parent)
    return parent if parent == "." else parent + "/"


def library(code_file: str) -> str:
    """The top-level module (or ``<frozen ...>``) a file outside the package belongs to."""
    if code_file.startswith("<"):
        return code_file
    path = Path(code_file)
    for root in (*(Path(p) for p in sys.path if p), STDLIB):
        resolved = root.resolve()
        if path.is_relative_to(resolved) and path != resolved:
            top = path.relative_to(resolved).parts[0]
            return top.removesuffix(".py")
    return code_file


class Tracer:
    """Records every Python call and where the package's code is after each call and return."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []  # (file, qualified name), in call order
        self.visits: list[str] = []  # the package's file the code is in, one per visit

    def _enter(self, file: str) -> None:
        if file and (not self.visits or self.visits[-1] != file):
            self.visits.append(file)

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            self.calls.append((code.co_filename, code.co_qualname))
            self._enter(where(code.co_filename))
        elif event == "return":
            caller = frame.f_back
            while caller is not None and not where(caller.f_code.co_filename):
                caller = caller.f_back
            if caller is not None:
                self._enter(where(caller.f_code.co_filename))


def trace(state: flowcore.State, event: EffectSucceeded) -> Tracer:
    """The calls of one ``advance(state, event)``: the first one traced is ``advance``."""
    tracer = Tracer()
    sys.setprofile(tracer)
    try:
        flowcore.advance(state, event)
    finally:
        sys.setprofile(None)
    return tracer


def compress(seq: list[str], longest: int = 8) -> list[str]:
    """``seq`` with each stretch that repeats at once written ``[a > b]xN`` (greedy, left to
    right: at each place the block that covers most of what follows)."""
    out: list[str] = []
    i = 0
    while i < len(seq):
        best_len, best_times = 1, 1
        for size in range(1, longest + 1):
            block = seq[i : i + size]
            if len(block) < size:
                break
            times = 1
            while seq[i + times * size : i + (times + 1) * size] == block:
                times += 1
            if times > 1 and size * times > best_len * best_times:
                best_len, best_times = size, times
        if best_times > 1:
            out.append(f"[{' > '.join(seq[i : i + best_len])}]x{best_times}")
        else:
            out.append(seq[i])
        i += best_len * best_times
    return out


def wrapped(path: list[str]) -> str:
    """The path written ``a > b > c``, wrapped at 100 columns (lines break before a ``>``)."""
    lines, line = [], " "
    for item in path:
        piece = f" {item}" if line == " " else f" > {item}"
        if len(line) + len(piece) > 100 and line.strip():
            lines.append(line)
            line, piece = "   ", f" > {item}"
        line += piece
    lines.append(line)
    return "\n".join(lines)


def report(tracer: Tracer, all_moves: bool) -> None:
    own = [(where(f), name) for f, name in tracer.calls if where(f)]
    others = [library(f) for f, _ in tracer.calls if not where(f)]
    print(f"package: {PACKAGE}")
    print(
        f"calls: {len(tracer.calls)} Python calls, {len(own)} in the package, "
        f"{len(others)} in libraries and the standard library"
    )
    print(f"distinct functions: {len(set(tracer.calls))} in all, {len(set(own))} in the package")
    files = Counter(file for file, _ in own)
    distinct = Counter(file for file, _ in set(own))
    print(f"the package's files, in first-seen order ({len(files)}): calls, distinct functions")
    for file in files:  # a Counter keeps first-seen order
        print(f"  {file:<34} {files[file]:6d} {distinct[file]:5d}")
    print("outside the package, by top-level module: calls")
    for name, count in Counter(others).most_common():
        print(f"  {name:<34} {count:6d}")
    if not others:
        print("  none")
    visits = tracer.visits
    print(f"visits: {len(visits)}, moves from one of the package's files to another: ", end="")
    print(len(visits) - 1)
    if all_moves:
        print("the path, visit by visit:")
        print(wrapped(visits))
    short = compress(visits)
    print(f"the path, repeated stretches compressed ({len(short)} items):")
    print(wrapped(short))
    print("visits per file (how often the path comes back to it = visits - 1):")
    for file, count in sorted(Counter(visits).items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {file:<34} {count:6d}")
    folders = [folder(file) for file in visits]
    folder_visits = Counter(f for i, f in enumerate(folders) if i == 0 or folders[i - 1] != f)
    folder_calls = Counter(folder(file) for file, _ in own)
    print("by folder of the package: calls, visits")
    for name, count in folder_calls.items():
        print(f"  {name:<34} {count:6d} {folder_visits[name]:6d}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all-moves", action="store_true", help="print every visit, in order")
    args = parser.parse_args()
    d, event = drive()
    warm = flowcore.advance(d.state, event)
    tracer = trace(d.state, event)
    print(f"event: effect-succeeded {event.idempotency_key}")
    print("effects it decides: " + ", ".join(type(e).__name__ for e in warm.effects))
    report(tracer, args.all_moves)


if __name__ == "__main__":
    main()
