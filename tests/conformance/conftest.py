"""The Temporal player needs the Temporal dev server of ``tests/temporal`` (one per session)."""

from tests.temporal.conftest import temporal_address

__all__ = ["temporal_address"]
