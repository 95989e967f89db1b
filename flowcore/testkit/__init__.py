"""The simulator and the property-test kit, whose public face is ``flowcore.testing``.

``simulator`` (``Simulator``, ``simulate``; with ``script``: responses,
calls, faults, signals; ``history``: run histories, ``drive``, the
``Trajectory``; ``simulation``: the driving loop in virtual time; and
``asking``: what a handler asks of its run through its ``Call``),
``vocabulary`` (what generated flows use), ``events`` (single events for a
state, and a host that makes up its reports), ``generated`` (a simulator
every generated flow runs in) and ``checks`` (the invariants) need only the
core; ``strategies`` and ``machine`` (``FlowMachine``) need hypothesis (the
``testing`` extra).

It never imports ``explore``.
"""
