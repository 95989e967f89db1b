"""The parts of ``flowcore.testing``, one module each.

``vocabulary`` (what generated flows use), ``events`` (single events for a
state, and a host that makes up its reports), ``world`` (a simulator every
generated flow runs in) and ``checks`` (the invariants) need only the core;
``strategies`` and ``machine`` (``FlowMachine``) need hypothesis.
"""
