"""``python -m flowcore_temporal ...``: the ``flowcore temporal`` commands on their own."""

from ._cli import main

main()
