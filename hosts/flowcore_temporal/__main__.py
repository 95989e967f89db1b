"""``python -m flowcore_temporal ...``: the ``flowcore temporal`` commands on their own.

The commands live in the command package (``flowcore_cli``); this runs them.
"""

from flowcore_cli._temporal import main

main()
