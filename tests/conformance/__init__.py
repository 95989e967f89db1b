"""The conformance vectors of ``specs/conformance/``: checked, replayed, and played on every host.

``test_vectors.py`` checks the committed vectors (fresh, complete, replaying as
declared); ``test_hosts.py`` plays each one on every host (``play_sim``,
``play_local``, ``play_temporal``) from the plan in ``vectors.py``.
"""
