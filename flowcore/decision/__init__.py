"""The decision function: ``start`` and ``advance`` (``interp``), the event
tables (``transitions``), the transaction (``txn``), one module per construct
(``constructs/``), the wind-down (``ending``), the state's records
(``state``, ``results``), keys, the wire, and the views hosts read after a
decision (``plan``, ``waiting``, ``persist``).

It imports the language, never the tools over it (``log``, ``testkit``,
``explore``).
"""
