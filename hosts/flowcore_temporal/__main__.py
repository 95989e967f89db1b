"""``python -m flowcore_temporal ...``: the same as ``flowcore temporal ...``.

The commands belong to the ``flowcore`` command, which depends on this host,
never the other way round: this module does not import the command package.
It runs the ``flowcore`` console script the installation declares (its entry
point), with ``temporal`` before the arguments given, so both spellings do the
same thing with the same output and exit codes.
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points

__all__ = ["main"]


def main() -> None:
    """Run ``flowcore temporal`` with this process's arguments."""
    found = entry_points(group="console_scripts", name="flowcore")
    if not found:
        print(
            "flowcore: python -m flowcore_temporal runs `flowcore temporal`, and no `flowcore`"
            " command is installed (pip install 'flowcore[temporal]')",
            file=sys.stderr,
        )
        sys.exit(2)
    command = next(iter(found)).load()
    sys.argv[1:1] = ["temporal"]
    command()


if __name__ == "__main__":
    main()
