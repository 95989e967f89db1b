"""Log and replay: log records (``records``, which gathers the names of
``record_types``, the byte formats ``formats`` and ``recorder``), replay
(``replay``, the fold, with ``replay_state``, one replay's state and how it
reads a record, and ``replay_start``, the run a ``run.started`` starts; its
``trajectory`` observer and ``report`` types), and what is built on replay
(``fork``, ``upgrade``).

It imports the decision function and the language, never ``testkit`` or
``explore``.
"""
