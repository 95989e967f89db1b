"""The local host's player on its PostgreSQL store: ``play_local``'s, with the
database a schema of the test session's PostgreSQL server, whose URL the
test gives as the player's ``server``."""

from __future__ import annotations

from .play_local import CLOCK, play, refuse

__all__ = ["CLOCK", "NAME", "play", "refuse"]

NAME = "local-postgres"
