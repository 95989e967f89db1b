"""Planted bugs: one-line changes to the local host's real code, to show the
simulation finds them.

Each bug is (module, the line as it is, the line it becomes). ``plant``
compiles the module's source with that one line changed and puts the changed
functions in place of the real ones, in this process only (the files are not
touched): a sweep's worker processes plant it when they start. The line must
occur exactly once, so a bug that no longer applies says so instead of
silently testing nothing.
"""

from __future__ import annotations

import importlib
import inspect
import types
from dataclasses import dataclass


@dataclass(frozen=True)
class Bug:
    module: str
    old: str
    new: str
    what: str


BUGS: dict[str, Bug] = {
    "lease-not-renewed": Bug(
        "flowcore_local._worker",
        "            store.extend_leases(keys, now)",
        "            store.extend_leases([], now)",
        "the heartbeat renews no lease: long work is taken by another worker while it runs",
    ),
    "live-worker-taken-for-dead": Bug(
        "flowcore_local._worker",
        "            gone = beat < now - 3 * self.lease_ms",
        "            gone = beat < now",
        "a worker counts another, live one as gone and recovers its work while it runs",
    ),
    "uncertain-call-requeued": Bug(
        "flowcore_local._worker",
        "        elif exec_class in SAFE and not _scheduled_call(run_id, key):",
        "        elif exec_class in SAFE or not _scheduled_call(run_id, key):",
        "after a crash, an uncertain call is run again instead of reported outcome-unknown",
    ),
    "idle-runs-kept": Bug(
        "flowcore_local._worker",
        "        self.store.forget_idle()",
        "        pass",
        "runs settled or waiting fill a worker's share: work stays ready with two workers",
    ),
}


class PlantError(ValueError):
    """The bug is unknown, or its line is not (exactly once) in the module."""


def plant(name: str) -> Bug:
    """Apply bug ``name`` to the loaded host code, in this process."""
    bug = BUGS.get(name)
    if bug is None:
        raise PlantError(f"no planted bug {name!r} (there are: {', '.join(sorted(BUGS))})")
    module = importlib.import_module(bug.module)
    source = inspect.getsource(module)
    lines = source.split("\n")
    where = [i for i, line in enumerate(lines) if line == bug.old]
    if len(where) != 1:
        raise PlantError(
            f"bug {name!r}: the line {bug.old.strip()!r} is in {bug.module}"
            f" {len(where)} times, not once"
        )
    lines[where[0]] = bug.new
    namespace: dict[str, object] = {
        "__name__": module.__name__,
        "__package__": module.__package__,
        "__file__": module.__file__,
    }
    exec(compile("\n".join(lines), f"{module.__file__} (planted: {name})", "exec"), namespace)
    for attr, value in namespace.items():
        if getattr(value, "__module__", None) != module.__name__:
            continue  # imported, not defined there
        old = module.__dict__.get(attr)
        if isinstance(value, type) and isinstance(old, type):
            for member, function in vars(value).items():
                if isinstance(function, (types.FunctionType, staticmethod, classmethod)):
                    setattr(old, member, function)
        elif isinstance(value, types.FunctionType):
            module.__dict__[attr] = value
    return bug
