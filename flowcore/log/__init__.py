"""Log and replay: log records and their byte formats (``records``), replay
(``replay`` with its ``trajectory`` observer and ``report`` types), and what
is built on replay (``fork``, ``upgrade``).

It imports the decision function and the language, never ``testkit`` or
``explore``.
"""
