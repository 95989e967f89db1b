"""Exploration, for ``flowcore check``: ``search`` (every ordering of what a
world may report, breadth-first over distinct states), ``graph`` (what the
search walks: states, moves, transitions, and the ``Point`` invariants see),
``invariants`` (the built-in invariants, the caller's, and liveness),
``determinism`` (the determinism check: every transition taken again from
the state decoded from the snapshot, each snapshot decoded once),
``world`` (what a world may do), ``reduction`` (when partial-order reduction
may answer one piece of work first) and ``result`` (``Exploration``,
``Violation``).
"""
